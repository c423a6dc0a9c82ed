"""A JSONPath that matches too much (``..*`` chained over a deep value) stops with a clear error
instead of running for minutes; ordinary recursive paths are unaffected."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import run_json

from agentscript.testing.jsonpath import JsonPathTooBroad, compile_path

CHAIN = "$" + "..*" * 16
DEEP = "[" * 30 + "1" + "]" * 30


def test_chained_recursive_wildcards_stop_with_matches_too_much() -> None:
    # In a child process: without the cap this would run for minutes; the bound is generous.
    code = (
        "import json\n"
        "from agentscript.testing.jsonpath import compile_path, JsonPathTooBroad\n"
        f"data = {{'a': json.loads({DEEP!r}), 'b': 'x'}}\n"
        "try:\n"
        f"    compile_path({CHAIN!r}).find(data)\n"
        "except JsonPathTooBroad as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert "matches too much" in done.stdout
    assert CHAIN[:20] in done.stdout


def test_filter_paths_share_the_budget_of_the_path_they_are_in() -> None:
    # Each filter evaluation alone stays under the cap (about 10,000 values); all 50 do not.
    item = [list(range(100)) for _ in range(100)]
    path = compile_path("$[?(@..*)]")
    assert path.find([item]) == [item]
    with pytest.raises(JsonPathTooBroad):
        path.find([item] * 50)


def test_recursive_path_over_ordinary_data_still_finds_every_match() -> None:
    data = {"items": [{"name": f"n{i}", "sub": {"name": f"s{i}"}} for i in range(1000)]}
    found = compile_path("$..name").find(data)
    assert len(found) == 2000 and found[:2] == ["n0", "n1"]


SPEC = """name: JP
x-agentscript:
  agent: order_status.agent
  actions:
    get_delivery_date: {outputs: {delivery_date: "Feb", x: DEEP}}
    check_if_late: {outputs: {is_late: true}}
testCases:
  - utterance: "Where is my order?"
    customEvaluations:
      - name: string_comparison
        parameters:
          - {name: operator, value: equals, isReference: false}
          - {name: actual, value: 'CHAIN', isReference: true}
          - {name: expected, value: "x", isReference: false}
    x-agentscript:
      model:
        - tool: go_to_orders
        - say: "ok"
"""


def test_spec_with_a_too_broad_path_is_a_case_error_naming_the_path(order_copy: Path) -> None:
    spec = order_copy / "chain.yaml"
    spec.write_text(SPEC.replace("DEEP", DEEP).replace("CHAIN", CHAIN), encoding="utf-8")
    code, data = run_json(str(spec))
    assert code == 1
    case = data["testCases"][0]
    assert case["status"] == "ERROR"
    assert "matches too much" in case["errorMessage"] and "..*..*" in case["errorMessage"]
