"""An ``async def`` tool's target is ``mantle://<owner>/<tool>``, spelled as a sync tool's:
how a tool runs is not part of its name, which traces, ``[actions.targets]`` keys and readers
of both see. It is still awaited on the event loop, never taking a pool thread
(``test_audit2_fixes.test_an_async_tool_runs_while_timed_out_sync_tools_hold_every_pool_thread``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mantle_helpers import Driver, make, reply_steps, start

TOOLS = {
    "skills/tk/skill.md": (
        "---\nname: Toolkit\ndescription: Tools.\nimport_tools: [shared_quick]\n---\n"
        "Use the tools.\n"
    ),
    "skills/tk/tools.py": (
        "import asyncio\n\n\n"
        "def plain() -> dict:\n"
        '    """Answer from a thread."""\n'
        '    return {"how": "sync"}\n\n\n'
        "async def quick() -> dict:\n"
        '    """Answer from the event loop."""\n'
        "    await asyncio.sleep(0)\n"
        '    return {"how": "async"}\n'
    ),
    "tools.py": (
        "async def shared_quick() -> dict:\n"
        '    """A root tool, async too."""\n'
        '    return {"how": "shared async"}\n'
    ),
}


def call(tool: str) -> dict[str, Any]:
    return {"tool": tool, "args": {}}


def ran(reply: Any) -> list[tuple[str, Any, str | None, str | None]]:
    return [
        (s["target"], s["output"], s["error"], s["ranTarget"])
        for s in reply_steps(reply, "ACTION_STEP")
    ]


def test_sync_and_async_tools_have_one_target_spelling(tmp_path: Path) -> None:
    run = Driver(make(tmp_path, TOOLS))
    moves = (call("plain"), call("quick"), call("shared_quick"), {"say": "Done."})
    reply = run.send("go", start("tk"), *moves)
    assert ran(reply) == [
        ("mantle://tk/plain", {"how": "sync"}, None, None),
        ("mantle://tk/quick", {"how": "async"}, None, None),
        ("mantle://_shared/shared_quick", {"how": "shared async"}, None, None),
    ]
