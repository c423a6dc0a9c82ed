"""Malformed and hostile specs: each is a clear spec error naming the file (exit 2, usage),
never a traceback, and a snapshot name cannot write outside ``<spec>.snapshots/``."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import run_test

WHITEBOX = """name: WB
x-agentscript:
  agent: order_status.agent
  actions:
    get_delivery_date: {{outputs: {{delivery_date: "Feb"}}}}
    check_if_late: {{outputs: {{is_late: true}}}}
testCases:
  - utterance: "Where is my order?"
    x-agentscript:
{extension}
      model:
        - tool: go_to_orders
        - say: "ok"
"""


def _spec_error(spec: Path, *args: str) -> str:
    code, out, err = run_test(str(spec), *args)
    assert code == 2, out + err
    assert str(spec) in err
    assert "Traceback" not in out + err
    assert len(err.strip().splitlines()) == 1, err
    return err


def _whitebox(folder: Path, extension: str, name: str = "wb.yaml") -> Path:
    spec = folder / name
    spec.write_text(WHITEBOX.format(extension=extension), encoding="utf-8")
    return spec


@pytest.mark.parametrize("name", ["../../escaped", "../escaped", "/tmp/escaped_abs", "a/b", ".."])
def test_snapshot_name_with_a_folder_is_refused_and_nothing_is_written(
    order_copy: Path, name: str
) -> None:
    folder = order_copy / "deep" / "er"
    folder.mkdir(parents=True)
    spec = _whitebox(folder, f'      assert: [{{instructions_snapshot: {{name: "{name}"}}}}]')
    before = {p for p in order_copy.rglob("*")}
    err = _spec_error(spec, "--update-snapshots")
    assert "plain file name" in err
    assert {p for p in order_copy.rglob("*")} == before
    assert not Path("/tmp/escaped_abs.txt").exists()


def test_plain_snapshot_name_is_written_inside_the_snapshot_folder(order_copy: Path) -> None:
    spec = _whitebox(order_copy, "      assert: [{instructions_snapshot: {name: order-prompt.v1}}]")
    code, _, err = run_test(str(spec))
    assert code == 0, err
    assert (order_copy / "wb.yaml.snapshots" / "order-prompt.v1.txt").is_file()


def test_snapshot_path_that_is_a_folder_is_a_spec_error(order_copy: Path) -> None:
    spec = _whitebox(order_copy, "      assert: [{instructions_snapshot: {name: d}}]")
    (order_copy / "wb.yaml.snapshots" / "d.txt").mkdir(parents=True)
    assert "is not a file" in _spec_error(spec)


def test_snapshot_symlink_pointing_outside_is_not_written_through(order_copy: Path) -> None:
    outside = order_copy / "outside.txt"
    outside.write_text("keep", encoding="utf-8")
    spec = _whitebox(order_copy, "      assert: [{instructions_snapshot: {name: s}}]")
    (order_copy / "wb.yaml.snapshots").mkdir()
    (order_copy / "wb.yaml.snapshots" / "s.txt").symlink_to(outside)
    assert "is not a file in" in _spec_error(spec, "--update-snapshots")
    assert outside.read_text(encoding="utf-8") == "keep"


@pytest.mark.parametrize(
    ("extension", "message"),
    [
        ("      assert: [{llm_calls: {min: x}}]", "llm_calls is a number"),
        ("      assert: [{llm_calls: {max: true}}]", "llm_calls is a number"),
        ("      assert: [{instructions_contain: {text: 5}}]", "'text' must be a text"),
        ("      assert: [{instructions_contain: {text: a, call: [1]}}]", "'call' must be"),
        ("      assert: [{instructions_contain: {text: a, call: 0}}]", "'call' must be"),
        ("      assert: [{tools_offered: {tools: [a], node: [x]}}]", "'node' must be"),
        ("      assert: [{action_failed: {action: a, error_contains: 3}}]", "'error_contains'"),
        ("      assert: [{action_variables: {action: a, before: [1]}}]", "'before' must map"),
        (
            "      faults: {check_if_late: {timeout: true, timeout_s: [1]}}",
            "'timeout_s' must be a number",
        ),
        ("      faults: {check_if_late: {latency_ms: -1}}", "'latency_ms' must be a number"),
    ],
)
def test_whitebox_and_fault_values_of_the_wrong_type_are_spec_errors(
    order_copy: Path, extension: str, message: str
) -> None:
    assert message in _spec_error(_whitebox(order_copy, extension))


def test_metric_that_is_not_a_name_is_a_spec_error(order_copy: Path) -> None:
    spec = order_copy / "m.yaml"
    spec.write_text(
        "x-agentscript: {agent: order_status.agent}\ntestCases:\n"
        "  - utterance: hi\n    metrics: [[1]]\n",
        encoding="utf-8",
    )
    assert f"{spec}:4:" in _spec_error(spec)


RUN_EVAL = (
    '{{"tests":[{{"id":"t","steps":[{{"type":"agent.send_message","id":"m1","utterance":"hi"}},'
    '{{"type":"{kind}","id":"e",{fields}}}]}}]}}'
)


@pytest.mark.parametrize(
    ("kind", "fields", "message"),
    [
        ("evaluator.string_assertion", '"actual":5,"expected":"x"', "'actual' must be"),
        ("evaluator.bot_response_rating", '"expected":"x","threshold":[1]', "'threshold'"),
        ("evaluator.bot_response_rating", '"expected":"x","threshold":true', "'threshold'"),
        ("evaluator.bot_response_rating", '"expected":"x","threshold":9', "'threshold'"),
        (
            "evaluator.numeric_assertion",
            '"actual":"{m1.outcome}","expected":NaN',
            "NaN is not a finite JSON number",
        ),
        (
            "evaluator.numeric_assertion",
            '"actual":"{m1.outcome}","expected":-Infinity',
            "-Infinity is not a finite JSON number",
        ),
        (
            "evaluator.numeric_assertion",
            '"actual":"{m1.outcome}","expected":1e400',
            "1e400 is not a finite JSON number",
        ),
    ],
)
def test_run_eval_payload_with_bad_values_is_a_spec_error(
    order_copy: Path, kind: str, fields: str, message: str
) -> None:
    spec = order_copy / "c.json"
    spec.write_text(RUN_EVAL.format(kind=kind, fields=fields), encoding="utf-8")
    assert message in _spec_error(spec, "--agent", str(order_copy / "order_status.agent"))


def test_deeply_nested_jsonpath_filter_is_a_spec_error(order_copy: Path) -> None:
    path = "$[?(" + "(" * 5_000 + "@.a" + ")" * 5_000 + ")]"
    spec = order_copy / "jp.yaml"
    spec.write_text(
        "x-agentscript: {agent: order_status.agent}\ntestCases:\n  - utterance: hi\n"
        "    customEvaluations:\n      - name: string_comparison\n        parameters:\n"
        "          - {name: operator, value: equals, isReference: false}\n"
        f"          - {{name: actual, value: '{path}', isReference: true}}\n"
        "          - {name: expected, value: x, isReference: false}\n",
        encoding="utf-8",
    )
    err = _spec_error(spec)
    assert "nested deeper than" in err and len(err) < 400


def test_moderately_nested_jsonpath_filter_still_works(order_copy: Path) -> None:
    from agentscript.testing.jsonpath import compile_path

    path = compile_path("$[?(" + "(" * 10 + "@.a == 1" + ")" * 10 + ")]")
    assert path.find([{"a": 1}, {"a": 2}]) == [{"a": 1}]
