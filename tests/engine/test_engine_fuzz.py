"""Property tests: a hostile or broken model cannot break the engine's guarantees.

A :class:`HostileModel` draws every answer from hypothesis data: text (empty, huge, unicode),
tool calls to visible, hidden, unknown and engine-internal names, with arguments of the right
type, the wrong type, missing, extra, huge, deeply nested, not a JSON object, NaN/inf; many
calls per step, endless tool calls (to hit the limits), ``ModelError``, text and calls together.
Every action is stubbed (:class:`FuzzStubs`) with outputs of its declared types or an error.
Users send random text and random confirmation answers; sessions are saved and restored.

After every turn :class:`Guard` checks what the engine promises whatever the model does:
``send`` returns (never raises), ``reply.error`` is None or a string, the trace is JSON,
the model only runs tools it was offered in that node's last resolution and is offered only
the tools that resolution let through, linked variables never change, model-written variables
are declared, mutable and of their declared type, the per-turn limits hold, every history sent
to the model is well formed, and a saved session restores to the same state and runs on.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from engine_helpers import (
    AGENTS,
    Scripted,
    assert_histories_well_formed,
    assert_well_formed,
    llm_inputs,
    steps,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentscript
from agentscript.actions.registry import StubBook, StubResult
from agentscript.check import check
from agentscript.engine.program import ProgramTool
from agentscript.engine.session import Agent, Reply, Session
from agentscript.engine.turn import NO, YES, Limits
from agentscript.expr.values import parse_type, type_matches
from agentscript.models.base import (
    Message,
    ModelError,
    ModelRequest,
    ModelResponse,
    TextSink,
    ToolCall,
    Usage,
)
from agentscript.syntax import parse

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
FIXTURES = ROOT.parent / "shared" / "conformance" / "agentscript" / "fixtures"
# A spread of the corpus: confirmation, collect, delegation, connected subagents, linked
# variables, escalation, end of session, setVariables, gates, hooks and plain routers.
CORPUS_SAMPLE = [
    "001_loan_origination.agent",
    "011_patient_intake.agent",
    "021_order_fulfillment.agent",
    "031_incident_mgmt.agent",
    "040_access_control.agent",
    "access_with_vcra.agent",
    "appointment_scheduler.agent",
    "byon_shopper_agent.agent",
    "case_escalation_bot.agent",
    "claim_processing_assistant.agent",
    "collect_comms_branching.agent",
    "collect_patient_intake.agent",
    "commerce_shopper_agent.agent",
    "connected_subagent_tool.agent",
    "connection_with_unified_email.agent",
    "edge_action_after_reasoning.agent",
    "edge_action_available_when.agent",
    "edge_action_confirmation.agent",
    "edge_action_set_variables_util.agent",
    "edge_end_session_basic.agent",
]


def agent_files() -> list[tuple[Path, str | None]]:
    files: list[tuple[Path, str | None]] = [(p, None) for p in sorted(EXAMPLES.glob("*/*.agent"))]
    files += [(p, None) for p in sorted(AGENTS.glob("*.agent"))]
    files += [(FIXTURES / name, "agentscript") for name in CORPUS_SAMPLE]
    return [(p, d) for p, d in files if p.exists()] + [(CORNER, None)]


# Corners the sample agents reach rarely: a confirmed call whose callback runs an action,
# a held call inside a delegate, a subagent that delegates to itself, typed setVariables
# (list, object, date, integer) and collect.
CORNER_AGENT = """system:
    instructions: "Corner cases."
    messages:
        welcome: "Hi."
        error: "Sorry."

config:
    developer_name: "Corner"

variables:
    account: linked string
        source: @MessagingSession.Id
    amounts: mutable list[number]
    profile: mutable object
    when: mutable date
    count: mutable integer = 0
    name: mutable string
    city: mutable string

