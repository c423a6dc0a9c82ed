"""OpenAPI actions (``https://...#operationId``) against a local HTTP server that serves a
small OpenAPI 3 document and implements it: request building (path, query, header, body),
auth from the environment, response mapping, failures, and ``validate --connect``."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import agentscript
from agentscript.actions.registry import ActionError
from agentscript.cli import main
from agentscript.integrations.config import ConfigError
from agentscript.integrations.openapi import OpenApiConfig, OpenApiHub, load_document
from agentscript.models.scripted import Move, ScriptedModel

received: list[dict[str, Any]] = []


def document(base: str) -> dict[str, Any]:
    return {
        "openapi": "3.0.3",
        "info": {"title": "Orders", "version": "1"},
        "servers": [{"url": f"{base}/v1"}],
        "paths": {
            "/orders/{order_id}": {
                "get": {
                    "operationId": "getOrder",
                    "parameters": [
                        {
                            "name": "order_id",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string"},
                        },
                        {"name": "verbose", "in": "query", "schema": {"type": "boolean"}},
                        {"name": "X-Locale", "in": "header", "schema": {"type": "string"}},
                    ],
                    "responses": {
                        "200": {
                            "description": "ok",
                            "content": {
                                "application/json": {
                                    "schema": {"$ref": "#/components/schemas/Order"}
                                }
                            },
                        }
                    },
                }
            },
            "/orders": {
                "post": {
                    "operationId": "createOrder",
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["item"],
                                    "properties": {
                                        "item": {"type": "string"},
                                        "qty": {"type": "integer"},
                                    },
                                }
                            }
                        },
                    },
                    "responses": {
                        "201": {
                            "description": "created",
                            "content": {
                                "application/json": {
                                    "schema": {"$ref": "#/components/schemas/Order"}
                                }
                            },
                        }
                    },
                }
            },
        },
        "components": {
            "schemas": {
                "Order": {
                    "type": "object",
                    "required": ["status"],
                    "properties": {"status": {"type": "string"}, "total": {"type": "number"}},
                }
            }
        },
    }


class Api(BaseHTTPRequestHandler):
    def _answer(self, status: int, data: Any) -> None:
        payload = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self) -> None:
        host = f"http://127.0.0.1:{self.server.server_address[1]}"
        received.append({"method": "GET", "path": self.path, "headers": dict(self.headers)})
        if self.path == "/openapi.json":
            self._answer(200, document(host))
        elif self.path.startswith("/v1/orders/42"):
            self._answer(200, {"status": "shipped", "total": 12.5})
        elif self.path.startswith("/v1/orders/bad"):
            self._answer(200, {"status": 7})  # contradicts the schema
        elif self.path.startswith("/v1/orders/leak"):  # echoes the credential alone
            credential = self.headers["Authorization"].split()[-1]
            self._answer(401, {"error": {"message": f"Incorrect API key provided: {credential}"}})
        else:
            self._answer(404, {"error": "no such order"})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        received.append(
            {"method": "POST", "path": self.path, "body": body, "headers": dict(self.headers)}
        )
        self._answer(201, {"status": f"created {body['item']} x{body.get('qty', 1)}"})

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def api() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Api)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    received.clear()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


AGENT = """\
system:
    instructions: "Be brief."
    messages:
        error: "Failed."
config:
    developer_name: "orders"
variables:
    status: mutable string = ""
start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | Help.
        actions:
            get: @actions.get_order
                set @variables.status = @outputs.status
            create: @actions.create_order
                set @variables.status = @outputs.status
    actions:
        get_order:
            description: "Read an order"
            target: "BASE/v1#getOrder"
            inputs:
                order_id: string
                    is_required: True
                verbose: boolean
                    is_required: True
            outputs:
                status: string
                total: number
        create_order:
            description: "Create an order"
            target: "BASE/v1#createOrder"
            inputs:
                item: string
                    is_required: True
                qty: number
                    is_required: True
            outputs:
                status: string
