"""A hostile model drives Mantle sessions: whatever it sends, the runtime keeps its promises.

The model draws every answer from hypothesis data: text, engine tools with valid and invalid
arguments, skill tools (visible or hidden), unknown names, non-object arguments, huge strings,
many calls per step, endless tool calls, and ModelError. After every turn we check that no
exception escaped, the trace is JSON, gated tools never ran, memory holds only declared
entries of their declared types, write-once project entries never changed, the LLM call
limit held, the history is well formed, and the session survives ``to_json``/``restore``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentscript
from agentscript.actions.registry import StubBook, StubResult
from agentscript.engine.session import Reply, Session
from agentscript.engine.turn import Limits
from agentscript.mantle.model import MemoryEntry, Project
from agentscript.mantle.queries import holds, tool_constraint
from agentscript.mantle.run import prompt as p
from agentscript.mantle.run.stack import ACTIVE, PARKED
from agentscript.mantle.runtime import MantleAgent, load_mantle_agent
from agentscript.models.base import (
    Message,
    ModelError,
    ModelRequest,
    ModelResponse,
    TextSink,
    ToolCall,
)

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared" / "conformance" / "mantle"
PREFIX = "RasaHQ__rasa-community-resources__"
CORPUS_PROJECTS = [
    "maestro-voice-banking-skills",
    "maestro-voice-appointment-skills",
    "chandratechblog-hrassistant",
]
PROJECTS = ["card_bank", *CORPUS_PROJECTS]
LIMITS = Limits(max_llm_calls=5, max_tool_calls_per_step=4, action_timeout=2.0)
HUGE = "x" * 30_000
SIGNED_IN = {
    "project.authenticated": True,
    "project.customer_id": "1001",
    "project.customer_name": "Ada",
}
OPTIONS = ("1001", "1002", "4321", "8765", "C-11", "C-99", "lost", "Express")
JSON_EXAMPLES: dict[str, list[Any]] = {
    "boolean": [True, False],
    "integer": [0, 1, 3, 1001],
    "number": [0.5, 12.0],
    "array": [[], ["a"]],
}
USER_TEXT = st.one_of(
    st.sampled_from(
        ["yes", "no", "Yes!", "no.", "ok", "I lost my card", "what's my balance", "", "  "]
    ),
    st.text(max_size=40),
    st.just(HUGE),
)


@cache
def load(name: str) -> MantleAgent:
    if name == "card_bank":
        agent = agentscript.load(ROOT / "examples" / "card_bank")
        assert isinstance(agent, MantleAgent)
        return agent
    return load_mantle_agent(CORPUS / f"{PREFIX}{name}", stub_missing_tools=True)


def available(name: str) -> bool:
    return name == "card_bank" or (CORPUS / f"{PREFIX}{name}").is_dir()


# --- the hostile model ------------------------------------------------------------------


def values(entry: MemoryEntry | None = None) -> st.SearchStrategy[Any]:
    """Anything a model could send as a value, biased towards the entry's own options."""
    options = list(OPTIONS)
    if entry is not None:
        options.extend(entry.enum_values or [])
    return st.one_of(
        st.sampled_from(options),
        st.none(),
        st.booleans(),
        st.integers(min_value=-(10**20), max_value=10**20),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=12),
        st.lists(st.integers(), max_size=3),
        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
        st.just(HUGE),
    )


def offered(request: ModelRequest, tool: str) -> dict[str, Any]:
    """The JSON-schema properties of ``tool`` as the request offers it (empty if hidden)."""
    for spec in request.tools:
        if spec.name == tool:
            properties: dict[str, Any] = spec.parameters.get("properties") or {}
            return properties
    return {}