start_agent router:
    description: "Route"
    reasoning:
        instructions: ->
            | Route.
        actions:
            go_pay: @utils.transition to @subagent.pay
                description: "Pay"
            ask_pay: @subagent.pay
                description: "Ask the pay subagent"
            save: @utils.setVariables
                description: "Save"
                with amounts=...
                with profile=...
                with when=...
                with count=...
            go_collect: @utils.transition to @subagent.intake

subagent pay:
    description: "Payments"
    reasoning:
        instructions: ->
            | Pay {!@variables.account}.
        actions:
            pay_it: @actions.pay
                description: "Pay"
                with amount=...
                run @actions.audit
                    set @variables.count = @outputs.n
                if @outputs.ok:
                    transition to @subagent.router
            again: @subagent.pay
                description: "Ask myself"
            back: @utils.transition to @subagent.router
    actions:
        pay:
            description: "Pay money"
            target: "flow://Pay"
            require_user_confirmation: True
            inputs:
                amount: number
            outputs:
                ok: boolean
        audit:
            description: "Audit"
            target: "flow://Audit"
            outputs:
                n: integer

subagent intake:
    description: "Collects"
    reasoning:
        instructions: ->
            collect @variables.name
                message: "Name?"
            collect @variables.city
                message: "City?"
            | Thanks.
