"""A PostgreSQL server, or the network path to it, that stops answering without closing
anything (a frozen host, a failover that leaves the connections dangling): the server's own
bounds (statement_timeout, lock_timeout) never fire, so the store bounds every wait itself. A
statement left unanswered fails (503 store_unavailable) and gives its connection back, a dark
presence is replaced, a readiness probe answers within its bound, and everything works again as
soon as the database answers, with nothing held meanwhile (no turn or session lock hung, no
pool slot lost).

The relay (pg_relay.Relay) keeps the connections open and swallows everything on them, while
new connections work. The store's bounds are shortened so that the tests take seconds; each
test caps its waits (SLACK), so that a wait the store leaves unbounded fails the test instead of
hanging it."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentscript.store import StoreError
from agentscript.store import postgres as pg
from agentscript.store.base import StoreUnreachable

from .conftest import pg_reset
from .harness import api, new_session
from .pg_relay import Relay
from .test_pg_row_locks import opened
from .test_store import outcome, record

# Well past every shortened bound below, well short of forever.
SLACK = 20.0
# How long the relay's connections stay dark: longer than any test needs, so that what waits
# for them unbounded is seen (``dark_over``) rather than hanging the test.
DARK_HOLD = 2 * SLACK


@pytest.fixture
def short_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pg, "STATEMENT_TIMEOUT", 1.0)
    monkeypatch.setattr(pg, "ANSWER_MARGIN", 0.5, raising=False)
    monkeypatch.setattr(pg, "QUICK_ANSWER", 0.5, raising=False)
    monkeypatch.setattr(pg, "PING_WAIT", 2.0, raising=False)


@contextlib.asynccontextmanager
async def relayed(dsn: str) -> AsyncIterator[Relay]:
    relay = Relay(dsn)
    await relay.start()
    try:
        yield relay
    finally:
        await relay.stop()


def test_a_statement_on_a_connection_gone_dark_fails_and_gives_its_connection_back(
    pg_dsn: str, short_bounds: None
) -> None:
    """One connection in the pool: the statement on it, unanswered, fails as a lost connection
    does (its slot given back, the pool flushed, the presence in doubt); the next one runs on a
    new connection, and the dark presence is replaced by the next turn's check."""
    pg_reset(pg_dsn)

    async def main() -> None:
        async with relayed(pg_dsn) as relay, opened(relay.dsn, max_connections=1) as store:
            await store.create_session(record())
            before = await store.worker()
            relay.go_dark(DARK_HOLD)
            with pytest.raises(StoreUnreachable) as failed:
                async with asyncio.timeout(SLACK):
                    await store.get_session("s1")
            assert "no answer within 1.5 s" in str(failed.value)
            assert "the connection was dropped" in str(failed.value)
            assert store._presence_doubtful and store._idle == []
            async with asyncio.timeout(SLACK):
                got = await store.get_session("s1")  # the one slot is free again
                assert got is not None
                after = await store.worker()
            assert after != before  # the dark presence was cut and another taken
            async with asyncio.timeout(SLACK), store.lock_session("s1", 1.0) as lock:
                await lock.commit(outcome(1, 1))
            got = await store.get_session("s1")
            assert got is not None and got.turns == 1
            assert not relay.dark_over  # all of it while the old connections were dark

    asyncio.run(main())


