"""Issue 10: the action pool hands a sync call to a kept worker and, for up to ``loop_wait``,
waits for it on the loop's own thread (a quick action costs one hand-off, no trip through the
event loop); a slower call is then awaited as a future so other tasks run meanwhile. These tests
pin that contract: which path a call takes, that results, errors and timeouts survive both
paths and the race between them, and the ``loop_wait_ms`` setting."""

from __future__ import annotations

import asyncio
import functools
import threading
from pathlib import Path

import pytest

from agentscript.actions.settings import ActionConfigError, parse_settings
from agentscript.actions.threads import DEFAULT_LOOP_WAIT, ActionThreads


async def ticks_while(pool: ActionThreads, call: object, *, wait: float) -> tuple[object, int]:
    """Run ``call`` on ``pool`` while another task counts the loop iterations it gets."""
    ticks = 0
    stop = asyncio.Event()

    async def count() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0)

    counter = asyncio.create_task(count())
    await asyncio.sleep(0)  # the counter starts
    ticks = 0
    loop = asyncio.get_running_loop()
    try:
        result = await pool.run(call, deadline=loop.time() + 30, wait=wait)  # type: ignore[arg-type]
    finally:
        stop.set()
        await counter
    return result, ticks


def test_a_quick_sync_action_is_answered_without_yielding_to_the_loop() -> None:
    pool = ActionThreads(2)
    gate = threading.Event()

    def quick() -> str:
        gate.wait(0.05)  # slow enough that a yielding caller would let the counter run
        return "done"

    result, ticks = asyncio.run(ticks_while(pool, quick, wait=30))
    assert result == "done"
    assert ticks == 0  # the loop's thread waited for the call itself


def test_an_action_slower_than_the_loop_wait_lets_other_tasks_run() -> None:
    pool = ActionThreads(2)

    def slow() -> str:
        threading.Event().wait(0.2)
        return "late"

    result, ticks = asyncio.run(ticks_while(pool, slow, wait=0.001))
    assert result == "late"
    assert ticks > 0


def test_loop_wait_zero_always_yields_to_the_loop() -> None:
    pool = ActionThreads(2)

    def slow() -> int:
        threading.Event().wait(0.05)
        return 7

    result, ticks = asyncio.run(ticks_while(pool, slow, wait=0))
    assert result == 7 and ticks > 0


@pytest.mark.parametrize("wait", [30.0, 0.0, 1e-6])
def test_an_exception_reaches_the_caller_on_either_path(wait: float) -> None:
    pool = ActionThreads(2)

    def broken() -> None:
        raise SystemExit(3)  # handed over, never raised in the worker

    async def main() -> None:
        loop = asyncio.get_running_loop()
        with pytest.raises(SystemExit):
            await pool.run(broken, deadline=loop.time() + 30, wait=wait)

    asyncio.run(main())


def test_results_survive_the_race_between_the_wait_and_the_switch_to_a_future() -> None:
    """A wait of a microsecond ends at about the time the worker finishes: every outcome must
    arrive exactly once, whichever side wins."""
    pool = ActionThreads(4)

    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        squares = []
        for n in range(400):
            square = functools.partial(pow, n, 2)
            squares.append(await pool.run(square, deadline=loop.time() + 30, wait=1e-6))
        return squares

    assert asyncio.run(main()) == [n * n for n in range(400)]


def test_a_deadline_shorter_than_the_loop_wait_still_times_out_and_the_call_is_dropped() -> None:
    pool = ActionThreads(1)
    release = threading.Event()
    finished: list[str] = []

    def hang() -> str:
        release.wait(30)
        finished.append("hang")
        return "too late"

    async def main() -> None:
        loop = asyncio.get_running_loop()
        with pytest.raises(TimeoutError):
            await pool.run(hang, deadline=loop.time() + 0.05, wait=30)

    try:
        asyncio.run(main())
    finally:
        release.set()


def test_the_default_loop_wait_is_one_millisecond_and_configurable() -> None:
    assert DEFAULT_LOOP_WAIT == 0.001
    assert parse_settings({}).loop_wait == DEFAULT_LOOP_WAIT
    assert parse_settings({"actions": {"loop_wait_ms": 0}}).loop_wait == 0
    assert parse_settings({"actions": {"loop_wait_ms": 2.5}}).loop_wait == 0.0025


@pytest.mark.parametrize("value", [-1, 1001, "1", True])
def test_a_bad_loop_wait_is_an_error_naming_the_key(value: object, tmp_path: Path) -> None:
    with pytest.raises(ActionConfigError, match="loop_wait_ms must be a number of milliseconds"):
        parse_settings({"actions": {"loop_wait_ms": value}}, where=str(tmp_path / "a.toml"))
