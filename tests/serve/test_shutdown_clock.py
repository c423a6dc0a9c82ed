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
