"""Long sessions kept between turns: what a turn's lock read costs as a session's state grows.

A worker keeps the session its last turn committed (server/live.py); the next turn locks the
row, sees the revision its commit wrote and runs the kept session without reading the stored
state. Until schema version 5 it parsed the state and compared it with the kept one instead.
For states of 50 kB (a conversation of about 100 turns) to 4 MB (the history limit), on SQLite
and PostgreSQL, this prints the event-loop CPU of:

- the lock read of a kept session (take the lease, read the row without its state, as a turn
  of a kept session does, match the kept session, give the lease back), against the
  reference measured in the same run: parsing that state's stored text and comparing it with
  the kept copy, which every such read did before;
- a whole kept turn through ``SessionService`` (an instant model, the commit included).

    .venv/bin/python bench/kept.py            # SQLite, and PostgreSQL when it answers
    .venv/bin/python bench/kept.py --quick    # fewer rounds

PostgreSQL: ``AGENTSCRIPT_BENCH_PG`` (default postgresql://postgres@127.0.0.1:5432/test); a
database is created for the run and dropped after it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from agentscript import load
from agentscript.models.function import FunctionModel
from agentscript.server.agents import load_agents, serve_agents
from agentscript.server.config import ServerConfig
from agentscript.server.live import LiveSessions
from agentscript.server.metrics import Metrics
from agentscript.server.service import SessionService
from agentscript.store import SessionRecord, new_revision, store_from_url
from common import REPO, machine

PG = os.environ.get("AGENTSCRIPT_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
NOTES = str(REPO / "tests" / "serve" / "agents" / "notes" / "notes.agent")


class _Parked:
    """What the lock read hands back: only resumed and sized, never run."""

    def resume(self) -> None: ...

    def history_chars(self) -> int:
        return 0


def state_of(messages: int, chars: int) -> dict[str, Any]:
    """The Notes agent's state with ``messages`` messages of about ``chars`` characters."""
    state = load(NOTES).session(model=FunctionModel(lambda m, i: "ok")).to_json()
    words = "lorem ipsum " * (chars // 12 + 1)
    state["history"] = [
        {"role": "user" if n % 2 == 0 else "assistant", "content": f"{n} {words[:chars]}"}
        for n in range(messages)
    ]
    return state


async def best_cpu(rounds: int, step: Callable[[], Awaitable[None]]) -> float:
    """Event-loop thread CPU seconds per ``step``, the best of three runs."""
    best = float("inf")
    for _ in range(3):
        started = time.thread_time()
        for _ in range(rounds):
            await step()
        best = min(best, (time.thread_time() - started) / rounds)
    return best


async def lock_read(url: str, label: str, state: dict[str, Any], rounds: int) -> str:
    store = store_from_url(url)
    await store.open()
    try:
        record = SessionRecord(
            f"s{time.time_ns()}", "Notes", "", "v1", state, revision=new_revision()
        )
        await store.create_session(record)
        sid = record.session_id
        async with store.lock_session(sid, 5) as lock:
            revision = lock.session.revision
            text = lock.session.state_text or ""
        assert revision is not None
        live = LiveSessions(10)
        live.keep(sid, 0, "v1", _Parked(), revision)  # type: ignore[arg-type]
        kept_copy = json.loads(text)

        async def read() -> None:
            # As a turn asks for it: without the state the kept session makes useless.
            async with store.lock_session(sid, 5, kept=lambda: live.revision(sid)) as lock:
                taken = live.take(lock.session)
            assert taken is not None, "the kept session must be used"
            live.keep(sid, 0, "v1", taken, revision)

        async def parse_and_compare() -> None:
            assert json.loads(text) == kept_copy

        for _ in range(3):
            await read()
        ours = await best_cpu(rounds, read)
        reference = await best_cpu(rounds, parse_and_compare)
        return (
            f"| {url.split(':')[0]} | {label} | {len(text) / 1e6:.2f} | {ours * 1e3:.3f} "
            f"| {reference * 1e3:.3f} | {reference / ours:.2f}x |"
        )
    finally:
        await store.close()


async def kept_turn(url: str, label: str, fill: int, chars: int, rounds: int) -> str:
    agents = load_agents([NOTES])
    served = serve_agents(agents, {a.name: FunctionModel(lambda m, i: "noted") for a in agents})
    config = ServerConfig(rate_limit=0, max_message_chars=max(chars + 16, 16_000))
    store = store_from_url(url)
    await store.open()
    try:
        service = SessionService(served, store, config, Metrics())
        sid = (await service.create("", "Notes", {}))["session_id"]
        for n in range(fill):
            await service.send("", sid, f"{n} " + "x" * chars, None)
        stored = await store.get_session(sid)
        size = len(stored.state_text or "") if stored is not None else 0
        before = service.metrics.session_loads["kept"]
        count = iter(range(10**9))

        async def turn() -> None:
            await service.send("", sid, f"turn {next(count)}", None)

        for _ in range(3):
            await turn()
        took = await best_cpu(rounds, turn)
        kept = service.metrics.session_loads["kept"] - before
        assert kept == 3 + 3 * rounds, "every measured turn must run the kept session"
        return f"| {url.split(':')[0]} | {label} | {size / 1e6:.2f} | {took * 1e3:.3f} |"
    finally:
        await store.close()


def pg_url() -> str | None:
    try:
        import psycopg

        name = f"agentscript_bench_kept_{os.getpid()}"
        with psycopg.connect(PG, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f"CREATE DATABASE {name}")
    except Exception:
        return None
    return f"{PG.rsplit('/', 1)[0]}/{name}"


def drop_pg(url: str) -> None:
    import psycopg

    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {url.rsplit('/', 1)[1]} WITH (FORCE)")


async def main(quick: bool) -> None:
    scale = 4 if quick else 1
    print(f"# bench/kept.py — {machine()}")
    folder = tempfile.mkdtemp(prefix="agentscript-bench-kept-")
    urls = [f"sqlite:///{Path(folder) / 'kept.db'}"]
    pg = pg_url()
    if pg is None:
        print(f"# PostgreSQL skipped: no server at {PG}")
    else:
        urls.append(pg)
    shapes = [
        ("100 turns", state_of(100, 480), 400 // scale),
        ("2,000 messages", state_of(2000, 480), 100 // scale),
        ("10,000 short messages", state_of(10000, 80), 60 // scale),
        ("history limit", state_of(8000, 480), 30 // scale),
    ]
    try:
        print("\nLock read of a kept session, event-loop CPU ms (reference: parse + compare)\n")
        print("| store | state | MB | lock read | reference | reference / lock read |")
        print("|---|---|---|---|---|---|")
        for url in urls:
            for label, state, rounds in shapes:
                print(await lock_read(url, label, state, rounds), flush=True)
        print("\nWhole kept turns (instant model, commit included), event-loop CPU ms\n")
        print("| store | session | MB | turn |")
        print("|---|---|---|---|")
        for url in urls:
            print(await kept_turn(url, "100 turns", 100, 480, 200 // scale), flush=True)
            print(await kept_turn(url, "64 long turns", 64, 16_000, 60 // scale), flush=True)
    finally:
        if pg is not None:
            drop_pg(pg)
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (smoke run)")
    asyncio.run(main(parser.parse_args().quick))
