"""Issue 9 item 3: a saved session is outside input; restore checks all of it, and a signed
session cannot be edited to open a gate."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hostile_helpers import load_agent, steps

import agentscript
from agentscript.engine.restore import SESSION_KEY_ENV, SessionRestoreError
from agentscript.engine.session import AgentBase, Session
from agentscript.models.scripted import ScriptedModel, parse_move

EXAMPLES = Path(__file__).parents[2] / "examples"
STUBS = {"secret": {"outputs": {"done": True}}, "refund": {"outputs": {"refund_id": "R1"}}}


def saved(agent: AgentBase | None = None) -> tuple[AgentBase, dict[str, Any]]:
    """A session that ran one turn and now waits for a yes/no on a refund."""
    agent = agent or load_agent("gate")
    model = ScriptedModel()
    session = agent.session(model=model, variables={"customer_id": "C-1"})
    model.begin_turn([parse_move({"tool": "refund_it", "args": {"amount": 5}})])
    reply = session.send("refund please")
    assert reply.confirmation is not None
    return agent, session.to_json()


def restore(agent: AgentBase, data: Any) -> Any:
    from agentscript.actions.registry import StubBook

    return agent.restore(data, model=ScriptedModel(), stubs=StubBook.from_data(STUBS))


def edit(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def apply(data: dict[str, Any]) -> None:
        *parents, last = path.split("/")
        target: Any = data
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        key: Any = int(last) if isinstance(target, list) else last
        if value is _DELETE:
            del target[key]
        else:
            target[key] = value

    return apply


_DELETE = object()


def test_saved_sessions_carry_the_agents_identity() -> None:
    agent, data = saved()
    assert data["format"] == "agentscript-session/2"
    assert data["agent"]["name"] == agent.name
    assert data["agent"]["hash"].startswith("sha256:")
    restored = restore(agent, json.dumps(data))
    assert restored.state.pending_confirmation is not None


def test_the_agents_hash_is_computed_once_not_per_save_and_restore(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server saves and restores a session on every turn: the hash of the agent's shape
    (a sorted JSON dump and a SHA-256 of it) is the same each time, so it is computed once."""
    agent, data = saved()
    shapes = []
    real = type(agent).state_shape
    monkeypatch.setattr(type(agent), "state_shape", lambda self: shapes.append(1) or real(self))
    for _ in range(3):
        restored = restore(agent, json.dumps(data))
        data = restored.to_json()
    assert data["agent"]["hash"] == agent.identity()["hash"]
    assert len(shapes) == 0  # computed before, when the session was first saved


def test_signed_session_edited_to_open_a_gate_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SESSION_KEY_ENV, "test-key-not-a-secret")
    agent, data = saved()
    assert data["signature"].startswith("hmac-sha256:")
    restore(agent, data)  # untouched: fine
    data["variables"]["is_verified"] = True
    with pytest.raises(SessionRestoreError) as caught:
        restore(agent, data)
    assert caught.value.field == "signature"
    assert "changed after it was saved" in caught.value.reason


def test_with_a_key_set_an_unsigned_session_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    agent, data = saved()  # saved before the key was set: unsigned
    monkeypatch.setenv(SESSION_KEY_ENV, "test-key-not-a-secret")
    with pytest.raises(SessionRestoreError, match="signature: missing"):
        restore(agent, data)


def test_unsigned_edits_still_have_to_be_well_typed() -> None:
    agent, data = saved()
    data["variables"]["is_verified"] = "true"
    with pytest.raises(SessionRestoreError) as caught:
        restore(agent, data)
    assert caught.value.field == "variables.is_verified"