@dataclass
class HostileModel:
    """A model whose every answer is drawn from hypothesis data: mostly what the request
    offers (so sessions get deep), often anything at all."""

    data: st.DataObject
    project: Project
    endless: bool = False  # never answers with text: the LLM call limit must stop the turn
    sense: int = 15  # out of 20: how often a choice is a plausible one
    name: str = "hostile"
    calls_this_turn: int = 0
    ids: int = 0
    requests: list[ModelRequest] = field(default_factory=list)

    def sensible(self) -> bool:
        return self.data.draw(st.integers(min_value=0, max_value=19)) < self.sense

    def likely(self, usual: list[Any], anything: st.SearchStrategy[Any]) -> Any:
        """Mostly one of ``usual``, else a draw from ``anything``."""
        if usual and self.sensible():
            return self.data.draw(st.sampled_from(usual))
        return self.data.draw(anything)

    async def complete(
        self, request: ModelRequest, *, stream: TextSink | None = None
    ) -> ModelResponse:
        self.calls_this_turn += 1
        self.requests.append(request)
        draw = self.data.draw
        roll = 9 if self.endless else draw(st.integers(min_value=0, max_value=19))
        if roll == 0:
            raise ModelError("the hostile model refuses")
        if roll < 5:
            return ModelResponse(text=draw(st.one_of(st.text(max_size=30), st.just(HUGE))))
        count = 1 if self.sensible() else draw(st.sampled_from([2, 3, 6]))
        return ModelResponse(
            text=draw(st.sampled_from([None, "", "thinking"])),
            tool_calls=[self.tool_call(request) for _ in range(count)],
        )

    def tool_call(self, request: ModelRequest) -> ToolCall:
        project = self.project
        every_tool = sorted({n for s in project.skills for n in project.tools_for(s)})
        others = [*every_tool, *sorted(p.ENGINE_TOOLS), "nope", "", "ACTIVATE"]
        name = self.likely([t.name for t in request.tools], st.sampled_from(others))
        self.ids += 1
        call_id = f"h-{self.ids}"
        if not self.sensible() and self.data.draw(st.integers(min_value=0, max_value=3)) == 0:
            raw = self.data.draw(st.sampled_from(["[1, 2]", "not json", '"text"', HUGE]))
            return ToolCall(call_id, name, None, raw_arguments=raw)
        return ToolCall(call_id, name, self.arguments(request, name))

    def arguments(self, request: ModelRequest, name: str) -> dict[str, Any]:
        if name == p.ACTIVATE:
            return self.activate_arguments(offered(request, name))
        if name == p.SET_FIELDS:
            return self.set_fields_arguments(offered(request, name))
        if name == p.RESOLVE:
            return {"confirmed": self.likely([True, False], values())}
        return self.tool_arguments(name)

    def activate_arguments(self, properties: dict[str, Any]) -> dict[str, Any]:
        skills = [*sorted(self.project.skills), "ghost"]
        blocks = sorted({b for s in self.project.skills.values() for b in s.blocks})
        args: dict[str, Any] = {
            "skill": self.likely(
                (properties.get("skill") or {}).get("enum") or [],
                st.one_of(st.sampled_from(skills), values()),
            )
        }
        if self.data.draw(st.integers(min_value=0, max_value=3)) == 0:
            args["block"] = self.likely(
                (properties.get("block") or {}).get("enum") or [],
                st.one_of(st.sampled_from([*blocks, "nowhere"]), values()),
            )
        return args

    def set_fields_arguments(self, properties: dict[str, Any]) -> dict[str, Any]:
        """Offered entries, and entries of other skills, project entries, unknown names."""
        entries = list(self.project.all_memory())
        names = [e.qualified_name for e in entries] + [e.name for e in entries]
        names += [f"session.{e.qualified_name}" for e in entries] + ["ghost", "project.x"]
        out: dict[str, Any] = {}
        for _ in range(self.data.draw(st.integers(min_value=0, max_value=3))):
            key = self.likely(sorted(properties), st.sampled_from(names))
            if key in properties:
                out[key] = self.plausible(properties[key])
            else:
                out[key] = self.data.draw(values(self.entry_for(key)))
        return out

    def tool_arguments(self, name: str) -> dict[str, Any]:
        """Arguments for a skill tool (offered or not): its parameters, mostly typed."""
        project = self.project
        tools = [t for s in project.skills for n, t in project.tools_for(s).items() if n == name]
        properties: dict[str, Any] = {}
        if tools:
            properties = dict(tools[0].parameters_schema.get("properties") or {})
        keys = [*sorted(properties), "extra"]
        chosen = self.data.draw(st.lists(st.sampled_from(keys), max_size=len(keys), unique=True))
        if self.sensible():
            chosen = sorted(properties)
        return {key: self.plausible(properties.get(key) or {}) for key in chosen}

    def plausible(self, prop: dict[str, Any]) -> Any:
        """A value for a JSON-schema property: mostly of its type and enum."""
        kind = prop.get("type")
        usual: list[Any] = list(prop.get("enum") or [])
        if not usual:
            usual = JSON_EXAMPLES.get(str(kind), list(OPTIONS))
        return self.likely(usual, values())

    def entry_for(self, key: str) -> MemoryEntry | None:
        name = key.removeprefix("session.")
        found = self.project.memory_entry(name)
        if found is not None:
            return found
        matches = [e for e in self.project.all_memory() if e.name == name]
        return matches[0] if matches else None


