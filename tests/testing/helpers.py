"""Running `agentscript test` in-process for the tests."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from agentscript.cli import main
from agentscript.commands import ExitCode
from agentscript.models.base import Model, ModelError, ModelRequest, ModelResponse, TextSink
from agentscript.testing import command
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
# A spec beside a copy of the Order Status example with one judged expectation; its agent
# turn is scripted, so only the judge model is asked.
JUDGED_SPEC = (
    "name: J\n"
    + ORDER_STUBS
    + """testCases:
  - utterance: "Where is my order?"
    expectedOutcome: "The agent gives a date"
    x-agentscript:
      model:
        - tool: go_to_orders
        - say: "Your order arrives Feb."
"""
)


def run_test(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["test", *args], env=env, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def run_json(*args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    code, out, err = run_test(*args, "--result-format", "json", env=env)
    assert out, err
    data: dict[str, Any] = json.loads(out)
    return code, data


def run_command(
    spec: Path, judge: Model, result_format: str = "json", *, blocking: bool = False
) -> tuple[ExitCode, str]:
    """``agentscript test SPEC`` in-process with ``judge`` as the judge model (a double that
    the command line cannot name): the exit code and everything printed."""
    out: list[str] = []
    options = command.TestOptions(
        paths=[spec],
        judge_model=judge,
        result_format=result_format,
        judge_blocking=blocking,
        base=spec.parent,
    )
    code = command.test_command(options, out.append, out.append)
    return code, "\n".join(out)


@dataclass
class JudgeDouble:
    """A judge model: answers ``answer`` (or raises ``error``) and keeps every request."""

    answer: str = '{"score": 1, "reasoning": "ok"}'
    error: ModelError | None = None
    name: str = "judge-double"
    requests: list[ModelRequest] = field(default_factory=list)

    async def complete(
        self, request: ModelRequest, *, stream: TextSink | None = None
    ) -> ModelResponse:
        self.requests.append(request)
        if self.error is not None:
            raise self.error
        return ModelResponse(text=self.answer)
