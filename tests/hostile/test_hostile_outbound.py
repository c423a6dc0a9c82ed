"""Backends an action calls over HTTP (``http_json_handler``, OpenAPI operations) that are
hostile or broken: a redirect elsewhere never carries the action's credentials, a body that
trickles in ends the call (and frees its thread) within its timeout, a credential never shows
in an error, and a document cannot move calls to another host or expand without bound."""

from __future__ import annotations

import contextlib
import dataclasses
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
    call_operation,
    load_document,
    parse_openapi_configs,
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


# ---------------------------------------------------------------------- secrets, URLs, paths


def _echo_bare_credential(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    credential = handler.headers.get("Authorization", "").split()[-1]
    answer = {"error": {"message": f"Incorrect API key provided: {credential}"}}
    send(handler, 401, "application/json", json.dumps(answer).encode())


def _echo_credentials_at_the_cut(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    # The error detail keeps 200 characters: the padding puts that cut inside the credential.
    padded = {"error": "x" * 170 + f" got {handler.headers.get('Authorization')}"}
    send(handler, 401, "application/json", json.dumps(padded).encode())


def _from_environment(config: OpenApiConfig) -> OpenApiConfig:
    return dataclasses.replace(config, headers=(("Authorization", "Bearer ${NOTES_TOKEN}"),))


@pytest.mark.parametrize("answer", [_echo_bare_credential, _echo_credentials_at_the_cut])
def test_openapi_error_body_echoing_the_credential_in_any_form_is_redacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answer: Any
) -> None:
    monkeypatch.setenv("NOTES_TOKEN", TOKEN)
    with RawServer(answer) as server:
        config = _from_environment(_config(tmp_path, _document(server.url)))
        with pytest.raises(ActionError) as caught:
            _call(config, server.url)
    message = str(caught.value)
    assert "answered HTTP 401" in message and "***" in message
    assert TOKEN[:6] not in message


@pytest.mark.parametrize("key", ["base_url", "spec"])
def test_openapi_url_holding_a_user_or_password_is_refused_at_load(key: str) -> None:
    table = {"spec": "notes.json", key: "https://svc:p4ssw0rd@api.example/v1?key=k3y"}
    with pytest.raises(ConfigError) as caught:
        parse_openapi_configs({"openapi": {"notes": table}}, path=None)
    message = str(caught.value)
    assert f"`{key}` holds a user or password" in message and "headers" in message
    assert "p4ssw0rd" not in message and "k3y" not in message


def test_openapi_document_server_holding_a_user_or_password_is_refused_at_load(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_document(_config(tmp_path, _document("http://svc:p4ssw0rd@127.0.0.1/v1")))
    assert "the base URL holds a user or password" in str(caught.value)
    assert "p4ssw0rd" not in str(caught.value)


def test_openapi_spec_url_query_never_shows_in_a_load_error(tmp_path: Path) -> None:
    with RawServer(_recorded) as server:
        closed = server.url  # nothing listens there once the server is gone
    config = OpenApiConfig("notes", f"{closed}/openapi.json?token=k3y-in-the-query")
    with pytest.raises(ConfigError, match="cannot fetch") as caught:
        load_document(config)
    assert "k3y" not in str(caught.value)


def test_openapi_call_error_never_shows_the_base_urls_user_or_password(tmp_path: Path) -> None:
    # Load refuses such a base URL; a document indexed some other way is shown without them.
    with RawServer(_recorded) as server:
        document = load_document(_config(tmp_path, _document(server.url)))
        document.base_url = server.url.replace("://", "://svc:p4ssw0rd@")
        request = ActionRequest("save", f"{server.url}#saveNote", {"text": "hi"})
        with pytest.raises(ActionError, match="holds a user or password") as caught:
            call_operation(
                _config(tmp_path, _document(server.url)),
                document,
                document.operations["saveNote"],
                request,
            )
        assert server.bodies == []
    assert "p4ssw0rd" not in str(caught.value)


def _note_by_id(base: str, route: str = "/notes/{note_id}") -> dict[str, Any]:
    parameter = {"name": "note_id", "in": "path", "required": True, "schema": {"type": "string"}}
    operation = {"operationId": "saveNote", "parameters": [parameter], "responses": {}}
    return _document(base, {route: {"post": operation}})


@pytest.mark.parametrize("note_id", ["..", ".", "../admin", "..\\admin", "a/./b"])
def test_openapi_path_parameter_holding_a_dot_segment_sends_nothing(
    tmp_path: Path, note_id: str
) -> None:
    with RawServer(_recorded) as server:
        config = _config(tmp_path, _note_by_id(server.url))
        request = ActionRequest("save", f"{server.url}#saveNote", {"note_id": note_id})
        with pytest.raises(ActionError, match=r"'note_id' holds a '\.' or '\.\.' path segment"):
            OpenApiHub([config]).handle(request)
        assert server.bodies == []


@pytest.mark.parametrize("note_id", ["v1.2", "...", "a/b"])
def test_openapi_path_parameter_with_dots_that_are_no_segment_is_sent_quoted(
    tmp_path: Path, note_id: str
) -> None:
    with RawServer(_recorded) as server:
        config = _config(tmp_path, _note_by_id(server.url))
        request = ActionRequest("save", f"{server.url}#saveNote", {"note_id": note_id})
        assert OpenApiHub([config]).handle(request) == {"ok": True}
        assert len(server.bodies) == 1


@pytest.mark.parametrize("route", ["/notes/../../admin/{note_id}", "/notes/%2e%2e/%2E%2E/x"])
def test_openapi_route_resolving_above_the_base_path_sends_nothing(
    tmp_path: Path, route: str
) -> None:
    with RawServer(_recorded) as server:
        config = _config(tmp_path, _note_by_id(server.url, route))
        request = ActionRequest("save", f"{server.url}#saveNote", {"note_id": "7"})
        with pytest.raises(ActionError, match="the operation's path leaves"):
            OpenApiHub([config]).handle(request)
        assert server.bodies == []


def test_http_action_url_holding_a_user_or_password_sends_nothing_and_shows_neither() -> None:
    with RawServer(_recorded) as server:
        with_credentials = server.url.replace("://", "://svc:p4ssw0rd@")
        with pytest.raises(ActionError, match="holds a user or password") as caught:
            _post(http_json_handler(), f"{with_credentials}/save")
        assert server.bodies == []
    assert "p4ssw0rd" not in str(caught.value) and "svc" not in str(caught.value)


def test_http_action_error_shows_no_query_string() -> None:
    def unavailable(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        send(handler, 503, "application/json", b"{}")

    with RawServer(unavailable) as server, pytest.raises(ActionError, match="HTTP 503") as caught:
        _post(http_json_handler(), f"{server.url}/save?token=k3y-in-the-query")
    assert "k3y" not in str(caught.value)


def test_a_document_redirect_is_followed_only_to_the_same_scheme(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # https -> http handed the document to anyone on the path, who could rewrite its servers
    # (where the credentials go) and its operations.
    from agentscript.actions import outbound

    asked: list[str] = []
    moves = {
        "https://docs.example/openapi.json": "https://docs.example/v2/openapi.json",
        "https://docs.example/v2/openapi.json": "http://docs.example/v2/openapi.json?sig=k3y",
    }

    def answer(url: str, **_: Any) -> outbound.Fetched:
        asked.append(url)
        if url in moves:
            return outbound.Fetched(302, {"location": moves[url]}, b"")
        return outbound.Fetched(200, {}, b"{}")

    monkeypatch.setattr(outbound, "fetch", answer)
    with pytest.raises(outbound.FetchError) as caught:
        outbound.fetch_following(
            "https://docs.example/openapi.json", timeout=5, total=5, max_bytes=100
        )
    assert asked == list(moves)  # the same-scheme move was followed, the other never fetched
    message = str(caught.value)
    assert "HTTP 302: a redirect from https:// to http://docs.example/v2/openapi.json" in message
    assert "changes the scheme" in message and "k3y" not in message
    with pytest.raises(ConfigError, match="cannot fetch: HTTP 302: a redirect from https://"):
        load_document(OpenApiConfig("notes", "https://docs.example/openapi.json"))


def _note_with_locale(base: str) -> dict[str, Any]:
    parameter = {"name": "X-Locale", "in": "header", "schema": {"type": "string"}}
    operation = {"operationId": "saveNote", "parameters": [parameter], "responses": {}}
    return _document(base, {"/notes": {"post": operation}})


@pytest.mark.parametrize(
    "locale", ["fr-CA\r\nX-Admin: yes", "fr-CA\n", "fr-CA\r", "fr\x00CA", "fr-CA\u2028"]
)
def test_openapi_header_parameter_http_cannot_carry_names_the_parameter_and_sends_nothing(
    tmp_path: Path, locale: str
) -> None:
    # The model wrote it: the error was "check the configured headers", which it cannot.
    with RawServer(_recorded) as server:
        config = _config(tmp_path, _note_with_locale(server.url))
        request = ActionRequest("save", f"{server.url}#saveNote", {"X-Locale": locale})
        with pytest.raises(ActionError) as caught:
            OpenApiHub([config]).handle(request)
        assert server.bodies == []
    message = str(caught.value)
    assert "the header parameter 'X-Locale' holds a line break" in message
    assert "nothing was sent" in message and "configured headers" not in message
    assert "fr" not in message and TOKEN not in message
    with RawServer(_recorded) as server:  # a tab and Latin-1 are sent as they are
        config = _config(tmp_path, _note_with_locale(server.url))
        request = ActionRequest("save", f"{server.url}#saveNote", {"X-Locale": "en-GB\tcafé"})
        assert OpenApiHub([config]).handle(request) == {"ok": True}
        assert len(server.bodies) == 1


def test_a_header_name_http_cannot_send_is_called_a_name() -> None:
    # A document's header parameter names its header; it was reported as a header value.
    from agentscript.actions import outbound

    with RawServer(_recorded) as server:
        with pytest.raises(outbound.FetchError) as caught:
            outbound.fetch(
                f"{server.url}/save",
                method="POST",
                headers={"X-Locale\nX-Admin": "en"},
                body=b"{}",
                timeout=5,
                total=5,
                max_bytes=100,
            )
        assert server.bodies == []
    assert str(caught.value) == "a header name holds a character HTTP cannot send"