def seeded(data: st.DataObject, project: Project) -> dict[str, Any]:
    """Initial memory: some entries set to values of their type, so gated tools and
    confirmations are reached within a few turns."""
    by_type: dict[str, list[Any]] = {
        "text": list(OPTIONS),
        "bool": [True, False],
        "int": [0, 2, 5],
        "float": [1.5, 100.0],
        "list": [[], ["a"]],
    }
    memory: dict[str, Any] = {}
    for entry in project.all_memory():
        usual = list(entry.enum_values or []) or by_type.get(entry.type, [{"k": 1}])
        if data.draw(st.integers(min_value=0, max_value=2)) == 0:
            memory[entry.qualified_name] = data.draw(st.sampled_from(usual))
    return memory


def stubs_for(data: st.DataObject, project: Project) -> StubBook:
    """Random results (outputs or errors) for every stubbed tool of the project."""
    book = StubBook()
    outcome = st.one_of(
        st.builds(StubResult, error=st.sampled_from(["down", "timeout", ""])),
        st.builds(
            StubResult,
            outputs=st.fixed_dictionaries(
                {}, optional={"ok": st.booleans(), "error": st.text(max_size=5), "v": values()}
            ),
        ),
    )
    for skill in project.skills:
        for name, tool in project.tools_for(skill).items():
            if tool.is_stub and name not in book.entries:
                book.entries[name] = data.draw(st.lists(outcome, min_size=1, max_size=3))
    return book


# --- the invariants ---------------------------------------------------------------------


def fits(entry: MemoryEntry, value: Any) -> bool:
    """A stored value of the entry's declared type (and enum)."""
    if value is None:
        return True
    kind = entry.type
    if kind == "text":
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, float) and math.isfinite(value)
    if kind == "list":
        return isinstance(value, list)
    if kind == "categorical":
        return not entry.enum_values or value in entry.enum_values
    json.dumps(value, allow_nan=False)
    return True


def check_memory(project: Project, memory: dict[str, Any], once: dict[str, Any]) -> None:
    declared = {e.qualified_name: e for e in project.all_memory()}
    assert set(memory) == set(declared)
    for key, value in memory.items():
        entry = declared[key]
        assert fits(entry, value), (key, entry.type, value)
        if entry.write_once and value is not None:
            assert once.setdefault(key, value) == value, f"write-once {key} changed"
        elif entry.write_once:
            assert key not in once, f"write-once {key} was unset"


