"""Skill stack and block entry rules found by an audit: which blocks ``activate_skill`` may
start, what a cancelled ``call:`` does to its caller, one frame per skill and a bounded stack,
``ask_before_filling`` steps reached again, and the gates of a ``link:``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mantle_helpers import Driver, load, make, run_text, said, skill_events, start, steps

from agentscript.limits import Limits


def refused(playback: Any, turn: int) -> list[tuple[str, str]]:
    return [(s["name"], s["reason"]) for s in steps(playback, turn, "REFUSED_STEP")]


def started(playback: Any, turn: int) -> list[str]:
    """Skills activated in the turn, the session-start lifecycle skill left out."""
    return [
        skill
        for event, skill in skill_events(playback, turn)
        if event == "activated" and skill != "default_session_start"
    ]


def ran(playback: Any, turn: int) -> list[str]:
    return [s["name"] for s in steps(playback, turn, "ACTION_STEP")]


# --- 1. activate_skill {block} starts only a block the visible prose names (M4/M6, M3) ------

REFUND = {
    "skills/refund/skill.md": """---
name: Refund
description: Refund an order.
---
Help the user get a refund. Start @block.verify.

if: session.refund.receipt_ok
The receipt is valid: run @block.do_refund.

:::ordered_block id=verify
steps:
  - id: ask_order
    collect: order_id
  - id: audit
    call: internal
:::

:::ordered_block id=do_refund
steps:
  - id: pay
    execute_tool: issue_refund
:::

:::ordered_block id=internal
steps:
  - id: note
    execute_tool: issue_refund
:::
""",
    "skills/refund/memory.yml": """schema:
  public:
    order_id: {type: text, description: The order number.}
    receipt_ok: {type: bool}
""",
    "skills/refund/tools.py": '''def issue_refund() -> dict:
    """Issue a refund."""
    return {"ok": True}
''',
}


def refund_turn(block: str) -> str:
    return f"""
turns:
  - user: "refund please"
    model:
      - tool: activate_skill
        args: {{skill: refund}}
      - tool: activate_skill
        args: {{skill: refund, block: {block}}}
      - say: "ok"
"""


def test_M4_activate_skill_refuses_a_block_hidden_by_an_if_marker(tmp_path: Path) -> None:
    agent = load(make(tmp_path, REFUND))
    playback = run_text(agent, refund_turn("do_refund"))
    assert "issue_refund" not in ran(playback, 1)
    assert [s for s in steps(playback, 1, "BLOCK_STEP") if s["event"] == "entered"] == []
    (name, reason), *_ = refused(playback, 1)
    assert name == "activate_skill" and "visible prose does not name it" in reason
    assert "verify" in reason  # the blocks that can be started are named


def test_M3_activate_skill_refuses_a_block_reached_only_by_a_call_step(tmp_path: Path) -> None:
    agent = load(make(tmp_path, REFUND))
    playback = run_text(agent, refund_turn("internal"))
    assert "issue_refund" not in ran(playback, 1)
    assert refused(playback, 1)[0][0] == "activate_skill"


def test_M4_activate_skill_starts_a_block_the_visible_prose_names(tmp_path: Path) -> None:
    agent = load(make(tmp_path, REFUND))
    playback = run_text(agent, refund_turn("verify"))
    assert refused(playback, 1) == []
    entered = [s["block"] for s in steps(playback, 1, "BLOCK_STEP") if s["event"] == "entered"]
    assert entered == ["verify"]


def test_M4_a_block_of_a_skill_that_is_not_active_is_refused(tmp_path: Path) -> None:
    agent = load(make(tmp_path, REFUND))
    playback = run_text(
        agent,
        """
turns:
  - user: "refund please"
    model:
      - tool: activate_skill
        args: {skill: refund, block: verify}
      - say: "ok"
""",
    )
    assert refused(playback, 1)[0][0] == "activate_skill"
    assert started(playback, 1) == []


# --- 2. a cancelled `call:` does not move its caller past the call (M3) --------------------

WIRE = {
    "skills/wire/skill.md": """---
name: Wire
description: Wire money abroad.
---
:::ordered_block id=main
steps:
  - id: verify_first
    call: verify
  - id: send
    execute_tool: wire_money
:::
""",
    "skills/wire/tools.py": '''def wire_money() -> dict:
    """Wire the money."""
    return {"ok": True}
''',
    "skills/verify/skill.md": """---
name: Verify
description: Verify the user with a one-time code.
---
:::ordered_block id=main
steps:
  - id: ask
    collect: otp
:::
""",
    "skills/verify/memory.yml": """schema:
  public:
    otp: {type: text, description: The one-time code.}
