"""At a connection limit (a role's CONNECTION LIMIT here; the database's and the server's
max_connections refuse alike), a block of statements whose new connection is refused waits for
one of the store's own connections in use to be given back, rather than failing its request
with a 503 while those come free within milliseconds. With none in use, or none given back in
time, it fails as before, saying the database refused more connections."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from agentscript.store import StoreUnreachable
from agentscript.store.postgres import ANSWER_MARGIN, PURGE_TIMEOUT, PostgresStore

from .conftest import _admin_connect, limited_role_database
from .test_pg_row_locks import opened
from .test_store import outcome, record

# The presence and two pooled connections: a third pooled one is refused.
LIMIT = 3
# More than the role lets the store open, so that the role's limit, not the store's own
# max_connections, is what the blocks meet.
CONNECTIONS = 6
PASSWORD = "sekrit-h3"  # trust auth ignores it; it must never be shown


@pytest.fixture
def limited_dsn(pg_dsn: str) -> Iterator[str]:
    """A database owned by a role of its own that may hold LIMIT connections, with a
    password in its URL; both dropped afterwards."""
    with limited_role_database("agentscript_waiting", LIMIT, PASSWORD) as url:
        yield url


def test_blocks_beyond_the_roles_limit_wait_for_the_stores_own_connections(
    limited_dsn: str,
) -> None:
    """More blocks at once than the role lets the store connect: every read, turn and
    statement succeeds on the two connections the store could open, none is refused (503),
    and the refusing server is not asked again and again."""

    async def main() -> None:
        async with opened(limited_dsn, max_connections=CONNECTIONS) as store:
            for n in range(4):
                await store.create_session(record(f"s{n}"))
            tries = _count_connects(store)

            async def turn(sid: str) -> None:
                async with store.lock_session(sid, 10.0) as lock:
                    await lock.commit(outcome(1, 1, sid=sid))

            async with asyncio.timeout(20):
                await asyncio.gather(
                    *(store._fetch("SELECT pg_sleep(0.1)") for _ in range(4)),
                    *(store.get_session(f"s{n}") for n in range(4)),
                    *(turn(f"s{n}") for n in range(4)),
                )
            for n in range(4):
                got = await store.get_session(f"s{n}")
                assert got is not None and got.turns == 1
            assert len(store._idle) == LIMIT - 1  # the role's limit, less the presence
            # Refused once for each block that asked before the first refusal came, at most;
            # the blocks that came later queued without asking again.
            assert tries.refused < CONNECTIONS, tries.refused
            _assert_pool_at_rest(store)

    asyncio.run(main())


def test_a_refusal_with_no_connection_of_the_store_in_use_fails_at_once_and_says_so(
    limited_dsn: str,
) -> None:
    """Nothing of the store's will come back: the statement fails at once, as before
    (StoreUnreachable, a 503), saying the database refused more connections, password masked."""

    async def main() -> None:
        async with opened(limited_dsn, max_connections=CONNECTIONS) as store:
            await store.create_session(record())
            await store._flush()  # the store keeps only its presence
            async with _others(limited_dsn, LIMIT - 1):  # the rest of the role's room
                started = time.monotonic()
                with pytest.raises(StoreUnreachable) as caught:
                    await store.get_session("s1")
                assert time.monotonic() - started < 1.0
            message = str(caught.value)
            assert "the database refused more connections, and this store holds none" in message
            assert "too many connections for role" in message
            assert PASSWORD not in message and ":***@" in message
            _assert_pool_at_rest(store)
            assert await store.get_session("s1") is not None  # room again

    asyncio.run(main())


def test_a_block_waits_for_a_connection_no_longer_than_its_wait(limited_dsn: str) -> None:
    async def main() -> None:
        async with opened(limited_dsn, max_connections=CONNECTIONS) as store:
            async with _others(limited_dsn, 1):  # presence, the store's one, another client
                holder = asyncio.ensure_future(_hold(store, 3.0))
                await _until(lambda: store._lent == 1)
                started = time.monotonic()
                with pytest.raises(StoreUnreachable) as caught:
                    async with store._conn(wait=0.3):
                        pass
                assert 0.25 < time.monotonic() - started < 2.0
                message = str(caught.value)
                assert "refused more connections, and none of the 1 this store holds" in message
                assert "came free within 0.3 s" in message
                assert "too many connections for role" in message
                assert PASSWORD not in message
                await holder
            _assert_pool_at_rest(store)

    asyncio.run(main())


def test_a_block_cancelled_while_it_waits_leaves_no_slot_or_connection_behind(
    limited_dsn: str,
) -> None:
    async def main() -> None:
        async with opened(limited_dsn, max_connections=CONNECTIONS) as store:
            await store.create_session(record())
            async with _others(limited_dsn, 1):
                holder = asyncio.ensure_future(_hold(store, 0.5))
                await _until(lambda: store._lent == 1)
                waiting = asyncio.ensure_future(store.get_session("s1"))
                await _until(lambda: bool(store._queued))
                waiting.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await waiting
                assert not store._queued
                await holder
                _assert_pool_at_rest(store)
                assert len(store._idle) == 1
                assert await store.get_session("s1") is not None

    asyncio.run(main())


def test_a_block_cancelled_as_it_is_given_a_connection_passes_it_on(limited_dsn: str) -> None:
    """The connection handed to a queued block that is cancelled before it runs is not lost:
    it goes back to the pool (or to the next block queued)."""

    async def main() -> None:
        async with opened(limited_dsn, max_connections=CONNECTIONS) as store:
            await store.create_session(record())
            async with _others(limited_dsn, 1):
                async with store._conn() as conn:
                    kept = conn.info.backend_pid
                    waiting = asyncio.ensure_future(store.get_session("s1"))
                    await _until(lambda: bool(store._queued))
                # Given to the queued block; cancelled before that block ran again.
                waiting.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await waiting
                _assert_pool_at_rest(store)
                assert [c.info.backend_pid for c in store._idle] == [kept]
                assert await store.get_session("s1") is not None

    asyncio.run(main())


def test_a_connection_given_back_hung_up_makes_room_for_the_waiting_block(
    limited_dsn: str,
) -> None:
    """The server closed the connection given back (an admin, idle_session_timeout): the
    queued block does not run on it; its room at the limit is taken for a new one."""

    async def main() -> None:
        async with opened(limited_dsn, max_connections=CONNECTIONS) as store:
            await store.create_session(record())
            async with _others(limited_dsn, 1):
                async with store._conn() as conn:
                    await conn.execute("SELECT 1")
                    waiting = asyncio.ensure_future(store.get_session("s1"))
                    await _until(lambda: bool(store._queued))
                    pid = conn.info.backend_pid
                    await asyncio.to_thread(_terminate, pid)
                    await _until(lambda: _readable(conn))  # the server's goodbye is there
                async with asyncio.timeout(5):
                    got = await waiting
                assert got is not None and got.session_id == "s1"
                assert pid not in [c.info.backend_pid for c in store._idle]
                _assert_pool_at_rest(store)

    asyncio.run(main())


def test_a_lost_connection_wakes_the_blocks_waiting_for_it(limited_dsn: str) -> None:
    """A connection in use dropped by the server (a restart, an admin): the queued block tries
    for the room it left at once, rather than wait for the store's other connections."""

    async def main() -> None:
        async with opened(limited_dsn, max_connections=CONNECTIONS) as store:
            await store.create_session(record())
            pids: list[int] = []
            lost = asyncio.ensure_future(_hold(store, 5.0, pids))
            other = asyncio.ensure_future(_hold(store, 5.0, pids))
            await _until(lambda: len(pids) == 2)
            waiting = asyncio.ensure_future(store.get_session("s1"))
            await _until(lambda: bool(store._queued))
            started = time.monotonic()
            await asyncio.to_thread(_terminate, pids[0])
            async with asyncio.timeout(10):
                got = await waiting
            assert time.monotonic() - started < 3.0  # not when the other one comes free
            assert got is not None
            with pytest.raises(StoreUnreachable):
                await lost
            await other
            _assert_pool_at_rest(store)

    asyncio.run(main())


