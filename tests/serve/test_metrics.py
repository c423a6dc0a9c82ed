"""The process metrics forget sessions whose last turn left the active window as turns come,
whether or not anything reads ``/metrics``."""

from __future__ import annotations

import pytest

from agentscript.server import metrics as metrics_module
from agentscript.server.metrics import ACTIVE_WINDOW, Metrics

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
