"""``agentscript mcp-serve --transport streamable-http`` keeps serve's promises to API keys: a
session belongs to the key that started it (another key is told it does not exist), and each
key has its own rate limit (``429`` with ``Retry-After`` past it)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from tests.fakes.llm_servers import OpenAIServer, Reply
from tests.integrations.test_mcp_serve import AGENT, _answering, _mcp_serve_http, _serving_url

# C is for the rate limit test alone: the order of the tests must not matter.
KEY_A, KEY_B, KEY_C = "key-a-1234567890ab", "key-b-5678901234cd", "key-c-9012345678ef"
# Per second: far below what the test sends, so only serve's burst (rate_burst) lets requests
# through, whatever the machine's speed.
RATE_LIMIT = "10"  # a burst of 20 a key (two seconds' worth), refilled at 10/s

Call = Callable[[str, dict[str, Any]], dict[str, Any]]


def _headers(key: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
    }


def _client(url: str, key: str, mcp_session: str | None = None) -> Call:
    """A tool caller over raw JSON-RPC as ``key``, in a new MCP session or in ``mcp_session``
    (the transport's session, which its header names)."""
    import httpx2

    headers = _headers(key)
    if mcp_session is None:
        hello = {"protocolVersion": "2025-03-26", "capabilities": {}}
        hello["clientInfo"] = {"name": "test", "version": "1"}
        opened = httpx2.post(
            url,
            headers=headers,
            json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello},
            timeout=30,
        )
        mcp_session = opened.headers["mcp-session-id"]
        headers["mcp-session-id"] = mcp_session
        ready = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        httpx2.post(url, headers=headers, json=ready, timeout=30)
    headers["mcp-session-id"] = mcp_session

    def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        request = {"name": name, "arguments": arguments}
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": request}
        answer = httpx2.post(url, headers=headers, json=body, timeout=60)
        result: dict[str, Any] = answer.json()["result"]
        return result

    call.mcp_session = mcp_session  # type: ignore[attr-defined]
    return call


def _text(result: dict[str, Any]) -> str:
    return str(result["content"][0]["text"])


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """mcp-serve over HTTP with the keys A, B and C, its model the fake server."""
    agent = tmp_path_factory.mktemp("keys") / "echo.agent"
    agent.write_text(AGENT)
    replies = [Reply(text=f"Answer {n}.") for n in range(20)]
    with OpenAIServer(replies) as model:
        extra = ("--rate-limit", RATE_LIMIT)
        proc = _mcp_serve_http(agent, model.base_url, 0, *extra, keys=f"{KEY_A},{KEY_B},{KEY_C}")
        try:
            address, _said = _serving_url(proc)
            assert _answering(address, proc) == 401
            yield address
        finally:
            proc.kill()
            proc.communicate(timeout=20)


def test_mcp_serve_a_session_belongs_to_the_key_that_started_it(url: str) -> None:
    alice = _client(url, KEY_A)
    started = alice("send", {"message": "my card is 4111"})["structuredContent"]
    sid = started["session_id"]
    bob = _client(url, KEY_B)
    unknown = bob("send", {"message": "what did I say?", "session_id": "f" * 32})
    taken = bob("send", {"message": "what did I say?", "session_id": sid})
    # Exactly the answer to an id that does not exist: nothing says the session is there.
    assert taken["isError"] is True and unknown["isError"] is True
    assert _text(taken).replace(sid, "ID") == _text(unknown).replace("f" * 32, "ID")
    # Its own key goes on with it.
    again = alice("send", {"message": "and now?", "session_id": sid})
    assert "isError" not in again or again["isError"] is False
    assert again["structuredContent"]["session_id"] == sid


def test_mcp_serve_a_transport_session_belongs_to_the_key_that_opened_it(url: str) -> None:
    import httpx2

    alice = _client(url, KEY_A)
    opened = alice.mcp_session  # type: ignore[attr-defined]
    ping = {"jsonrpc": "2.0", "id": 7, "method": "ping"}

    def as_bob(method: str, mcp_session: str) -> tuple[int, str]:
        headers = {**_headers(KEY_B), "mcp-session-id": mcp_session}
        sent = httpx2.request(method, url, headers=headers, json=ping, timeout=30)
        return sent.status_code, sent.text

    # Key B naming key A's transport session is answered exactly as for one that does not
    # exist: it can neither use it nor end it.
    unknown = as_bob("POST", "f" * 32)
    assert unknown[0] == 404
    assert as_bob("POST", opened) == unknown
    assert as_bob("DELETE", opened) == as_bob("DELETE", "f" * 32)
    # Key A's transport session is still there.
    again = alice("send", {"message": "still here?"})
    assert again["structuredContent"]["session_id"]


def test_mcp_serve_rate_limits_each_key_as_serve_does(url: str) -> None:
    import httpx2

    from agentscript.server.config import burst_for

    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    burst = burst_for(float(RATE_LIMIT))
    # One client for the burst: a new one per request costs about 60 ms (an SSL context),
    # slow enough on a loaded machine for the bucket to refill as fast as it is drained.
    with httpx2.Client(headers=_headers(KEY_C), timeout=30) as client:
        answers = [client.post(url, json=ping) for _ in range(burst + 20)]
    # The whole burst passes; then the bucket, refilled at 10/s, runs dry again.
    assert all(a.status_code != 429 for a in answers[:burst])
    refused = next(a for a in answers[burst:] if a.status_code == 429)
    assert int(refused.headers["retry-after"]) >= 1
    error = json.loads(refused.text)["error"]
    assert error["code"] == "rate_limited" and f"rate_limit {RATE_LIMIT}" in error["message"]
    # Another key has a bucket of its own.
    other = httpx2.post(url, headers=_headers(KEY_B), json=ping, timeout=30)
    assert other.status_code != 429
