"""Hostile text in reports: case names, labels, agent replies and judge reasoning carrying
control characters, ANSI/OSC escape sequences, newlines and ``#`` must not break the junit XML,
reach the terminal raw, forge TAP lines or turn a failure into a SKIP."""

from __future__ import annotations

import json
import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from helpers import ORDER_STUBS, run_test

from agentscript.testing.reporters.json_report import render_json
from agentscript.testing.results import CaseResult, RunResult, Verdict

# YAML double-quoted escapes: \e is ESC, \x07 BEL (ends an OSC title sequence), \x00 NUL.
HOSTILE = (
    r"""name: "Inj\e[31mRED\e[0m"
"""
    + ORDER_STUBS
    + r"""testCases:
  - utterance: "Where\x01 ]]> is my order?"
    expectedTopic: "Order\x00_Management"
    customEvaluations:
      - label: "lbl\nok 99 forged\e]0;pwned\x07"
        name: string_comparison
        parameters:
          - {name: operator, value: equals, isReference: false}
          - {name: actual, value: "$.outcome", isReference: true}
          - {name: expected, value: "x\x0b", isReference: false}
    x-agentscript:
      name: "CASE_NAME\nok 42 forged line\n\e[2J\e[31mred\x1b[0m \x0c ]]> # SKIP not ready"
      model:
        - tool: go_to_orders
        - say: "Reply \x1b[5mBLINK\x1b[0m \x08\x00 ]]> \nnot ok"
"""
)
# Controls a terminal would act on (C0 except newline, DEL, C1).
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def _hostile(order_copy: Path) -> Path:
    spec = order_copy / "hostile.yaml"
    spec.write_text(HOSTILE, encoding="utf-8")
    return spec


def test_junit_report_with_control_characters_is_well_formed_xml(order_copy: Path) -> None:
    code, out, err = run_test(str(_hostile(order_copy)), "--result-format", "junit")
    assert code == 1, err
    root = ET.fromstring(out.split("\n", 1)[1])  # parses: the test is that this does not raise
    suite = root.find("testsuite")
    assert suite is not None
    assert "CASE_NAME" in suite.get("name", "")
    assert root.get("failures") == "2"
    # Shown escaped, not dropped: the ESC of the name and the BEL of the label.
    assert "\\x1b[2J" in suite.get("name", "")
    assert any("\\x07" in (t.get("name") or "") for t in root.iter("testcase"))


def test_junit_written_to_output_dir_parses_back(order_copy: Path) -> None:
    out_dir = order_copy / "out"
    run_test(str(_hostile(order_copy)), "--result-format", "junit", "-d", str(out_dir))
    tree = ET.parse(out_dir / "test-result.xml")
    assert tree.getroot().tag == "testsuites"


def test_human_report_shows_escape_sequences_instead_of_obeying_them(order_copy: Path) -> None:
    code, out, _ = run_test(str(_hostile(order_copy)))
    assert code == 1
    assert RAW_CONTROL.search(out) is None
    assert "\\x1b[2J" in out and "\\x1b]0;pwned\\x07" in out
    # The newlines in the case name and label are escaped: no line starts with a forged "ok".
    assert not any(line.startswith("ok ") for line in out.splitlines())
    header = next(line for line in out.splitlines() if "CASE_NAME" in line)
    assert header.startswith("FAILURE") and "\\nok 42 forged line\\n" in header


def test_tap_report_keeps_one_line_per_test_point_and_no_forged_lines(order_copy: Path) -> None:
    code, out, _ = run_test(str(_hostile(order_copy)), "--result-format", "tap")
    assert code == 1
    assert RAW_CONTROL.search(out) is None
    lines = out.splitlines()
    assert lines[0] == "TAP version 14" and lines[-1] == "1..2"
    allowed = re.compile(r"(not ok|ok) \d+ .*|  ---|  \w+: .*|  \.\.\.")
    assert all(allowed.fullmatch(line) for line in lines[1:-1]), lines
    points = [line for line in lines if re.match(r"(not )?ok \d+", line)]
    assert [p.split()[:3] for p in points] == [["not", "ok", "1"], ["not", "ok", "2"]]


def test_tap_hash_in_case_name_does_not_turn_a_failure_into_skip(order_copy: Path) -> None:
    _, out, _ = run_test(str(_hostile(order_copy)), "--result-format", "tap")
    for line in out.splitlines():
        if line.startswith("not ok"):
            # Every '#' in a description is escaped, so no directive follows the name.
            assert re.search(r"(?<!\\)#\s*(SKIP|TODO)", line, re.IGNORECASE) is None, line
            assert "\\# SKIP not ready" in line


def test_tap_backslash_in_name_is_escaped(order_copy: Path) -> None:
    spec = _hostile(order_copy)
    spec.write_text(
        spec.read_text(encoding="utf-8").replace(
            r'name: "CASE_NAME\n', r'name: "back\\slash \\# SKIP CASE_NAME\n'
        ),
        encoding="utf-8",
    )
    _, out, _ = run_test(str(spec), "--result-format", "tap")
    first = next(line for line in out.splitlines() if line.startswith("not ok 1"))
    # "back\slash \# SKIP": the backslashes doubled, then '#' escaped: no directive.
    assert "back\\\\slash \\\\\\# SKIP" in first
    assert re.search(r"(?<!\\)(\\\\)*#\s*SKIP", first) is None


def test_json_report_is_strict_json_with_non_finite_numbers() -> None:
    verdict = Verdict("n", math.nan, math.inf, False, score=math.nan)
    run = RunResult(cases=[CaseResult("s", "s.json", "c", 1, verdicts=[verdict])])

    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    data = json.loads(render_json(run), parse_constant=refuse)
    result = data["testCases"][0]["testResults"][0]
    assert result["expectedValue"] == "nan" and result["actualValue"] == "inf"