BAD_EDITS: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("string for a boolean", edit("variables/is_verified", "yes"), "variables.is_verified"),
    ("number for a linked string", edit("variables/customer_id", 7), "variables.customer_id"),
    ("unknown variable", edit("variables/evil", 1), "variables.evil"),
    ("missing variable", edit("variables/count", _DELETE), "variables.count"),
    ("variables not an object", edit("variables", [1]), "variables"),
    ("ended as a string", edit("ended", "false"), "ended"),
    ("turn as a string", edit("turn", "3"), "turn"),
    ("turn negative", edit("turn", -1), "turn"),
    ("empty session id", edit("session_id", ""), "session_id"),
    ("unknown node", edit("current_node", "nowhere"), "current_node"),
    ("unknown resume node", edit("resume_node", 5), "resume_node"),
    ("unknown top-level field", edit("is_admin", True), "is_admin"),
    ("missing format", edit("format", _DELETE), "format"),
    ("other agent", edit("agent/name", "Another_Agent"), "agent.name"),
    ("other version", edit("agent/hash", "sha256:0"), "agent.hash"),
    ("missing identity", edit("agent", _DELETE), "agent"),
    ("history not a list", edit("history", "abc"), "history"),
    ("history empty text", edit("history", ""), "history"),
    ("extra as zero", edit("extra", 0), "extra"),
    ("stub usage as empty text", edit("stub_usage", ""), "stub_usage"),
    ("bad role", edit("history/0/role", "system"), "history[0].role"),
    ("content not text", edit("history/0/content", {"a": 1}), "history[0].content"),
    ("extra history field", edit("history/0/secret", 1), "history[0].secret"),
    ("tool result without call", edit("history/1/tool_calls", []), "history[2].tool_call_id"),
    (
        "pending tool unknown",
        edit("pending_confirmation/tool", "nope"),
        "pending_confirmation.tool",
    ),
    (
        "pending tool without confirmation",
        edit("pending_confirmation/tool", "secret"),
        "pending_confirmation.tool",
    ),
    ("pending node unknown", edit("pending_confirmation/node", "x"), "pending_confirmation.node"),
    (
        "pending argument of wrong type",
        edit("pending_confirmation/arguments/amount", "five"),
        "pending_confirmation.arguments.amount",
    ),
    (
        "pending argument unknown",
        edit("pending_confirmation/arguments/evil", 1),
        "pending_confirmation.arguments.evil",
    ),
    ("pending not an object", edit("pending_confirmation", "yes"), "pending_confirmation"),
    ("stub usage negative", edit("stub_usage", {"refund": -1}), "stub_usage.refund"),
    ("extra state", edit("extra", {"x": 1}), "extra.x"),
]


@pytest.mark.parametrize(
    ("change", "field"), [(e[1], e[2]) for e in BAD_EDITS], ids=[e[0] for e in BAD_EDITS]
)
def test_restore_names_the_first_problem(
    change: Callable[[dict[str, Any]], None], field: str
) -> None:
    agent, data = saved()
    change(data)
    with pytest.raises(SessionRestoreError) as caught:
        restore(agent, data)
    assert caught.value.field == field, str(caught.value)
    assert str(caught.value).startswith(f"cannot restore the session: {field}: ")


@pytest.mark.parametrize(
    "text", ['{"format": "agentscript-session/2", "x": NaN}', "[1, 2]", "not json", "[" * 5000]
)
def test_restore_of_text_that_is_not_a_session_object(text: str) -> None:
    agent, _ = saved()
    with pytest.raises(SessionRestoreError):
        restore(agent, text)


WRONG_VALUES: list[Any] = [None, "x", 0, -1, True, [], {}, [{}], {"a": None}, 1.5]


def paths(data: Any, prefix: str = "") -> list[str]:
    out = []
    if isinstance(data, dict):
        items = list(data.items())
    elif isinstance(data, list):
        items = list(enumerate(data))
    else:
        return out
    for key, value in items:
        path = f"{prefix}/{key}" if prefix else str(key)
        out.append(path)
        out.extend(paths(value, path))
    return out


def internal_error(reply: Any) -> str | None:
    """The reply's error when it is an internal one (a bug, such as a KeyError on state that
    restore let in): a turn turns any exception into ``reply.error``, so send() returns."""
    error = getattr(reply, "error", None)
    return error if isinstance(error, str) and error.startswith("internal error") else None


def held(value: Any) -> Callable[[dict[str, Any]], None]:
    """The block's step held (with no confirmation pending, which would move it on)."""

    def apply(data: dict[str, Any]) -> None:
        data["extra"]["mantle"]["pending"] = None
        data["extra"]["mantle"]["stack"][0]["blocks"][0]["held"] = value

    return apply


