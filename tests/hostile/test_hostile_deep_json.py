"""JSON nested past Python's recursion limit, from every outside source the runtime parses:
each reader treats it as the bad JSON it is, never as a crash.

``json.loads`` raises :class:`RecursionError`, not :class:`json.JSONDecodeError`, for an input
nested deeper than the interpreter's recursion limit (``"[" * 100_000 + "]" * 100_000`` is only
200 kB, well under every size limit). Commit e815831 made these readers catch it; each test here
drives one of them through its public entry point and checks the outcome a user sees, so it fails
if that reader lets the RecursionError escape again:

- an http(s):// action whose service answers deep JSON: an action error "did not answer with
  JSON";
- an OpenAPI document that is deep JSON: a load error "not valid JSON or YAML: nested too
  deeply"; an OpenAPI operation answering deep JSON: an action error "the response is not JSON";
- an MCP tool whose text result is deep JSON: the text, as ``{"result": text}``;
- the lean OpenAI client given a deep error body: the body kept as text in the model error;
- ``agentscript test`` given a deep run-eval payload, a deep expected-action list, a judge
  answering deep JSON or a deep recording: a spec error, a failed verdict, a model error.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from raw_server import Answer, RawServer, openai_completion, send

import agentscript
from agentscript.actions import http_json_handler
from agentscript.cli import main
from agentscript.integrations.config import McpServerConfig
from agentscript.integrations.mcp_client import McpHub
from agentscript.models.base import Message, ModelError, ModelRequest
from agentscript.models.openai_lean import LeanOpenAIModel
from agentscript.models.scripted import Move, ScriptedModel

ROOT = Path(__file__).parents[2]
LEVELS = 100_000  # a hundred times the default recursion limit of 1000
DEEP = "[" * LEVELS + "]" * LEVELS
ENV = {"OPENAI_API_KEY": "sk-test", "AGENTSCRIPT_CONFIG": "/nonexistent"}


def test_deep_json_input_is_a_recursion_error_for_json_loads() -> None:
    """The premise of every test below: without a handler, this input escapes json.loads."""
    with pytest.raises(RecursionError):
        json.loads(DEEP)


def answer_deep(status: int) -> Answer:
    """A RawServer answer: ``DEEP`` as a JSON body with ``status``."""

    def answer(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        send(handler, status, "application/json", DEEP.encode())

    return answer


def action_errors(reply: agentscript.Reply) -> dict[str, str | None]:
    steps = reply.trace["planTrace"]["steps"]
    return {s["name"]: s["error"] for s in steps if s["type"] == "ACTION_STEP"}


ACTION_AGENT = """\
system:
    instructions: "Be brief."
    messages:
        error: "Something failed."
config:
    developer_name: "deep_agent"
start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | Help.
        actions:
            deep: @actions.deep
    actions:
        deep:
            description: "Answers deep JSON"
            target: "TARGET"
"""


def run_deep_action(agent: agentscript.AgentBase) -> agentscript.Reply:
    model = ScriptedModel([Move(calls=[("deep", {})]), Move(text="Sorry.")])
    return agent.session(model=model).send("go")


# ---------------------------------------------------------------------- actions


def test_deep_json_http_action_answer_is_an_action_error(tmp_path: Path) -> None:
    with RawServer(answer_deep(200)) as server:
        path = tmp_path / "deep.agent"
        path.write_text(ACTION_AGENT.replace("TARGET", f"{server.url}/deep"))
        agent = agentscript.load(path, dialect="agentscript")
        agent.register_handler("http", http_json_handler())
        reply = run_deep_action(agent)
    assert reply.error is None  # a failed action is a result for the model, not the turn's end
    error = action_errors(reply)["deep"]
    assert error is not None and f"{server.url}/deep did not answer with JSON" in error


def openapi_document(base_url: str) -> dict[str, Any]:
    return {
        "openapi": "3.0.3",
        "info": {"title": "Deep", "version": "1"},
        "servers": [{"url": base_url}],
        "paths": {
            "/deep": {
                "post": {"operationId": "getDeep", "responses": {"200": {"description": "ok"}}}
            }
        },
    }


def write_openapi_agent(tmp_path: Path, base_url: str, spec_text: str) -> Path:
    (tmp_path / "api.json").write_text(spec_text)
    (tmp_path / "agentscript.toml").write_text('[openapi.deep]\nspec = "api.json"\ntimeout = 5\n')
    path = tmp_path / "deep.agent"
    path.write_text(ACTION_AGENT.replace("TARGET", f"{base_url}#getDeep"))
    return path


def test_deep_json_openapi_document_is_a_load_error(tmp_path: Path) -> None:
    path = write_openapi_agent(tmp_path, "http://127.0.0.1:9/v1", DEEP)
    with pytest.raises(
        agentscript.AgentScriptError, match=r"api\.json: not valid JSON or YAML: nested too deeply"
    ):
        agentscript.load(path, dialect="agentscript")


def test_deep_json_openapi_response_is_an_action_error(tmp_path: Path) -> None:
    with RawServer(answer_deep(200)) as server:
        document = json.dumps(openapi_document(server.url))
        agent = agentscript.load(
            write_openapi_agent(tmp_path, server.url, document), dialect="agentscript"
        )
        reply = run_deep_action(agent)
    assert reply.error is None
    error = action_errors(reply)["deep"]
    assert error is not None and "action 'deep' (getDeep): the response is not JSON" in error


# An MCP server whose one tool answers DEEP as plain text (no structured content, so the
# client has to read the text as JSON itself).
MCP_SERVER = f"""\
from mcp.server.mcpserver import MCPServer

