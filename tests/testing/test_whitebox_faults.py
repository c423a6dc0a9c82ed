"""White-box assertions on what the model was shown, and fault injection in actions."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import run_json, run_test

CONVERSATION = """variables: {order_ID: "1234", num_turns: 2}
actions:
  get_delivery_date: {outputs: {delivery_date: "February 10, 2026"}}
  check_if_late: {outputs: {is_late: true}}
turns:
  - user: Where is my order?
    model: [{tool: go_to_orders}, {say: "February 10, sorry."}]
    assert:
      - instructions_contain: {text: "Apologize to the customer", node: Order_Management}
      - instructions_contain: {text: "order number 1234", call: 2}
      - tools_offered: {tools: [go_to_orders, go_to_escalation], node: router}
      - tools_hidden: {tools: [go_to_orders], node: Order_Management}
      - variables_before: {num_turns: 2}
      - variables_after: {num_turns: 3, is_late: true}
      - action_variables: {action: check_if_late, before: {is_late: false}, after: {is_late: true}}
      - llm_calls: 2
      - instructions_snapshot: {name: order_prompt, node: Order_Management}
"""


def _write(folder: Path, text: str) -> Path:
    spec = folder / "whitebox.yaml"
    spec.write_text(text, encoding="utf-8")
    return spec


def test_whitebox_assertions_hold_on_the_example(order_copy: Path) -> None:
    spec = _write(order_copy, CONVERSATION)
    code, data = run_json(str(spec), "--verbose")
    results = data["testCases"][0]["testResults"]
    assert code == 0, results
    assert [r["name"] for r in results] == [
        "instructions_contain",
        "instructions_contain",
        "tools_offered",
        "tools_hidden",
        "variables_before",
        "variables_after",
        "action_variables",
        "llm_calls",
        "instructions_snapshot",
    ]
    snapshot = order_copy / "whitebox.yaml.snapshots" / "order_prompt.txt"
    assert "Apologize to the customer" in snapshot.read_text(encoding="utf-8")


def test_whitebox_failures_name_what_the_model_saw(order_copy: Path) -> None:
    spec = _write(
        order_copy,
        CONVERSATION.replace("llm_calls: 2", "llm_calls: 3").replace(
            "tools_hidden: {tools: [go_to_orders], node: Order_Management}",
            "tools_hidden: {tools: [go_to_orders], node: router}",
        ),
    )
    code, out, _ = run_test(str(spec))
    assert code == 1
    assert "FAIL llm_calls" in out and "actual:   2" in out
    assert "tools ['go_to_orders'] were offered (expected hidden)" in out


def test_snapshot_change_fails_until_updated(order_copy: Path) -> None:
    spec = _write(order_copy, CONVERSATION)
    assert run_test(str(spec))[0] == 0
    agent = order_copy / "order_status.agent"
    agent.write_text(
        agent.read_text(encoding="utf-8").replace("Apologize to the customer", "Say sorry"),
        encoding="utf-8",
    )
    spec.write_text(CONVERSATION.replace("Apologize to the customer", "Say sorry"), "utf-8")
    code, out, _ = run_test(str(spec))
    assert code == 1 and "differ from snapshot" in out
    assert run_test(str(spec), "--update-snapshots")[0] == 0
    assert run_test(str(spec))[0] == 0


FAULTY = """variables: {order_ID: "1234"}
actions:
  check_if_late: {outputs: {is_late: false}}
faults:
  get_delivery_date: {FAULT}
turns:
  - user: Where is my order?
    model: [{tool: go_to_orders}]
    expect:
      response: "Sorry, something went wrong. Please try again."
    assert:
      - action_failed: {action: get_delivery_date, error_contains: "NEEDLE"}
      - llm_calls: 1
