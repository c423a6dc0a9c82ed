"""Runtime helpers: memory coercion and write rules, tool results, the skill stack."""

from __future__ import annotations

import pytest

from agentscript.diagnostics import UNKNOWN_SPAN
from agentscript.mantle.memory import (
    MemoryWriteError,
    check_write,
    coerce_value,
    resolve_name,
)
from agentscript.mantle.model import AgentSettings, MemoryEntry, Project, Skill
from agentscript.mantle.run.confirmation import yes_no
from agentscript.mantle.run.stack import PAUSED, SkillStack
from agentscript.mantle.run.tool_handler import failed, normalise_result


def entry(kind: str, **extra: object) -> MemoryEntry:
    return MemoryEntry("s", "x", kind, "f", UNKNOWN_SPAN, **extra)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kind", "value", "expected"),
    [
        ("text", "a", "a"),
        ("text", 12, "12"),
        ("bool", "True", True),
        ("bool", False, False),
        ("int", 3.0, 3),
        ("int", " 7 ", 7),
        ("float", 2, 2.0),
        ("float", "2.5", 2.5),
        ("list", ("a",), ["a"]),
        ("json", {"a": [1]}, {"a": [1]}),
        ("any", None, None),
    ],
)
def test_coerce_value_accepts_lossless_forms(kind: str, value: object, expected: object) -> None:
    assert coerce_value(entry(kind), value) == expected


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        ("text", True),
        ("bool", "maybe"),
        ("int", True),
        ("int", 2.5),
        ("float", "x"),
        ("list", "a"),
        # Regression (fuzz): values strict JSON cannot hold broke to_json/restore.
        ("float", float("inf")),
        ("float", float("nan")),
        ("float", "-inf"),
        ("float", 10**400),
        pytest.param("int", 10**5000, id="int-too-long-for-json"),
        pytest.param("text", 10**5000, id="text-from-an-int-too-long-to-print"),
        ("list", [float("nan")]),
        ("json", {"a": float("inf")}),
        ("categorical", {"a": float("nan")}),
    ],
)
def test_coerce_value_rejects_other_values(kind: str, value: object) -> None:
    with pytest.raises(MemoryWriteError, match=r"s\.x"):
        coerce_value(entry(kind), value)


def test_rejected_values_are_shown_short_in_the_error() -> None:
    with pytest.raises(MemoryWriteError) as failure:
        coerce_value(entry("int"), "x" * 30_000)
    assert len(str(failure.value)) < 200 and str(failure.value).endswith("xxx...")


def test_categorical_uses_the_declared_spelling() -> None:
    choice = entry("categorical", enum_values=["express", "standard"])
    assert coerce_value(choice, "EXPRESS") == "express"
    with pytest.raises(MemoryWriteError, match="not one of"):
        coerce_value(choice, "drone")


def test_write_once_entries_refuse_a_different_second_value() -> None:
    locked = entry("text", write_once=True)
    assert check_write(locked, {"s.x": "a"}, "a") == "a"
    with pytest.raises(MemoryWriteError, match="already set"):
        check_write(locked, {"s.x": "a"}, "b")


def test_resolve_name_prefers_the_skill_then_project() -> None:
    project = Project(root=".", agent=AgentSettings(file="agent.yml"))
    project.memory["x"] = MemoryEntry("project", "x", "text", "f", UNKNOWN_SPAN)
    skill = Skill("s", "s", "f", UNKNOWN_SPAN)
    skill.memory["x"] = entry("text")
    project.skills["s"] = skill
    assert resolve_name(project, "x", ["s"]).qualified_name == "s.x"  # type: ignore[union-attr]
    assert resolve_name(project, "x", []).qualified_name == "project.x"  # type: ignore[union-attr]
    assert resolve_name(project, "session.project.x", ["s"]).qualified_name == "project.x"  # type: ignore[union-attr]
    assert resolve_name(project, "y", ["s"]) is None


def test_yes_no_and_tool_results() -> None:
    assert yes_no("Yes!") is True and yes_no("no.") is False and yes_no("maybe later") is None

    class Result:
        def __init__(self) -> None:
            self.llm_response = {"a": 1}

    assert normalise_result(Result()) == {"a": 1}
    assert normalise_result(None) == {} and normalise_result(5) == {"result": 5}
    assert failed({"ok": False}) and failed({"error": "x"}) and not failed({"ok": True})


def test_skill_stack_is_plain_json_data() -> None:
    extra: dict[str, object] = {}
    stack = SkillStack(extra)
    frame = stack.push("a", "routed")
    SkillStack.enter_block(frame, "b")
    frame["status"] = PAUSED
    stack.push("c", "interrupt")
    assert stack.active() is not None and stack.active()["skill"] == "c"  # type: ignore[index]
    assert [f["skill"] for f in stack.paused()] == ["a"]
    assert stack.count_activation("a") == 0 and stack.count_activation("a") == 1
    again = SkillStack(extra)
    assert again.find("a") is frame and SkillStack.block(frame)["block"] == "b"  # type: ignore[index]