"""

TOML = """\
[openapi.orders]
spec = "SPEC"
headers = { Authorization = "Bearer ${ORDERS_TOKEN}" }
timeout = 5
"""


def write(tmp_path: Path, base: str, *, spec: str | None = None, agent: str = AGENT) -> Path:
    (tmp_path / "agentscript.toml").write_text(TOML.replace("SPEC", spec or f"{base}/openapi.json"))
    path = tmp_path / "orders.agent"
    path.write_text(agent.replace("BASE", base))
    return path


def action_steps(reply: agentscript.Reply) -> list[dict[str, Any]]:
    return [s for s in reply.trace["planTrace"]["steps"] if s["type"] == "ACTION_STEP"]


def test_operation_request_is_built_from_inputs_and_auth_from_env(
    tmp_path: Path, api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORDERS_TOKEN", "s3cret")
    agent = agentscript.load(write(tmp_path, api), dialect="agentscript")
    model = ScriptedModel(
        [
            Move(calls=[("get", {"order_id": "42", "verbose": True})]),
            Move(calls=[("create", {"item": "lamp", "qty": 2})]),
            Move(text="Done."),
        ]
    )
    session = agent.session(model=model)
    reply = session.send("order 42, and a lamp")
    assert reply.error is None
    get, post = received[1], received[2]  # received[0] fetched the document
    assert get["path"] == "/v1/orders/42?verbose=true"
    assert get["headers"]["Authorization"] == "Bearer s3cret"
    assert post["path"] == "/v1/orders" and post["body"] == {"item": "lamp", "qty": 2}
    outputs = [s["output"] for s in action_steps(reply)]
    assert outputs == [{"status": "shipped", "total": 12.5}, {"status": "created lamp x2"}]
    assert session.variables["status"] == "created lamp x2"
    assert "s3cret" not in json.dumps(reply.trace)


def test_non_2xx_and_schema_mismatch_are_clear_action_errors(
    tmp_path: Path, api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORDERS_TOKEN", "t")
    agent = agentscript.load(write(tmp_path, api), dialect="agentscript")
    model = ScriptedModel(
        [
            Move(
                calls=[
                    ("get", {"order_id": "nope", "verbose": False}),
                    ("get", {"order_id": "bad", "verbose": False}),
                ]
            ),
            Move(text="Sorry."),
        ]
    )
    reply = agent.session(model=model).send("x")
    first, second = (s["error"] for s in action_steps(reply))
    assert "getOrder" in first and "HTTP 404" in first and "no such order" in first
    assert "does not match the documented schema" in second and "status should be string" in second


def test_missing_token_is_an_action_error_naming_the_variable(
    tmp_path: Path, api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ORDERS_TOKEN", raising=False)
    agent = agentscript.load(write(tmp_path, api), dialect="agentscript")
    model = ScriptedModel(
        [Move(calls=[("get", {"order_id": "42", "verbose": True})]), Move(text=".")]
    )
    (step,) = action_steps(agent.session(model=model).send("x"))
    assert "ORDERS_TOKEN, which is not set" in step["error"]


def test_malformed_document_is_a_load_error(tmp_path: Path, api: str) -> None:
    (tmp_path / "broken.yaml").write_text("openapi: 3.0.0\npaths: [1, 2\n")
    with pytest.raises(agentscript.AgentScriptError, match="not valid JSON or YAML"):
        agentscript.load(write(tmp_path, api, spec="broken.yaml"), dialect="agentscript")
    (tmp_path / "swagger.yaml").write_text("swagger: '2.0'\n")
    with pytest.raises(agentscript.AgentScriptError, match="not an OpenAPI 3 document"):
        agentscript.load(write(tmp_path, api, spec="swagger.yaml"), dialect="agentscript")


def test_validate_connect_checks_actions_against_operations(tmp_path: Path, api: str) -> None:
    broken = (
        AGENT.replace("#createOrder", "#deleteOrder")
        .replace("                order_id: string\n                    is_required: True\n", "")
        .replace("                verbose: boolean", "                verbose: number")
        .replace(
            "                total: number",
            "                total: number\n                eta: string",
        )
    )
    path = write(tmp_path, api, agent=broken)
    result = CliRunner().invoke(
        main, ["validate", "--connect", "--format", "json", "--dialect", "agentscript", str(path)]
    )
    assert "Traceback" not in result.output
    assert result.exit_code == 1
    codes = sorted(d["code"] for d in json.loads(result.stdout) if d["code"].startswith("openapi-"))
    assert codes == [
        "openapi-missing-input",
        "openapi-type-mismatch",
        "openapi-unknown-operation",
        "openapi-unknown-output",
    ]


def test_validate_connect_accepts_matching_actions(tmp_path: Path, api: str) -> None:
    path = write(tmp_path, api)
    result = CliRunner().invoke(
        main, ["validate", "--connect", "--format", "json", "--dialect", "agentscript", str(path)]
    )
    assert [d["code"] for d in json.loads(result.stdout) if d["code"].startswith("openapi-")] == []


def test_s12_an_error_echoing_the_bare_token_reaches_neither_the_model_nor_the_trace(
    tmp_path: Path, api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORDERS_TOKEN", "sk-orders-0123456789")
    agent = agentscript.load(write(tmp_path, api), dialect="agentscript")
    model = ScriptedModel(
        [Move(calls=[("get", {"order_id": "leak", "verbose": False})]), Move(text="Sorry.")]
    )
    reply = agent.session(model=model).send("x")
    (step,) = action_steps(reply)
    assert "HTTP 401" in step["error"] and "Incorrect API key provided: ***" in step["error"]
    assert "sk-orders" not in json.dumps(reply.trace) and "sk-orders" not in reply.text


def test_s12_a_dot_segment_path_parameter_is_an_error_result_and_sends_nothing(
    tmp_path: Path, api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORDERS_TOKEN", "t0ken")
    agent = agentscript.load(write(tmp_path, api), dialect="agentscript")
    model = ScriptedModel(
        [Move(calls=[("get", {"order_id": "..", "verbose": False})]), Move(text="Sorry.")]
    )
    reply = agent.session(model=model).send("x")
    (step,) = action_steps(reply)
    assert "'order_id' holds a '.' or '..' path segment" in step["error"]
    assert reply.error is None and reply.text == "Sorry."
    assert [r["path"] for r in received] == ["/openapi.json"]


# ---------------------------------------------------------------------- document shapes


SHAPES_SPEC = """\
openapi: 3.0.3
info: {title: Orders, version: "1"}
servers: [{url: "BASE/v1"}]
paths:
  /orders/{order_id}:
    get:
      operationId: getOrder
      parameters:
        - {name: order_id, in: path, required: true, schema: PARAM}
      requestBody: {content: {application/json: {schema: BODY}}}
      responses:
        "200": {description: ok, content: {application/json: {schema: RESPONSE}}}
