"""Restoring a saved Mantle session checks its skill stack against what the runtime writes: a
pending confirmation the live turn could have held (its fields, its block and step, its
arguments checked like a live call's), a held step of the shape ``hold`` writes, and a stack
within the runtime's invariants. A forged one is refused at
restore (SessionRestoreError naming the field), never run or failing later inside a turn."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mantle_helpers import EXAMPLE, copy_bank, make

import agentscript
from agentscript.engine.restore import Checker, SessionRestoreError
from agentscript.engine.session import AgentBase, Reply, Session
from agentscript.limits import Limits
from agentscript.mantle.restore_check import check_mantle_state
from agentscript.mantle.runtime import MantleAgent
from agentscript.models.scripted import ScriptedModel, parse_move

Edit = Callable[[dict[str, Any]], None]


def bank() -> MantleAgent:
    agent = agentscript.load(EXAMPLE, stub_missing_tools=True)
    assert isinstance(agent, MantleAgent)
    return agent


def signed_in(agent: MantleAgent) -> Session:
    """A card_bank session of an authenticated customer, answered by a scripted model."""
    return agent.session(
        model=ScriptedModel(),
        variables={"project.authenticated": True, "project.customer_id": "1001"},
    )


def send(session: Session, text: str, *moves: dict[str, Any]) -> Reply:
    model = session.model
    assert isinstance(model, ScriptedModel)
    model.begin_turn([parse_move(m) for m in moves or ({"say": "ok"},)])
    return session.send(text)


def pending_saved() -> tuple[MantleAgent, dict[str, Any]]:
    """card_replace at its place_order step, waiting for the user's yes/no on
    order_replacement (held by the step, ``source: step``)."""
    agent = bank()
    session = signed_in(agent)
    send(
        session,
        "I lost my card C-11",
        {"tool": "activate_skill", "args": {"skill": "card_replace"}},
        {"tool": "set_fields", "args": {"reason": "lost", "card_id": "C-11"}},
        {"tool": "activate_skill", "args": {"skill": "card_replace", "block": "order_card"}},
    )
    reply = send(session, "express", {"tool": "set_fields", "args": {"shipping": "express"}})
    assert reply.confirmation is not None
    data = session.to_json()
    pending = data["extra"]["mantle"]["pending"]
    assert pending["source"] == "step" and pending["step"] == "place_order", pending
    return agent, data


def restore(agent: AgentBase, data: dict[str, Any]) -> Session:
    return agent.restore(data, model=ScriptedModel())


def refused(agent: AgentBase, data: dict[str, Any]) -> SessionRestoreError:
    with pytest.raises(SessionRestoreError) as caught:
        restore(agent, data)
    return caught.value


def at(data: dict[str, Any], path: str) -> Any:
    target: Any = data
    for part in path.split("/"):
        target = target[int(part)] if isinstance(target, list) else target[part]
    return target


def put(path: str, value: Any) -> Edit:
    def apply(data: dict[str, Any]) -> None:
        *parents, last = path.split("/")
        target = at(data, "/".join(parents))
        target[int(last) if isinstance(target, list) else last] = value

    return apply


def drop(path: str) -> Edit:
    def apply(data: dict[str, Any]) -> None:
        *parents, last = path.split("/")
        del at(data, "/".join(parents))[last]

    return apply


PENDING = "extra/mantle/pending"
ENTRY = "extra/mantle/stack/0/blocks/0"
FROM_MODEL = {"source": "llm", "block": None, "step": None}


def pending(**fields: Any) -> Edit:
    def apply(data: dict[str, Any]) -> None:
        at(data, PENDING).update(fields)

    return apply


# --- 1. a pending confirmation the live turn could have held --------------------------------

PENDING_EDITS: list[tuple[str, Edit, str]] = [
    ("source missing", drop(f"{PENDING}/source"), "extra.mantle.pending.source"),
    ("block missing", drop(f"{PENDING}/block"), "extra.mantle.pending.block"),
    ("step missing", drop(f"{PENDING}/step"), "extra.mantle.pending.step"),
    ("source unknown", pending(source="model"), "extra.mantle.pending.source"),
    ("source not text", pending(source={"a": 1}), "extra.mantle.pending.source"),
    ("block a number", pending(block=7, step=["x"]), "extra.mantle.pending.block"),
    ("block unknown", pending(block="nope"), "extra.mantle.pending.block"),
    ("step unknown", pending(step="nope"), "extra.mantle.pending.step"),
    ("step of another tool", pending(step="load_cards"), "extra.mantle.pending.step"),
    ("step that is no tool call", pending(step="pick_card"), "extra.mantle.pending.step"),
    (
        "step not where the pointer is",
        put(f"{ENTRY}/step", "pick_shipping"),
        "extra.mantle.pending.step",
    ),
    ("block and step on a model call", pending(source="llm"), "extra.mantle.pending.block"),
    ("tool without confirmation", pending(tool="block_card"), "extra.mantle.pending.tool"),
    ("skill not on the stack", put("extra/mantle/stack", []), "extra.mantle.pending.skill"),
    ("turn after the session's", pending(turn=10**9), "extra.mantle.pending.turn"),
    ("step arguments empty", pending(arguments={}), "extra.mantle.pending.arguments.card_id"),
    (
        "step argument unknown",
        pending(arguments={"card_id": "C-11", "shipping": "express", "evil": 1}),
        "extra.mantle.pending.arguments.evil",
    ),
    (
        "step argument of the wrong type",
        pending(arguments={"card_id": 5, "shipping": "express"}),
        "extra.mantle.pending.arguments.card_id",
    ),
    (
        "step argument not among the enum",
        pending(arguments={"card_id": "C-11", "shipping": "overnight"}),
        "extra.mantle.pending.arguments.shipping",
    ),
    (
        "model call with unknown and wrong arguments",
        pending(**FROM_MODEL, arguments={"card_id": 5, "shipping": "overnight", "evil": 1}),
        "extra.mantle.pending.arguments",
    ),
    (
        "model call without arguments",
        pending(**FROM_MODEL, arguments={}),
        "extra.mantle.pending.arguments",
    ),
    (
        "model call with an argument of the wrong type",
        pending(**FROM_MODEL, arguments={"card_id": 5, "shipping": "express"}),
        "extra.mantle.pending.arguments",
    ),
    (
        "model call with an argument not among the enum",
        pending(**FROM_MODEL, arguments={"card_id": "C-11", "shipping": "overnight"}),
        "extra.mantle.pending.arguments",
    ),
    (
        "model call with too large arguments",
        pending(**FROM_MODEL, arguments={"card_id": "C" * 30_000, "shipping": "express"}),
        "extra.mantle.pending.arguments",
    ),
]


@pytest.mark.parametrize(
    ("change", "field"), [e[1:] for e in PENDING_EDITS], ids=[e[0] for e in PENDING_EDITS]
)
def test_a_forged_pending_confirmation_is_refused_at_restore(change: Edit, field: str) -> None:
    agent, data = pending_saved()
    change(data)
    error = refused(agent, data)
    assert error.field == field, str(error)


def test_the_saved_pending_confirmation_restores_and_a_yes_orders_once() -> None:
    agent, data = pending_saved()
    session = restore(agent, data)
    reply = send(session, "yes")
    assert reply.error is None
    assert reply.actions == ["order_replacement"]
    assert reply.confirmation is None  # the block moved on: it does not ask again
    again = send(session, "yes")
    assert "order_replacement" not in again.actions


def test_a_pending_call_held_from_the_model_restores_with_checked_arguments() -> None:
    agent, data = pending_saved()
    # Held by the model in the skill's prose (no block runs: one would run the tool itself),
    # with the arguments its question shows (memory: C-11, express).
    pending(**FROM_MODEL, arguments={"card_id": "C-11", "shipping": "express"})(data)
    put("extra/mantle/stack/0/blocks", [])(data)
    session = restore(agent, data)
    reply = send(session, "yes")
    assert reply.error is None
    assert reply.actions == ["order_replacement"]


def test_a_pending_call_saved_before_its_turn_was_recorded_still_restores() -> None:
    agent, data = pending_saved()
    drop(f"{PENDING}/turn")(data)
    restore(agent, data)


# --- 2. a held step has the shape the runtime writes -----------------------------------------

HELD_EDITS: list[tuple[str, Any, str]] = [
    ("no step", {"x": 1}, "held.x"),
    ("step only", {"step": "place_order"}, "held.memory"),
    ("memory only", {"memory": "{}"}, "held.step"),
    ("step a number", {"step": 5, "memory": "{}"}, "held.step"),
    ("step unknown", {"step": "nope", "memory": "{}"}, "held.step"),
    ("memory a list", {"step": "place_order", "memory": []}, "held.memory"),
    ("extra field", {"step": "place_order", "memory": "{}", "x": 1}, "held.x"),
]


@pytest.mark.parametrize(
    ("held", "field"), [e[1:] for e in HELD_EDITS], ids=[e[0] for e in HELD_EDITS]
)
def test_a_held_step_of_the_wrong_shape_is_refused(held: Any, field: str) -> None:
    agent, data = pending_saved()
    data["extra"]["mantle"]["pending"] = None
    put(f"{ENTRY}/held", held)(data)
    error = refused(agent, data)
    assert error.field == f"extra.mantle.stack[0].blocks[0].{field}", str(error)


def test_a_step_held_by_the_runtime_restores_and_the_session_goes_on() -> None:
    agent, data = pending_saved()
    session = restore(agent, data)
    assert send(session, "no").error is None  # declined: the step is held
    saved = session.to_json()
    held = saved["extra"]["mantle"]["stack"][0]["blocks"][0]["held"]
    assert held is not None and held["step"] == "place_order", held
    session = restore(agent, saved)
    assert send(session, "hello").error is None
    put(f"{ENTRY}/held", {"step": None, "memory": "{}"})(saved)  # a pointer not yet moved
    assert send(restore(agent, saved), "hello").error is None


# --- 3. the stack within the runtime's invariants (one frame per skill, ...) ---------------


def frames(*specs: tuple[str, str, str]) -> list[dict[str, Any]]:
    return [
        {"skill": skill, "status": status, "kind": kind, "via_call": False, "blocks": []}
        for skill, status, kind in specs
    ]


def without_pending(data: dict[str, Any]) -> dict[str, Any]:
    data = copy.deepcopy(data)
    data["extra"]["mantle"]["pending"] = None
    return data


@pytest.mark.parametrize("depth", [4, 20_000])
def test_more_frames_than_skills_are_refused(depth: int) -> None:
    agent, data = pending_saved()
    data = without_pending(data)
    frame = data["extra"]["mantle"]["stack"][0]
    data["extra"]["mantle"]["stack"] = [copy.deepcopy(frame) for _ in range(depth)]
    error = refused(agent, data)
    assert error.field == "extra.mantle.stack", str(error)
    assert f"{depth} frames; one per skill, and the project has 3" in error.reason


def test_a_stack_deeper_than_a_lowered_max_stack_depth_still_restores() -> None:
    """Limits.max_stack_depth bounds new starts; a session saved before the limit was lowered
    is not stranded (its next start is refused by the live rule)."""
    agent, data = pending_saved()
    three = (
        frames(
            ("authenticate", "paused", "routed"),
            ("check_balance", "paused", "interrupt"),
        )
        + data["extra"]["mantle"]["stack"]
    )
    data["extra"]["mantle"]["stack"] = three
    restore(agent, copy.deepcopy(data))
    check_mantle_state(agent.project, Checker(), data, Limits(max_stack_depth=2))


STACK_EDITS: list[tuple[str, list[dict[str, Any]], str]] = [
    (
        "one skill twice",
        frames(("check_balance", "paused", "routed"), ("check_balance", "active", "interrupt")),
        "stack[1].skill",
    ),
    (
        "two active frames",
        frames(("check_balance", "active", "routed"), ("authenticate", "active", "interrupt")),
        "stack[0].status",
    ),
    ("a parked top frame", frames(("check_balance", "parked", "routed")), "stack[0].status"),
    (
        "a parked frame below one it did not invoke",
        frames(("check_balance", "parked", "routed"), ("authenticate", "active", "interrupt")),
        "stack[0].status",
    ),
]


@pytest.mark.parametrize(
    ("stack", "field"), [e[1:] for e in STACK_EDITS], ids=[e[0] for e in STACK_EDITS]
)
def test_a_stack_the_runtime_never_builds_is_refused(
    stack: list[dict[str, Any]], field: str
) -> None:
    agent, data = pending_saved()
    data = without_pending(data)
    data["extra"]["mantle"]["stack"] = stack
    error = refused(agent, data)
    assert error.field == f"extra.mantle.{field}", str(error)


def test_stacks_the_runtime_builds_restore() -> None:
    agent, data = pending_saved()
    data = without_pending(data)
    for stack in (
        frames(("check_balance", "parked", "routed"), ("authenticate", "active", "invoked")),
        frames(("check_balance", "parked", "routed"), ("authenticate", "paused", "invoked")),
        frames(("check_balance", "paused", "routed"), ("authenticate", "paused", "interrupt")),
    ):
        data["extra"]["mantle"]["stack"] = stack
        assert send(restore(agent, copy.deepcopy(data)), "hello").error is None


def test_block_entries_are_bounded_by_the_skills_blocks() -> None:
    agent, data = pending_saved()
    data = without_pending(data)
    frame = data["extra"]["mantle"]["stack"][0]
    frame["blocks"] = [dict(frame["blocks"][0], call=i > 0) for i in range(5000)]
    error = refused(agent, data)
    assert error.field == "extra.mantle.stack[0].blocks[1].block", str(error)


ASKED_EDITS: list[tuple[str, dict[str, Any], str]] = [
    ("unknown step", {"nope": 1}, "asked.nope"),
    ("turn after the session's", {"pick_card": 10**9}, "asked.pick_card"),
]


@pytest.mark.parametrize(
    ("asked", "field"), [e[1:] for e in ASKED_EDITS], ids=[e[0] for e in ASKED_EDITS]
)
def test_asked_names_steps_of_the_block_and_past_turns(asked: dict[str, Any], field: str) -> None:
    agent, data = pending_saved()
    data = without_pending(data)
    put(f"{ENTRY}/asked", asked)(data)
    error = refused(agent, data)
    assert error.field == f"extra.mantle.stack[0].blocks[0].{field}", str(error)


CALLS = {
    "skills/refund/skill.md": """---
