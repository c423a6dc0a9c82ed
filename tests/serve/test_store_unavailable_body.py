"""``503 store_unavailable`` tells the client the session store is unavailable and to retry,
naming the request whose log line says why, and nothing of the store: before, its message was
the store's own error (the database's user, host, port and name and the driver's FATAL text, or
the SQLite file's path), shown to any API client, where ``/readyz`` keeps them to the log."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2 as httpx
import pytest

from agentscript.server import sse
from agentscript.server.config import ServerConfig
from agentscript.server.logs import WithRequestId
from agentscript.store import StoreError

from .conftest import pg_reset
from .harness import api, new_session
from .pg_relay import Relay

# What a driver's error says of a database: all of it for the log, none of it for a client.
DETAIL = (
    'connection to server at "10.1.2.3", port 6543 failed: FATAL: password authentication '
    'failed for user "agent_rw" (postgresql://agent_rw:***@10.1.2.3:6543/sessions_prod)'
)
SECRETS = ("10.1.2.3", "6543", "agent_rw", "sessions_prod", "FATAL", "***")


@contextmanager
def logged(caplog: pytest.LogCaptureFixture) -> Iterator[dict[str, str]]:
    """The server's ``store unavailable`` lines, by the id of the request they were written
    for (filled in when the block ends)."""
    named = WithRequestId()
    caplog.handler.addFilter(named)
    lines: dict[str, str] = {}
    try:
        # The agentscript logger's own level too: a test before may have run the command's
        # logs.configure, which leaves it at WARNING without --access-log.
        with caplog.at_level(logging.INFO), caplog.at_level(logging.INFO, logger="agentscript"):
            yield lines
    finally:
        caplog.handler.removeFilter(named)
    for record in caplog.records:
        if record.name == "agentscript.server" and record.getMessage().startswith("store una"):
            lines[record.request_id] = record.getMessage()  # type: ignore[attr-defined]


def access_line(caplog: pytest.LogCaptureFixture, request_id: str) -> str:
    [line] = [
        r.getMessage()
        for r in caplog.records
        if r.name == "agentscript.access" and r.request_id == request_id  # type: ignore[attr-defined]
    ]
    return line


def told(response: httpx.Response, request_id: str) -> None:
    """The answer is a retryable 503 naming only its request."""
    assert response.status_code == 503, response.text
    assert response.headers["Retry-After"] == "1"
    assert response.headers["x-request-id"] == request_id
    assert response.json() == {
        "error": {
            "code": "store_unavailable",
            "message": (
                "the session store is unavailable; retry shortly (the server's log says why, "
                f"under request id {request_id})"
            ),
        }
    }


def test_a_lost_sqlite_file_is_named_in_the_log_not_to_the_client(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "sessions.db"

    async def main() -> None:
        async with api(f"sqlite:///{path}", config=ServerConfig(access_log=True)) as client:
            sid = await new_session(client)
            os.rename(path, tmp_path / "elsewhere.db")
            sent = await client.post(
                f"/v1/sessions/{sid}/messages",
                json={"text": "lost?"},
                headers={"X-Request-ID": "lost-1"},
            )
            told(sent, "lost-1")
            read = await client.get(f"/v1/sessions/{sid}", headers={"X-Request-ID": "lost-2"})
            told(read, "lost-2")
            assert str(tmp_path) not in sent.text + read.text

    with logged(caplog) as lines:
        asyncio.run(main())
    assert set(lines) == {"lost-1", "lost-2"}
    assert all(str(path) in line for line in lines.values())
    assert " 503 store_unavailable " in access_line(caplog, "lost-1")


@asynccontextmanager
async def failing_commits(client: httpx.AsyncClient) -> AsyncIterator[None]:
    """Every commit of the served store fails with a driver's error naming the database."""
    store = client._transport.app.state.service.store  # type: ignore[attr-defined]
    real = store.lock_session

    @asynccontextmanager
    async def refusing(
        session_id: str, wait: float, *, kept: str | None = None
    ) -> AsyncIterator[Any]:
        async with real(session_id, wait, kept=kept) as lock:

            class Refusing:
                session = lock.session

                async def commit(self, outcome: Any) -> None:
                    raise StoreError(DETAIL)

            yield Refusing()

    store.lock_session = refusing
    try:
        yield
    finally:
        store.lock_session = real


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "streamed"])
def test_a_failed_commit_names_the_database_in_the_log_not_to_the_client(
    caplog: pytest.LogCaptureFixture, streamed: bool
) -> None:
    """A turn answered as JSON (503), or streamed: its ``error`` event, after the stream's
    200, says the same as the JSON answer."""

    async def main() -> httpx.Response:
        async with api("memory://", config=ServerConfig(access_log=True)) as client:
            sid = await new_session(client)
            async with failing_commits(client):
                headers = {"X-Request-ID": "commit-1"}
                if streamed:
                    headers["Accept"] = "text/event-stream"
                return await client.post(
                    f"/v1/sessions/{sid}/messages", json={"text": "hi"}, headers=headers
                )

    with logged(caplog) as lines:
        sent = asyncio.run(main())
    if streamed:
        assert sent.status_code == 200
        [(_, data)] = [e for e in sse.parse(sent.text) if e[0] == "error"]
        assert data["status"] == 503 and data["code"] == "store_unavailable"
        assert data["message"] == (
            "the session store is unavailable; retry shortly (the server's log says why, "
            "under request id commit-1)"
        )
        assert " 200 store_unavailable " in access_line(caplog, "commit-1")
    else:
        told(sent, "commit-1")
        assert " 503 store_unavailable " in access_line(caplog, "commit-1")
    assert not [secret for secret in SECRETS if secret in sent.text]
    assert lines == {"commit-1": f"store unavailable: {DETAIL}"}


def test_a_postgresql_gone_is_named_in_the_log_not_to_the_client(
    pg_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    pg_reset(pg_dsn)
    database = urlsplit(pg_dsn).path.lstrip("/")

    async def main() -> tuple[httpx.Response, int]:
        relay = Relay(pg_dsn)
        await relay.start()
        try:
            async with api(relay.dsn) as client:
                sid = await new_session(client)
                await relay.stop()  # refused, every connection closed
                sent = await client.post(
                    f"/v1/sessions/{sid}/messages",
                    json={"text": "hi"},
                    headers={"X-Request-ID": "pg-1"},
                )
                await relay.start()  # the store closes at the end as usual
                return sent, relay.port
        finally:
            await relay.stop()

    with logged(caplog) as lines:
        sent, port = asyncio.run(main())
    told(sent, "pg-1")
    for secret in (str(port), "127.0.0.1", database, "postgres"):
        assert secret not in sent.text, secret
    assert str(port) in lines["pg-1"]
