"""Behaviours of the server over time and under failure: a session's expiry counts from its
last turn, /readyz follows the store going away and coming back, and a body without a
Content-Length is bounded like one with it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx2 as httpx
import pytest

from agentscript.server.config import ServerConfig

from .conftest import pg_reset
from .harness import api, execute, lease_rows, new_session, run


def error_of(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


# ------------------------------------------------------------------ expiry


def test_each_turn_pushes_the_session_expiry_back(api_store: str) -> None:
    """--session-ttl counts from the last turn: a session in use outlives its first TTL."""
    # Each step lands 0.4 TTL from an expiry: at 1 s a pause of the test process (a full
    # garbage collection of the suite's heap takes up to 0.7 s) crossed one.
    ttl = 2.0

    async def scenario(client: httpx.AsyncClient) -> None:
        sid = await new_session(client)
        created = (await client.get(f"/v1/sessions/{sid}")).json()
        await asyncio.sleep(0.6 * ttl)
        sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "hello"})
        assert sent.status_code == 200, sent.text
        after_turn = (await client.get(f"/v1/sessions/{sid}")).json()
        assert after_turn["expires_at"] > created["expires_at"]
        assert after_turn["expires_at"] >= after_turn["updated_at"] + ttl - 0.01
        # Past the TTL counted from creation, within it counted from the turn: still there.
        await asyncio.sleep(0.6 * ttl)
        still = await client.get(f"/v1/sessions/{sid}")
        assert still.status_code == 200, still.text
        assert still.json()["turns"] == 1
        again = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "again"})
        assert again.status_code == 200 and again.json()["turn"] == 2
        # Idle for longer than the TTL: gone, for reads and for messages.
        await asyncio.sleep(1.2 * ttl)
        assert error_of(await client.get(f"/v1/sessions/{sid}")) == (404, "session_not_found")
        late = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "late"})
        assert error_of(late) == (404, "session_not_found")

    run(api_store, scenario, config=ServerConfig(session_ttl=ttl))


def test_a_ttl_turned_on_later_expires_the_sessions_written_without_one(api_store: str) -> None:
    """Sessions created while the server ran without --session-ttl expire, counted from their
    last update, once a server starts with one (they had no expiry to count down)."""

    async def create(client: httpx.AsyncClient) -> tuple[str, str]:
        return await new_session(client), await new_session(client)

    idle, recent = run(api_store, create)
    # The first one was last written long ago; the second just now.
    execute(
        api_store,
        "UPDATE agentscript_sessions SET updated_at = ? WHERE session_id = ?",
        time.time() - 100,
        idle,
    )

    async def with_ttl(client: httpx.AsyncClient) -> None:
        await client._transport.app.state.expiry_backfill  # type: ignore[attr-defined]
        assert error_of(await client.get(f"/v1/sessions/{idle}")) == (404, "session_not_found")
        kept = await client.get(f"/v1/sessions/{recent}")
        assert kept.status_code == 200, kept.text
        assert kept.json()["expires_at"] is not None

    run(api_store, with_ttl, config=ServerConfig(session_ttl=50))


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgresql"])
def test_a_session_whose_turn_runs_past_its_expiry_is_not_purged_under_it(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The purge skips a session with a turn running (begun before it expired): that turn
    commits and pushes the expiry back. Purged under it, the client got 409 turn_conflict and
    the session and all its turns were gone."""
    ttl = 1.5  # the view right after the commit must come within it, even on a loaded machine
    block, calls = tmp_path / "block", tmp_path / "calls.jsonl"
    monkeypatch.setenv("NOTES_BLOCK", str(block))
    monkeypatch.setenv("NOTES_LOG", str(calls))
    if kind == "postgresql":
        url: str = request.getfixturevalue("pg_dsn")
        pg_reset(url)
    else:
        url = "memory://" if kind == "memory" else f"sqlite:///{tmp_path}/sessions.db"

    async def scenario(client: httpx.AsyncClient) -> None:
        store = client._transport.app.state.service.store  # type: ignore[attr-defined]
        sid = await new_session(client)
        block.touch()
        turn = asyncio.create_task(
            client.post(f"/v1/sessions/{sid}/messages", json={"text": '/note {"text": "a"}'})
        )
        for _ in range(1000):  # until the turn waits inside its action
            if calls.exists():
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(ttl + 0.3)  # the session expired while its turn runs
        assert await store.purge_expired() == 0
        block.unlink()
        answer = await turn
        assert answer.status_code == 200, answer.text
        view = await client.get(f"/v1/sessions/{sid}")
        assert view.status_code == 200 and view.json()["turns"] == 1
        # Idle past its expiry with no turn running: purged, turns and all.
        await asyncio.sleep(ttl + 0.3)
        assert await store.purge_expired() == 1
        assert await store.list_turns(sid) == []

    run(url, scenario, config=ServerConfig(session_ttl=ttl, rate_limit=0))


