"""X-Request-ID: on every response, kept from a proxy when well formed, and in every log line
the server writes while it handles the request."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import httpx2 as httpx

from agentscript.server.config import ServerConfig
from agentscript.server.logs import FORMAT, WithRequestId
from agentscript.server.requestid import current, request_id_of

from .harness import NOTES, new_session, run
from .process import serving

NEW_ID = re.compile(r"[0-9a-f]{32}")


def test_every_response_carries_its_own_request_id(tmp_path: Path) -> None:
    async def scenario(client: httpx.AsyncClient) -> list[tuple[int, str | None]]:
        created = await client.post("/v1/agents/Notes/sessions", json={})
        sid = created.json()["session_id"]
        answers = [
            created,
            await client.get("/healthz"),
            await client.post(f"/v1/sessions/{sid}/messages", json={"text": "fast path"}),
            await client.post(
                f"/v1/sessions/{sid}/messages",
                json={"text": "streamed"},
                headers={"Accept": "text/event-stream"},
            ),
            await client.get("/v1/sessions/no-such-session"),
            await client.post(f"/v1/sessions/{sid}/messages", json={"txt": "typo"}),
            await client.post(f"/v1/sessions/{sid}/messages", content=b"x" * 5000),
        ]
        return [(r.status_code, r.headers.get("x-request-id")) for r in answers]

    config = ServerConfig(max_body_bytes=4096)
    answers = run(f"sqlite:///{tmp_path}/s.db", scenario, config=config)
    assert [status for status, _ in answers] == [201, 200, 200, 200, 404, 422, 413]
    ids = [request_id for _, request_id in answers]
    assert all(request_id and NEW_ID.fullmatch(request_id) for request_id in ids), ids
    assert len(set(ids)) == len(ids)


def test_a_well_formed_request_id_is_kept_and_any_other_replaced(tmp_path: Path) -> None:
    kept = ["req-7f3a", "0b6e9c1d-2f4a-4c1e-9d7a-3b2c1d0e9f8a", "lb:trace/AB+c=d@e_f.g", "x" * 128]
    # "-" is what a line outside any request shows: a request may not pass for none.
    replaced = ["x" * 129, "two words", "semi;colon", 'quote"d', "", "-"]

    async def scenario(client: httpx.AsyncClient) -> list[str]:
        sid = await new_session(client)
        out = []
        for value in kept + replaced:
            response = await client.post(
                f"/v1/sessions/{sid}/messages", json={"text": "hi"}, headers={"X-Request-ID": value}
            )
            assert response.status_code == 200
            out.append(response.headers["x-request-id"])
        return out

    answered = run(f"sqlite:///{tmp_path}/s.db", scenario)
    assert answered[: len(kept)] == kept
    assert all(NEW_ID.fullmatch(value) for value in answered[len(kept) :]), answered


def test_only_the_first_request_id_header_counts() -> None:
    first, second = b"first-id", b"second-id"
    headers = [(b"x-request-id", first), (b"x-request-id", second)]
    assert request_id_of(headers) == "first-id"
    assert NEW_ID.fullmatch(
        request_id_of([(b"x-request-id", b"bad id"), (b"x-request-id", second)])
    )


def test_log_lines_name_the_request_they_were_written_for(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    db = tmp_path / "s.db"
    args = [NOTES, "--model", "standin", "--store", f"sqlite:///{db}", "--access-log"]
    with serving(args, {}, log) as server:
        sid = httpx.post(f"{server.url}/v1/agents/Notes/sessions", json={}).json()["session_id"]
        sent = httpx.post(
            f"{server.url}/v1/sessions/{sid}/messages",
            json={"text": "hi"},
            headers={"X-Request-ID": "support-ticket-42"},
        )
        assert sent.status_code == 200
        os.rename(db, tmp_path / "elsewhere.db")
        lost = httpx.post(f"{server.url}/v1/sessions/{sid}/messages", json={"text": "lost?"})
        assert lost.status_code == 503
        lost_id = lost.headers["x-request-id"]
    lines = log.read_text().splitlines()
    assert [
        line
        for line in lines
        if f"agentscript.access support-ticket-42: 127.0.0.1 POST /v1/sessions/{sid}/messages 200"
        in line
    ], lines
    assert [line for line in lines if f"agentscript.server {lost_id}: store unavailable" in line]
    assert [line for line in lines if f"agentscript.access {lost_id}: " in line and " 503 " in line]


def test_a_line_written_outside_any_request_says_so() -> None:
    record = logging.LogRecord("agentscript.server", logging.ERROR, __file__, 1, "x", None, None)
    WithRequestId().filter(record)
    assert logging.Formatter(FORMAT).format(record).endswith("agentscript.server -: x")
    token = current.set("abc")
    try:
        WithRequestId().filter(record)
    finally:
        current.reset(token)
    assert logging.Formatter(FORMAT).format(record).endswith("agentscript.server abc: x")


def test_cors_lets_a_browser_read_the_request_id_and_retry_after(tmp_path: Path) -> None:
    async def scenario(client: httpx.AsyncClient) -> tuple[httpx.Response, httpx.Response]:
        preflight = await client.options(
            "/v1/agents/Notes/sessions",
            headers={
                "Origin": "https://app.example.com",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "x-request-id",
            },
        )
        got = await client.get("/v1/agents", headers={"Origin": "https://app.example.com"})
        return preflight, got

    config = ServerConfig(cors_origins=["https://app.example.com"])
    preflight, response = run(f"sqlite:///{tmp_path}/s.db", scenario, config=config)
    # A browser may send the id of its own request too.
    assert preflight.status_code == 200
    assert "x-request-id" in preflight.headers["access-control-allow-headers"].lower()
    exposed = {
        h.strip().lower() for h in response.headers["access-control-expose-headers"].split(",")
    }
    assert {"x-request-id", "retry-after"} <= exposed