# Edits of a Mantle session that no single-field edit makes: each is refused or runs.
MANTLE_STACK_EDITS: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
    ("held without step", held({"x": 1})),
    ("held with garbage", held({"step": 5, "memory": []})),
    ("pending block a number", edit("extra/mantle/pending/block", 7)),
    ("pending source model", edit("extra/mantle/pending/source", "model")),
    ("pending arguments empty", edit("extra/mantle/pending/arguments", {})),
    (
        "pending arguments wrong",
        edit("extra/mantle/pending/arguments", {"card_id": 5, "shipping": "overnight", "evil": 1}),
    ),
    (
        "deep stack",
        lambda d: d["extra"]["mantle"].update(
            stack=[copy.deepcopy(d["extra"]["mantle"]["stack"][0]) for _ in range(20_000)]
        ),
    ),
    (
        "every frame active",
        lambda d: d["extra"]["mantle"].update(
            stack=[copy.deepcopy(d["extra"]["mantle"]["stack"][0]) for _ in range(3)]
        ),
    ),
    (
        "many block entries",
        lambda d: d["extra"]["mantle"]["stack"][0].update(
            blocks=[copy.deepcopy(d["extra"]["mantle"]["stack"][0]["blocks"][0])] * 5000
        ),
    ),
]


def edits_of(data: dict[str, Any], kind: str) -> list[tuple[str, Callable[[dict[str, Any]], None]]]:
    """Every field replaced by every wrong kind of value, or deleted; for Mantle, plus the
    stack edits above."""
    found = [
        (f"{path} = {value!r}", edit(path, value))
        for path in paths(data)
        if path != "signature"
        for value in [*WRONG_VALUES, _DELETE]
    ]
    if kind == "mantle_pending":
        found += MANTLE_STACK_EDITS
    return found


@pytest.mark.parametrize("kind", ["agent_script", "mantle", "mantle_pending"])
def test_no_edit_of_a_saved_session_fails_later_than_restore(kind: str) -> None:
    """Every field replaced by every wrong kind of value: restore either refuses it with a
    SessionRestoreError or gives a session whose next turns run (never a raw KeyError,
    TypeError or AttributeError, at restore or at the next send, nor an internal error in the
    reply). ``mantle_pending`` waits for a yes/no on a call held by a block step."""
    agent, data = {
        "agent_script": saved,
        "mantle": mantle_saved,
        "mantle_pending": mantle_pending_saved,
    }[kind]()
    for label, change in edits_of(data, kind):
        broken = copy.deepcopy(data)
        change(broken)
        try:
            session = restore(agent, broken)
        except SessionRestoreError:
            continue
        model = session.model
        assert isinstance(model, ScriptedModel)
        for text in ("yes", "hello"):
            model.begin_turn([parse_move({"say": "ok"})])
            reply = session.send(text)
            assert reply is not None, label
            assert internal_error(reply) is None, f"{label}: {text!r}: {reply.error}"


def test_restored_gate_stays_closed_when_the_value_is_not_a_boolean() -> None:
    agent, data = saved()
    data["variables"]["is_verified"] = 1
    with pytest.raises(SessionRestoreError):
        restore(agent, data)
    session = restore(agent, saved()[1])
    session.model.begin_turn(
        [parse_move({"say": "no"}), parse_move({"tool": "secret"}), parse_move({"say": "done"})]
    )  # type: ignore[attr-defined]
    reply = session.send("no")
    assert steps(reply, "REFUSED_STEP") or not steps(reply, "ACTION_STEP")


# --- Mantle -----------------------------------------------------------------------------------


def card_bank_session() -> tuple[AgentBase, ScriptedModel, Session]:
    """card_bank with an authenticated customer, answered by a scripted model."""
    agent = agentscript.load(EXAMPLES / "card_bank", stub_missing_tools=True)
    model = ScriptedModel()
    session = agent.session(
        model=model,
        variables={"project.authenticated": True, "project.customer_id": "1001"},
    )
    return agent, model, session


