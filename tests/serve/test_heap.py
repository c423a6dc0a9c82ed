"""A finished turn is freed by reference counting alone (no reference cycles), and ``serve``
exempts its start-up objects from the cycle collector: the collector's full passes were most of
serve's p99 (issue 11, docs/performance.md)."""

from __future__ import annotations

import asyncio
import gc
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2 as httpx
from tests.fakes.tour import AGENT, TURNS

import agentscript
from agentscript.models.scripted import ScriptedModel
from agentscript.server.config import ServerConfig
from agentscript.server.heap import YOUNG_THRESHOLD
from agentscript.store import MemoryStore

from .harness import NOTES, api, new_session


@contextmanager
def cyclic_garbage() -> Iterator[Counter[str]]:
    """Counts, by type, the objects of agentscript's own classes that only the cycle collector
    could free. (Other libraries' garbage is left out: an event loop of a thread an earlier test
    ended, say, can become garbage while this runs.)"""
    found: Counter[str] = Counter()
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield found
        gc.collect()
        found.update(
            type(o).__qualname__ for o in gc.garbage if type(o).__module__.startswith("agentscript")
        )
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def test_turns_with_tool_calls_subagents_and_transitions_leave_no_reference_cycles(
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.agent"
    path.write_text(AGENT, encoding="utf-8")
    agent = agentscript.load(path)
    model = ScriptedModel()
    with cyclic_garbage() as garbage:
        session = agent.session(model=model, actions={"lookup": lambda ref: {"status": ref}})
        for moves in TURNS:
            model.begin_turn(moves)
            assert session.send("next").error is None
        del session
    assert garbage == Counter()


def test_served_turns_leave_no_reference_cycles(tmp_path: Path) -> None:
    async def main() -> None:
        config = ServerConfig(rate_limit=0)
        async with api(f"sqlite:///{tmp_path}/s.db", config=config) as client:
            sid = await new_session(client)
            await client.post(f"/v1/sessions/{sid}/messages", json={"text": "warm up"})
            with cyclic_garbage() as garbage:
                for n in range(5):
                    r = await client.post(f"/v1/sessions/{sid}/messages", json={"text": f"m{n}"})
                    assert r.status_code == 200 and r.json()["error"] is None, r.text
            assert garbage == Counter()

    asyncio.run(main())


def test_freeze_heap_exempts_start_up_objects_and_spaces_young_collections() -> None:
    from agentscript.server.agents import load_agents, serve_agents
    from agentscript.server.app import create_app
    from agentscript.server.standin import StandInModel

    async def start(freeze: bool) -> int:
        agents = load_agents([NOTES])
        served = serve_agents(agents, {a.name: StandInModel() for a in agents})
        app = create_app(served, MemoryStore(), purge_every=None, freeze_heap=freeze)
        transport = httpx.ASGITransport(app=app)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://t") as client,
        ):
            assert (await client.get("/healthz")).status_code == 200
            return gc.get_freeze_count()

    thresholds = gc.get_threshold()
    try:
        assert asyncio.run(start(False)) == 0
        assert gc.get_threshold() == thresholds
        assert asyncio.run(start(True)) > 10_000  # the app, FastAPI, pydantic, the agents
        assert gc.get_threshold() == (YOUNG_THRESHOLD, *thresholds[1:])
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