name: Refund
description: Refund an order.
---
Help the user get a refund. Start @block.verify.

:::ordered_block id=verify
steps:
  - id: ask_order
    collect: order_id
  - id: audit
    call: internal
  - id: pay
    execute_tool: issue_refund
:::

:::ordered_block id=internal
steps:
  - id: ask_note
    collect: note
:::
""",
    "skills/refund/memory.yml": """schema:
  public:
    order_id: {type: text, description: The order number.}
    note: {type: text, description: A note.}
""",
    "skills/refund/tools.py": '''def issue_refund() -> dict:
    """Issue a refund."""
    return {"ok": True}
''',
}


def called_block_saved(tmp_path: Path) -> tuple[AgentBase, dict[str, Any]]:
    """refund's verify block at its ``call: internal`` step, internal waiting for a note."""
    agent = agentscript.load(make(tmp_path, CALLS))
    session = agent.session(model=ScriptedModel())
    send(
        session,
        "refund please",
        {"tool": "activate_skill", "args": {"skill": "refund"}},
        {"tool": "activate_skill", "args": {"skill": "refund", "block": "verify"}},
        {"tool": "set_fields", "args": {"order_id": "O-1"}},
        {"say": "A note?"},
    )
    data = session.to_json()
    entries = [
        (e["block"], e["step"], e["call"]) for e in data["extra"]["mantle"]["stack"][0]["blocks"]
    ]
    assert entries == [("verify", "audit", False), ("internal", "ask_note", True)], entries
    return agent, data


