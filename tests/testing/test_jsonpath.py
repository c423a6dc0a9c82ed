"""The JSONPath evaluator: Salesforce's documented custom-evaluation paths, and clear errors."""

from __future__ import annotations

import pytest

from agentscript.testing.jsonpath import JsonPathError, compile_path

DATA = {
    "generatedData": {
        "invokedActions": [
            [
                {
                    "function": {
                        "name": "Check_Weather",
                        "input": {"dateToCheck": "2025-09-12"},
                        "output": {"high": 21},
                    },
                    "executionLatency": 12,
                }
            ],
            [{"function": {"name": "Get_Events", "input": {"city": "Paris"}, "output": {}}}],
        ],
        "topic": "local_weather",
    }
}


def test_documented_filter_path_finds_the_action_input() -> None:
    path = compile_path(
        "$.generatedData.invokedActions[*][?(@.function.name == 'Check_Weather')]"
        ".function.input.dateToCheck"
    )
    assert path.find(DATA) == ["2025-09-12"]


def test_index_wildcard_and_bracket_member_paths() -> None:
    assert compile_path("$.generatedData.invokedActions[*][0].function.name").find(DATA) == [
        "Check_Weather",
        "Get_Events",
    ]
    assert compile_path("$['generatedData']['topic']").find(DATA) == ["local_weather"]
    assert compile_path("$.generatedData.invokedActions[-1][0].function.input.city").find(DATA) == [
        "Paris"
    ]


def test_filters_compare_numbers_and_combine_with_and_or() -> None:
    found = compile_path(
        "$.generatedData.invokedActions[*][?(@.executionLatency > 10 && @.function.output.high)]"
        ".function.name"
    ).find(DATA)
    assert found == ["Check_Weather"]
    either = "$..function[?(@ == 'x')]"
    assert compile_path(either).find(DATA) == []
    names = compile_path("$..name").find(DATA)
    assert names == ["Check_Weather", "Get_Events"]


def test_a_missing_member_matches_nothing() -> None:
    assert compile_path("$.generatedData.nothing[0]").find(DATA) == []


@pytest.mark.parametrize(
    ("path", "column"),
    [("generatedData.topic", 1), ("$.a[?(@.b == )]", 14), ("$.a[", 5), ("$.a.[0]", 5)],
)
def test_unparsable_paths_raise_with_the_column(path: str, column: int) -> None:
    with pytest.raises(JsonPathError) as info:
        compile_path(path)
    assert info.value.column == column
