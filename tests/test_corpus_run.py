"""Every fixture of the conformance corpus that checks clean runs on the engine.

Each fixture is loaded with ``agentscript.load`` (the ``agentscript`` dialect for the files the
``agentforce`` org rules reject), every declared action is stubbed and linked variables get
values, then:

* turn 1: the model answers with text; the turn succeeds, or fails only with the engine's own
  message for a deterministic step that cannot work with empty action outputs;
* turn 2 (same session): the model calls the first tool it is offered, with arguments built
  from that tool's JSON schema, then answers with text; nothing escapes as a Python exception
  and the arguments built from the advertised schema are accepted.

A third run gives every stub outputs of the declared types: then no turn may fail at all.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import agentscript
from agentscript import AgentScriptError
from agentscript.actions.registry import StubBook, StubResult
from agentscript.engine.program import json_schema_of
from agentscript.engine.session import Agent, Reply
from agentscript.models.base import ModelRequest, ModelResponse, TextSink, ToolCall
from conformance import FIXTURES_DIR, fixture_files
from fakes.bench_scripts import load_bench_script

FIXTURES = fixture_files()
pytestmark = pytest.mark.skipif(not FIXTURES, reason="conformance corpus not available")

# A deterministic `set @variables.x = @outputs.y` fails when the stub returned no `y`: the
# turn must then end with this message (S12), nothing else.
MISSING_OUTPUT = re.compile(r"^set @variables\.\w+ at line \d+: @outputs\.\w+ is not defined$")


def _load_corpus_lists() -> ModuleType:
    """The known error files live in tests/check/test_corpus.py: reuse them, not a copy."""
    path = Path(__file__).resolve().parent / "check" / "test_corpus.py"
    spec = importlib.util.spec_from_file_location("_check_corpus_lists", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_LISTS = _load_corpus_lists()
ORG_REJECTED: dict[str, set[str]] = _LISTS.ORG_REJECTED
BROKEN: dict[str, set[str]] = _LISTS.BROKEN
RUNNABLE = [p for p in FIXTURES if p.name not in BROKEN]


# ---------------------------------------------------------------------- helpers


def sample(schema: dict[str, Any]) -> Any:
    """A value that satisfies a JSON schema as the engine advertises it."""
    kind = schema.get("type")
    if kind == "string":
        formats = {"date": "2024-01-15", "date-time": "2024-01-15T10:00:00Z", "time": "10:00:00"}
        return formats.get(str(schema.get("format")), "sample")
    if kind == "number":
        return 1.5
    if kind == "integer":
        return 1
    if kind == "boolean":
        return True
    if kind == "array":
        items = schema.get("items")
        return [sample(items)] if items else []
    if kind == "object":
        return {k: sample(v) for k, v in (schema.get("properties") or {}).items()}
    return "sample"


def sample_of_type(type_name: str) -> Any:
    return sample(json_schema_of(type_name))


@cache
def load_fixture(name: str) -> Agent:
    dialect = "agentscript" if name in ORG_REJECTED else None
    return agentscript.load(FIXTURES_DIR / name, dialect=dialect)


def stub_book(agent: Agent, *, typed: bool) -> StubBook:
    """Every declared action answers; with ``typed`` its outputs have the declared types."""
    book = StubBook()
    for node in agent.outline.subagents.values():
        for name, action in node.actions.items():
            outputs = (
                {k: sample_of_type(p.type) for k, p in action.outputs.items()} if typed else {}
            )
            book.entries[name] = StubResult(outputs=outputs)
    return book


def linked_values(agent: Agent) -> dict[str, Any]:
    return {
        name: sample_of_type(info.type)
        for name, info in agent.outline.variables.items()
        if info.is_linked
    }


class ProbeModel:
    """Answers text; when armed, the first request with tools gets a call of its first tool."""

    name = "probe"

    def __init__(self) -> None:
        self.armed = False
        self.requests: list[ModelRequest] = []
        self.called: tuple[str, str, dict[str, Any]] | None = None

    async def complete(
        self, request: ModelRequest, *, stream: TextSink | None = None
    ) -> ModelResponse:
        self.requests.append(request)
        if self.armed and request.tools:
            self.armed = False
            tool = request.tools[0]
            arguments = sample(tool.parameters)
            self.called = (request.node, tool.name, arguments)
            return ModelResponse(tool_calls=[ToolCall("probe_1", tool.name, arguments)])
        self.armed = False
        return ModelResponse(text="All set.")


def steps(reply: Reply) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = reply.trace["planTrace"]["steps"]
    return result


def assert_clean_failure(reply: Reply) -> None:
    """A failed turn says why in one engine message, recorded as the trace's ERROR_STEP."""
    assert reply.error is not None
    assert "Traceback" not in reply.error
    errors = [s for s in steps(reply) if s["type"] == "ERROR_STEP"]
    assert [s["message"] for s in errors] == [reply.error]
    assert reply.text  # the user still gets system.messages.error (or the default)