CALL_EDITS: list[tuple[str, Edit, str]] = [
    ("first block marked called", put(f"{ENTRY}/call", True), "blocks[0].call"),
    (
        "called block not marked",
        put("extra/mantle/stack/0/blocks/1/call", False),
        "blocks[1].call",
    ),
    (
        "a block entered twice",
        lambda d: at(d, "extra/mantle/stack/0/blocks").append(
            copy.deepcopy(at(d, "extra/mantle/stack/0/blocks/1"))
        ),
        "blocks[2].block",
    ),
]


@pytest.mark.parametrize(
    ("change", "field"), [e[1:] for e in CALL_EDITS], ids=[e[0] for e in CALL_EDITS]
)
def test_block_entries_follow_call_steps(tmp_path: Path, change: Edit, field: str) -> None:
    agent, data = called_block_saved(tmp_path)
    assert send(restore(agent, copy.deepcopy(data)), "N-1").error is None  # untouched: fine
    change(data)
    error = refused(agent, data)
    assert error.field == f"extra.mantle.stack[0].{field}", str(error)


# --- 4. the bookkeeping keys hold what the runtime writes ------------------------------------

MANTLE = "extra/mantle"


def frame_kind(kind: str, via_call: bool) -> Edit:
    def apply(data: dict[str, Any]) -> None:
        at(data, f"{MANTLE}/stack/0").update(kind=kind, via_call=via_call)

    return apply


