"""`expect:` in conversation files: checked after each turn by `agentscript run`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from agentscript.cli import main

ROOT = Path(__file__).resolve().parents[1]
AGENT = ROOT / "examples/order_status/order_status.agent"
HEAD = """\
variables: {order_ID: "1234", num_turns: 2}
actions:
    get_delivery_date: {outputs: {delivery_date: "February 10, 2026"}}
    check_if_late: {outputs: {is_late: true}}
turns:
    - user: "Where is my order?"
      model: [{tool: go_to_orders}, {say: "It arrives February 10."}]
"""


def run(tmp_path: Path, expect: str) -> tuple[int, str]:
    path = tmp_path / "c.yaml"
    path.write_text(
        HEAD + "      expect:\n" + "".join(f"          {line}\n" for line in expect.splitlines())
    )
    result = CliRunner().invoke(main, ["run", str(AGENT), "--conversation", str(path), "--json"])
    return result.exit_code, result.output


def test_the_shipped_example_meets_its_expectations() -> None:
    conversation = ROOT / "examples/order_status/late_order.yaml"
    result = CliRunner().invoke(
        main, ["run", str(AGENT), "--conversation", str(conversation), "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["turns"][0]["failed_expectations"] == []


def test_met_expectations_exit_0(tmp_path: Path) -> None:
    code, output = run(
        tmp_path,
        'node: Order_Management\npath: [router, Order_Management]\nresponse: "It arrives February 10."\n'
        'response_contains: "February"\nvariables: {num_turns: 3}\nescalated: false\nended: false\n'
        "error: false",
    )
    assert code == 0, output


@pytest.mark.parametrize(
    ("expect", "failure"),
    [
        ("node: router", 'node: expected "router", got "Order_Management"'),
        ("actions: [go_to_orders]", 'actions: expected ["go_to_orders"], got'),
        ("variables: {num_turns: 4}", "variables.num_turns: expected 4, got 3"),
        ("variables: {nope: 1}", "variables.nope: no such variable"),
        ('response_contains: "March"', 'response: expected it to contain "March"'),
        ("escalated: true", "escalated: expected true, got false"),
        ("error: true", "error: expected the turn to fail, it did not"),
    ],
)
def test_unmet_expectations_are_reported_and_exit_1(
    tmp_path: Path, expect: str, failure: str
) -> None:
    code, output = run(tmp_path, expect)
    assert code == 1
    failures = json.loads(output)["turns"][0]["failed_expectations"]
    assert len(failures) == 1 and failures[0].startswith(failure), failures


def test_transcript_shows_the_failure(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(HEAD + "      expect: {node: router}\n")
    result = CliRunner().invoke(main, ["run", str(AGENT), "--conversation", str(path)])
    assert result.exit_code == 1
    assert 'expect failed: node: expected "router", got "Order_Management"' in result.output


@pytest.mark.parametrize(
    ("expect", "message"),
    [
        ("{nodes: x}", "unknown expectation(s) ['nodes']"),
        ("[node]", "'expect' must be a mapping"),
        ("{actions: go_to_orders}", "'expect.actions' must be a list of names"),
        ("{ended: maybe}", "'expect.ended' must be true or false"),
    ],
)
def test_malformed_expectations_are_bad_input(tmp_path: Path, expect: str, message: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(HEAD + f"      expect: {expect}\n")
    result = CliRunner().invoke(main, ["run", str(AGENT), "--conversation", str(path)])
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output