"""


def _fault(order_copy: Path, fault: str, needle: str) -> tuple[int, str]:
    spec = _write(order_copy, FAULTY.replace("{FAULT}", fault).replace("NEEDLE", needle))
    code, out, _ = run_test(str(spec))
    return code, out


def test_fault_raise_runs_the_error_path(order_copy: Path) -> None:
    code, out = _fault(order_copy, '{raise: "service unavailable"}', "service unavailable")
    assert code == 0, out


def test_fault_timeout_runs_the_error_path(order_copy: Path) -> None:
    code, out = _fault(order_copy, "{timeout: true, timeout_s: 0.02}", "timed out")
    assert code == 0, out


def test_fault_malformed_output_runs_the_error_path(order_copy: Path) -> None:
    code, out = _fault(order_copy, '{malformed: "oops"}', "must return a dict")
    assert code == 0, out


def test_fault_latency_then_return_takes_the_normal_path(order_copy: Path) -> None:
    spec = _write(
        order_copy,
        FAULTY.replace("{FAULT}", '{latency_ms: 5, return: {delivery_date: "May 1"}}')
        .replace('response: "Sorry, something went wrong. Please try again."', "error: false")
        .replace(
            '- action_failed: {action: get_delivery_date, error_contains: "NEEDLE"}',
            "- variables_after: {updated_delivery_date: May 1}",
        )
        .replace("model: [{tool: go_to_orders}]", "model: [{tool: go_to_orders}, {say: ok}]")
        .replace("llm_calls: 1", "llm_calls: 2"),
    )
    code, out, _ = run_test(str(spec))
    assert code == 0, out


def test_bad_fault_and_assert_are_spec_errors(order_copy: Path) -> None:
    spec = _write(order_copy, FAULTY.replace("{FAULT}", "{explode: true}"))
    code, _, err = run_test(str(spec))
    assert code == 2 and "unknown ['explode']" in err and f"{spec}:5:" in err
    spec = _write(order_copy, CONVERSATION.replace("llm_calls: 2", "llm_callz: 2"))
    code, _, err = run_test(str(spec))
    assert code == 2 and "unknown assertion 'llm_callz'" in err


# --- fault names and the agent's [limits] (tests/testing/agents/gate) ----------------------

GATE = Path(__file__).parent / "agents" / "gate" / "gate.agent"
# `verify` is the tool the model sees; it runs the action `verify_identity`, whose stub would
# answer verified: true if the fault did not replace it.
GATE_FAULT = """variables: {tier: silver}
actions:
  verify_identity: {outputs: {verified: true}}
faults:
  NAME: {raise: down}
turns:
  - user: Change my address, my email is a@b.c
    model: [{tool: go_account}, {tool: verify, args: {email: a@b.c}}, {say: "Sorry."}]
    assert:
      - action_failed: {action: verify_identity, error_contains: down}
"""


def _gate(tmp_path: Path, spec: str) -> Path:
    shutil.copy(GATE, tmp_path / "gate.agent")
    return _write(tmp_path, spec)


@pytest.mark.parametrize("name", ["verify", "verify_identity"])
def test_fault_by_tool_or_action_name_replaces_the_action(tmp_path: Path, name: str) -> None:
    # A fault on the tool name used to be ignored: the stub ran and the case tested nothing.
    spec = _gate(tmp_path, GATE_FAULT.replace("NAME", name))
    code, out, err = run_test(str(spec))
    assert code == 0, out + err


@pytest.mark.parametrize(
    ("faults", "line", "message"),
    [
        ("  verifi: {raise: down}", 5, "'verifi' is not an action of the agent Coverage_Gate nor "
         "a tool that runs one (a fault of case 'whitebox'); did you mean 'verify'?"),
        ("  go_account: {raise: down}", 5, "(a fault of case 'whitebox'; it is a tool that runs "
         "no action); use one of: update, update_account_info, verify, verify_identity"),
        ("  verify_identity: {raise: a}\n  verify: {raise: b}", 6,
         "faults 'verify_identity' and 'verify' of case 'whitebox' both name the action "
         "'verify_identity'; keep one"),
    ],
)  # fmt: skip
def test_fault_on_a_name_the_agent_lacks_is_a_spec_error(
    tmp_path: Path, faults: str, line: int, message: str
) -> None:
    # A fault on a name no action has would never fire: the case would pass on the real path.
    spec = _gate(tmp_path, GATE_FAULT.replace("  NAME: {raise: down}", faults))
    code, out, err = run_test(str(spec))
    assert code == 2, out
    assert f"{spec}:{line}: " in err and message in err, err


@pytest.mark.parametrize(
    "faults", ["", "faults: {update_account_info: {raise: down}}\n",
               "faults: {update_account_info: {timeout: true}}\n"]
)  # fmt: skip
def test_a_case_with_faults_keeps_the_limits_of_agentscript_toml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, faults: str
) -> None:
    # Faults used to give the session a fresh Limits, dropping the agent's [limits]: this
    # turn needs 2 LLM calls, over max_llm_calls = 1, and passed only when a fault was set.
    monkeypatch.delenv("AGENTSCRIPT_CONFIG", raising=False)
    (tmp_path / "agentscript.toml").write_text("[limits]\nmax_llm_calls = 1\n", encoding="utf-8")
    spec = _gate(
        tmp_path,
        faults + "turns:\n  - user: hi\n    model: [{tool: go_account}, {say: Hello.}]\n"
        "    expect: {node: account}\n",
    )
    code, out, _ = run_test(str(spec))
    assert code == 1, out
    assert "FAIL turn_error" in out and "Limits.max_llm_calls = 1" in out