BOOKKEEPING_EDITS: list[tuple[str, Edit, str]] = [
    ("kind start (never written)", frame_kind("start", False), "stack[0].kind"),
    ("via_call on a routed skill", frame_kind("routed", True), "stack[0].via_call"),
    ("via_call on an engine skill", frame_kind("engine", True), "stack[0].via_call"),
    (
        "written: not a memory entry",
        put(f"{MANTLE}/written", {"card_replace.nope": 1}),
        "written.card_replace.nope",
    ),
    (
        "written: a turn after the session's",
        put(f"{MANTLE}/written", {"card_replace.reason": 3}),
        "written.card_replace.reason",
    ),
    ("activations: unknown skill", put(f"{MANTLE}/activations", {"nope": 1}), "activations.nope"),
    (
        "activations: a count of 0",
        put(f"{MANTLE}/activations", {"card_replace": 1, "check_balance": 0}),
        "activations.check_balance",
    ),
    ("ending: a skill not in before_end", put(f"{MANTLE}/ending", ["check_balance"]), "ending"),
    ("ending: an unknown skill", put(f"{MANTLE}/ending", ["nope"]), "ending"),
    (
        "offer: a skill not on the stack",
        put(f"{MANTLE}/offer", {"skill": "check_balance"}),
        "offer.skill",
    ),
    ("offer: the active skill", put(f"{MANTLE}/offer", {"skill": "card_replace"}), "offer.skill"),
]