"""
CORNER = Path("corner.agent")


@cache
def load(path: Path, dialect: str | None) -> Agent:
    if path == CORNER:
        result = check(parse(CORNER_AGENT, "corner.agent"))
        assert not [d for d in result.diagnostics if d.is_error], result.diagnostics
        return Agent(result.outline, name="corner")
    agent = agentscript.load(path, dialect=dialect)
    assert isinstance(agent, Agent)
    return agent


# ---------------------------------------------------------------- values

HUGE = st.sampled_from(["a", "é", "😀", "\u202e", "\x00"]).map(lambda c: c * 100_000)
ODD_TEXT = st.sampled_from(
    ["", " ", "\n", "\ud800", "null", "{}", "yes", "😀" * 3, "\u0000\u200b", "{!@variables.x}"]
)
TEXT = st.one_of(st.text(max_size=40), ODD_TEXT)
FLOATS = st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 1e308, 5e-324])
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    FLOATS,
    TEXT,
)


def nested(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


DEEP = st.integers(min_value=17, max_value=3000).map(nested)
HOSTILE = st.one_of(
    SCALARS,
    st.lists(SCALARS, max_size=4),
    st.dictionaries(TEXT, SCALARS, max_size=4),
    DEEP,
    HUGE,
)

_VALID: dict[str, st.SearchStrategy[Any]] = {
    "string": TEXT,
    "id": st.text(min_size=1, max_size=12).filter(str.strip),
    "number": st.one_of(
        st.integers(-(10**6), 10**6), st.floats(allow_nan=False, allow_infinity=False)
    ),
    "currency": st.floats(min_value=0, max_value=1e6),
    "integer": st.integers(-(10**9), 10**9),
    "long": st.integers(-(2**62), 2**62),
    "boolean": st.booleans(),
    "object": st.dictionaries(
        st.text(max_size=5), st.one_of(st.integers(), st.text(max_size=5)), max_size=3
    ),
    "date": st.sampled_from(["2025-01-31", "2024-02-29", "1999-12-31"]),
    "datetime": st.sampled_from(["2025-01-31T10:00:00Z", "2024-02-29T23:59"]),
    "timestamp": st.sampled_from(["2025-01-31T10:00:00+02:00"]),
    "time": st.sampled_from(["10:00", "23:59:59"]),
}


def valid_value(type_name: str, *, nullable: bool = True) -> st.SearchStrategy[Any]:
    """Values :func:`coerce_to_type` accepts for ``type_name`` (unknown types: anything)."""
    try:
        base, item = parse_type(type_name)
    except ValueError:
        return SCALARS
    if base == "list":
        items = valid_value(item, nullable=False) if item else SCALARS
        strategy: st.SearchStrategy[Any] = st.lists(items, max_size=3)
    else:
        strategy = _VALID[base]
    return st.one_of(st.none(), strategy) if nullable else strategy


# ---------------------------------------------------------------- actions


class FuzzStubs(StubBook):
    """Every action answers with outputs of its declared types, or fails."""

    def __init__(self, data: st.DataObject, outputs: dict[str, dict[str, str]]) -> None:
        super().__init__()
        self.data = data
        self.outputs = outputs

    def has(self, name: str) -> bool:
        return True

    def take(self, name: str) -> StubResult:
        if self.data.draw(st.integers(0, 9), label=f"{name} fails") == 0:
            return StubResult(error=self.data.draw(TEXT, label="action error"))
        declared = self.outputs.get(name, {})
        return StubResult(
            outputs={
                k: self.data.draw(valid_value(t), label=f"{name}.{k}") for k, t in declared.items()
            }
        )


def action_outputs(agent: Agent) -> dict[str, dict[str, str]]:
    outputs: dict[str, dict[str, str]] = {}
    for info in agent.outline.subagents.values():
        for action in info.actions.values():
            outputs.setdefault(action.name, {}).update(
                {k: p.type for k, p in action.outputs.items()}
            )
    return outputs


# ---------------------------------------------------------------- the model

INTERNAL_NAMES = [
    "",
    "@utils.setVariables",
    "setVariables",
    "@utils.transition",
    "transition",
    "escalate",
    "end_session",
    "__init__",
    "__class__",
    "capture_router_fields",
    "cancel_router_collect",
    "😀",
]


class HostileModel:
    """Answers each LLM call with a move drawn from hypothesis data."""

    name = "hostile"

    def __init__(self, data: st.DataObject, agent: Agent) -> None:
        self.data = data
        self.agent = agent
        self.endless = False  # this turn: tool calls only, until a limit stops the turn
        self.calls = 0

    def draw(self, strategy: st.SearchStrategy[Any], label: str) -> Any:
        return self.data.draw(strategy, label=label)

    async def complete(
        self, request: ModelRequest, *, stream: TextSink | None = None
    ) -> ModelResponse:
        roll = self.draw(st.integers(0, 99), "move")
        if roll < 5:
            raise ModelError(self.draw(TEXT, "model error"))
        usage = Usage(
            self.draw(st.integers(0, 10**6), "in"), self.draw(st.integers(0, 10**6), "out")
        )
        if roll < 40 and not self.endless:
            text = self.draw(st.one_of(TEXT, HUGE), "text")
            if stream is not None:
                stream(text)
            return ModelResponse(text=text, usage=usage, model=self.name)
        count = self.draw(st.integers(1, 12) if roll % 4 == 0 else st.integers(1, 3), "calls")
        calls = [self.tool_call(request) for _ in range(count)]
        text = self.draw(st.one_of(st.none(), TEXT), "text with calls") if roll >= 85 else None
        return ModelResponse(text=text, tool_calls=calls, usage=usage, model=self.name)

    def tool_call(self, request: ModelRequest) -> ToolCall:
        node = self.agent.program.nodes.get(request.node)
        every = node.tools if node is not None else {}
        offered = [t.name for t in request.tools]
        hidden = sorted(set(every) - set(offered))
        other_nodes = sorted(
            {name for n in self.agent.program.nodes.values() for name in n.tools} - set(every)
        )
        pools = [offered, offered, hidden, other_nodes, INTERNAL_NAMES]
        pool = self.draw(st.sampled_from([p for p in pools if p] or [INTERNAL_NAMES]), "pool")
        name = self.draw(
            st.one_of(st.sampled_from(pool), TEXT)
            if pool is INTERNAL_NAMES
            else st.sampled_from(pool),
            "tool",
        )
        self.calls += 1
        call_id = self.draw(
            st.sampled_from([f"call_{self.calls}", f"call_{self.calls}", "", "call_1"]), "id"
        )
        tool = every.get(name)
        shape = self.draw(st.integers(0, 9), "arguments shape")
        if shape == 0:
            raw = self.draw(st.one_of(TEXT, st.sampled_from(["[1, 2]", "42", "{", "null"])), "raw")
            return ToolCall(call_id, name, None, raw_arguments=raw)
        return ToolCall(call_id, name, self.arguments(tool, shape))

    def arguments(self, tool: ProgramTool | None, shape: int) -> dict[str, Any]:
        params = tool.parameters if tool is not None else {}
        args: dict[str, Any] = {}
        for pname, param in params.items():
            if param.required or self.draw(st.booleans(), f"give {pname}"):
                args[pname] = self.draw(valid_value(param.type), f"arg {pname}")
        names = sorted(params)
        if shape == 1 and names:  # wrong types
            args[self.draw(st.sampled_from(names), "wrong")] = self.draw(HOSTILE, "wrong value")
        elif shape == 2 and names:  # missing
            args.pop(self.draw(st.sampled_from(names), "missing"), None)
        elif shape == 3:  # extra
            extra = self.draw(st.one_of(TEXT, st.sampled_from(self.variable_names())), "extra")
            args[extra] = self.draw(HOSTILE, "extra value")
        elif shape == 4:  # huge, deep, NaN, inf, unicode in place of every value
            for pname in names or ["x"]:
                args[pname] = self.draw(st.one_of(HUGE, DEEP, FLOATS, ODD_TEXT), "hostile value")
        return args

    def variable_names(self) -> list[str]:
        return sorted(self.agent.outline.variables) or ["x"]


# ---------------------------------------------------------------- the guarantees


class Guard:
    """Checks one session's turns; remembers the last resolution of each node across turns."""

    def __init__(self, agent: Agent, session: Session, limits: Limits) -> None:
        self.agent = agent
        self.limits = limits
        declared = agent.outline.variables
        self.linked = {
            n: json.dumps(session.variables.get(n)) for n, v in declared.items() if v.is_linked
        }
        self.visible: dict[str, set[str]] = {}
        self.hidden: dict[str, set[str]] = {}
        self.replies: list[Reply] = []  # the session's turns so far, to rebuild full inputs

    def check(self, reply: Reply, session: Session) -> None:
        assert isinstance(reply, Reply)
        assert reply.error is None or isinstance(reply.error, str)
        json.dumps(reply.trace)
        steps: list[dict[str, Any]] = reply.trace["planTrace"]["steps"]
        self.replies.append(reply)
        calls = sum(1 for s in steps if s["type"] == "LLM_STEP")
        for messages in llm_inputs(*self.replies)[-calls:] if calls else []:
            assert_well_formed(messages)
        for step in steps:
            self.check_step(step)
        self.check_confirmation(reply, steps)
        llm_calls = sum(1 for s in steps if s["type"] == "LLM_STEP")
        assert llm_calls <= self.limits.max_llm_calls
        transitions = sum(1 for s in steps if s["type"] == "TRANSITION_STEP")
        if reply.error is not None and "transitions in one turn" in reply.error:
            transitions -= 1  # the refused one is recorded, not followed
        assert transitions <= self.limits.max_transitions
        for name, value in self.linked.items():
            assert json.dumps(reply.variables.get(name)) == value, f"linked {name} changed"
        assert_well_formed([m.to_json() for m in session.state.history])

    def check_step(self, step: dict[str, Any]) -> None:
        kind = step["type"]
        if kind == "RESOLUTION_STEP":
            self.visible[step["node"]] = set(step["tools"])
            self.hidden[step["node"]] = set(step["hiddenTools"])
        elif kind == "LLM_STEP":
            offered = {t["name"] for t in step["input"]["tools"]}
            assert offered == self.visible.get(step["node"], set())
        elif kind == "ACTION_STEP" and step["source"] == "llm":
            node = step["node"]
            assert step["name"] in self.visible.get(node, set()), step
            assert step["name"] not in self.hidden.get(node, set()), step
            if step["action"] in ("@utils.setVariables", "collect") and step["error"] is None:
                self.check_model_write(step["input"])

    def check_confirmation(self, reply: Reply, steps: list[dict[str, Any]]) -> None:
        """A held call ends the turn at once, and the user is asked."""
        held = [i for i, s in enumerate(steps) if s.get("event") == "confirmation_requested"]
        if not held:
            assert reply.confirmation is None
            return
        after = steps[held[-1] + 1 :]
        assert not [s for s in after if s["type"] in ("LLM_STEP", "ACTION_STEP", "NODE_ENTER")]
        if reply.error is None:
            assert reply.confirmation is not None and reply.confirmation in reply.messages

    def check_model_write(self, written: dict[str, Any]) -> None:
        declared = self.agent.outline.variables
        for name, value in written.items():
            assert name in declared and declared[name].is_mutable, name
            assert type_matches(value, declared[name].type), (name, value)


