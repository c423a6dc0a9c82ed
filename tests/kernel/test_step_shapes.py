"""One trace shape per step type: the same scenario played in both formats gives steps of
each shared type with the same keys (docs/trace.md)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from formats import agent_script, mantle, opening, session, steps

from agentscript.engine.session import AgentBase
from agentscript.models.scripted import Move, ScriptedModel
from agentscript.trace_steps import ResponseKind, Source, StepType

SHARED = [
    StepType.RESOLUTION_STEP,
    StepType.LLM_STEP,
    StepType.ACTION_STEP,
    StepType.REFUSED_STEP,
    StepType.RESPONSE_STEP,
    StepType.ERROR_STEP,
    StepType.EVENT_STEP,
]


def scenario(make: Callable[[Path], AgentBase], root: Path) -> list[dict[str, Any]]:
    """Every shared step type once: an action, a refusal, a held call and its yes, a text
    answer, and a failed turn."""
    agent = make(root)
    model = ScriptedModel()
    chat = session(agent, model)
    found: list[dict[str, Any]] = []
    model.begin_turn(
        [
            *opening(agent),
            Move(calls=[("add", {"a": 1}), ("nope", {})]),
            Move(calls=[("refund", {"amount": 5})]),
        ]
    )
    held = chat.send("add one, then refund five")
    assert held.confirmation is not None and held.error is None
    found += steps(held)
    model.begin_turn([Move(text="Refunded.")])
    confirmed = chat.send("yes")
    assert confirmed.actions == ["refund"] and confirmed.text == "Refunded."
    found += steps(confirmed)
    model.begin_turn([])
    failed = chat.send("and?")
    assert failed.error is not None
    found += steps(failed)
    return found


def shapes(found: list[dict[str, Any]], step_type: StepType) -> dict[str, set[frozenset[str]]]:
    """Key sets of the steps of ``step_type``, by what they record (event, kind, source)."""
    by_case: dict[str, set[frozenset[str]]] = {}
    for step in found:
        if step["type"] != step_type:
            continue
        case = str(step.get("event") or step.get("kind") or step.get("source") or "")
        by_case.setdefault(case, set()).add(frozenset(step))
    return by_case


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    return {
        make.__name__: scenario(make, tmp_path_factory.mktemp(make.__name__))
        for make in (agent_script, mantle)
    }


@pytest.mark.parametrize("step_type", SHARED, ids=[t.value for t in SHARED])
def test_each_shared_step_type_has_the_same_keys_in_both_formats(
    traces: dict[str, list[dict[str, Any]]], step_type: StepType
) -> None:
    ours = shapes(traces["agent_script"], step_type)
    theirs = shapes(traces["mantle"], step_type)
    common = set(ours) & set(theirs)
    assert common, f"the scenario wrote no {step_type} in both formats: {ours} / {theirs}"
    for case in common:
        assert ours[case] == theirs[case], (step_type, case)


def test_the_scenario_covers_the_cases_both_formats_share(
    traces: dict[str, list[dict[str, Any]]],
) -> None:
    for name, found in traces.items():
        responses = {s["kind"] for s in found if s["type"] == StepType.RESPONSE_STEP}
        assert {ResponseKind.LLM, ResponseKind.ERROR} <= responses, name
        events = {s["event"] for s in found if s["type"] == StepType.EVENT_STEP}
        assert {"confirmation_requested", "confirmation_resolved"} <= events, name
        refused = [s for s in found if s["type"] == StepType.REFUSED_STEP]
        assert [s["source"] for s in refused] == [Source.LLM], name


def test_steps_hold_plain_strings_not_enum_members(
    traces: dict[str, list[dict[str, Any]]],
) -> None:
    for found in traces.values():
        for step in found:
            for value in step.values():
                assert not isinstance(value, str) or type(value) is str, step