def check_history(messages: list[Message]) -> None:
    """Every tool call is answered right after it is made, and every answer has its call."""
    index = 0
    while index < len(messages):
        message = messages[index]
        assert message.role in ("user", "assistant", "tool"), message.role
        assert message.role != "tool", f"tool message without its call at {index}"
        index += 1
        if message.tool_calls:
            wanted = sorted(c.id for c in message.tool_calls)
            answers = messages[index : index + len(wanted)]
            assert sorted(str(m.tool_call_id) for m in answers if m.role == "tool") == wanted
            index += len(wanted)


def check_stack(session: Session) -> None:
    """Only the top frame is active; a parked frame waits for the skill it invoked, right
    above it (otherwise it could never resume nor be started again); a call waiting for
    confirmation belongs to a skill on the stack."""
    frames = session.state.extra["mantle"]["stack"]
    pending = session.state.extra["mantle"]["pending"]
    assert pending is None or pending["skill"] in [f["skill"] for f in frames], pending
    for index, frame in enumerate(frames):
        if frame["status"] == ACTIVE:
            assert index == len(frames) - 1, frames
        if frame["status"] == PARKED:
            assert index + 1 < len(frames) and frames[index + 1]["kind"] == "invoked", frames


def check_turn(
    agent: MantleAgent, session: Session, reply: Reply, model: HostileModel, once: dict[str, Any]
) -> None:
    project = agent.project
    # Python's JSON: NaN in a model's arguments is the provider's to refuse (json.loads takes
    # it); what the runtime stores (memory) is checked as strict JSON below.
    json.dumps(reply.trace)
    steps = reply.trace["planTrace"]["steps"]
    assert len([s for s in steps if s["type"] == "LLM_STEP"]) <= LIMITS.max_llm_calls
    assert model.calls_this_turn <= LIMITS.max_llm_calls
    for step in steps:
        for key in ("preVars", "postVars"):
            if isinstance(step.get(key), dict):
                check_memory(project, step[key], once)
        if step["type"] != "ACTION_STEP":
            continue
        if step["source"] == "llm":  # what the model sent passed the size and depth bounds
            assert len(json.dumps(step["input"])) <= LIMITS.max_argument_chars
        if step["name"] == p.SET_FIELDS:
            continue
        assert step["name"] in project.tools_for(step["skill"]), step
        constraint = tool_constraint(project, step["skill"], step["name"])
        if constraint is not None:
            assert holds(constraint.requires, step["preVars"]), (step["name"], step["preVars"])
    check_memory(project, session.variables, once)
    check_stack(session)
    for request in model.requests:
        check_history(request.messages)
    check_history(session.state.history)


def take_turn(
    agent: MantleAgent, session: Session, model: HostileModel, text: str, once: dict[str, Any]
) -> None:
    model.calls_this_turn = 0
    model.requests.clear()
    reply = session.send(text)
    check_turn(agent, session, reply, model, once)


@pytest.mark.parametrize("name", PROJECTS)
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_a_hostile_model_cannot_break_a_session(name: str, data: st.DataObject) -> None:
    if not available(name):
        pytest.skip("conformance corpus not present")
    agent = load(name)
    project = agent.project
    model = HostileModel(
        data,
        project,
        endless=data.draw(st.integers(0, 5)) == 0,
        sense=data.draw(st.sampled_from([10, 16, 19])),
    )
    given_memory = seeded(data, project)
    if name == "card_bank" and data.draw(st.booleans()):
        given_memory.update(SIGNED_IN)
    session = agent.session(
        model=model,
        variables=given_memory,
        stubs=stubs_for(data, project),
        limits=LIMITS,
    )
    once: dict[str, Any] = {}
    for _ in range(data.draw(st.integers(min_value=1, max_value=6))):
        take_turn(agent, session, model, data.draw(USER_TEXT), once)
    saved = json.loads(json.dumps(session.to_json()))
    restored = agent.restore(saved, model=model, stubs=stubs_for(data, project), limits=LIMITS)
    assert restored.to_json() == saved
    take_turn(agent, restored, model, data.draw(USER_TEXT), once)
