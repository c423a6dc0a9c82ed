"""The process metrics forget sessions whose last turn left the active window as turns come,
whether or not anything reads ``/metrics``, and sessions deleted or expired at once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx2 as httpx
import pytest

from agentscript.models.base import Message, Model, ModelError
from agentscript.models.function import FunctionInfo, FunctionModel
from agentscript.server import metrics as metrics_module
from agentscript.server.agents import load_agents, serve_agents
from agentscript.server.app import create_app
from agentscript.server.auth import ApiKeys
from agentscript.server.config import ServerConfig
from agentscript.server.metrics import ACTIVE_WINDOW, Metrics
from agentscript.server.service import SessionService
from agentscript.server.standin import StandInModel
from agentscript.store import store_from_url

from .harness import NOTES

TRACE = {"usage": {"llm_ms": 5.0, "llm_calls": 1}}


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The metrics' monotonic clock, set by the test through ``clock[0]``."""
    now = [0.0]
    monkeypatch.setattr(metrics_module.time, "monotonic", lambda: now[0])
    return now


def test_active_sessions_are_forgotten_as_turns_come_without_a_scrape(clock: list[float]) -> None:
    now = clock
    now[0] = 1_000.0
    metrics = Metrics()
    for n in range(1_000):
        metrics.turn("A", f"s{n}", 0.01, TRACE)
    metrics.turn("A", "s0", 0.01, TRACE)  # s0 is recent again: it moves behind the others
    assert len(metrics._last_turn) == 1_000
    now[0] += ACTIVE_WINDOW + 1
    metrics.turn("A", "late", 0.01, TRACE)
    # Only the new turn is left, and no /metrics read was needed to forget the others.
    assert list(metrics._last_turn) == ["late"]
    assert metrics.active_sessions() == 1


def test_a_session_with_a_new_turn_stays_active_while_older_ones_go(clock: list[float]) -> None:
    now = clock
    metrics = Metrics()
    metrics.turn("A", "first", 0.01, TRACE)
    now[0] = 100.0
    metrics.turn("A", "second", 0.01, TRACE)
    now[0] = 200.0
    metrics.turn("A", "first", 0.01, TRACE)  # first's last turn is now the latest
    now[0] = ACTIVE_WINDOW + 150.0  # second (at 100) left the window, first (at 200) did not
    assert metrics.active_sessions() == 1
    now[0] = ACTIVE_WINDOW + 201.0
    assert metrics.active_sessions() == 0
    assert "agentscript_active_sessions 0" in metrics.render()


# ---------------------------------------------------------------- sessions that are gone

TTL = 0.3  # --session-ttl, in seconds


@asynccontextmanager
async def served(
    config: ServerConfig, purge_every: float | None = None, model: Model | None = None
) -> AsyncIterator[tuple[httpx.AsyncClient, SessionService]]:
    agents = load_agents([NOTES])
    app = create_app(
        serve_agents(agents, {a.name: model or StandInModel() for a in agents}),
        store_from_url("memory://"),
        config=config,
        keys=ApiKeys.of(),
        purge_every=purge_every,
    )
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://test") as client,
    ):
        yield client, app.state.service


async def gauges(client: httpx.AsyncClient) -> tuple[int, int]:
    """The active and kept sessions ``/metrics`` reads."""
    text = (await client.get("/metrics")).text
    found = dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
    return int(found["agentscript_active_sessions"]), int(found["agentscript_kept_sessions"])


async def session_with_a_turn(client: httpx.AsyncClient) -> str:
    made = await client.post("/v1/agents/Notes/sessions", json={})
    sid = str(made.json()["session_id"])
    sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "hi"})
    assert sent.status_code == 200
    return sid


def test_a_deleted_session_is_neither_active_nor_kept() -> None:
    async def main() -> None:
        async with served(ServerConfig()) as (client, _service):
            sid = await session_with_a_turn(client)
            await session_with_a_turn(client)
            assert await gauges(client) == (2, 2)
            assert (await client.delete(f"/v1/sessions/{sid}")).status_code == 204
            assert await gauges(client) == (1, 1)

    asyncio.run(main())


def test_an_expired_session_read_as_gone_is_forgotten_at_once() -> None:
    async def main() -> None:
        async with served(ServerConfig(session_ttl=TTL)) as (client, service):
            sid = await session_with_a_turn(client)
            assert len(service.live) == len(service.owners) == 1
            await asyncio.sleep(TTL + 0.1)
            assert (await client.get(f"/v1/sessions/{sid}")).status_code == 404
            # forgotten by the 404 itself, before any scrape
            assert len(service.live) == len(service.owners) == service.metrics.kept_sessions == 0
            assert await gauges(client) == (0, 0)

    asyncio.run(main())


def test_an_expired_session_nobody_asks_for_is_neither_active_nor_kept() -> None:
    async def main() -> None:
        async with served(ServerConfig(session_ttl=TTL)) as (client, _service):
            await session_with_a_turn(client)
            assert await gauges(client) == (1, 1)
            await asyncio.sleep(TTL + 0.1)
            assert await gauges(client) == (0, 0)

    asyncio.run(main())


def test_the_purge_loop_drops_the_expired_kept_sessions() -> None:
    async def main() -> None:
        async with served(ServerConfig(session_ttl=TTL), purge_every=0.05) as (client, service):
            await session_with_a_turn(client)
            assert len(service.live) == service.metrics.kept_sessions == 1
            for _ in range(100):  # the loop's rounds, with no request
                await asyncio.sleep(0.05)
                if not len(service.live):
                    break
            assert len(service.live) == service.metrics.kept_sessions == 0

    asyncio.run(main())


# ---------------------------------------------------------------- model calls that fail


def test_a_failed_model_call_is_counted_apart_from_the_answered_ones() -> None:
    def answer(messages: list[Message], info: FunctionInfo) -> str:
        if messages[-1].content == "fail":
            raise ModelError("the provider is down")
        return "Hello."

    async def main() -> None:
        async with served(ServerConfig(), model=FunctionModel(answer)) as (client, _service):
            sid = await session_with_a_turn(client)
            failed = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "fail"})
            assert failed.status_code == 200 and failed.json()["error"]
            text = (await client.get("/metrics")).text
            assert 'agentscript_llm_calls_total{agent="Notes"} 1' in text
            assert 'agentscript_llm_errors_total{agent="Notes"} 1' in text
            assert 'agentscript_turns_total{agent="Notes",outcome="error"} 1' in text

    asyncio.run(main())
