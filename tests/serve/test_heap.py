"""A finished turn is freed by reference counting alone (no reference cycles), and ``serve``
exempts its start-up objects from the cycle collector: the collector's full passes were most of
serve's p99 (issue 11, docs/performance.md)."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2 as httpx
import pytest
from tests.fakes.tour import AGENT, TURNS

import agentscript
from agentscript.models.scripted import ScriptedModel
from agentscript.server.config import ServerConfig
from agentscript.server.heap import (
    COUNT_EVERY,
    YOUNG_THRESHOLD,
    SurvivorFreezer,
    memory_gauge,
    resident_memory,
)
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


@contextmanager
def collector_held() -> Iterator[None]:
    """No automatic collection while the test looks at generations; nothing left frozen after."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.enable()


def in_generations(obj: object) -> bool:
    return any(o is obj for generation in range(3) for o in gc.get_objects(generation))


def test_survivor_freezer_freezes_the_heap_every_n_kept_sessions() -> None:
    freezer = SurvivorFreezer(every=3, measure=lambda: 0)
    with collector_held():
        survivor: list[object] = []  # a tracked object, in the young generation
        assert in_generations(survivor)
        freezer.kept()
        freezer.kept()
        assert in_generations(survivor) and freezer.freezes == 0
        freezer.kept()
        # Frozen: no collection walks it again.
        assert not in_generations(survivor) and freezer.freezes == 1
        freezer.kept()
        assert freezer.freezes == 1


class Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cycle collector frees it


def test_survivor_freezer_reclaims_frozen_cycles_once_memory_grows_by_the_growth() -> None:
    memory = [1_000]
    freezer = SurvivorFreezer(every=1, growth=0.25, measure=lambda: memory[0])
    with collector_held():
        freezer.kept()  # the first look: the baseline, 1,000
        node = Node()
        gone = weakref.ref(node)
        del node
        memory[0] = 1_250  # grown, but not by more than a quarter: no full pass
        freezer.kept()  # frozen with the rest
        gc.collect()
        assert gone() is not None and freezer.full_passes == 0
        memory[0] = 1_251
        freezer.kept()
        assert gone() is None and freezer.full_passes == 1
        # The next pass waits for a quarter more than what was read after this one.
        memory[0] = 1_500
        freezer.kept()
        assert freezer.full_passes == 1
        memory[0] = 1_600
        freezer.kept()
        assert freezer.full_passes == 2


def test_survivor_freezer_reads_memory_once_a_freeze_and_counts_only_as_a_fallback() -> None:
    freezer = SurvivorFreezer(every=1)
    assert freezer.measure is memory_gauge() and freezer.check_every == 1
    counting = SurvivorFreezer(every=1, measure=gc.get_freeze_count)
    assert counting.check_every == COUNT_EVERY


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads /proc (Linux)")
def test_resident_memory_is_the_memory_held_now() -> None:
    assert memory_gauge() is resident_memory
    before = resident_memory()
    block = bytearray(b"x" * (64 << 20))  # written, so resident
    held = resident_memory()
    assert held - before >= 48 << 20
    del block
    assert resident_memory() < held - (32 << 20)  # a large block goes back to the system


def test_serve_freezes_kept_sessions_and_an_embedded_app_does_not() -> None:
    from agentscript.server.agents import load_agents, serve_agents
    from agentscript.server.app import create_app
    from agentscript.server.standin import StandInModel

    async def run(freeze: bool) -> SurvivorFreezer | None:
        agents = load_agents([NOTES])
        served = serve_agents(agents, {a.name: StandInModel() for a in agents})
        config = ServerConfig(rate_limit=0)
        app = create_app(served, MemoryStore(), config=config, purge_every=None, freeze_heap=freeze)
        transport = httpx.ASGITransport(app=app)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://t") as client,
        ):
            freezer: SurvivorFreezer | None = app.state.service.live.freezer
            if freezer is not None:
                freezer.every = 4
            sid = await new_session(client)  # kept: 1
            for n in range(7):  # kept: 8
                r = await client.post(f"/v1/sessions/{sid}/messages", json={"text": f"m{n}"})
                assert r.status_code == 200 and r.json()["error"] is None, r.text
            return freezer

    thresholds = gc.get_threshold()
    try:
        assert asyncio.run(run(False)) is None
        freezer = asyncio.run(run(True))
        assert freezer is not None and freezer.freezes == 2
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