"""
GOOD_SCHEMA = "{type: object, properties: {status: {type: string}}, required: [status]}"


@pytest.mark.parametrize(
    ("part", "schema", "problem"),
    [
        ("BODY", "{type: object, properties: [1, 2], required: 5}", "`properties` must be"),
        ("BODY", "{type: object, required: 5}", "`required` must be a list of property names"),
        ("BODY", "{type: object, required: [a, 1]}", "found a list holding int"),
        ("BODY", "{properties: {a: {properties: [x]}}}", "the request body schema > a: `prop"),
        ("PARAM", "{type: string, required: [1]}", "the schema of path parameter 'order_id'"),
        ("RESPONSE", "{type: object, required: 5}", "the schema of response 200: `required`"),
        ("RESPONSE", "{properties: {a: 7}}", "the schema of response 200 > a: expected a mapping"),
    ],
)
def test_a_schema_whose_properties_or_required_has_the_wrong_shape_is_a_load_error(
    tmp_path: Path, part: str, schema: str, problem: str
) -> None:
    # Each was read as is and failed every call (TypeError: 'int' object is not iterable) and
    # `validate --connect` with a traceback.
    spec = SHAPES_SPEC.replace("BASE", "http://127.0.0.1:9")
    for name in ("PARAM", "BODY", "RESPONSE"):
        spec = spec.replace(name, schema if name == part else GOOD_SCHEMA)
    (tmp_path / "spec.yaml").write_text(spec)
    agent = write(
        tmp_path,
        "http://127.0.0.1:9",
        spec="spec.yaml",
        agent=AGENT.replace("#createOrder", "#getOrder"),
    )
    with pytest.raises(agentscript.AgentScriptError) as caught:
        agentscript.load(agent, dialect="agentscript")
    assert "operation getOrder" in str(caught.value) and problem in str(caught.value)
    result = CliRunner().invoke(
        main, ["validate", "--connect", "--format", "json", "--dialect", "agentscript", str(agent)]
    )
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)
    assert result.exit_code == 1
    (error,) = [d for d in json.loads(result.stdout) if d["code"] == "config-error"]
    assert "operation getOrder" in error["message"] and problem in error["message"]


def test_a_boolean_required_in_a_schema_is_ignored_as_swagger_2_wrote_it(tmp_path: Path) -> None:
    # `required: true` inside a property's or a parameter's schema: a Swagger 2 habit found in
    # many OpenAPI 3 documents, which says nothing the checks read; the document still loads.
    spec = SHAPES_SPEC.replace("BASE", "http://127.0.0.1:9")
    spec = spec.replace("PARAM", "{type: string, required: true}")
    spec = spec.replace("BODY", "{type: object, properties: {a: {type: string, required: true}}}")
    spec = spec.replace("RESPONSE", GOOD_SCHEMA)
    (tmp_path / "spec.yaml").write_text(spec)
    document = load_document(OpenApiConfig("orders", str(tmp_path / "spec.yaml")))
    (operation,) = document.operations.values()
    assert operation.body_schema == {"type": "object", "properties": {"a": {"type": "string"}}}
    assert [p.schema for p in operation.parameters] == [{"type": "string"}]


def test_an_operation_id_used_twice_is_a_load_error_naming_both_operations(
    tmp_path: Path,
) -> None:
    # The last one won silently: the action reading an order ran the DELETE.
    doc = document("http://127.0.0.1:9")
    doc["paths"]["/orders/{order_id}"]["delete"] = {
        "operationId": "getOrder",
        "parameters": doc["paths"]["/orders/{order_id}"]["get"]["parameters"][:1],
        "responses": {"204": {"description": "gone"}},
    }
    (tmp_path / "orders.json").write_text(json.dumps(doc))
    with pytest.raises(ConfigError) as caught:
        load_document(OpenApiConfig("orders", str(tmp_path / "orders.json")))
    message = str(caught.value)
    assert "operationId 'getOrder' is used twice" in message
    assert "GET /orders/{order_id} and DELETE /orders/{order_id}" in message


# ---------------------------------------------------------------------- which API a target names


def _api(tmp_path: Path, name: str, base_url: str) -> OpenApiConfig:
    spec = tmp_path / f"{name}.json"
    spec.write_text(json.dumps(document("http://unused.example")))
    return OpenApiConfig(name, str(spec), base_url=base_url)


def test_a_target_names_an_api_only_at_or_below_its_base_urls_path(tmp_path: Path) -> None:
    hub = OpenApiHub([_api(tmp_path, "orders", "http://api.example/v1")])
    for target in ("http://api.example/v1evil#getOrder", "http://api.example/v10#getOrder"):
        with pytest.raises(ActionError, match="is not the base URL of an API declared"):
            hub.find(target)
    for target in ("http://api.example/v1#getOrder", "http://api.example/v1/#getOrder"):
        assert hub.find(target)[0].name == "orders"
    assert hub.find("http://api.example/v1/orders#getOrder")[0].name == "orders"


def test_a_target_under_two_base_urls_names_the_api_of_the_longer_one(tmp_path: Path) -> None:
    hub = OpenApiHub(
        [
            _api(tmp_path, "orders", "http://api.example/v1"),
            _api(tmp_path, "beta", "http://api.example/v1/beta"),
        ]
    )
    assert hub.find("http://api.example/v1/beta#getOrder")[0].name == "beta"
    assert hub.find("http://api.example/v1#getOrder")[0].name == "orders"