""",
    "skills/balance/skill.md": """---
name: Balance
description: Tell the balance.
---
Tell the balance.
""",
}


def test_M3_cancelling_a_called_skill_cancels_its_caller(tmp_path: Path) -> None:
    agent = load(make(tmp_path, WIRE))
    playback = run_text(
        agent,
        """
turns:
  - user: "wire 1000"
    model:
      - tool: activate_skill
        args: {skill: wire}
      - say: "Your code?"
  - user: "I don't have it"
    model:
      - tool: cancel_skill
      - say: "Cancelled."
""",
    )
    assert "wire_money" not in ran(playback, 2)
    assert skill_events(playback, 2) == [("cancelled", "verify"), ("cancelled", "wire")]
    assert playback.turns[1].reply.node is None


def test_M3_dropping_a_paused_called_skill_drops_its_caller(tmp_path: Path) -> None:
    agent = load(make(tmp_path, WIRE))
    playback = run_text(
        agent,
        """
turns:
  - user: "wire 1000"
    model:
      - tool: activate_skill
        args: {skill: wire}
      - say: "Your code?"
  - user: "what is my balance?"
    model:
      - tool: activate_skill
        args: {skill: balance}
      - tool: complete_skill
      - say: "100."
  - user: "forget the wire"
    model:
      - tool: cancel_skill
      - say: "Dropped."
  - user: "thanks"
    model:
      - say: "Bye."
""",
    )
    assert ("cancelled", "wire") in skill_events(playback, 3)
    assert all("wire_money" not in ran(playback, n) for n in (3, 4))
    assert playback.turns[3].reply.node is None


# --- 3. one frame per skill, and a bounded stack (rule 1, M3) ------------------------------

RESTART = {
    "skills/b/skill.md": """---
name: B
description: Restart A.
---
:::ordered_block id=main
steps:
  - id: go
    link: a
:::
""",
    "skills/c/skill.md": """---
name: C
description: Call A.
---
:::ordered_block id=main
steps:
  - id: go
    call: a
:::
""",
    "skills/a/skill.md": """---
name: A
description: Collect x and y.
---
:::ordered_block id=main
steps:
  - id: ask_x
    collect: x
  - id: ask_y
    collect: y
:::
""",
    "skills/a/memory.yml": """schema:
  public:
    x: {type: text, description: first}
    y: {type: text, description: second}
""",
    "skills/d/skill.md": """---
name: D
description: Chat.
---
Chat.
""",
    "responses.yml": """responses:
  utter_ask_x:
    - text: "What is x?"
  utter_ask_y:
    - text: "What is y?"
""",
}


def test_rule1_a_link_to_a_paused_skill_waits_and_keeps_its_memory(tmp_path: Path) -> None:
    run = Driver(make(tmp_path, RESTART))
    run.send("start a", start("a"))
    run.send("x is 1", {"tool": "set_fields", "args": {"x": "1"}})
    reply = run.send("do b", start("b"), {"say": "A is still waiting."})
    assert reply.error is None
    assert run.stack() == [("a", "paused"), ("b", "active")]
    assert run.session.state.variables["a.x"] == "1"
    reasons = [
        s["reason"] for s in reply.trace["planTrace"]["steps"] if s["type"] == "REFUSED_STEP"
    ]
    assert any("already on the stack" in r for r in reasons)
    # the user resumes a: it continues at the same step with its value
    back = run.send("back to a", start("a"))
    assert back.error is None and back.text == "What is y?"
    assert run.stack() == [("b", "paused"), ("a", "active")]
    assert run.session.state.variables["a.x"] == "1"


def test_rule1_a_call_to_a_skill_on_the_stack_is_refused(tmp_path: Path) -> None:
    run = Driver(make(tmp_path, RESTART))
    run.send("start a", start("a"))
    run.send("x is 1", {"tool": "set_fields", "args": {"x": "1"}})
    reply = run.send("do c", start("c"), {"say": "A is still waiting."})
    assert reply.error is None
    assert run.stack() == [("a", "paused"), ("c", "active")]
    assert run.session.state.variables["a.x"] == "1"


def test_rule1_the_skill_stack_depth_is_bounded(tmp_path: Path) -> None:
    run = Driver(make(tmp_path, RESTART), Limits(max_stack_depth=2))
    run.send("start a", start("a"))
    run.send("chat", start("d"), {"say": "ok"})
    reply = run.send("do c", start("c"), {"say": "no room"})
    assert run.stack() == [("a", "paused"), ("d", "active")]
    reasons = [
        s["reason"] for s in reply.trace["planTrace"]["steps"] if s["type"] == "REFUSED_STEP"
    ]
    assert any("Limits.max_stack_depth = 2" in r for r in reasons)


# --- 4. an ask_before_filling step reached again asks again (rule 7 / M7) ------------------

TIP = {
    "skills/tip/skill.md": """---