def test_readiness_probes_of_a_dark_store_answer_within_their_bound_and_share_one_check(
    pg_dsn: str, short_bounds: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The audit's case: probes came while the pool's connection and the presence's went dark.
    Each probe answers within PING_WAIT, they share one check rather than queue one each, and
    the check, bounded itself, ends by taking a new presence: the next probe and the next turn
    find the store well."""
    pg_reset(pg_dsn)
    monkeypatch.setattr(pg, "PING_WAIT", 0.3, raising=False)  # shorter than the check

    async def main() -> None:
        async with relayed(pg_dsn) as relay, opened(relay.dsn) as store:
            await store.create_session(record())
            await store.ping()
            before = await store.worker()
            opened_before = relay.accepted
            relay.go_dark(DARK_HOLD)
            async with asyncio.timeout(SLACK):
                probes = await asyncio.gather(
                    *(store.ping() for _ in range(3)), return_exceptions=True
                )
            assert all(isinstance(p, StoreError) for p in probes), probes
            assert "no answer within 0.3 s" in str(probes[0])
            async with asyncio.timeout(SLACK):
                while (await asyncio.gather(store.ping(), return_exceptions=True))[0]:
                    await asyncio.sleep(0.1)  # until the check, going on past the probes, ends
                assert await store.worker() != before
                assert (await store.get_session("s1")) is not None
            # One check for the three probes: one new connection for the pool, one for the
            # presence (a check each would have opened one of each per probe).
            assert relay.accepted - opened_before == 2
            assert not relay.dark_over

    asyncio.run(main())


def test_turns_on_a_dark_postgresql_answer_503_and_the_session_runs_again(
    pg_dsn: str, short_bounds: None, caplog: pytest.LogCaptureFixture
) -> None:
    """Through the API: a turn whose statements go unanswered is a 503 store_unavailable with
    Retry-After, never a request that hangs, and it holds nothing once answered: the session's
    next turn runs (it was 409 session_busy for good, behind the hung turn's lock), as do
    /readyz and other sessions."""
    pg_reset(pg_dsn)

    async def main() -> None:
        async with relayed(pg_dsn) as relay, api(relay.dsn) as client:
            sid = await new_session(client)
            url = f"/v1/sessions/{sid}/messages"
            assert (await client.post(url, json={"text": "a"})).status_code == 200
            relay.go_dark(DARK_HOLD)
            async with asyncio.timeout(SLACK):
                sent = await client.post(url, json={"text": "b"})
            assert sent.status_code == 503, sent.text
            assert sent.json()["error"]["code"] == "store_unavailable"
            # Why is in the log line, for the operator; the client is told to retry.
            assert "retry" in sent.json()["error"]["message"]
            assert "no answer within" not in sent.text and str(relay.port) not in sent.text
            assert "no answer within" in caplog.records[-1].getMessage()
            assert sent.headers["Retry-After"] == "1"
            async with asyncio.timeout(SLACK):
                ready = await client.get("/readyz")
                assert ready.status_code in (200, 503)
                again = await client.post(url, json={"text": "c"})
                assert again.status_code == 200, again.text
                assert again.json()["turn"] == 2
                other = await new_session(client)
                sent = await client.post(f"/v1/sessions/{other}/messages", json={"text": "d"})
                assert sent.status_code == 200, sent.text
                assert (await client.get("/readyz")).status_code == 200
            assert not relay.dark_over

    asyncio.run(main())


def _keepalives(conn: Any) -> tuple[int, int, int, int, int]:
    sock = socket.socket(fileno=conn.fileno())
    try:
        return (
            sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT),
        )
    finally:
        sock.detach()  # the descriptor is the connection's


def test_connections_send_tcp_keepalives_unless_the_url_sets_its_own(pg_dsn: str) -> None:
    """An idle connection to a host gone dark is found dead in seconds, not the system's two
    hours: both the pool's connections and the presence's; a URL's own settings win."""
    pg_reset(pg_dsn)

    async def main() -> list[tuple[int, int, int, int, int]]:
        found = []
        for dsn in (pg_dsn, f"{pg_dsn}?keepalives_idle=77&tcp_user_timeout=9000"):
            async with opened(dsn) as store:
                await store.get_session("s1")
                found += [_keepalives(store._idle[0]), _keepalives(store._presence)]
        return found

    assert asyncio.run(main()) == [(1, 10, 5, 3, 30_000)] * 2 + [(1, 77, 5, 3, 9000)] * 2


def test_a_commit_waiting_on_a_locked_table_does_not_blame_the_sessions_row(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another client's LOCK TABLE on the turns: the commit's lock timeout says a row or a table
    was locked, not the session's row (which nobody held)."""
    pg_reset(pg_dsn)
    monkeypatch.setattr(pg, "LOCK_TIMEOUT", 0.3)
    import psycopg

    async def main() -> str:
        async with opened(pg_dsn) as store:
            await store.create_session(record())
            async with await psycopg.AsyncConnection.connect(pg_dsn) as other:
                await other.execute("LOCK TABLE agentscript_turns IN EXCLUSIVE MODE")
                with pytest.raises(StoreError) as failed:
                    async with asyncio.timeout(SLACK), store.lock_session("s1", 1.0) as lock:
                        await lock.commit(outcome(1, 1))
                await other.rollback()
            return str(failed.value)

    message = asyncio.run(main())
    assert "stayed locked by another client" in message
    assert "the row of session" not in message
    assert "a row or table that session s1 needed" in message


def test_readyz_of_a_server_whose_store_went_dark_answers_in_time(
    pg_dsn: str, short_bounds: None
) -> None:
    """Through the API, right after the connections went dark and before any turn noticed:
    /readyz answers (503 then, 200 once its check has replaced what went dark) rather than
    hanging, and turns are not held behind it."""
    pg_reset(pg_dsn)

    async def main() -> None:
        async with relayed(pg_dsn) as relay, api(relay.dsn) as client:
            sid = await new_session(client)
            assert (await client.get("/readyz")).status_code == 200
            relay.go_dark(DARK_HOLD)
            async with asyncio.timeout(SLACK):
                first = await client.get("/readyz")
                assert first.status_code in (200, 503)
                sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "a"})
                assert sent.status_code in (200, 503), sent.text
                for _ in range(100):  # until the probes' check has replaced the dark ones
                    if (await client.get("/readyz")).status_code == 200:
                        break
                    await asyncio.sleep(0.1)
                sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "b"})
                assert sent.status_code == 200, sent.text
            assert not relay.dark_over

    asyncio.run(main())


def test_a_start_up_whose_connection_goes_dark_fails_rather_than_waiting_for_good(
    pg_dsn: str, short_bounds: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start-up's migration has no bound on the server (it waits for another worker's):
    on a connection gone dark it fails with StoreUnreachable, the error a worker is started
    again for, rather than holding the start for good."""
    pg_reset(pg_dsn)
    monkeypatch.setattr(pg, "OPEN_TIMEOUT", 1.0, raising=False)

    async def main() -> str:
        async with relayed(pg_dsn) as relay, opened(relay.dsn) as store:
            relay.go_dark(DARK_HOLD)
            with pytest.raises(StoreUnreachable) as failed:
                async with asyncio.timeout(SLACK):
                    await store.open()  # on the pool's connection, now dark
            assert not relay.dark_over
            return str(failed.value)

    assert "no answer within 1 s" in asyncio.run(main())
