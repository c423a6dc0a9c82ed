"""The server's main loop wakes once a second, not ten times, and at once when told to stop
(server/runner.py): an idle server no longer polls, and a stop does not wait for the tick."""

from __future__ import annotations

import asyncio
import threading

import pytest
import uvicorn

from agentscript.server import runner
from agentscript.server.runner import SignalledServer


def _server() -> SignalledServer:
    return SignalledServer(uvicorn.Config(lambda *_: None))


def test_the_main_loop_stops_at_once_when_should_exit_is_set_from_another_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a tick of an hour, only the wake-up can end the loop: a loop that still polled
    (or slept its tick out) would hold the test until its guard fails it."""
    monkeypatch.setattr(runner, "TICK", 3600.0)
    server = _server()
    ticks: list[int] = []

    async def on_tick(counter: int) -> bool:
        ticks.append(counter)
        if len(ticks) == 1:
            threading.Timer(0.05, lambda: setattr(server, "should_exit", True)).start()
        return server.should_exit

    monkeypatch.setattr(server, "on_tick", on_tick)

    async def body() -> None:
        await asyncio.wait_for(server.main_loop(), timeout=30)

    asyncio.run(body())
    assert ticks == [0, 10]  # the first look, and the one the stop woke


def test_a_signal_wakes_the_main_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """``handle_exit`` (SIGTERM) sets ``should_exit``: the loop ends without its tick."""
    monkeypatch.setattr(runner, "TICK", 3600.0)
    server = _server()
    looks = 0

    async def on_tick(counter: int) -> bool:
        nonlocal looks
        looks += 1
        return server.should_exit

    monkeypatch.setattr(server, "on_tick", on_tick)

    async def body() -> None:
        task = asyncio.ensure_future(server.main_loop())
        await asyncio.sleep(0.05)
        server.handle_exit(15, None)
        await asyncio.wait_for(task, timeout=30)

    asyncio.run(body())
    assert looks == 2 and server.should_exit and not server.force_exit


def test_every_look_writes_the_date_header() -> None:
    """uvicorn writes the Date header when its counter is a multiple of ten: the loop counts
    in tens, so the header is as fresh as the tick (a second)."""
    server = _server()
    seen: list[int] = []

    async def on_tick(counter: int) -> bool:
        seen.append(counter)
        return len(seen) == 3

    server.on_tick = on_tick  # type: ignore[method-assign]
    runner_tick, runner.TICK = runner.TICK, 0.001
    try:
        asyncio.run(server.main_loop())
    finally:
        runner.TICK = runner_tick
    assert all(counter % runner.TICKS_PER_HEADER == 0 for counter in seen) and len(seen) == 3


def test_should_exit_set_before_the_loop_runs_needs_no_loop() -> None:
    server = _server()
    server.should_exit = True  # no loop yet: nothing to wake, no error
    assert server.should_exit