name: Tip
description: Send a tip.
---
:::ordered_block id=main
steps:
  - id: ask_amount
    collect: amount
    ask_before_filling: true
  - id: confirm
    collect: ok
    ask_before_filling: true
  - id: check
    noop: true
    next:
      - if: session.tip.ok == False
        then: ask_amount
      - else: END
:::
""",
    "skills/tip/memory.yml": """schema:
  public:
    amount: {type: int, description: amount}
    ok: {type: bool, description: user agrees}
""",
    "responses.yml": """responses:
  utter_ask_amount:
    - text: "How much?"
  utter_ask_ok:
    - text: "Correct?"
""",
}


def test_rule7_an_ask_before_filling_step_reached_again_asks_again(tmp_path: Path) -> None:
    agent = load(make(tmp_path, TIP))
    playback = run_text(
        agent,
        """
turns:
  - user: "tip please"
    model:
      - tool: activate_skill
        args: {skill: tip}
  - user: "5"
    model:
      - tool: set_fields
        args: {amount: 5}
  - user: "no, wrong"
    model:
      - tool: set_fields
        args: {ok: false}
  - user: "7"
    model:
      - tool: set_fields
        args: {amount: 7}
  - user: "yes"
    model:
      - tool: set_fields
        args: {ok: true}
      - say: "Sent."
""",
    )
    for turn in playback.turns:
        assert turn.reply.error is None, turn.reply.error
    assert [said(playback, n, "collect") for n in (1, 2, 3, 4)] == [
        ["How much?"],
        ["Correct?"],
        ["How much?"],  # the pointer came back: asked again, the old 5 does not count
        ["Correct?"],  # and the confirmation is asked again too
    ]
    assert ("completed", "tip") in skill_events(playback, 5)


# --- 5. link checks the target's requires and disabled, as call does (M1) ------------------

LINK = {
    "memory.yml": "is_admin:\n  type: bool\n",
    "skills/b/skill.md": """---
name: B
description: Help page.
---
:::ordered_block id=main
steps:
  - id: go
    link: admin
:::
""",
    "skills/admin/skill.md": """---
name: Admin
description: Admin tasks.
requires: session.project.is_admin
---
:::ordered_block id=main
steps:
  - id: wipe
    execute_tool: wipe_db
:::
""",
    "skills/admin/tools.py": '''def wipe_db() -> dict:
    """Wipe."""
    return {"ok": True}
''',
}

HELP = """
turns:
  - user: "help"
    model:
      - tool: activate_skill
        args: {skill: b}
      - say: "ok"
"""


def test_M1_a_link_step_checks_the_targets_requires(tmp_path: Path) -> None:
    playback = run_text(load(make(tmp_path, LINK)), HELP)
    assert "wipe_db" not in ran(playback, 1)
    assert ("activated", "admin") not in skill_events(playback, 1)
    assert any("requires" in reason for _, reason in refused(playback, 1))


def test_M1_a_link_step_checks_that_the_target_is_enabled(tmp_path: Path) -> None:
    files = dict(LINK)
    files["skills/admin/skill.md"] = files["skills/admin/skill.md"].replace(
        "requires: session.project.is_admin\n", "disabled: true\n"
    )
    playback = run_text(load(make(tmp_path, files)), HELP)
    assert "wipe_db" not in ran(playback, 1)
    assert any("disabled" in reason for _, reason in refused(playback, 1))


def test_M1_a_link_step_runs_when_the_target_is_available(tmp_path: Path) -> None:
    playback = run_text(load(make(tmp_path, LINK)), "variables:\n  project.is_admin: true\n" + HELP)
    assert "wipe_db" in ran(playback, 1)


# --- 6. a refused activate_skill changes nothing (S5/M1) ----------------------------------


def test_S5_a_refused_activate_skill_with_a_block_starts_nothing(tmp_path: Path) -> None:
    playback = run_text(
        load(make(tmp_path, LINK)),
        """
variables:
  project.is_admin: true
turns:
  - user: "wipe"
    model:
      - tool: activate_skill
        args: {skill: admin, block: main}
      - say: "ok"
""",
    )
    assert refused(playback, 1)[0][0] == "activate_skill"
    assert "wipe_db" not in ran(playback, 1)
    assert started(playback, 1) == []
    assert playback.turns[0].reply.node is None
