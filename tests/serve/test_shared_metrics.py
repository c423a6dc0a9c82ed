"""``--workers N``: ``/metrics`` sums every worker's figures (server/sharedmetrics.py), and a
worker that ended leaves its counters counted and its gauges gone. The real processes are in
test_shared_metrics_workers.py."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import httpx2 as httpx
import pytest

from agentscript.server import sharedmetrics
from agentscript.server.agents import load_agents, serve_agents
from agentscript.server.app import create_app
from agentscript.server.auth import ApiKeys
from agentscript.server.metrics import BUCKETS, COUNTERS, HISTOGRAMS, Metrics
from agentscript.server.sharedmetrics import DEPARTED, MetricsDir, SharedMetrics
from agentscript.server.standin import StandInModel
from agentscript.store import store_from_url

from .harness import NOTES


def worker(turns: int, seconds: float, *, agent: str = "A", busy: int = 0) -> Metrics:
    """A worker's figures after ``turns`` turns of ``seconds`` each, ``busy`` turns running."""
    metrics = Metrics()
    for n in range(turns):
        metrics.turn(agent, f"{agent}-{n}", seconds, {"usage": {"llm_ms": 1.0, "llm_calls": 2}})
        metrics.http[("POST", 200)] += 1
    metrics.in_progress = busy
    metrics.kept_sessions = turns
    return metrics


def samples(text: str) -> dict[str, float]:
    """Each sample line of a Prometheus text, by name and labels."""
    found = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            found[name] = float(value)
    return found


def snapshot(directory: Path, name: str, metrics: Metrics) -> None:
    (directory / name).write_text(json.dumps(metrics.to_json()))


def test_counters_and_gauges_of_every_worker_are_summed_from_their_snapshots(
    tmp_path: Path,
) -> None:
    snapshot(tmp_path, "101-aa.json", worker(3, 0.02, busy=1))
    snapshot(tmp_path, "102-bb.json", worker(4, 0.02, agent="B"))
    mine = SharedMetrics(worker(2, 0.02, busy=2), tmp_path)
    seen = samples(mine.render())
    assert seen['agentscript_turns_total{agent="A",outcome="ok"}'] == 5
    assert seen['agentscript_turns_total{agent="B",outcome="ok"}'] == 4
    assert seen['agentscript_llm_calls_total{agent="A"}'] == 10
    assert seen['agentscript_http_requests_total{method="POST",status="200"}'] == 9
    assert seen["agentscript_turns_in_progress"] == 3
    assert seen["agentscript_kept_sessions"] == 9
    assert seen["agentscript_active_sessions"] == 9
    # its own figures are read live, never from its own snapshot (written by the scrape)
    assert (tmp_path / mine.name).exists()


def test_every_counter_and_histogram_goes_through_a_snapshot_whole() -> None:
    figures = worker(2, 0.02)
    figures.tokens[("A", "output")] += 7
    figures.action_errors["A"] += 1
    figures.llm_errors["A"] += 4
    figures.refusals["A"] += 2
    figures.session_loads["restored"] += 3
    # the table names every counter and histogram Metrics has, so none is left out of a sum
    counters = {k for k, v in vars(figures).items() if isinstance(v, Counter)}
    assert counters == {name for name, _ in COUNTERS}
    histograms = {
        k for k, v in vars(figures).items() if isinstance(v, dict) and k.endswith("_time")
    }
    assert histograms == set(HISTOGRAMS)
    back = Metrics.from_json(json.loads(json.dumps(figures.to_json())))
    for name, _ in COUNTERS:
        assert getattr(back, name) == getattr(figures, name), name
        assert getattr(back, name), name  # each was set above, so the test compares something
    assert back.render() == figures.render()
    row = figures.to_json()
    row["http"] = [["POST", 200]]  # a row without its count
    with pytest.raises(ValueError, match="http row of 1 key parts, not 2"):
        Metrics.from_json(row)


def test_summed_histograms_stay_cumulative_with_inf_equal_to_count(tmp_path: Path) -> None:
    snapshot(tmp_path, "101-aa.json", worker(3, 0.003))
    snapshot(tmp_path, "102-bb.json", worker(2, 0.7))
    seen = samples(SharedMetrics(worker(4, 20.0), tmp_path).render())
    name = "agentscript_turn_seconds"
    counts = [seen[f'{name}_bucket{{agent="A",le="{bound:g}"}}'] for bound in BUCKETS]
    assert counts == sorted(counts)  # cumulative
    assert counts[0] == 3 and counts[BUCKETS.index(1.0)] == 5 and counts[-1] == 9
    assert seen[f'{name}_bucket{{agent="A",le="+Inf"}}'] == seen[f'{name}_count{{agent="A"}}'] == 9
    assert math.isclose(seen[f'{name}_sum{{agent="A"}}'], 3 * 0.003 + 2 * 0.7 + 4 * 20.0)