def test_the_only_connection_closed_after_a_failed_statement_makes_room_for_the_waiting_block(
    limited_dsn: str,
) -> None:
    """A connection closed after a statement failed (its state unknown) was the only one the
    store held: nothing will be given back, and the queued block takes its room at once
    instead of waiting its whole wait for nothing."""

    async def main() -> None:
        async with opened(limited_dsn, max_connections=CONNECTIONS) as store:
            await store.create_session(record())
            async with _others(limited_dsn, 1):
                with pytest.raises(Exception, match="division by zero"):
                    async with store._conn() as conn:
                        waiting = asyncio.ensure_future(store.get_session("s1"))
                        await _until(lambda: bool(store._queued))
                        await conn.execute("SELECT 1 / 0")
                async with asyncio.timeout(3):
                    got = await waiting
                assert got is not None
                _assert_pool_at_rest(store)

    asyncio.run(main())


def test_blocks_get_the_connections_given_back_in_the_order_they_came(limited_dsn: str) -> None:
    """First come, first served: a block queued for a connection is not overtaken by blocks
    that came after it (nor by new ones, which queue behind it)."""

    async def main() -> None:
        async with opened(limited_dsn, max_connections=CONNECTIONS) as store:
            served: list[int] = []

            async def block(n: int) -> None:
                async with store._conn() as conn:
                    served.append(n)
                    await conn.execute("SELECT pg_sleep(0.02)")

            async with _others(limited_dsn, 1):
                blocks = []
                async with store._conn():
                    for n in range(4):
                        blocks.append(asyncio.ensure_future(block(n)))
                        await _until(lambda n=n: len(store._queued) == n + 1)
                async with asyncio.timeout(10):
                    await asyncio.gather(*blocks)
            assert served == [0, 1, 2, 3]
            _assert_pool_at_rest(store)

    asyncio.run(main())