def play_two_turns(name: str, *, typed: bool) -> tuple[Agent, ProbeModel, Reply, Reply]:
    agent = load_fixture(name)
    model = ProbeModel()
    session = agent.session(
        model=model, stubs=stub_book(agent, typed=typed), variables=linked_values(agent)
    )
    first = session.send("Hello, I need some help.")
    model.armed = True
    model.requests.clear()
    second = session.send("Yes, please go ahead.")
    # Both traces and the session must stay JSON-serialisable (trace files, restore).
    json.dumps(first.trace)
    json.dumps(second.trace)
    json.dumps(session.to_json())
    return agent, model, first, second


# ---------------------------------------------------------------------- tests


def test_every_clean_fixture_is_covered() -> None:
    assert len(FIXTURES) == 270
    assert len(RUNNABLE) == 270 - len(BROKEN)


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_fixtures_do_not_load(name: str) -> None:
    with pytest.raises(AgentScriptError) as caught:
        agentscript.load(FIXTURES_DIR / name, dialect="agentscript")
    assert {d.code for d in caught.value.diagnostics if d.is_error} == BROKEN[name]


@pytest.mark.parametrize("path", RUNNABLE, ids=lambda p: p.name)
def test_fixture_runs_with_empty_stub_outputs(path: Path) -> None:
    agent, model, first, second = play_two_turns(path.name, typed=False)

    start = agent.program.start
    first_steps = steps(first)
    assert first_steps[0]["type"] == "NODE_ENTER"
    assert first_steps[0]["node"] == start
    assert first.path[0] == start
    if first.error is None:
        assert "All set." in first.messages
    else:
        assert_clean_failure(first)
        assert MISSING_OUTPUT.match(first.error), first.error

    # Turn 2: whatever the tool did, the turn ends with a reply, never an exception.
    assert steps(second)[0]["type"] == "NODE_ENTER"
    if second.error is not None:
        assert_clean_failure(second)
        assert MISSING_OUTPUT.match(second.error), second.error
    if model.called is not None:
        _node, tool, _arguments = model.called
        refused = [s for s in steps(second) if s["type"] == "REFUSED_STEP"]
        # Arguments built from the advertised schema pass the engine's argument check.
        assert refused == [], refused
        answered = [s["output"] for s in steps(second) if s["type"] == "LLM_STEP"]
        assert [c["name"] for c in answered[0]["tool_calls"]] == [tool]


@pytest.mark.parametrize("path", RUNNABLE, ids=lambda p: p.name)
def test_fixture_runs_cleanly_with_typed_stub_outputs(path: Path) -> None:
    agent, model, first, second = play_two_turns(path.name, typed=True)
    assert first.error is None, first.error
    assert second.error is None, second.error
    assert steps(first)[0] == {
        "type": "NODE_ENTER",
        "node": agent.program.start,
        "reason": "turn start (router)",
    }
    if model.called is not None:
        node, tool, _arguments = model.called
        # The probe's tool call reached the engine from the node that offered the tool.
        offered = [
            s
            for s in steps(second)
            if s["type"] == "RESOLUTION_STEP" and s["node"] == node and tool in s["tools"]
        ]
        assert offered
        # ... and ran (or waits for the user's yes/no when the action requires it).
        assert tool in second.actions or second.confirmation is not None


def test_most_start_agents_offer_a_tool() -> None:
    """Guards the tool probe above against silently testing nothing."""
    offered = 0
    for path in RUNNABLE:
        agent = load_fixture(path.name)
        if agent.program.nodes[agent.program.start].tools:
            offered += 1
    assert offered > 200


def test_turn_benchmark_smoke(capsys: pytest.CaptureFixture[str]) -> None:
    """bench/turn.py runs (its agents play their turns without error); no timing is checked."""
    try:
        module = load_bench_script("turn.py", "_bench_turn")
        assert module.main(["--quick"]) == 0
    finally:
        sys.modules.pop("_bench_turn", None)
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()}
    assert rows["seed002"][1] == "2"  # LLM iterations per turn
    assert rows["hub30"][1] == "3"