def test_reading_a_session_does_not_push_its_expiry_back(api_store: str) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        sid = await new_session(client)
        first = (await client.get(f"/v1/sessions/{sid}")).json()["expires_at"]
        await client.get(f"/v1/sessions/{sid}/turns")
        assert (await client.get(f"/v1/sessions/{sid}")).json()["expires_at"] == first

    run(api_store, scenario, config=ServerConfig(session_ttl=60))


# ------------------------------------------------------------------ readiness


class TcpRelay:
    """A TCP relay to PostgreSQL that can be cut (listener and live connections) and restored:
    the database going away and coming back, as seen from the server."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def cut(self) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()
        for writer in list(self._writers):
            writer.close()
        self._writers.clear()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self._writers |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, ConnectionError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


def test_readyz_is_503_while_postgresql_is_gone_and_200_when_it_returns(pg_dsn: str) -> None:
    pg_reset(pg_dsn)
    parts = urlsplit(pg_dsn)

    async def main() -> None:
        relay = TcpRelay(parts.hostname or "127.0.0.1", parts.port or 5432)
        await relay.start()
        netloc = f"{parts.username}@127.0.0.1:{relay.port}"
        dsn = urlunsplit(parts._replace(netloc=netloc))
        async with api(dsn) as client:
            sid = await new_session(client)
            assert (
                await client.post(f"/v1/sessions/{sid}/messages", json={"text": "a"})
            ).is_success
            assert (await client.get("/readyz")).status_code == 200

            await relay.cut()
            down = await client.get("/readyz")
            assert error_of(down) == (503, "not_ready")
            message = down.json()["error"]["message"]
            # Anyone may ask: the kind of store, never its address (the log has it).
            assert message == "the postgresql store does not answer (the log says why)"
            assert str(relay.port) not in down.text
            assert "Traceback" not in down.text
            # Requests that need the store say so with a 503, never a 500.
            sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "b"})
            assert error_of(sent) == (503, "store_unavailable")
            # Retried as the other 503s are (it had no Retry-After).
            assert sent.headers["Retry-After"] == "1"
            assert error_of(await client.get(f"/v1/sessions/{sid}")) == (503, "store_unavailable")

            await relay.start()
            up = await client.get("/readyz")
            assert up.status_code == 200, up.text
            # Every request works again at once: no dead pooled connection is handed out.
            for text in ("c", "d", "e"):
                sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": text})
                assert sent.status_code == 200, sent.text
            assert (await client.get(f"/v1/sessions/{sid}")).json()["turns"] == 4
        await relay.cut()

    asyncio.run(main())


def test_readyz_is_503_while_the_sqlite_file_is_gone_and_200_when_it_returns(
    tmp_path: Path,
) -> None:
    path = tmp_path / "sessions.db"
    moved = tmp_path / "elsewhere.db"

    async def scenario(client: httpx.AsyncClient) -> None:
        sid = await new_session(client)
        assert (await client.get("/readyz")).status_code == 200
        os.rename(path, moved)  # removed or replaced under the server: writes would be lost
        down = await client.get("/readyz")
        assert error_of(down) == (503, "not_ready")
        assert down.json()["error"]["message"] == (
            "the sqlite store does not answer (the log says why)"
        )
        assert str(tmp_path) not in down.text
        sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "lost?"})
        assert error_of(sent) == (503, "store_unavailable")
        os.rename(moved, path)
        assert (await client.get("/readyz")).status_code == 200
        sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "kept"})
        assert sent.status_code == 200, sent.text
        assert sent.json()["turn"] == 1

    run(f"sqlite:///{path}", scenario)


def test_readyz_is_503_when_the_sqlite_file_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"

    async def scenario(client: httpx.AsyncClient) -> None:
        assert (await client.get("/readyz")).status_code == 200
        path.unlink()
        path.write_bytes(b"")  # another file now has the name
        assert error_of(await client.get("/readyz")) == (503, "not_ready")

    run(f"sqlite:///{path}", scenario)


# ------------------------------------------------------------------ request bodies


class Feed:
    """A request body sent in chunks without Content-Length; counts what was taken."""

    def __init__(self, chunk: bytes, count: int) -> None:
        self.chunk = chunk
        self.count = count
        self.taken = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for _ in range(self.count):
            self.taken += 1
            yield self.chunk


@pytest.mark.parametrize("path", ["/v1/sessions/{sid}/messages", "/v1/agents/Notes/sessions"])
def test_chunked_body_over_the_limit_is_413_and_not_read_to_its_end(
    api_store: str, path: str
) -> None:
    limit = 1000

    async def scenario(client: httpx.AsyncClient) -> None:
        sid = await new_session(client)
        feed = Feed(b" " * 400, 5000)  # 2 MB, far over the limit
        response = await client.post(
            path.format(sid=sid),
            content=feed,
            headers={"Content-Type": "application/json"},
        )
        assert error_of(response) == (413, "body_too_large")
        assert "max_body_bytes" in response.json()["error"]["message"]
        assert feed.taken < 10  # stopped at the limit, never read to the end
        assert (await client.get(f"/v1/sessions/{sid}")).json()["turns"] == 0

    run(api_store, scenario, config=ServerConfig(max_body_bytes=limit))


def test_chunked_body_under_the_limit_is_accepted(api_store: str) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        sid = await new_session(client)
        parts = [b'{"text": ', b'"hel', b'lo"}']

        async def body() -> AsyncIterator[bytes]:
            for part in parts:
                yield part

        response = await client.post(
            f"/v1/sessions/{sid}/messages",
            content=body(),
            headers={"Content-Type": "application/json"},
        )
        assert response.status_code == 200, response.text
        assert response.json()["user"] == "hello"

    run(api_store, scenario, config=ServerConfig(max_body_bytes=1000))


def test_postgresql_restart_between_requests_fails_at_most_one_request(pg_dsn: str) -> None:
    """The pool holds several idle connections when the server restarts: readyz is right at
    once, and one failed request at most (503) flushes every dead connection."""
    pg_reset(pg_dsn)
    parts = urlsplit(pg_dsn)

    async def main() -> None:
        relay = TcpRelay(parts.hostname or "127.0.0.1", parts.port or 5432)
        await relay.start()
        dsn = urlunsplit(parts._replace(netloc=f"{parts.username}@127.0.0.1:{relay.port}"))
        async with api(dsn) as client:
            sids = [await new_session(client) for _ in range(4)]
            sent = await asyncio.gather(
                *(client.post(f"/v1/sessions/{s}/messages", json={"text": "a"}) for s in sids)
            )
            assert all(r.status_code == 200 for r in sent)
            await relay.cut()
            await relay.start()
            assert (await client.get("/readyz")).status_code == 200
            statuses = []
            for sid in sids:
                response = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "b"})
                statuses.append(response.status_code)
            assert set(statuses) <= {200, 503} and statuses.count(503) <= 1
            assert statuses[-1] == 200
        await relay.cut()

    asyncio.run(main())


def test_sql_stores_keep_no_lock_for_sessions_no_turn_is_running(api_store: str) -> None:
    """The in-process lock of a session is forgotten once its turn ends (or fails to start),
    and so is its lease row: a long-running server does not keep one per session it ever
    served."""
    from agentscript.store import (
        SessionBusy,
        SessionGone,
        SessionRecord,
        TurnOutcome,
        TurnRecord,
        store_from_url,
    )

    async def main() -> None:
        store = store_from_url(api_store)
        await store.open()
        try:
            for sid in ("a", "b", "c"):
                await store.create_session(SessionRecord(sid, "Notes", "o", "v1", {"n": 0}))
                async with store.lock_session(sid, 1.0) as lock:
                    assert lock.session.session_id == sid
            with pytest.raises(SessionGone):
                async with store.lock_session("missing", 1.0):
                    pass
            async with store.lock_session("a", 1.0):
                with pytest.raises(SessionBusy):
                    async with store.lock_session("a", 0.05):
                        pass
            async with store.lock_session("b", 1.0) as lock:  # a committed turn
                await lock.commit(
                    TurnOutcome(
                        state={"n": 1},
                        record=TurnRecord("b", 1, {"turn": 1}, {"steps": []}, None),
                        ended=False,
                        escalated=False,
                        expires_at=None,
                    )
                )
            assert (await store.get_session("b")).turns == 1  # type: ignore[union-attr]
            assert store.leases.queued == 0  # type: ignore[attr-defined]
            # released by each turn, and never written for "missing"
            assert await asyncio.to_thread(lease_rows, api_store) == 0
        finally:
            await store.close()

    asyncio.run(main())


@pytest.mark.parametrize(
    "sdk_code, final",
    [("import time\ntime.sleep(0.3)\n", 200), ("raise ImportError('broken sdk')\n", 503)],
)
def test_readyz_waits_for_the_model_sdks_loaded_after_listening(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sdk_code: str, final: int
) -> None:
    """A model SDK is imported once the server runs, not before it listens; until it is in,
    /readyz is 503 (and says why); an SDK that fails to import keeps it 503."""
    from agentscript.models import sdk_provider

    name = f"agentscript_fake_sdk_{final}"
    (tmp_path / f"{name}.py").write_text(sdk_code)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sdk_provider, "_WANTED_SDKS", {name})
    monkeypatch.delitem(__import__("sys").modules, name, raising=False)

    async def scenario(client: httpx.AsyncClient) -> None:
        early = await client.get("/readyz")
        assert error_of(early) == (503, "not_ready")
        assert "model SDKs are still loading" in early.json()["error"]["message"]
        for _ in range(200):
            await asyncio.sleep(0.02)
            late = await client.get("/readyz")
            if "still loading" not in late.text:
                break
        assert late.status_code == final, late.text
        if final == 503:
            assert "a model SDK failed to load: broken sdk" in late.json()["error"]["message"]

    run(f"sqlite:///{tmp_path}/s.db", scenario)


# ------------------------------------------------------------------ sockets


def test_accepted_connections_get_tcp_nodelay_even_from_a_protocol_0_listener() -> None:
    """uvicorn's --workers listener is socket.socket(family) (protocol 0), which asyncio does
    not give TCP_NODELAY: without it every response waited ~40 ms for a delayed ACK."""
    import socket

    from agentscript.server.httptools_nodelay import NoDelayHttpToolsProtocol
    from agentscript.server.nodelay import H11, HTTPTOOLS, NoDelayH11Protocol, protocol, set_nodelay

    class Transport:
        def __init__(self, sock: socket.socket) -> None:
            self.sock = sock

        def get_extra_info(self, name: str) -> object:
            return self.sock if name == "socket" else None

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        with socket.create_connection(listener.getsockname()) as _client:
            accepted, _ = listener.accept()
            with accepted:
                assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 0
                set_nodelay(Transport(accepted))  # type: ignore[arg-type]
                assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as unix:
        set_nodelay(Transport(unix))  # type: ignore[arg-type]  # not TCP: left alone
    assert f"{NoDelayH11Protocol.__module__}:{NoDelayH11Protocol.__name__}" == H11
    name = f"{NoDelayHttpToolsProtocol.__module__}:{NoDelayHttpToolsProtocol.__name__}"
    assert name == HTTPTOOLS == protocol()  # the serve extra installs httptools


def test_without_httptools_serve_falls_back_to_h11(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from agentscript.server import nodelay

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "httptools" else real(name, *a),
    )
    assert nodelay.protocol() == nodelay.H11