def mantle_saved() -> tuple[AgentBase, dict[str, Any]]:
    agent, model, session = card_bank_session()
    model.begin_turn(
        [
            parse_move({"tool": "activate_skill", "args": {"skill": "card_replace"}}),
            parse_move({"say": "Which card?"}),
        ]
    )
    session.send("I lost my card")
    return agent, session.to_json()


def mantle_pending_saved() -> tuple[AgentBase, dict[str, Any]]:
    """card_replace at its place_order step, waiting for a yes/no on order_replacement."""
    agent, model, session = card_bank_session()
    model.begin_turn(
        [
            parse_move({"tool": "activate_skill", "args": {"skill": "card_replace"}}),
            parse_move({"tool": "set_fields", "args": {"reason": "lost", "card_id": "C-11"}}),
            parse_move(
                {"tool": "activate_skill", "args": {"skill": "card_replace", "block": "order_card"}}
            ),
        ]
    )
    session.send("I lost my card C-11")
    model.begin_turn([parse_move({"tool": "set_fields", "args": {"shipping": "express"}})])
    assert session.send("express").confirmation is not None
    data = session.to_json()
    assert data["extra"]["mantle"]["pending"]["source"] == "step"
    return agent, data


MANTLE_EDITS: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("unknown skill", edit("extra/mantle/stack/0/skill", "nope"), "extra.mantle.stack[0].skill"),
    ("bad status", edit("extra/mantle/stack/0/status", "weird"), "extra.mantle.stack[0].status"),
    ("stack not a list", edit("extra/mantle/stack", {}), "extra.mantle.stack"),
    ("started as text", edit("extra/mantle/started", "yes"), "extra.mantle.started"),
    ("unknown memory entry", edit("variables/project.evil", 1), "variables.project.evil"),
    ("unknown extra", edit("extra/other", {}), "extra.other"),
    ("pending on the node", edit("pending_confirmation", {"node": "x"}), "pending_confirmation"),
]


@pytest.mark.parametrize(
    ("change", "field"), [(e[1], e[2]) for e in MANTLE_EDITS], ids=[e[0] for e in MANTLE_EDITS]
)
def test_mantle_restore_checks_the_skill_stack_and_memory(
    change: Callable[[dict[str, Any]], None], field: str
) -> None:
    agent, data = mantle_saved()
    assert data["extra"]["mantle"]["stack"], data["extra"]
    restore(agent, copy.deepcopy(data))  # untouched: fine
    change(data)
    with pytest.raises(SessionRestoreError) as caught:
        restore(agent, data)
    assert caught.value.field == field, str(caught.value)


def test_mantle_memory_of_the_wrong_type_is_refused() -> None:
    agent, data = mantle_saved()
    booleans = [
        k
        for k, v in data["variables"].items()
        if isinstance(v, bool) or k == "project.authenticated"
    ]
    assert booleans
    data["variables"][booleans[0]] = "true"
    with pytest.raises(SessionRestoreError) as caught:
        restore(agent, data)
    assert caught.value.field == f"variables.{booleans[0]}"


def test_host_supplied_linked_values_replace_the_stored_ones() -> None:
    agent, data = saved()
    data["variables"]["customer_id"] = "C-666"  # well typed, but not the host's customer
    session = agent.restore(data, model=ScriptedModel(), variables={"customer_id": "C-1"})
    assert session.variables["customer_id"] == "C-1"
    with pytest.raises(ValueError, match="unknown variable"):
        agent.restore(data, model=ScriptedModel(), variables={"nope": 1})


def test_budget_totals_in_extra_are_restored_and_checked() -> None:
    agent, data = saved()
    data["extra"] = {
        "usage": {"llm_calls": 2, "input_tokens": 10, "output_tokens": 5, "cost": None}
    }
    restore(agent, data)  # a session metered by a budget reads back
    data["extra"]["usage"]["llm_calls"] = -1
    with pytest.raises(SessionRestoreError) as caught:
        restore(agent, data)
    assert caught.value.field == "extra.usage.llm_calls"
