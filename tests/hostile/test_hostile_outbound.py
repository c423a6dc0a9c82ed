"""Backends an action calls over HTTP (``http_json_handler``, OpenAPI operations) that are
hostile or broken: a redirect elsewhere never carries the action's credentials, a body that
trickles in ends the call (and frees its thread) within its timeout, a credential never shows
in an error, and a document cannot move calls to another host or expand without bound."""

from __future__ import annotations

import contextlib
import json
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from raw_server import RawServer, send

from agentscript.actions.http import http_json_handler
from agentscript.actions.registry import ActionError, ActionRequest
from agentscript.integrations.config import ConfigError
from agentscript.integrations.openapi import (
    OpenApiConfig,
    OpenApiHub,
    load_document,
)

TOKEN = "s3cret-token-value"


def _redirect_to(target: str) -> Any:
    def answer(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        handler.send_response(307)
        handler.send_header("Location", f"{target}/elsewhere?key=1")
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    return answer


def _recorded(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    send(handler, 200, "application/json", b'{"ok": true}')


def _a_byte_at_a_time(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", "400")
    handler.end_headers()
    with contextlib.suppress(OSError):
        for _ in range(400):  # 40 s in all
            handler.wfile.write(b" ")
            handler.wfile.flush()
            time.sleep(0.1)


def _echo_credentials(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    echoed = json.dumps({"error": f"bad token: {handler.headers.get('Authorization')}"})
    send(handler, 401, "application/json", echoed.encode())


def _post(handler: Any, url: str) -> dict[str, Any]:
    result: dict[str, Any] = handler(ActionRequest("save", url, {"text": "hi"}))
    return result


def test_http_action_never_follows_a_redirect_with_its_headers() -> None:
    with RawServer(_recorded) as other, RawServer(_redirect_to(other.url)) as first:
        handler = http_json_handler(headers={"Authorization": f"Bearer {TOKEN}"})
        with pytest.raises(ActionError) as caught:
            _post(handler, f"{first.url}/save")
        assert other.bodies == []  # nothing, and no credential, reached the other host
    message = str(caught.value)
    assert "answered HTTP 307" in message and "redirects are not followed" in message
    assert "key=1" not in message


def test_http_action_whose_answer_trickles_in_ends_within_its_timeout() -> None:
    started = time.monotonic()
    with RawServer(_a_byte_at_a_time) as server:
        with pytest.raises(ActionError) as caught:
            _post(http_json_handler(timeout=1.0), f"{server.url}/save")
        ended = time.monotonic()
    assert "no whole answer within 1 s" in str(caught.value)
    assert ended - started < 10  # not the 40 s the server would take: the thread is free


def test_outbound_calls_that_ended_leave_no_deadline_watched() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from agentscript.actions import outbound

    def post(url: str, total: float, max_bytes: int = 1000) -> int:
        fetched = outbound.fetch(
            url, method="POST", body=b"{}", timeout=30, total=total, max_bytes=max_bytes
        )
        return fetched.status

    with RawServer(_recorded) as server:
        # From several threads at once, as the action pool calls.
        with ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(lambda _: post(f"{server.url}/save", 30), range(200)))
        with pytest.raises(outbound.FetchError, match="larger than 1 bytes"):
            post(f"{server.url}/save", 30, max_bytes=1)
        left = outbound._WATCHDOG.watched()
    assert statuses == [200] * 200
    assert left == 0  # each entry went with its call, not at its deadline 30 s on
    # A call past its deadline is still cut there, and leaves nothing either.
    with (
        RawServer(_a_byte_at_a_time) as server,
        pytest.raises(outbound.FetchError, match="no whole answer within 1 s"),
    ):
        post(f"{server.url}/save", 1)
    assert outbound._WATCHDOG.watched() == 0


def test_a_header_value_http_cannot_send_is_refused_without_showing_it() -> None:
    with RawServer(_recorded) as server:
        handler = http_json_handler(headers={"Authorization": f"Bearer {TOKEN}\n"})
        with pytest.raises(ActionError) as caught:
            _post(handler, f"{server.url}/save")
        assert server.bodies == []
    assert "a header value holds a character HTTP cannot send" in str(caught.value)
    assert TOKEN not in str(caught.value)


# ---------------------------------------------------------------------- OpenAPI


def _document(base: str, paths: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "openapi": "3.0.3",
        "info": {"title": "Notes", "version": "1"},
        "servers": [{"url": base}],
        "paths": paths
        or {
            "/notes": {
                "post": {
                    "operationId": "saveNote",
                    "requestBody": {
                        "content": {"application/json": {"schema": {"type": "object"}}}
                    },
                    "responses": {"200": {"description": "ok"}},
                }
            }
        },
        **extra,
    }


def _config(tmp_path: Path, document: dict[str, Any] | str, **given: Any) -> OpenApiConfig:
    spec = tmp_path / ("notes.yaml" if isinstance(document, str) else "notes.json")
    spec.write_text(document if isinstance(document, str) else json.dumps(document))
    headers = (("Authorization", f"Bearer {TOKEN}"),)
    return OpenApiConfig("notes", str(spec), headers=headers, **given)


def _call(config: OpenApiConfig, base: str) -> dict[str, Any]:
    request = ActionRequest("save", f"{base}#saveNote", {"text": "hi"})
    return OpenApiHub([config]).handle(request)


def test_openapi_operation_never_follows_a_redirect_with_its_credentials(tmp_path: Path) -> None:
    with RawServer(_recorded) as other, RawServer(_redirect_to(other.url)) as first:
        config = _config(tmp_path, _document(first.url))
        with pytest.raises(ActionError) as caught:
            _call(config, first.url)
        assert other.bodies == []
    assert "answered HTTP 307" in str(caught.value) and TOKEN not in str(caught.value)


def test_openapi_operation_whose_answer_trickles_in_ends_within_its_timeout(
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    with RawServer(_a_byte_at_a_time) as server:
        config = _config(tmp_path, _document(server.url), timeout=1.0)
        with pytest.raises(ActionError) as caught:
            _call(config, server.url)
        ended = time.monotonic()
    assert "no whole answer within 1 s" in str(caught.value)
    assert ended - started < 10


def test_openapi_error_body_echoing_the_credentials_is_redacted(tmp_path: Path) -> None:
    with RawServer(_echo_credentials) as server:
        config = _config(tmp_path, _document(server.url))
        with pytest.raises(ActionError) as caught:
            _call(config, server.url)
    message = str(caught.value)
    assert "answered HTTP 401" in message and "bad token: ***" in message
    assert TOKEN not in message


@pytest.mark.parametrize("route", ["1:9999/steal", ".attacker.example/x", "x"])
def test_openapi_route_that_could_leave_the_base_url_is_refused_at_load(
    tmp_path: Path, route: str
) -> None:
    paths = {route: {"post": {"operationId": "saveNote", "responses": {}}}}
    with pytest.raises(ConfigError, match="must start with '/'"):
        load_document(_config(tmp_path, _document("http://127.0.0.1", paths)))


def test_openapi_refs_that_expand_exponentially_are_refused_at_load(tmp_path: Path) -> None:
    levels = 10  # each schema names the next four times: 4**10 nodes once expanded
    schemas = {
        f"S{n}": {
            "type": "object",
            "properties": {name: {"$ref": f"#/components/schemas/S{n + 1}"} for name in "abcd"},
        }
        for n in range(levels)
    }
    schemas[f"S{levels}"] = {"type": "string"}
    paths = {
        "/notes": {
            "post": {
                "operationId": "saveNote",
                "requestBody": {
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/S0"}}}
                },
                "responses": {},
            }
        }
    }
    document = _document("http://127.0.0.1", paths, components={"schemas": schemas})
    with pytest.raises(ConfigError, match="expand past"):
        load_document(_config(tmp_path, document))


def test_openapi_yaml_aliases_that_expand_exponentially_are_refused_at_load(
    tmp_path: Path,
) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 10)}]" for n in range(1, 9)]
    text = "\n".join(lines) + "\nopenapi: 3.0.3\npaths: {}\n"
    with pytest.raises(ConfigError, match="not valid JSON or YAML"):
        load_document(_config(tmp_path, text))
