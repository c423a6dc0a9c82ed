"""Fuzzing the readers of outside input: any text gives a spec or a SpecError (file and line),
any path text a JsonPath or a JsonPathError; nothing else ever escapes."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from agentscript.testing.errors import SpecError
from agentscript.testing.jsonpath import JsonPathError, compile_path
from agentscript.testing.readers import read_spec
from agentscript.testing.readers.strict_json import JsonProblem, load_json

FRAGMENTS = [
    "name: T\n",
    "subjectName: X\n",
    "testCases:\n",
    "  - utterance: hi\n",
    "    expectedActions: ",
    "[a, b]\n",
    "'['a']'\n",
    "    metrics: [coherence]\n",
    "  - inputs:\n",
    "      - utterance: x\n",
    "    scorers:\n",
    "      - {name: coherence}\n",
    "scenario:\n",
    "  simulation_context: x\n",
    "  goals: {assertions: [{skill_completed: {}}]}\n",
    "turns:\n",
    "  - user: hi\n",
    "    assert: [{llm_calls: x}]\n",
    "faults: {a: {raise: 1}}\n",
    "    customEvaluations: [{name: string_comparison, parameters: []}]\n",
    ": ",
    "- ",
    "\t",
]
XML = [
    "<AiEvaluationDefinition>",
    "</AiEvaluationDefinition>",
    "<testCase>",
    "</testCase>",
    "<inputs>",
    "</inputs>",
    "<utterance>hi</utterance>",
    "<expectation>",
    "</expectation>",
    "<name>topic_assertion</name>",
    "<expectedValue>x</expectedValue>",
    "<parameter>",
    "</parameter>",
    "<",
    "&amp;",
    "<!DOCTYPE x>",
]
JSON = [
    '{"tests": [',
    "{",
    "}",
    "]",
    '"steps": [',
    '{"type": "agent.send_message"',
    ",",
    '"utterance": "hi"',
    '"id": "m"',
    '"actual": "{m.topic}"',
    ":",
    '"x": "\\udfff"',  # a lone surrogate
    '"\\ud83d\\ude00"',  # a pair: one character
    "9" * 5_000,  # longer than Python reads
    "NaN",
]


def _read(suffix: str, text: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"spec{suffix}"
        path.write_text(text, encoding="utf-8")
        try:
            read_spec(path)
        except SpecError as exc:
            assert str(exc).startswith(str(path)) or exc.path is None


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=14))
def test_yaml_specs_read_or_fail_cleanly(parts: list[str]) -> None:
    _read(".yaml", "".join(parts))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(XML), max_size=14))
def test_xml_specs_read_or_fail_cleanly(parts: list[str]) -> None:
    _read(".aiEvaluationDefinition-meta.xml", "".join(parts))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(JSON), max_size=14))
def test_eval_payloads_read_or_fail_cleanly(parts: list[str]) -> None:
    _read(".json", "".join(parts))


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet='{}[]:,"\\udD8fe0 9aN', max_size=40))
def test_strict_json_reads_or_raises_json_problem(text: str) -> None:
    try:
        load_json(text, finite=True, unicode=True)
    except JsonProblem as exc:
        assert exc.message.startswith("invalid JSON: ")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="$.[]*?()@'\"=!<>&|ab01- ", max_size=30))
def test_jsonpath_compiles_or_raises_jsonpath_error(text: str) -> None:
    try:
        path = compile_path(text)
    except JsonPathError:
        return
    path.find({"a": [{"b": 1}, [0, "x"]], "b": None})
