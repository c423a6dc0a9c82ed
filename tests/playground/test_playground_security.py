"""What keeps the playground (and a server without keys) to its own user: requests another
site's page makes through the developer's browser are refused, a server with keys takes no
stubbed actions from its clients, a replay whose stubs were forgotten is refused rather than
run for real, a conversation file cannot stall the loop or nest past what a session keeps, and
the page is never framed nor given another site's script."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

from agentscript.server.command import build_app

from .harness import LATE_ORDER, ORDER_STATUS, options, run, say, session

SCRIPT_ONLY = """\
variables: {order_ID: "1234"}
turns:
    - user: "Where is my order?"
      model:
          - say: "Scripted."
"""


async def _with_base(opts: Any, base_url: str, scenario: Any) -> Any:
    app, _lines = build_app(opts)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=base_url) as c,
    ):
        return await scenario(c)


def test_a_server_without_keys_refuses_a_host_name_that_is_not_loopback() -> None:
    async def create(c: httpx.AsyncClient) -> httpx.Response:
        return await c.post("/playground/api/agents/Order_Status/sessions", json={})

    def status(base_url: str) -> tuple[int, str]:
        answer = asyncio.run(_with_base(options(ORDER_STATUS), base_url, create))
        return answer.status_code, answer.json().get("error", {}).get("code", "")

    # A DNS-rebinding page: its name resolves to 127.0.0.1, the browser sends it as Host.
    assert status("http://rebind.attacker.test:8000") == (403, "host_not_allowed")
    assert status("http://127.0.0.1.attacker.test") == (403, "host_not_allowed")
    for base_url in ("http://127.0.0.1:8000", "http://localhost:8000", "http://[::1]:8000"):
        assert status(base_url)[0] == 201, base_url


def test_a_server_without_keys_refuses_requests_from_another_sites_page() -> None:
    async def scenario(c: httpx.AsyncClient) -> list[tuple[int, str]]:
        answers = []
        for origin in ("http://evil.example", "null", "http://127.0.0.1:9999", None):
            headers = {"Origin": origin} if origin else {}
            # An empty body without a content type: what a no-cors fetch or a form can send.
            answer = await c.post("/v1/agents/Order_Status/sessions", headers=headers)
            answers.append((answer.status_code, answer.json().get("error", {}).get("code", "")))
        own = await c.post(
            "/v1/agents/Order_Status/sessions", headers={"Origin": "http://127.0.0.1:8000"}
        )
        answers.append((own.status_code, ""))
        allowed = await c.post(
            "/v1/agents/Order_Status/sessions", headers={"Origin": "https://app.example"}
        )
        answers.append((allowed.status_code, ""))
        return answers

    opts = options(ORDER_STATUS, cors_origins=["https://app.example"])
    refused = (403, "origin_not_allowed")
    assert asyncio.run(_with_base(opts, "http://127.0.0.1:8000", scenario)) == [
        refused,
        refused,
        refused,  # the same host on another port is another site
        (201, ""),  # no Origin: not a browser's cross-site request
        (201, ""),  # the page itself
        (201, ""),  # an origin allowed by --cors-origin
    ]


def test_a_server_with_keys_checks_the_key_not_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTSCRIPT_API_KEYS", "key-1-0123456789ab")

    async def scenario(c: httpx.AsyncClient) -> tuple[int, int]:
        keyed = await c.post(
            "/v1/agents/Order_Status/sessions",
            json={},
            headers={"Authorization": "Bearer key-1-0123456789ab", "Origin": "https://app.example"},
        )
        bare = await c.post("/v1/agents/Order_Status/sessions", json={})
        return keyed.status_code, bare.status_code

    got = asyncio.run(_with_base(options(ORDER_STATUS), "http://agents.example.com", scenario))
    assert got == (201, 401)


def test_a_server_with_keys_takes_no_stubbed_actions_from_its_clients(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTSCRIPT_API_KEYS", "key-1-0123456789ab")
    key = {"Authorization": "Bearer key-1-0123456789ab"}
    stubbed = Path(LATE_ORDER).read_text(encoding="utf-8")

    async def scenario(c: httpx.AsyncClient) -> tuple[httpx.Response, httpx.Response]:
        path = "/playground/api/agents/Order_Status/sessions"
        refused = await c.post(path, json={"conversation": stubbed}, headers=key)
        scripted = await c.post(path, json={"conversation": SCRIPT_ONLY}, headers=key)
        return refused, scripted

    refused, scripted = asyncio.run(_with_base(options(ORDER_STATUS), "http://x", scenario))
    assert refused.status_code == 422
    error = refused.json()["error"]
    assert error["code"] == "stubs_not_allowed"
    assert "check_if_late, get_delivery_date" in error["message"]
    # Scripted model moves stay: they choose only among the tools the agent offers, as a model.
    assert scripted.status_code == 201 and scripted.json()["scripted_turns"] == 1


def test_a_replayed_session_whose_stubs_were_forgotten_is_refused_not_run_for_real(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentscript.server.playground import sessions

    monkeypatch.setattr(sessions, "MAX_SESSIONS", 2)
    stubbed = Path(LATE_ORDER).read_text(encoding="utf-8")

    async def scenario(c: httpx.AsyncClient) -> tuple[httpx.Response, dict[str, Any]]:
        path = "/playground/api/agents/Order_Status/sessions"
        replayed = (await c.post(path, json={"conversation": stubbed})).json()["session_id"]
        plain = await session(c, "Order_Status", variables={"order_ID": "1"})
        for _ in range(2):  # two newer sessions: both older ones are forgotten
            await session(c, "Order_Status")
        refused = await c.post(f"/v1/sessions/{replayed}/messages", json={"text": "hi"})
        return refused, await say(c, plain, "hello")

    refused, plain_turn = run(options(ORDER_STATUS), scenario)
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "playground_session_forgotten"
    # A session with nothing of its own loses nothing by being forgotten.
    assert plain_turn["error"] is None and plain_turn["turn"] == 1


def test_a_conversation_nested_past_what_a_session_keeps_is_422() -> None:
    deep = "variables: {a: " + "[" * 256 + "]" * 256 + "}"

    async def scenario(c: httpx.AsyncClient) -> list[httpx.Response]:
        return [
            await c.post("/playground/api/conversations", json={"text": deep}),
            await c.post(
                "/playground/api/agents/Order_Status/sessions", json={"conversation": deep}
            ),
        ]

    for answer in run(options(ORDER_STATUS), scenario):
        assert answer.status_code == 422
        assert answer.json()["error"]["code"] == "invalid_conversation"
        assert "nested more than" in answer.json()["error"]["message"]


def test_conversation_files_are_parsed_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    import agentscript.conversation as conversation

    threads: list[str] = []
    parse = conversation.parse_conversation

    def recording(text: str, path: Path | None = None) -> Any:
        threads.append(threading.current_thread().name)
        return parse(text, path)

    monkeypatch.setattr(conversation, "parse_conversation", recording)

    async def scenario(c: httpx.AsyncClient) -> str:
        answer = await c.post("/playground/api/conversations", json={"text": SCRIPT_ONLY})
        assert answer.status_code == 200
        return threading.current_thread().name

    loop_thread = run(options(ORDER_STATUS), scenario)
    assert threads and threads[0] != loop_thread


def test_the_page_and_its_assets_forbid_framing_sniffing_and_other_sites_scripts() -> None:
    async def scenario(c: httpx.AsyncClient) -> list[httpx.Response]:
        return [
            await c.get("/playground/"),
            await c.get("/playground/static/playground.js"),
            await c.get("/playground/static/playground.css"),
        ]

    for answer in run(options(ORDER_STATUS), scenario):
        assert answer.status_code == 200
        policy = answer.headers["content-security-policy"]
        assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy
        assert answer.headers["x-content-type-options"] == "nosniff"


def test_with_keys_the_operators_presets_are_taken_and_a_clients_own_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`serve --playground --var project.authenticated=true` with keys: the page sends the
    operator's value back, and every new session was refused (only the agent sets it). The
    operator's value is taken; a client that changes it, or sets another fixed one, is not."""
    from .harness import CARD_BANK

    monkeypatch.setenv("AGENTSCRIPT_API_KEYS", "key-1-0123456789ab")
    key = {"Authorization": "Bearer key-1-0123456789ab"}
    path = "/playground/api/agents/card-bank/sessions"

    async def scenario(c: httpx.AsyncClient) -> list[int]:
        preset = (await c.get("/playground/api/config", headers=key)).json()["variables"]
        sent_back = await c.post(path, json={"variables": preset}, headers=key)
        changed = await c.post(
            path, json={"variables": {"project.authenticated": False}}, headers=key
        )
        another = await c.post(
            path, json={"variables": {**preset, "project.customer_id": "1001"}}, headers=key
        )
        return [sent_back.status_code, changed.status_code, another.status_code]

    opts = options(CARD_BANK, variables=["project.authenticated=true"])
    assert asyncio.run(_with_base(opts, "http://127.0.0.1:8000", scenario)) == [201, 422, 422]
