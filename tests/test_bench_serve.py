"""The arithmetic of ``bench/serve.py``'s report: percentiles, the two overhead readings, the
peer ratios and the CPU it reads from /proc. A wrong figure here would go into
docs/performance.md unnoticed: the bench itself has no expected output to check."""

from __future__ import annotations

import asyncio
import io
import os
import time
from contextlib import redirect_stdout
from types import ModuleType

import pytest

from fakes.bench_scripts import load_bench_script


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench_script("serve.py", "bench_serve")


def test_bench_percentile_is_the_value_at_its_rank(bench: ModuleType) -> None:
    values = [float(v) for v in range(100, 0, -1)]  # unsorted on purpose
    assert bench.pct(values, 0.5) == 51.0
    assert bench.pct(values, 0.99) == 100.0
    assert bench.pct([7.0], 0.99) == 7.0


def test_bench_overheads_charge_the_delay_strictly_and_the_traced_wait_otherwise(
    bench: ModuleType,
) -> None:
    # 105 ms turns with two 50 ms model calls that the server saw take 101 ms in all.
    measured = [(0.105, 2, 0.101)] * 10 + [(0.125, 2, 0.101)]
    got = bench.overheads(measured, 0.05)
    assert got["p50"] == pytest.approx(5.0)
    assert got["traced_p50"] == pytest.approx(4.0)
    assert got["p99"] == pytest.approx(25.0)  # the slow turn
    assert got["traced_p99"] == pytest.approx(24.0)


def row(cpu: float, db: float, tps: float, p50: float, traced: float) -> dict[str, float]:
    return {
        "cpu_ms": cpu,
        "db_cpu_ms": db,
        "tps": tps / 2,  # the whole run's rate: not the one the ratios use
        "saturated_tps": tps,
        "p50": p50,
        "traced_p50": traced,
        "open_p99": 2 * p50,
        "open_traced_p99": 2 * traced,
        "seq_cpu_ms": 1.5 * cpu,
    }


def test_bench_peer_ratios_divide_the_peers_figures_by_ours(bench: ModuleType) -> None:
    rows = {
        ("langgraph", "sqlite", 1): row(22.0, 0.0, 40, 30.0, 12.0),
        ("openai-lean", "sqlite", 1): row(2.0, 0.0, 400, 6.0, 3.0),
        ("langgraph", "postgresql", 1): row(24.0, 3.0, 30, 30.0, 12.0),
        ("openai-lean", "postgresql", 1): row(2.5, 0.5, 330, 7.5, 4.0),
        # The in-process stand-in does less work than the peer: never in the ratios.
        ("standin", "sqlite", 1): row(1.0, 0.0, 900, 1.0, 1.0),
    }
    out = io.StringIO()
    with redirect_stdout(out):
        bench.print_peer_ratios(rows, {"p50": 2.0, "p99": 9.0, "cpu_ms": 0.6})
    lines = [line for line in out.getvalue().splitlines() if line.startswith("| openai")]
    assert len(lines) == 2
    sqlite, postgresql = (line.split(" | ") for line in lines)
    assert sqlite[3:6] == ["22.0, 2.0, 11.0x", "(same)", "40, 400, 10.0x"]
    assert sqlite[6:9] == ["30.0, 6.0, 5.0x", "12.0, 3.0, 4.0x", "33.0, 3.0, 11.0x"]
    # PostgreSQL: the second cell adds each side's database CPU (27 / 3).
    assert postgresql[3:6] == ["24.0, 2.5, 9.6x", "27.0, 3.0, 9.0x", "30, 330, 11.0x"]
    assert postgresql[9:] == ["60.0, 15.0", "24.0, 8.0 |"]
    assert "standin" not in out.getvalue()
    # Beside each peer server: a tenth of its one-at-a-time p50, and the relay floor.
    assert (
        "One turn at a time (sqlite, 1 worker(s)): 10x the peer's strict p50 is 3.00 ms; "
        "the relay floor is 2.00 ms (15.0x the peer's)." in out.getvalue()
    )


def test_bench_relay_floor_makes_two_model_calls_a_turn(
    bench: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentscript.server.standin import StandInServer

    monkeypatch.setattr(bench, "quiet_collector", lambda: None)  # no gc.freeze in the suite
    with StandInServer() as model:
        floor = bench.relay_floor(model.base_url, 0.0, turns=10)
        # 20 warm-up turns and 10 measured, each relayed as two calls, answered 200.
        assert model.requests == 2 * 30
    assert set(floor) == {"p50", "p99", "cpu_ms"}
    assert 0 < floor["p50"] <= floor["p99"]


def test_bench_saturated_rate_counts_turns_between_the_ramp_and_the_drain(
    bench: ModuleType,
) -> None:
    # 128 turns done 0.3 s in, 2,128 when the last session was handed out 4.3 s in.
    assert bench.saturated_rate(400.0, (0.3, 128), (4.3, 2_128)) == pytest.approx(500.0)
    # A run too short for a saturated stretch (or one that never ramped) keeps the whole rate.
    assert bench.saturated_rate(400.0, (0.3, 128), (0.4, 200)) == 400.0
    assert bench.saturated_rate(400.0, None, (4.3, 2_128)) == 400.0
    assert bench.saturated_rate(400.0, (0.3, 128), None) == 400.0


def test_bench_reads_the_cpu_of_the_processes_it_asks_for(bench: ModuleType) -> None:
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:  # some CPU of this process to read
        pass
    mine = os.times()
    read = bench.processes_cpu(lambda pid, _fields: pid == str(os.getpid()))
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert read == pytest.approx(mine.user + mine.system, abs=3 * tick)
    assert bench.group_cpu(os.getpgrp()) >= read
    # No database, or one no backend serves: nothing to count.
    assert bench.database_cpu(None) == 0.0
    assert bench.database_cpu("agentscript_no_such_database") == 0.0


def test_bench_reads_a_chunked_stream_whole_and_its_turn_event(bench: ModuleType) -> None:
    # A streamed turn as uvicorn sends it: chunked, the events split across chunks anyhow.
    events = (
        b'event: token\ndata: {"text":"hi"}\n\n'
        b'event: step\ndata: {"type":"x"}\n\n'
        b'event: turn\ndata: {"turn":3,"error":null}\n\n'
    )
    pieces = [events[:10], events[10:57], events[57:]]
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    answer = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"transfer-encoding: chunked\r\n\r\n" + chunked
    )

    async def read() -> tuple[int, bytes, bytes]:
        reader = asyncio.StreamReader()
        reader.feed_data(answer + b"HTTP/1.1 200 OK\r\n")  # the next answer on the connection
        writer = Sink()
        status, body = await bench.exchange(reader, writer, b"request")
        return status, body, await reader.read(8)

    status, body, rest = asyncio.run(read())
    assert (status, body) == (200, events)
    assert rest == b"HTTP/1.1"  # read to the end of this answer, never past it
    assert bench.turn_json(body) == {"turn": 3, "error": None}
    failed = b'event: token\ndata: {"text":"a"}\n\nevent: error\ndata: {"code":"busy"}\n\n'
    assert bench.turn_json(failed) == {"error": {"code": "busy"}}
    assert bench.turn_json(b'event: token\ndata: {"text":"a"}\n\n') is None  # cut short


class Sink:
    """A stand-in for asyncio.StreamWriter: takes the request and keeps nothing."""

    def write(self, data: bytes) -> None:
        pass