@pytest.mark.parametrize(
    ("change", "field"), [e[1:] for e in BOOKKEEPING_EDITS], ids=[e[0] for e in BOOKKEEPING_EDITS]
)
def test_bookkeeping_the_runtime_never_writes_is_refused(change: Edit, field: str) -> None:
    agent, data = pending_saved()
    data = without_pending(data)
    restore(agent, copy.deepcopy(data))  # untouched: fine
    change(data)
    error = refused(agent, data)
    assert error.field == f"extra.mantle.{field}", str(error)


def test_an_invoked_frame_with_via_call_restores() -> None:
    """What blocks.call_step writes (and a link: from such a frame passes on)."""
    agent, data = pending_saved()
    data = without_pending(data)
    data["extra"]["mantle"]["stack"] = frames(
        ("check_balance", "parked", "routed"), ("authenticate", "active", "invoked")
    )
    data["extra"]["mantle"]["stack"][1]["via_call"] = True
    assert send(restore(agent, data), "hello").error is None


def test_a_resume_offer_restores_and_a_forged_one_is_refused() -> None:
    """lifecycle.after_skills_ended offers the paused skill; the offer names it."""
    agent = bank()
    session = signed_in(agent)
    send(
        session,
        "I lost my card",
        {"tool": "activate_skill", "args": {"skill": "card_replace"}},
        {"tool": "set_fields", "args": {"reason": "lost"}},
    )
    send(
        session,
        "Wait, first tell me my balance.",
        {"tool": "activate_skill", "args": {"skill": "check_balance"}},
        {"tool": "get_balance"},
        {"tool": "complete_skill"},
        {"say": "Your balance is 1250.75 EUR."},
    )
    data = session.to_json()
    assert data["extra"]["mantle"]["offer"] == {"skill": "card_replace"}
    assert data["extra"]["mantle"]["activations"] == {"card_replace": 1, "check_balance": 1}
    assert send(restore(agent, copy.deepcopy(data)), "yes").error is None
    data["extra"]["mantle"]["offer"] = {"skill": "authenticate"}
    assert refused(agent, data).field == "extra.mantle.offer.skill"


