"""Second audit of the HTTP server: Mantle confirmations in the session view, key files with a
byte-order mark, bounded metric labels, JSON CORS refusals, and Accept negotiation."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx2 as httpx
import pytest

from agentscript.server import sse
from agentscript.server.auth import ApiKeys, KeyConfigError
from agentscript.server.config import ServerConfig

from .harness import CARD_BANK, run

# Signs in as customer 1001 through the authenticate skill: a client cannot preset the
# project entries its tool writes (test_serve_security.py).
SIGN_IN = (
    '/activate_skill {"skill": "authenticate"}',
    '/verify_customer {"customer_number": "1001", "pin": "4321"}',
    "/complete_skill {}",
)


def test_audit2_mantle_pending_confirmation_is_in_the_session_view(api_store: str) -> None:
    """A Mantle call waiting for a yes/no shows in GET /v1/sessions/{id}, as the turn said."""

    async def scenario(client: httpx.AsyncClient) -> None:
        created = await client.post("/v1/agents/card-bank/sessions", json={"variables": {}})
        sid = created.json()["session_id"]
        turn = {}
        for text in (
            *SIGN_IN,
            '/activate_skill {"skill": "card_replace"}',
            '/set_fields {"reason": "lost", "card_id": "C-11"}',
            '/activate_skill {"skill": "card_replace", "block": "order_card"}',
            "set:session.card_replace.shipping=express",
        ):
            response = await client.post(f"/v1/sessions/{sid}/messages", json={"text": text})
            assert response.status_code == 200, response.text
            turn = response.json()
        assert turn["confirmation"]  # the turn asks for the confirmation
        view = (await client.get(f"/v1/sessions/{sid}")).json()
        pending = view["pending_confirmation"]
        assert pending is not None
        assert pending["tool"] == "order_replacement"
        assert pending["skill"] == "card_replace"
        assert pending["arguments"] == {"card_id": "C-11", "shipping": "express"}
        answered = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "yes"})
        assert answered.json()["actions"] == ["order_replacement"]
        assert (await client.get(f"/v1/sessions/{sid}")).json()["pending_confirmation"] is None

    run(api_store, scenario, paths=(CARD_BANK,), config=ServerConfig(rate_limit=0))


def test_audit2_key_file_with_a_byte_order_mark_keeps_its_first_key(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_bytes(b"\xef\xbb\xbfkey-one-0123456789\r\nkey-two-0123456789\r\n")
    loaded = ApiKeys.from_env({"AGENTSCRIPT_API_KEYS": str(keys)})
    assert loaded.owner("Bearer key-one-0123456789") is not None
    assert loaded.owner("Bearer key-two-0123456789") is not None
    hashed = tmp_path / "hashed"
    hashed.write_bytes(b"\xef\xbb\xbfsha256:" + hashlib.sha256(b"k1").hexdigest().encode())
    assert ApiKeys.from_env({"AGENTSCRIPT_API_KEYS": str(hashed)}).owner("Bearer k1")


def test_audit2_http_metric_counts_unknown_methods_as_other(tmp_path: Path) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        for method in ("FOO", "BREW", "X-" + "A" * 50):
            response = await client.request(method, "/healthz")
            assert response.status_code == 405
        assert (await client.request("PROPFIND", "/healthz")).status_code == 405
        text = (await client.get("/metrics")).text
        lines = [line for line in text.splitlines() if line.startswith("agentscript_http_")]
        assert 'agentscript_http_requests_total{method="other",status="405"} 4' in lines
        assert not any("FOO" in line or "BREW" in line or "PROPFIND" in line for line in lines)

    run(f"sqlite:///{tmp_path}/s.db", scenario)


def test_audit2_refused_cors_preflight_is_a_json_error(tmp_path: Path) -> None:
    config = ServerConfig(cors_origins=["https://app.example.com"])
    preflight = {"Access-Control-Request-Method": "POST"}

    async def scenario(client: httpx.AsyncClient) -> None:
        allowed = await client.options(
            "/v1/agents", headers={"Origin": "https://app.example.com", **preflight}
        )
        assert allowed.status_code == 200
        assert allowed.headers["access-control-allow-origin"] == "https://app.example.com"
        refused = await client.options(
            "/v1/agents", headers={"Origin": "https://evil.example", **preflight}
        )
        assert refused.status_code == 400
        assert refused.headers["content-type"] == "application/json"
        error = refused.json()["error"]
        assert error["code"] == "cors_refused" and "origin" in error["message"]
        bad_method = await client.options(
            "/v1/agents",
            headers={"Origin": "https://app.example.com", "Access-Control-Request-Method": "PUT"},
        )
        assert bad_method.status_code == 400
        assert bad_method.json()["error"]["code"] == "cors_refused"
        assert "method" in bad_method.json()["error"]["message"]
        assert "access-control-allow-origin" in bad_method.headers

    run(f"sqlite:///{tmp_path}/s.db", scenario, config=config)


def test_audit2_accept_negotiation_streams_only_when_preferred(tmp_path: Path) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        sid = (await client.post("/v1/agents/Notes/sessions", json={})).json()["session_id"]
        url = f"/v1/sessions/{sid}/messages"
        for accept, streamed in (
            ("text/event-stream", True),
            ("text/event-stream, application/json", True),
            ("Text/Event-Stream", True),
            ("application/json;q=0.5, text/event-stream", True),
            ("text/event-stream;q=0.5, application/json", False),
            ("text/event-stream;q=0", False),
            ("application/json;q=0, text/event-stream;q=0", False),
            ("*/*", False),
            ("application/json", False),
        ):
            response = await client.post(url, json={"text": "hi"}, headers={"Accept": accept})
            assert response.status_code == 200, (accept, response.text)
            kind = response.headers["content-type"].split(";")[0]
            assert kind == ("text/event-stream" if streamed else "application/json"), accept
            if streamed:
                assert sse.parse(response.text)[-1][0] == "turn"
            else:
                assert response.json()["response"] == "You said: hi"

    run(f"sqlite:///{tmp_path}/s.db", scenario, config=ServerConfig(rate_limit=0))


def test_audit2_body_without_a_json_content_type_says_so(tmp_path: Path) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        sid = (await client.post("/v1/agents/Notes/sessions", json={})).json()["session_id"]
        for url, content in (
            (f"/v1/sessions/{sid}/messages", b'{"text": "hi"}'),
            ("/v1/agents/Notes/sessions", b'{"variables": {"count": 2}}'),
        ):
            for headers, said in (
                ({}, "no Content-Type was sent"),
                ({"Content-Type": "text/plain"}, "got 'text/plain'"),
            ):
                response = await client.post(url, content=content, headers=headers)
                assert response.status_code == 422, response.text
                error = response.json()["error"]
                assert error["code"] == "invalid_request"
                assert "Content-Type: application/json" in error["message"]
                assert said in error["message"]
        # nothing ran and nothing was created
        assert (await client.get(f"/v1/sessions/{sid}")).json()["turns"] == 0
        assert len((await client.get("/v1/sessions")).json()["sessions"]) == 1
        wrong_shape = await client.post(f"/v1/sessions/{sid}/messages", json=["hi"])
        assert wrong_shape.status_code == 422
        assert "Content-Type" not in wrong_shape.json()["error"]["message"]

    run(f"sqlite:///{tmp_path}/s.db", scenario, config=ServerConfig(rate_limit=0))


def test_audit2_openapi_operation_ids_are_unique_and_head_still_answers(tmp_path: Path) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        document = (await client.get("/openapi.json")).json()
        ids = [op["operationId"] for item in document["paths"].values() for op in item.values()]
        assert len(ids) == len(set(ids)), sorted(ids)
        for path in ("/healthz", "/readyz"):
            head = await client.head(path)
            assert head.status_code == 200 and head.content == b""
            assert (await client.get(path)).status_code == 200

    run(f"sqlite:///{tmp_path}/s.db", scenario)


@pytest.mark.parametrize("key", ["clé-secrète", "two words", "tab\there"])
def test_audit2_a_key_no_header_can_carry_is_refused_at_start_up(key: str) -> None:
    with pytest.raises(KeyConfigError) as refused:
        ApiKeys.from_env({"AGENTSCRIPT_API_KEYS": f"good-key-0123456789,{key}"})
    assert "visible ASCII" in str(refused.value) and key not in str(refused.value)