server = MCPServer("deep")


@server.tool(structured_output=False)
def deep() -> str:
    return "[" * {LEVELS} + "]" * {LEVELS}


server.run("stdio")
"""


def test_deep_json_mcp_tool_text_is_the_result_text(tmp_path: Path) -> None:
    script = tmp_path / "deep_server.py"
    script.write_text(MCP_SERVER)
    config = McpServerConfig(name="deep", command=sys.executable, args=(str(script),))
    hub = McpHub({"deep": config})
    try:
        outputs = asyncio.run(hub.call_tool("deep", "deep", {}))
    finally:
        hub.close()
    assert outputs == {"result": DEEP}


# ---------------------------------------------------------------------- the lean client


def test_deep_json_lean_client_error_body_is_kept_as_text() -> None:
    request = ModelRequest("You help.", "", [Message("user", "hi")], [])
    with RawServer(answer_deep(400)) as server:
        model = LeanOpenAIModel("gpt-test", api_key="sk-test", base_url=server.url, max_retries=0)
        with pytest.raises(ModelError) as caught:
            asyncio.run(model.complete(request))
    message = str(caught.value)
    assert "refused the request (HTTP 400): [[[[" in message
    assert "RecursionError" not in message


# ---------------------------------------------------------------------- agentscript test


@pytest.fixture
def order_copy(tmp_path: Path) -> Path:
    """A private copy of examples/order_status (agent and specs)."""
    target = tmp_path / "order_status"
    shutil.copytree(ROOT / "examples" / "order_status", target)
    return target


def run_test(*args: str) -> Result:
    return CliRunner().invoke(main, ["test", *args], env=ENV)


def test_deep_json_eval_payload_is_a_spec_error(order_copy: Path) -> None:
    spec = order_copy / "deep.json"
    spec.write_text(DEEP)
    result = run_test(str(spec))
    assert result.exit_code == 2, result.output
    assert f"{spec}:1: invalid JSON: nested too deeply" in result.stderr


def test_deep_json_expected_action_list_is_a_spec_error(order_copy: Path) -> None:
    spec = order_copy / "deep.yaml"
    spec.write_text(
        "name: T\nsubjectType: AGENT\nsubjectName: Order_Status\ntestCases:\n"
        f"  - utterance: hi\n    expectedActions: '{DEEP}'\n"
    )
    result = run_test(str(spec))
    assert result.exit_code == 2, result.output
    assert f"{spec}:6: cannot read the action list '[[[[" in result.stderr
    assert "; write ['A','B']" in result.stderr


def test_deep_json_judge_answer_is_a_failed_verdict(order_copy: Path) -> None:
    spec = order_copy / "specs" / "Order_Status-testSpec.yaml"
    text = spec.read_text(encoding="utf-8")
    spec.write_text(
        text.replace(
            "    expectedTopic: Order_Management\n",
            "    expectedTopic: Order_Management\n"
            "    expectedOutcome: The agent gives the delivery date.\n",
            1,
        ),
        encoding="utf-8",
    )
    judged = '{"score": ' + DEEP + "}"

    def answer(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        send(handler, 200, "application/json", openai_completion(judged))

    with RawServer(answer) as server:
        result = run_test(
            str(spec),
            "-k",
            "order",
            "--judge",
            "openai:judge-test",
            "--base-url",
            server.url,
            "--result-format",
            "json",
        )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    verdict = next(r for r in data["testCases"][0]["testResults"] if r["judged"])
    assert verdict["result"] == "FAILURE"
    explained = verdict["metricExplainability"]
    # Too deep to decode (the recursion is caught): not JSON the judge could have meant.
    assert 'the judge did not answer with JSON: \'{"score": [[[[' in explained


def test_deep_json_recording_is_a_model_error(order_copy: Path) -> None:
    spec = order_copy / "specs" / "Order_Status-testSpec.yaml"
    recording = spec.with_name(spec.name + ".replay.json")
    recording.write_text(DEEP)
    result = run_test(str(spec))
    assert result.exit_code == 2, result.output
    said = f"{recording}: not a recording: invalid JSON at line 1: nested too deeply; delete it"
    assert said in result.stderr