FEEDBACK = "---\nname: Feedback\ndescription: Ask for feedback.\n---\nAsk how we did.\n"


SESSION_END_TURNS: list[tuple[str, list[dict[str, Any]], list[tuple[str, str]], bool]] = [
    (
        "resumed: the session is ending",
        [
            {"tool": "complete_skill"},  # feedback
            {"tool": "activate_skill", "args": {"skill": "card_replace"}},
            {"say": "Back to your card."},
        ],
        [("card_replace", "active")],
        False,
    ),
    (
        "dropped: the session ended",
        [{"tool": "complete_skill"}, {"tool": "cancel_skill"}, {"say": "Bye."}],
        [],
        True,
    ),
]


@pytest.mark.parametrize(
    ("moves", "stack", "ended"),
    [e[1:] for e in SESSION_END_TURNS],
    ids=[e[0] for e in SESSION_END_TURNS],
)
def test_an_offer_left_by_a_session_end_turn_restores(
    tmp_path: Path, moves: list[dict[str, Any]], stack: list[tuple[str, str]], ended: bool
) -> None:
    """A /session_end signal turn runs skills without taking the offer first (before_turn):
    the model may resume or drop the offered skill, so a session that is ending or ended
    keeps an offer that names a frame no longer paused."""
    project = copy_bank(tmp_path)
    (project / "agent.yml").write_text(
        (project / "agent.yml").read_text() + "conversation:\n  before_end: [feedback]\n"
    )
    (project / "skills" / "feedback").mkdir()
    (project / "skills" / "feedback" / "skill.md").write_text(FEEDBACK)
    agent = agentscript.load(project, stub_missing_tools=True)
    session = signed_in(agent)
    send(session, "I lost my card", {"tool": "activate_skill", "args": {"skill": "card_replace"}})
    send(
        session,
        "my balance?",
        {"tool": "activate_skill", "args": {"skill": "check_balance"}},
        {"tool": "complete_skill"},
        {"say": "1250.75 EUR."},
    )
    assert session.to_json()["extra"]["mantle"]["offer"] == {"skill": "card_replace"}
    assert send(session, "/session_end", *moves).ended is ended
    data = session.to_json()
    mantle = data["extra"]["mantle"]
    assert mantle["offer"] == {"skill": "card_replace"}
    assert [(f["skill"], f["status"]) for f in mantle["stack"]] == stack
    assert (mantle["ending"] is None) is ended
    restore(agent, data)


ENDING = {
    "agent.yml": "agent:\n  id: t\n  persona: You are a bot.\n"
    "conversation:\n  before_end: [feedback, ghost]\n",
    "skills/feedback/skill.md": FEEDBACK,
    "skills/other/skill.md": "---\nname: Other\ndescription: Something else.\n---\nHelp.\n",
}


def test_what_is_left_of_before_end_restores_and_nothing_else(tmp_path: Path) -> None:
    """session_end_signal writes conversation.before_end and continue_ending takes from its
    front, so ``ending`` is a tail of it: it may name a skill the project does not define
    (skipped when its turn comes), never one before_end does not list."""
    agent = agentscript.load(make(tmp_path, ENDING))
    session = agent.session(model=ScriptedModel())
    assert send(session, "/session_end", {"say": "How did we do?"}).error is None
    data = session.to_json()
    assert data["extra"]["mantle"]["ending"] == ["ghost"]  # feedback is running
    for honest in (["ghost"], [], ["feedback", "ghost"]):
        data["extra"]["mantle"]["ending"] = honest
        restore(agent, copy.deepcopy(data))
    data["extra"]["mantle"]["ending"] = ["ghost"]
    restored = restore(agent, copy.deepcopy(data))
    reply = send(restored, "Great", {"tool": "complete_skill"}, {"say": "Thanks!"})
    assert reply.error is None and reply.ended
    for forged in (["other"], ["feedback"], ["ghost", "ghost"], ["feedback", "ghost", "ghost"]):
        data["extra"]["mantle"]["ending"] = forged
        assert refused(agent, data).field == "extra.mantle.ending", forged