def test_a_departed_workers_counters_stay_counted_and_its_gauges_are_dropped(
    tmp_path: Path,
) -> None:
    snapshot(tmp_path, "101-aa.json", worker(3, 0.02, busy=1))
    mine = SharedMetrics(worker(2, 0.02), tmp_path)
    before = samples(mine.render())
    MetricsDir(tmp_path).fold(101)
    assert not (tmp_path / "101-aa.json").exists()
    after = samples(mine.render())
    assert after['agentscript_turns_total{agent="A",outcome="ok"}'] == 5
    assert after == before | {
        "agentscript_turns_in_progress": 0,
        "agentscript_kept_sessions": 2,
        "agentscript_active_sessions": 2,
    }


def test_a_snapshot_folded_but_not_yet_removed_is_counted_once(tmp_path: Path) -> None:
    # The supervisor folds, then removes: a scrape in between reads both.
    snapshot(tmp_path, "101-aa.json", worker(3, 0.02))
    snapshot(tmp_path, "102-bb.json", worker(1, 0.02))
    supervisor = MetricsDir(tmp_path)
    supervisor.fold(101)
    snapshot(tmp_path, "101-aa.json", worker(3, 0.02))  # as read before its removal
    supervisor.fold(102)  # a second worker that ended: both stay in the total, once each
    assert json.loads((tmp_path / DEPARTED).read_text())["folded"] == ["101-aa.json", "102-bb.json"]
    seen = samples(SharedMetrics(worker(2, 0.02), tmp_path).render())
    assert seen['agentscript_turns_total{agent="A",outcome="ok"}'] == 6


def test_an_unreadable_snapshot_is_left_out_with_a_line_and_the_scrape_answers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "101-aa.json").write_text('{"format": "other"}')
    seen = samples(SharedMetrics(worker(2, 0.02), tmp_path).render())
    assert seen['agentscript_turns_total{agent="A",outcome="ok"}'] == 2
    assert "101-aa.json cannot be read, left out" in caplog.text


@pytest.mark.parametrize(
    "damage",
    [
        lambda path: path.write_text('{"format": '),  # cut short
        lambda path: path.write_text('{"folded": 3}'),
        lambda path: path.mkdir(),  # read_text: an OSError
    ],
    ids=["cut-short", "folded-not-a-list", "unreadable"],
)
def test_a_damaged_departed_total_is_left_out_with_a_line_and_the_scrape_answers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: Callable[[Path], object]
) -> None:
    snapshot(tmp_path, "101-aa.json", worker(3, 0.02))
    damage(tmp_path / DEPARTED)
    with caplog.at_level(logging.ERROR, logger="agentscript.server"):
        seen = samples(SharedMetrics(worker(2, 0.02), tmp_path).render())
    assert seen['agentscript_turns_total{agent="A",outcome="ok"}'] == 5  # the live figures
    (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert f"{DEPARTED} cannot be read, left out" in line


def test_a_turn_writes_no_file_and_a_scrape_and_the_shutdown_write_the_workers_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sharedmetrics, "WRITE_EVERY", 3600.0)  # no background write here

    async def main() -> None:
        agents = load_agents([NOTES])
        served = serve_agents(agents, {a.name: StandInModel() for a in agents})
        app = create_app(
            served,
            store_from_url("memory://"),
            keys=ApiKeys.of(),
            purge_every=None,
            metrics_dir=str(tmp_path),
        )
        transport = httpx.ASGITransport(app=app)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://test") as client,
        ):
            made = await client.post("/v1/agents/Notes/sessions", json={})
            sid = made.json()["session_id"]
            sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "hi"})
            assert sent.status_code == 200
            assert list(tmp_path.iterdir()) == []  # the turn wrote nothing
            assert (await client.get("/metrics")).status_code == 200
            (written,) = tmp_path.iterdir()
            figures = Metrics.from_json(json.loads(written.read_text()))
            assert figures.turns[("Notes", "ok")] == 1
            await client.post(f"/v1/sessions/{sid}/messages", json={"text": "again"})
        # the shutdown wrote the last turn's figures
        figures = Metrics.from_json(json.loads(written.read_text()))
        assert figures.turns[("Notes", "ok")] == 2

    asyncio.run(main())


def test_the_supervisors_directory_is_private_and_removed(tmp_path: Path) -> None:
    created = MetricsDir.create()
    try:
        assert created.path.stat().st_mode & 0o777 == 0o700
    finally:
        created.remove()
    assert not created.path.exists()


def test_a_new_supervisor_removes_the_directories_of_supervisors_that_died(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sharedmetrics.tempfile, "tempdir", str(tmp_path))
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    dead = tmp_path / f"agentscript-metrics-{gone.stdout.strip()}-abc123"
    dead.mkdir()
    (dead / "1-x.json").write_text("{}")
    alive = tmp_path / f"agentscript-metrics-{os.getpid()}-def456"  # a running server's
    alive.mkdir()
    other = tmp_path / "agentscript-metrics-notapid-x"
    other.mkdir()
    created = MetricsDir.create()
    try:
        assert created.path.parent == tmp_path
        assert created.path.name.startswith(f"agentscript-metrics-{os.getpid()}-")
        assert not dead.exists() and alive.exists() and other.exists()
    finally:
        created.remove()
