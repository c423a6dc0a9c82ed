"""``agentscript serve`` under a load held for a while: do turns/s and the store's files hold steady?

The closed loop of ``bench/serve.py`` lasts a few seconds a row, too short to show what only
builds up: a log that is never restarted (SQLite's WAL grew by 47 MB a second at saturation
until session 10, and turns got slower as it grew), tables that bloat, caches that fill. This
script keeps one server busy for ``--seconds`` with ``--clients`` clients, each making a session
and sending it 5 turns, again and again, and prints every ``--window`` seconds the turns/s of
that window, the server's CPU per turn (every thread of it, the SQLite checkpointer's
included) and the size of the store on disk (SQLite: the database file and its WAL;
PostgreSQL: the database). The reference is the run's own first window: the last line gives
the last window's turns/s as a ratio of the first's. After the run it prints the store's size a
turn at rest (its logs folded in): the disk a deployment needs per turn it keeps.

    .venv/bin/python bench/sustained.py                       # SQLite and PostgreSQL, 40 s each
    .venv/bin/python bench/sustained.py --stores sqlite --seconds 120

The model is the in-process stand-in (no model client, no delay), so the server and its store
are what saturates: a cheaper turn than a deployment's, whose model client adds CPU per turn,
so there the log grows more slowly than here; the server gets core 0 and this load generator the others, as in
``bench/serve.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
import time
from pathlib import Path

import httpx2 as httpx

import serve as bench
from common import machine


def store_bytes(store: str) -> dict[str, int]:
    """Sizes on disk of the store behind ``store`` (a sqlite:/// or postgresql:// URL)."""
    if store.startswith("sqlite:///"):
        path = Path(store.removeprefix("sqlite:///"))
        wal = Path(f"{path}-wal")
        return {"db": path.stat().st_size, "wal": wal.stat().st_size if wal.exists() else 0}
    import psycopg

    with psycopg.connect(store) as conn:
        row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    return {"db": int(row[0]) if row else 0}


def at_rest(store: str) -> str:
    """What the store holds a turn once the run is over and its logs are folded in (SQLite: a
    checkpoint that empties the WAL; PostgreSQL: a VACUUM, then its tables, indexes and TOAST):
    the disk a deployment needs per turn it keeps."""
    if store.startswith("sqlite:///"):
        import sqlite3

        path = store.removeprefix("sqlite:///")
        with contextlib.closing(sqlite3.connect(path)) as db:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            turns = db.execute("SELECT COUNT(*) FROM agentscript_turns").fetchone()[0]
        size = Path(path).stat().st_size
        where = "the database file after a checkpoint"
    else:
        import psycopg

        with psycopg.connect(store, autocommit=True) as conn:
            conn.execute("VACUUM")
            turns = conn.execute("SELECT COUNT(*) FROM agentscript_turns").fetchone()[0]
            row = conn.execute(
                "SELECT SUM(pg_total_relation_size(oid)) FROM pg_class "
                "WHERE relkind = 'r' AND relname LIKE 'agentscript%'"
            ).fetchone()
        size = int(row[0] or 0)
        where = "its tables, indexes and TOAST after a VACUUM"
    return (
        f"at rest: {size / 1e6:.1f} MB for {turns:,} turns, {size / max(1, turns) / 1e3:.2f} kB "
        f"a turn ({where})"
    )


async def hold(
    url: str, store: str, seconds: float, clients: int, window: float, pgid: int
) -> list[float]:
    """Turns/s of each window while ``clients`` keep the server busy; prints a line each."""
    poster = bench.TurnPoster(url)
    stop = time.monotonic() + seconds
    turns = errors = 0
    rates: list[float] = []
    async with httpx.AsyncClient(timeout=60) as client:

        async def worker() -> None:
            nonlocal turns, errors
            while time.monotonic() < stop:
                (sid,) = await bench.new_sessions(client, url, 1)
                for _ in range(5):
                    _elapsed, ok = await bench.one_turn(poster, sid)
                    turns += ok
                    errors += not ok

        async def report() -> None:
            started = time.monotonic()
            done = 0
            cpu = bench.group_cpu(pgid)
            while time.monotonic() < stop:
                await asyncio.sleep(window)
                rates.append((turns - done) / window)
                used, cpu = bench.group_cpu(pgid) - cpu, bench.group_cpu(pgid)
                cpu_ms = used / max(1, turns - done) * 1000
                done = turns
                sizes = await asyncio.to_thread(store_bytes, store)
                shown = "  ".join(f"{name} {size / 1e6:7.1f} MB" for name, size in sizes.items())
                print(
                    f"| {time.monotonic() - started:5.0f} s | {rates[-1]:6.0f} | {cpu_ms:.2f} "
                    f"| {errors} | {shown} |",
                    flush=True,
                )

        await asyncio.gather(report(), *(worker() for _ in range(clients)))
    poster.close()
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", default="sqlite,postgresql")
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--window", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=32)
    args = parser.parse_args()
    usable = os.sched_getaffinity(0)
    server_cpus = {min(usable)} if len(usable) > 1 else None
    if server_cpus:
        os.sched_setaffinity(0, usable - server_cpus)
    print(f"# bench/sustained.py — {machine()}")
    print(
        f"# {args.clients} clients, each a session and 5 turns after another, for "
        f"{args.seconds:.0f} s; in-process stand-in model; turns/s and store size every "
        f"{args.window:.0f} s"
    )
    with tempfile.TemporaryDirectory() as tmp:
        agent = bench.write_agent(Path(tmp) / "agent")
        for store_kind in args.stores.split(","):
            if store_kind == "postgresql" and not bench.pg_available():
                print(f"\n## postgresql: skipped, no server at {bench.PG}")
                continue
            name = f"agentscript_sustained_{os.getpid()}"
            store = (
                f"sqlite:///{tmp}/sustained.db"
                if store_kind == "sqlite"
                else bench.pg_database(name, True)
            )
            print(
                f"\n## {store_kind}\n\n| time | turns/s | CPU ms/turn | errors | store on disk |\n|---|---|---|---|---|"
            )
            try:
                server, _start = bench.start_server(
                    "standin", agent, store, 1, None, server_cpus, max_turns=128
                )
                try:
                    rates = asyncio.run(
                        hold(
                            server.url,
                            store,
                            args.seconds,
                            args.clients,
                            args.window,
                            server.proc.pid,
                        )
                    )
                finally:
                    server.stop()
                print(f"\n{at_rest(store)}")
            finally:
                if store_kind == "postgresql":
                    bench.pg_database(name, False)
            if len(rates) >= 2 and rates[0]:
                print(f"\nlast window / first: {rates[-1] / rates[0]:.2f}")


if __name__ == "__main__":
    main()
