"""S8 (LLM-written variables), S10 (literal `|` instructions) and hostile tool arguments."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from engine_helpers import AGENTS, Scripted, steps

import agentscript
from agentscript.diagnostics import AgentScriptError
from agentscript.engine.turn import Limits
from agentscript.models.base import Message, ToolCall
from agentscript.models.function import FunctionInfo, FunctionModel

STUBS = {"find_records": {"outputs": {"found": 3}}}


def notes_session(**kwargs: Any) -> Scripted:
    return Scripted("vars", variables={"customer_id": "C-1"}, stubs=STUBS, **kwargs)


def call(session: Scripted, tool: str, args: dict[str, Any]) -> Any:
    return session.send("x", {"tool": "go_notes"}, {"tool": tool, "args": args}, {"say": "ok"})


def test_S8_set_variables_writes_declared_mutable_variables() -> None:
    reply = call(notes_session(), "save", {"note": "n1", "count": 2})
    action = steps(reply, "ACTION_STEP")[0]
    assert action["action"] == "@utils.setVariables"
    assert action["preVars"]["note"] == "" and action["postVars"]["note"] == "n1"
    assert reply.variables["note"] == "n1" and reply.variables["count"] == 2


def test_S8_bound_value_is_computed_when_the_tool_is_called() -> None:
    reply = call(notes_session(), "stamp", {})
    assert reply.variables["note"] == "stamped C-1"


@pytest.mark.parametrize("target", ["customer_id", "label", "undeclared", "__class__"])
def test_S8_llm_cannot_set_linked_immutable_or_undeclared_variables(target: str) -> None:
    reply = call(notes_session(), "save", {target: "evil"})
    refused = steps(reply, "REFUSED_STEP")
    assert len(refused) == 1 and "unknown argument" in refused[0]["reason"]
    assert steps(reply, "ACTION_STEP") == []
    assert reply.variables["customer_id"] == "C-1"
    assert reply.variables["label"] == "constant"
    assert "undeclared" not in reply.variables and "__class__" not in reply.variables


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ({"count": "two"}, "expected a number"),
        ({"count": True}, "expected a number"),
        ({"note": 5}, "expected a string"),
        ({"note": {"nested": 1}}, "expected a string"),
    ],
)
def test_S8_llm_values_are_checked_against_the_declared_type(
    args: dict[str, Any], problem: str
) -> None:
    reply = call(notes_session(), "save", args)
    refused = steps(reply, "REFUSED_STEP")
    assert len(refused) == 1 and problem in refused[0]["reason"]
    assert reply.variables["count"] == 0 and reply.variables["note"] == ""
    result = [m for m in steps(reply, "LLM_STEP")[-1]["input"]["messages"] if m["role"] == "tool"]
    assert json.loads(result[-1]["content"])["error"] == refused[0]["reason"]


def test_S8_list_values_are_checked_item_by_item() -> None:
    ok = call(notes_session(), "save_items", {"items": ["a", "b"]})
    assert ok.variables["items"] == ["a", "b"]
    bad = call(notes_session(), "save_items", {"items": ["a", 3]})
    assert len(steps(bad, "REFUSED_STEP")) == 1 and bad.variables["items"] == []


def checked_copy(tmp_path: Path, old: str, new: str) -> Path:
    text = (AGENTS / "vars.agent").read_text().replace(old, new, 1)
    path = tmp_path / "variant.agent"
    path.write_text(text)
    return path


def test_S8_linked_and_immutable_targets_are_rejected_before_running(tmp_path: Path) -> None:
    for target, code in [
        ("customer_id", "set-variables-immutable-target"),
        ("label", "set-variables-immutable-target"),
    ]:
        path = checked_copy(
            tmp_path, "with items=...", f"with items=...\n                with {target}=..."
        )
        with pytest.raises(AgentScriptError) as info:
            agentscript.load(path)
        assert code in {d.code for d in info.value.diagnostics}
    path = checked_copy(
        tmp_path, "| Route.", '| Route.\n            set @variables.customer_id = "x"'
    )
    with pytest.raises(AgentScriptError) as info:
        agentscript.load(path)
    assert "set-linked-variable" in {d.code for d in info.value.diagnostics}


def test_S10_pipe_instructions_are_literal_but_interpolate() -> None:
    reply = call(notes_session(), "save", {"note": "n1"})
    first = steps(reply, "LLM_STEP")[1]["input"]["instructions"]
    # Statement-looking lines are sent as text: nothing is run (no ACTION_STEP for find).
    assert first.startswith("if @variables.verified == True:\n    run @actions.find\n")
    assert [s["action"] for s in steps(reply, "ACTION_STEP")] == ["@utils.setVariables"]
    # `{!expr}` is interpolated (decision in docs/semantics.md), re-rendered each iteration.
    assert first.endswith("Note for C-1: . Save with lookup.")
    second = steps(reply, "LLM_STEP")[2]["input"]["instructions"]
    assert second.endswith("Note for C-1: n1. Save with lookup.")


def test_S10_actions_reference_renders_the_binding_name_of_an_action_definition() -> None:
    reply = call(notes_session(), "save", {"note": "n1"})
    # `{!@actions.find_records}` names the action definition; the LLM sees the tool `lookup`.
    assert "Save with lookup." in steps(reply, "LLM_STEP")[1]["input"]["instructions"]
    offered = [t["name"] for t in steps(reply, "LLM_STEP")[1]["input"]["tools"]]
    assert "lookup" in offered and "find_records" not in offered


# ---------------------------------------------------------------- hostile arguments


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ({"query": "q" * 50_000, "limit": 1}, "too large"),
        ({"query": "q", "limit": 1, "extra": 1}, "unknown argument"),
        ({"query": "q"}, "missing required argument 'limit'"),
        ({"query": ["q"], "limit": 1}, "expected a string"),
        ({"query": "q", "limit": "1; drop table"}, "expected a number"),
        ({"query": "q", "limit": float("inf")}, "finite"),
    ],
)
def test_safety_hostile_arguments_are_refused_with_an_error_result(
    args: dict[str, Any], problem: str
) -> None:
    reply = call(notes_session(), "lookup", args)
    refused = steps(reply, "REFUSED_STEP")
    assert len(refused) == 1 and problem in refused[0]["reason"], refused
    assert steps(reply, "ACTION_STEP") == []
    assert reply.variables["count"] == 0
    assert reply.error is None and reply.text == "ok"


def test_safety_deeply_nested_json_is_refused() -> None:
    deep: Any = "leaf"
    for _ in range(40):
        deep = {"d": deep}
    reply = call(notes_session(), "save_items", {"items": deep})
    assert "nested too deeply" in steps(reply, "REFUSED_STEP")[0]["reason"]


def raw_model(raw: str) -> FunctionModel:
    """Sends one tool call whose arguments are not a JSON object, then answers."""

    def answer(messages: list[Message], info: FunctionInfo) -> ToolCall | str:
        if info.calls_before == 0:
            return ToolCall("c1", "go_notes", {})
        if info.calls_before == 1:
            return ToolCall("c2", "lookup", None, raw)
        return "ok"

    return FunctionModel(answer, name="raw")


@pytest.mark.parametrize("raw", ["[1, 2]", '"text"', "null", "{not json"])
def test_safety_non_object_json_arguments_are_refused(raw: str) -> None:
    agent = agentscript.load(AGENTS / "vars.agent")
    session = agent.session(model=raw_model(raw), variables={"customer_id": "C"})
    reply = session.send("x")
    refused = steps(reply, "REFUSED_STEP")
    assert len(refused) == 1 and "not a JSON object" in refused[0]["reason"]
    assert steps(reply, "ACTION_STEP") == []
    assert reply.text == "ok"


def test_safety_too_many_tool_calls_in_one_step_are_refused() -> None:
    session = notes_session(limits=Limits(max_tool_calls_per_step=2))
    many = [{"tool": "save", "args": {"count": i}} for i in range(1, 5)]
    reply = session.send("x", {"tool": "go_notes"}, {"tools": many}, {"say": "ok"})
    assert len(steps(reply, "ACTION_STEP")) == 2
    assert len(steps(reply, "REFUSED_STEP")) == 2
    assert reply.variables["count"] == 2


def test_safety_unknown_tool_is_refused_and_named_in_the_result() -> None:
    reply = call(notes_session(), "rm_rf", {})
    assert "unknown tool 'rm_rf'" in steps(reply, "REFUSED_STEP")[0]["reason"]


def tools_variant(tmp_path: Path, old: str, new: str) -> agentscript.Agent:
    text = (AGENTS / "tools.agent").read_text().replace(old, new, 1)
    path = tmp_path / "tools_variant.agent"
    path.write_text(text)
    return agentscript.load(path)


def test_failing_interpolation_renders_empty_with_a_warning(tmp_path: Path) -> None:
    agent = tools_variant(tmp_path, "| Route.", "| Route [{!@variables.payload.level}].")
    session = Scripted(agent, variables={"customer_id": "C"})
    reply = session.send("x", {"say": "ok"})
    resolution = steps(reply, "RESOLUTION_STEP")[0]
    assert resolution["instructions"] == "Route []."
    assert any("rendered empty" in w for w in resolution["warnings"])
    assert reply.error is None


def test_failing_set_expression_ends_the_turn_with_the_error_message(tmp_path: Path) -> None:
    agent = tools_variant(
        tmp_path,
        "| Route.",
        "set @variables.status = @variables.payload.level\n            | Route.",
    )
    session = Scripted(agent, variables={"customer_id": "C"})
    reply = session.send("x", {"say": "never"})
    assert reply.error is not None and "set @variables.status" in reply.error
    assert reply.text == "Sorry, the shop had a problem."
    assert steps(reply, "LLM_STEP") == []
    assert not session.session.ended
