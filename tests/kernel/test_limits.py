"""One ``Limits``: every field named in the error it causes, overridable from the API and
from ``agentscript.toml``; the exceptions split by audience."""

from __future__ import annotations

import doctest
from pathlib import Path

import pytest
from formats import agent_script, mantle, opening, session, steps

import agentscript
from agentscript.actions.registry import ActionError
from agentscript.conversation import ConversationError
from agentscript.engine.procedures import ProcedureFailure, TransitionSignal
from agentscript.errors import LimitReached, RunFailure, Signal, TurnError, UsageError
from agentscript.limits import Limits
from agentscript.models.base import ModelError
from agentscript.models.scripted import Move, ScriptedModel

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.mark.parametrize("make", [agent_script, mantle], ids=["agentscript", "mantle"])
def test_S11_the_llm_call_budget_error_names_its_field_in_both_formats(
    make: object, tmp_path: Path
) -> None:
    agent = make(tmp_path)  # type: ignore[operator]
    model = ScriptedModel()
    chat = session(agent, model, limits=Limits(max_llm_calls=len(opening(agent)) + 1))
    model.begin_turn([*opening(agent), Move(calls=[("add", {"a": 1})]), Move(text="never")])
    reply = chat.send("go")
    assert reply.error is not None and "Limits.max_llm_calls = " in reply.error
    assert reply.text == "Sorry, something went wrong."


@pytest.mark.parametrize("make", [agent_script, mantle], ids=["agentscript", "mantle"])
def test_a_refused_call_over_the_step_limit_names_its_field(make: object, tmp_path: Path) -> None:
    agent = make(tmp_path)  # type: ignore[operator]
    model = ScriptedModel()
    chat = session(agent, model, limits=Limits(max_tool_calls_per_step=1))
    two = Move(calls=[("add", {"a": 1}), ("add", {"a": 2})])
    model.begin_turn([*opening(agent), two, Move(text="ok")])
    refused = steps(chat.send("go"), "REFUSED_STEP")
    assert [s["limit"] for s in refused] == ["max_tool_calls_per_step"]


def test_limits_come_from_the_limits_table_of_agentscript_toml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "agentscript.toml"
    config.write_text("[limits]\nmax_llm_calls = 3\naction_timeouts = { slow = 2 }\n")
    monkeypatch.setenv("AGENTSCRIPT_CONFIG", str(config))
    agent = agent_script(tmp_path)
    assert agent.limits == Limits(max_llm_calls=3, action_timeouts={"slow": 2.0})
    chat = agent.session(model=ScriptedModel())
    assert chat.limits.max_llm_calls == 3
    # The Python API wins over the file.
    assert agent.session(model=ScriptedModel(), limits=Limits()).limits.max_llm_calls == 16


@pytest.mark.parametrize(
    ("table", "named"),
    [
        ("max_llm_calls = 0", "max_llm_calls"),
        ("max_tokens = 3", "max_tokens"),
        ('action_timeout = "soon"', "action_timeout"),
        ("action_timeouts = { slow = -1 }", "action_timeouts"),
    ],
)
def test_a_bad_limits_table_is_an_invalid_limits_error_naming_the_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, table: str, named: str
) -> None:
    config = tmp_path / "agentscript.toml"
    config.write_text(f"[limits]\n{table}\n")
    monkeypatch.setenv("AGENTSCRIPT_CONFIG", str(config))
    with pytest.raises(agentscript.AgentScriptError) as failure:
        agent_script(tmp_path)
    diagnostic = failure.value.diagnostics[0]
    assert diagnostic.code == "invalid-limits" and named in diagnostic.message
    assert diagnostic.file == str(config)


def test_exceptions_are_split_by_audience() -> None:
    assert issubclass(agentscript.AgentScriptError, UsageError)
    assert issubclass(ConversationError, UsageError) and issubclass(ConversationError, ValueError)
    for failure in (ModelError, ActionError, TurnError, ProcedureFailure, LimitReached):
        assert issubclass(failure, RunFailure)
    assert issubclass(TransitionSignal, Signal)
    reached = LimitReached("max_transitions", 10, "more than 10 transitions in one turn")
    assert (reached.limit, reached.value, reached.exhausted) == ("max_transitions", 10, False)
    assert "Limits.max_transitions = 10" in str(reached)


def test_the_limits_doc_examples_run() -> None:
    failures, tried = doctest.testfile(str(DOCS / "limits.md"), module_relative=False)
    assert tried > 0 and failures == 0