# ---------------------------------------------------------------- sessions

LIMITS = st.one_of(
    st.just(Limits()),
    st.builds(
        Limits,
        max_llm_calls=st.integers(1, 5),
        max_transitions=st.integers(0, 3),
        max_tool_calls_per_step=st.integers(1, 4),
    ),
)
CONFIRMATION = st.one_of(
    st.sampled_from(sorted(YES | NO)),
    st.sampled_from(["YES!", " ok. ", "y e s", "yes please"]),
    TEXT,
)
USER_TEXT = st.one_of(TEXT, HUGE, st.sampled_from(sorted(YES)))


def linked_values(agent: Agent, data: st.DataObject) -> dict[str, Any]:
    return {
        name: data.draw(valid_value(info.type, nullable=False), label=f"linked {name}")
        for name, info in agent.outline.variables.items()
        if info.is_linked
    }


def play(agent: Agent, data: st.DataObject) -> None:
    """A few turns of one session, saved and restored at a random point."""
    limits = data.draw(LIMITS, label="limits")
    model = HostileModel(data, agent)
    outputs = action_outputs(agent)

    def new_stubs() -> FuzzStubs:
        return FuzzStubs(data, outputs)

    session = agent.session(
        model=model, variables=linked_values(agent, data), stubs=new_stubs(), limits=limits
    )
    guard = Guard(agent, session, limits)
    turns = data.draw(st.integers(1, 4), label="turns")
    restore_at = data.draw(st.integers(1, turns), label="restore before turn")
    for turn in range(turns):
        if turn == restore_at:
            session = round_trip(
                agent, session, lambda: HostileModel(data, agent), new_stubs, limits
            )
            model = session.model  # type: ignore[assignment]
        model.endless = data.draw(st.integers(0, 9), label="endless") == 0
        if session.state.pending_confirmation is not None:
            text = data.draw(CONFIRMATION, label="confirmation answer")
        else:
            text = data.draw(USER_TEXT, label="user")
        reply = session.send(text)
        guard.check(reply, session)
    # Whatever happened, the final state saves and the restored session takes a turn.
    restored = round_trip(agent, session, lambda: HostileModel(data, agent), new_stubs, limits)
    guard.check(restored.send(data.draw(USER_TEXT, label="user after restore")), restored)


