"""The message fast path (server/fastpath.py) answers exactly as the FastAPI route would.

Every request goes to two servers, one with the fast path and one without it, and must get
the same status, headers and body. The fast path must also have answered the plain requests
itself and handed every other one to the route.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx2 as httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentscript.server.agents import load_agents, serve_agents
from agentscript.server.app import create_app
from agentscript.server.auth import ApiKeys
from agentscript.server.config import ServerConfig
from agentscript.server.fastpath import MessageFastPath
from agentscript.server.standin import StandInModel
from agentscript.store import store_from_url

from .harness import NOTES

KEY = "k-" + "x" * 30
AUTH = {"authorization": f"Bearer {KEY}"}
JSON = {"content-type": "application/json"}
COMPARED_HEADERS = ("content-type", "www-authenticate", "retry-after", "cache-control")


@dataclass
class Server:
    client: httpx.AsyncClient
    session_id: str = ""
    delegated: list[str] = field(default_factory=list)


@dataclass
class Pair:
    loop: asyncio.AbstractEventLoop
    fast: Server
    plain: Server

    def send(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[Any, Any]:
        """``POST path`` (``{sid}`` is each server's session) to both; both answers, comparable."""

        async def both() -> tuple[Any, Any]:
            return (
                await answer(self.fast, path, body, headers),
                await answer(self.plain, path, body, headers),
            )

        return self.loop.run_until_complete(both())


async def answer(server: Server, path: str, body: bytes, headers: dict[str, str]) -> Any:
    response = await server.client.post(
        path.format(sid=server.session_id), content=body, headers=headers
    )
    kept = {name: response.headers.get(name) for name in COMPARED_HEADERS}
    text = response.text.replace(server.session_id, "<sid>")
    if kept["content-type"] == "application/json":
        return response.status_code, kept, untimed(json.loads(text))
    return response.status_code, kept, re.sub(r'"(\w*Ms|llm_ms)":[-0-9.e]+', r'"\1":0', text)


def untimed(data: Any) -> Any:
    """``data`` without measured times, which differ run to run."""
    if isinstance(data, dict):
        return {k: untimed(v) for k, v in data.items() if not k.endswith(("Ms", "_ms"))}
    if isinstance(data, list):
        return [untimed(v) for v in data]
    return data


def build(*, fast: bool, config: ServerConfig, keys: tuple[str, ...]) -> Any:
    agents = load_agents([NOTES])
    served = serve_agents(agents, {a.name: StandInModel() for a in agents})
    app = create_app(
        served,
        store_from_url("memory://"),
        config=config,
        keys=ApiKeys.of(*keys),
        purge_every=None,
    )
    if not fast:
        app.user_middleware = [m for m in app.user_middleware if m.cls is not MessageFastPath]
    return app


def watch_delegations(app: Any, server: Server) -> None:
    """Record the path of every request the fast path hands on (the stack is built by now)."""
    layer = app.middleware_stack
    while not isinstance(layer, MessageFastPath):
        layer = layer.app
    inner = layer.app

    async def handed_on(scope: Any, receive: Any, send: Any) -> None:
        server.delegated.append(scope["path"])
        await inner(scope, receive, send)

    layer.app = handed_on


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    loop = asyncio.new_event_loop()
    config = ServerConfig(rate_limit=0, max_message_chars=50)
    apps = {fast: build(fast=fast, config=config, keys=(KEY,)) for fast in (True, False)}
    servers: dict[bool, Server] = {}
    contexts = []
    for fast, app in apps.items():
        lifespan = app.router.lifespan_context(app)
        loop.run_until_complete(lifespan.__aenter__())
        contexts.append(lifespan)
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")
        server = servers[fast] = Server(client)
        created = loop.run_until_complete(
            client.post("/v1/agents/Notes/sessions", json={}, headers=AUTH)
        )
        server.session_id = created.json()["session_id"]
    watch_delegations(apps[True], servers[True])
    try:
        yield Pair(loop, servers[True], servers[False])
    finally:
        for server in servers.values():
            loop.run_until_complete(server.client.aclose())
        for lifespan in contexts:
            loop.run_until_complete(lifespan.__aexit__(None, None, None))
        loop.close()


MESSAGES = "/v1/sessions/{sid}/messages"
# (what it is, path, body, headers, status, answered by the fast path)
CASES = [
    ("plain", MESSAGES, b'{"text": "hi"}', {**AUTH, **JSON}, 200, True),
    (
        "charset",
        MESSAGES,
        b'{"text": "h\\u00e9"}',
        {**AUTH, "content-type": "application/json; charset=utf-8"},
        200,
        True,
    ),
    ("key", MESSAGES, b'{"text": "hi"}', {**AUTH, **JSON, "idempotency-key": "k1"}, 200, True),
    ("same key", MESSAGES, b'{"text": "hi"}', {**AUTH, **JSON, "idempotency-key": "k1"}, 200, True),
    (
        "key, other text: refused",
        MESSAGES,
        b'{"text": "ho"}',
        {**AUTH, **JSON, "idempotency-key": "k1"},
        409,
        True,
    ),
    ("no key", MESSAGES, b'{"text": "hi"}', JSON, 401, True),
    ("wrong key", MESSAGES, b'{"text": "hi"}', {"authorization": "Bearer nope", **JSON}, 401, True),
    ("too long", MESSAGES, json.dumps({"text": "x" * 51}).encode(), {**AUTH, **JSON}, 422, True),
    ("no session", "/v1/sessions/nope/messages", b'{"text": "hi"}', {**AUTH, **JSON}, 404, True),
    (
        "+json",
        MESSAGES,
        b'{"text": "hi"}',
        {**AUTH, "content-type": "application/vnd.x+json"},
        200,
        False,
    ),
    ("no content type", MESSAGES, b'{"text": "hi"}', AUTH, 422, False),
    ("text/plain", MESSAGES, b'{"text": "hi"}', {**AUTH, "content-type": "text/plain"}, 422, False),
    ("bad JSON", MESSAGES, b'{"text": ', {**AUTH, **JSON}, 400, False),
    ("empty body", MESSAGES, b"", {**AUTH, **JSON}, 422, False),
    ("a list", MESSAGES, b'["hi"]', {**AUTH, **JSON}, 422, False),
    ("a number", MESSAGES, b'{"text": 1}', {**AUTH, **JSON}, 422, False),
    ("null", MESSAGES, b'{"text": null}', {**AUTH, **JSON}, 422, False),
    ("extra field", MESSAGES, b'{"text": "hi", "x": 1}', {**AUTH, **JSON}, 422, False),
    ("no text", MESSAGES, b'{"txt": "hi"}', {**AUTH, **JSON}, 422, False),
    ("lone surrogate", MESSAGES, b'{"text": "a\\ud800"}', {**AUTH, **JSON}, 422, True),
    (
        "key with a space",
        MESSAGES,
        b'{"text": "hi"}',
        {**AUTH, **JSON, "idempotency-key": "a b"},
        422,
        False,
    ),
    (
        "key too long",
        MESSAGES,
        b'{"text": "hi"}',
        {**AUTH, **JSON, "idempotency-key": "k" * 201},
        422,
        False,
    ),
    (
        "bad session id",
        "/v1/sessions/no%20pe/messages",
        b'{"text": "hi"}',
        {**AUTH, **JSON},
        422,
        False,
    ),
    (
        "stream",
        MESSAGES,
        b'{"text": "hi"}',
        {**AUTH, **JSON, "accept": "text/event-stream"},
        200,
        True,
    ),
]


def test_fast_path_answers_as_the_route_would(pair: Pair) -> None:
    for name, path, body, headers, status, fast in CASES:
        before = len(pair.fast.delegated)
        fast_answer, route_answer = pair.send(path, body, headers)
        assert fast_answer == route_answer, name
        assert fast_answer[0] == status, (name, fast_answer)
        assert (len(pair.fast.delegated) == before) is fast, name


def test_fast_path_keeps_repeated_headers_for_the_route(pair: Pair) -> None:
    async def twice() -> tuple[Any, Any]:
        answers = []
        for server in (pair.fast, pair.plain):
            response = await server.client.post(
                MESSAGES.format(sid=server.session_id),
                content=b'{"text": "hi"}',
                headers=[
                    ("authorization", "Bearer nope"),
                    ("authorization", f"Bearer {KEY}"),
                    ("content-type", "application/json"),
                ],
            )
            answers.append((response.status_code, response.json().get("error")))
        return answers[0], answers[1]

    before = len(pair.fast.delegated)
    fast_answer, route_answer = pair.loop.run_until_complete(twice())
    assert fast_answer == route_answer
    assert len(pair.fast.delegated) == before + 1


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
BODIES = (
    st.builds(lambda text: json.dumps({"text": text}).encode(), st.text(max_size=60))
    | st.builds(lambda value: json.dumps(value).encode(), JSON_VALUES)
    | st.builds(lambda value: json.dumps({"text": value}).encode(), JSON_VALUES)
    | st.binary(max_size=40)
)
CONTENT_TYPES = st.sampled_from(
    [
        "application/json",
        "application/json; charset=utf-8",
        "APPLICATION/JSON",
        "text/plain",
        "application/x+json",
        "",
    ]
)
KEYS = st.none() | st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=8)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=BODIES, content_type=CONTENT_TYPES, key=KEYS)
def test_fast_path_fuzzed_against_the_route(
    pair: Pair, body: bytes, content_type: str, key: str | None
) -> None:
    headers = dict(AUTH)
    if content_type:
        headers["content-type"] = content_type
    if key is not None:
        headers["idempotency-key"] = key
    fast_answer, route_answer = pair.send(MESSAGES, body, headers)
    assert fast_answer == route_answer
    assert fast_answer[0] < 500
