"""``context.send`` is bounded as the model's words are: one text by
``Limits.max_reply_chars``, the sends of a turn's tools by ``Limits.max_tool_sends``. A send
past a bound raises ``SendRefused`` inside the tool (uncaught, the call's error result), is
traced as an ``EVENT_STEP send_refused`` and says nothing; its text is never kept in full."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mantle_helpers import Driver, make, reply_said, reply_steps, start

from agentscript.engine.session import Reply
from agentscript.limits import Limits

TOOLS = {
    "skills/tk/skill.md": "---\nname: Toolkit\ndescription: Tools.\n---\nUse the tools.\n",
    "skills/tk/tools.py": (
        "def shout(size: int, context=None) -> dict:\n"
        '    """Send one text of `size` characters."""\n'
        '    context.send("x" * size)\n'
        '    return {"ok": True}\n\n\n'
        "def careful(size: int, context=None) -> dict:\n"
        '    """Send one text of `size` characters, and say so when it was refused."""\n'
        "    try:\n"
        '        context.send("y" * size)\n'
        "    except Exception as exc:\n"
        '        return {"refused": type(exc).__name__, "limit": exc.limit}\n'
        '    return {"refused": None}\n\n\n'
        "async def chatty(times: int, context=None) -> dict:\n"
        '    """Send `times` short messages."""\n'
        "    for i in range(times):\n"
        '        await context.send(f"update {i}")\n'
        '    return {"ok": True}\n'
    ),
}


def call(tool: str, **args: Any) -> dict[str, Any]:
    return {"tool": tool, "args": args}


def refusals(reply: Reply) -> list[dict[str, Any]]:
    return [s for s in reply_steps(reply, "EVENT_STEP") if s["event"] == "send_refused"]


def test_a_send_longer_than_a_reply_is_refused_and_never_kept(tmp_path: Path) -> None:
    run = Driver(make(tmp_path, TOOLS), Limits(max_reply_chars=300))
    moves = (call("shout", size=300), call("shout", size=301), {"say": "Done."})
    reply = run.send("go", start("tk"), *moves)
    said, refused = reply_steps(reply, "ACTION_STEP")
    assert said["error"] is None and reply_said(reply) == ["x" * 300, "Done."]
    # uncaught, the refusal is the call's error result, as any exception of a tool
    assert refused["output"] == {"error": refused["error"]}
    assert "SendRefused" in refused["error"]
    assert "Limits.max_reply_chars = 300" in refused["error"]
    (event,) = refusals(reply)
    assert event["tool"] == "shout" and event["limit"] == "max_reply_chars"
    assert event["chars"] == 301 and event["preview"] == "x" * 200 + "…"
    # neither the reply, the history, the trace nor the saved session holds the text
    assert "x" * 301 not in "".join(reply.messages)
    assert "x" * 301 not in json.dumps(reply.trace)
    assert "x" * 301 not in json.dumps(run.session.to_json())


def test_a_tool_may_catch_a_refused_send(tmp_path: Path) -> None:
    run = Driver(make(tmp_path, TOOLS), Limits(max_reply_chars=300))
    reply = run.send("go", start("tk"), call("careful", size=1000), {"say": "Done."})
    (step,) = reply_steps(reply, "ACTION_STEP")
    assert step["error"] is None
    assert step["output"] == {"refused": "SendRefused", "limit": "max_reply_chars"}
    assert [e["limit"] for e in refusals(reply)] == ["max_reply_chars"]
    assert reply.messages == ["Done."]


def test_the_turns_tools_together_send_at_most_max_tool_sends_messages(tmp_path: Path) -> None:
    run = Driver(make(tmp_path, TOOLS), Limits(max_tool_sends=3))
    moves = (call("chatty", times=2), call("chatty", times=2), {"say": "Done."})
    reply = run.send("go", start("tk"), *moves)
    first, second = reply_steps(reply, "ACTION_STEP")
    assert first["error"] is None
    assert "Limits.max_tool_sends = 3" in second["error"]
    assert reply_said(reply) == ["update 0", "update 1", "update 0", "Done."]
    (event,) = refusals(reply)
    assert event["limit"] == "max_tool_sends" and event["preview"] == "update 1"
    # the count is per turn: the next one sends again
    again = run.send("more", call("chatty", times=3), {"say": "Done."})
    assert reply_said(again) == ["update 0", "update 1", "update 2", "Done."]
    assert refusals(again) == []


def test_max_tool_sends_is_a_limit_of_the_limits_table() -> None:
    assert Limits().replaced({"max_tool_sends": 2}).max_tool_sends == 2


def test_a_tool_catches_the_refusals_by_their_public_names() -> None:
    """A tool that catches a refused send or a closed context imports the exceptions from the
    package, not from the runner's module."""
    from agentscript.mantle import ContextClosed, SendRefused
    from agentscript.mantle.run import tool_execution

    assert SendRefused is tool_execution.SendRefused
    assert ContextClosed is tool_execution.ContextClosed
