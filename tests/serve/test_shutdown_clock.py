"""The shutdown grace counts once (server/shutdown.py): what uvicorn's wait for the connections
left of it goes to the app's wait for its streamed turns; a server started later in the same
process starts with the whole grace again."""

from __future__ import annotations

import time

import pytest

from agentscript.server.shutdown import ShutdownClock


@pytest.fixture(autouse=True)
def _clean_clock() -> None:
    ShutdownClock.reset()


def test_the_whole_grace_is_left_until_a_shutdown_begins() -> None:
    assert ShutdownClock.left(25.0) == 25.0


def test_what_is_left_counts_from_the_first_mark() -> None:
    ShutdownClock.mark()
    first = ShutdownClock.began
    time.sleep(0.05)
    ShutdownClock.mark()  # every open connection marks it: the first one counts
    assert ShutdownClock.began == first
    assert ShutdownClock.left(1.0) <= 0.95  # the time since the first mark is gone
    assert 0.0 < ShutdownClock.left(3600.0) < 3600.0
    assert ShutdownClock.left(0.01) == 0.0


def test_a_server_starting_forgets_an_earlier_shutdown_in_its_process() -> None:
    ShutdownClock.mark()
    ShutdownClock.reset()  # what the app's start-up does
    assert ShutdownClock.left(25.0) == 25.0


def test_a_stop_at_once_leaves_nothing_of_the_grace() -> None:
    ShutdownClock.end()  # a second Ctrl-C (server/runner.py)
    assert ShutdownClock.left(25.0) == 0.0
    ShutdownClock.mark()  # a connection told afterwards gives none of it back
    assert ShutdownClock.left(25.0) == 0.0


def test_the_wait_for_streamed_turns_ends_when_a_stop_at_once_comes_during_it() -> None:
    import asyncio

    from agentscript.server.config import ServerConfig
    from agentscript.server.metrics import Metrics
    from agentscript.server.service import SessionService
    from agentscript.store import store_from_url

    async def scenario() -> tuple[int, bool]:
        service = SessionService({}, store_from_url("memory://"), ServerConfig(), Metrics())
        turn = asyncio.create_task(asyncio.sleep(3600))  # a streamed turn whose client left
        service.background.add(turn)
        waiting = asyncio.create_task(service.finish_turns(25.0))
        await asyncio.sleep(0.3)
        assert not waiting.done()  # the grace is not over
        ShutdownClock.end()
        cut = await asyncio.wait_for(waiting, 5.0)  # not the 25 s grace
        return cut, turn.cancelled()

    assert asyncio.run(scenario()) == (1, True)
