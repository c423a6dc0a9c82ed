"""Running `agentscript test` in-process for the tests."""

from __future__ import annotations

import json
from typing import Any

from click.testing import CliRunner

from agentscript.cli import main
from fakes.llm_servers import FakeCall, Reply

# A run against the fake model server: a key for it, and no agentscript.toml of the machine's.
LIVE_ENV = {"OPENAI_API_KEY": "sk-test", "AGENTSCRIPT_CONFIG": "/nonexistent"}
# A spec of the Order Status example whose one case LIVE_TURN answers.
LIVE_SPEC = """name: Live
subjectType: AGENT
subjectName: Order_Status
x-agentscript:
  actions:
    get_delivery_date: {outputs: {delivery_date: "February 10, 2026"}}
    check_if_late: {outputs: {is_late: false}}
testCases:
  - utterance: Where is my order?
    expectedTopic: Order_Management
    contextVariables: [{name: Id, value: "1234"}]
"""
LIVE_TURN = [Reply(calls=[FakeCall.of("go_to_orders", {})]), Reply(text="February 10.")]
# The x-agentscript block of a spec beside a copy of the Order Status example: its agent file
# and stubs for the two flow actions it cannot run here.
ORDER_STUBS = """x-agentscript:
  agent: order_status.agent
  actions:
    get_delivery_date: {outputs: {delivery_date: "Feb"}}
    check_if_late: {outputs: {is_late: true}}
"""


def run_test(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["test", *args], env=env, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def run_json(*args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    code, out, err = run_test(*args, "--result-format", "json", env=env)
    assert out, err
    data: dict[str, Any] = json.loads(out)
    return code, data