def test_a_presence_lost_while_blocks_queue_at_the_limit_gets_back_in(limited_dsn: str) -> None:
    """The presence's connection dropped (an admin, a network blip) while blocks queue for the
    store's connections at the limit: every connection given back goes to the next block, so
    none is ever idle to be closed for the presence's room. The next one given back is closed
    for it instead, and a lease is taken again while the load goes on (not a 503 for every
    turn until the load drops)."""

    async def main() -> None:
        async with opened(limited_dsn, max_connections=CONNECTIONS) as store:
            await store.create_session(record())
            stop = asyncio.Event()

            async def load() -> None:
                while not stop.is_set():
                    await store._fetch("SELECT pg_sleep(0.05)")

            blocks = [asyncio.ensure_future(load()) for _ in range(CONNECTIONS)]
            try:
                await _until(lambda: store._lent == LIMIT - 1 and len(store._queued) >= 2)
                presence = store._presence
                before = await store.worker()
                await asyncio.to_thread(_terminate, presence.info.backend_pid)
                await _until(lambda: _readable(presence))  # the server's goodbye is there
                # Another client (another worker's blocks) takes the room the presence left.
                async with _others(limited_dsn, 1), asyncio.timeout(5):
                    after = await store.worker()
                    async with store.lock_session("s1", 5.0) as lease:
                        await lease.commit(outcome(1, 1))
                assert after != before and store._presence is not presence
                assert not any(b.done() for b in blocks)  # no block failed meanwhile
            finally:
                stop.set()
                async with asyncio.timeout(10):
                    await asyncio.gather(*blocks)
            _assert_pool_at_rest(store)

    asyncio.run(main())


def test_a_block_refused_while_only_a_long_block_holds_a_connection_fails_at_once(
    limited_dsn: str,
) -> None:
    """A long block (a purge's batch may hold its connection for minutes) is not worth waiting
    for: a block refused at the limit while only such a one is lent fails at once, as when
    the store holds none, rather than after CONNECTION_WAIT."""

    async def main() -> None:
        async with opened(limited_dsn, max_connections=CONNECTIONS) as store:
            await store.create_session(record())
            await store._flush()  # the store keeps only its presence
            async with store._conn(within=PURGE_TIMEOUT + ANSWER_MARGIN) as long:
                await long.execute("SELECT 1")
                async with _others(limited_dsn, 1):  # the rest of the role's room
                    started = time.monotonic()
                    with pytest.raises(StoreUnreachable) as caught:
                        async with asyncio.timeout(5):
                            await store.get_session("s1")
                    assert time.monotonic() - started < 1.0
                    assert store._lent == 1
            message = str(caught.value)
            assert "the database refused more connections, and this store holds none" in message
            assert "held by long blocks" in message
            assert "too many connections for role" in message
            assert PASSWORD not in message
            _assert_pool_at_rest(store)
            assert await store.get_session("s1") is not None

    asyncio.run(main())


class _Connects:
    refused = 0


def _count_connects(store: Any) -> _Connects:
    """Counts the store's new connections refused from now on."""
    counts = _Connects()
    new = store._new_connection

    async def counting() -> Any:
        try:
            return await new()
        except StoreUnreachable:
            counts.refused += 1
            raise

    store._new_connection = counting
    return counts


async def _hold(store: Any, seconds: float, pids: list[int] | None = None) -> None:
    """One block holding a connection of the store for ``seconds``."""
    async with store._conn() as conn:
        if pids is not None:
            pids.append(conn.info.backend_pid)
        await conn.execute("SELECT pg_sleep(%s)", (seconds,))


@asynccontextmanager
async def _others(dsn: str, count: int) -> AsyncIterator[None]:
    """``count`` connections of the role held by another client (each waiting for room that
    a closed connection left, whose backend counts until it has exited)."""
    import psycopg

    held: list[Any] = []
    try:
        for _ in range(count):
            for _ in range(200):
                try:
                    held.append(await psycopg.AsyncConnection.connect(dsn))
                    break
                except psycopg.OperationalError:
                    await asyncio.sleep(0.02)
            else:
                raise AssertionError("no room for another client")
        yield
    finally:
        for conn in held:
            await conn.close()


async def _until(ready: Any, seconds: float = 5.0) -> None:
    async with asyncio.timeout(seconds):
        while not ready():
            await asyncio.sleep(0.005)


def _assert_pool_at_rest(store: PostgresStore) -> None:
    """No block holds a connection or a slot, and none is queued."""
    assert store._lent == 0
    assert getattr(store, "_long", 0) == 0
    assert getattr(store, "_presence_wanted", None) is None
    assert not store._queued
    assert store._slots._value == store.max_connections


def _terminate(pid: int) -> None:
    admin: Any = _admin_connect()
    try:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    finally:
        admin.close()


def _readable(conn: Any) -> bool:
    import select

    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN)
    return bool(poller.poll(0))