def round_trip(
    agent: Agent,
    session: Session,
    model: Callable[[], HostileModel],
    stubs: Callable[[], FuzzStubs],
    limits: Limits,
) -> Session:
    saved = json.dumps(session.to_json())
    restored = agent.restore(saved, model=model(), stubs=stubs(), limits=limits)
    assert json.dumps(restored.to_json()) == saved
    assert restored.id == session.id
    return restored


FILES = agent_files()


def test_the_sample_covers_examples_test_agents_and_the_corpus() -> None:
    names = {p.parent.name for p, _ in FILES}
    assert {"order_status", "agents", "fixtures"} <= names
    assert sum(1 for p, _ in FILES if p.parent == FIXTURES) in (0, len(CORPUS_SAMPLE))


@pytest.mark.parametrize(
    ("path", "dialect"), FILES, ids=[f"{p.parent.name or 'inline'}/{p.stem}" for p, _ in FILES]
)
@settings(
    max_examples=10,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(data=st.data())
def test_a_hostile_model_cannot_break_the_engine(
    path: Path, dialect: str | None, data: st.DataObject
) -> None:
    play(load(path, dialect), data)


# ---------------------------------------------------------------- regressions found by the fuzz

PAY_STUBS: dict[str, Any] = {"pay": {"outputs": {"ok": False}}, "audit": {"outputs": {"n": 3}}}


def corner(stubs: dict[str, Any] | None = None) -> Scripted:
    return Scripted(load(CORNER, None), variables={"account": "A-1"}, stubs=stubs or PAY_STUBS)


def history_json(session: Scripted) -> list[dict[str, Any]]:
    messages: list[Message] = session.session.state.history
    return [m.to_json() for m in messages]


def test_arguments_nested_as_deep_as_a_provider_parses_are_refused_not_a_crash() -> None:
    # json.loads accepts ~990 levels; json.dumps of them inside the engine's stack overflowed.
    session = corner()
    reply = session.send("x", {"tool": "save", "args": {"profile": nested(990)}}, {"say": "ok"})
    assert reply.error is None and reply.text == "ok"
    refused = steps(reply, "REFUSED_STEP")
    assert len(refused) == 1 and "nested more than 64 levels" in refused[0]["reason"]
    assert reply.variables["profile"] is None
    json.dumps(reply.trace)
    json.dumps(session.session.to_json())


def test_a_confirmed_call_whose_callback_fails_leaves_the_history_well_formed() -> None:
    session = corner({"pay": {"outputs": {"ok": True}}, "audit": {"error": "audit is down"}})
    held = session.send("pay", {"tool": "go_pay"}, {"tool": "pay_it", "args": {"amount": 5}})
    assert held.confirmation is not None
    failed = session.send("yes")
    assert failed.error is not None and "audit is down" in failed.error
    assert_well_formed(history_json(session))
    after = session.send("hello", {"say": "hi"})
    assert after.error is None
    assert_histories_well_formed(held, failed, after)


def test_a_call_held_inside_a_delegate_ends_the_callers_turn_with_the_question() -> None:
    session = corner()
    reply = session.send(
        "pay",
        {"tool": "ask_pay"},
        {"tool": "pay_it", "args": {"amount": 5}},
        {"say": "the caller must not be asked again"},
    )
    assert reply.confirmation is not None and reply.confirmation in reply.messages
    assert len(steps(reply, "LLM_STEP")) == 2
    assert session.model.unused_moves() != []
    assert_well_formed(history_json(session))
    confirmed = session.send("yes", {"say": "paid"})
    assert [s["name"] for s in steps(confirmed, "ACTION_STEP")] == ["pay_it", "audit"]
    assert confirmed.error is None
    assert_histories_well_formed(reply, confirmed)


def test_two_delegations_in_one_step_each_see_a_well_formed_history() -> None:
    session = corner()
    reply = session.send(
        "twice",
        {"tools": [{"tool": "ask_pay"}, {"tool": "ask_pay"}]},
        # Two steps of the first delegate move the step mark past the caller's.
        {"tool": "pay_it", "args": {}},
        {"tool": "pay_it", "args": {}},
        {"say": "first"},
        {"say": "second"},
        {"say": "done"},
    )
    assert reply.error is None and reply.text == "done"
    assert_histories_well_formed(reply)
    inputs = zip(steps(reply, "LLM_STEP"), llm_inputs(reply), strict=True)
    delegated = [messages for step, messages in inputs if step["node"] == "pay"]
    assert [messages[-1]["role"] for messages in delegated] == [
        "user",
        "tool",
        "tool",
        "user",
    ]
