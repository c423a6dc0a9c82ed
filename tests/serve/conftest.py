"""Fixtures for the serve tests: a PostgreSQL database of their own, and stores on each backend.

PostgreSQL tests use the server at 127.0.0.1:5432 (trust auth, database ``test``): a database
named ``agentscript_serve_<pid>`` is created for the run and dropped at its end. Without a
server they are skipped (one line says how to enable them), except under ``CI=true``, where
that is a failure.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

PG_ADMIN = os.environ.get("AGENTSCRIPT_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def _admin_connect() -> object:
    import psycopg

    return psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=3)


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """A fresh PostgreSQL database for this test run (dropped afterwards)."""
    try:
        admin = _admin_connect()
    except Exception as exc:
        message = (
            f"PostgreSQL not reachable at {PG_ADMIN} ({type(exc).__name__}); start one on "
            "127.0.0.1:5432 with trust auth and a database 'test' to run these tests"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    name = f"agentscript_serve_{os.getpid()}"
    admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")  # type: ignore[attr-defined]
    admin.execute(f"CREATE DATABASE {name}")  # type: ignore[attr-defined]
    base = PG_ADMIN.rsplit("/", 1)[0]
    try:
        yield f"{base}/{name}"
    finally:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")  # type: ignore[attr-defined]
        admin.close()  # type: ignore[attr-defined]


def pg_reset(dsn: str) -> None:
    """Empty every agentscript table (each test starts from no sessions)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in ("agentscript_turns", "agentscript_sessions", "agentscript_locks"):
            conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute("DROP TABLE IF EXISTS agentscript_meta")


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: object) -> str:
    """A store URL on each backend (a new, empty store for each test)."""
    kind = request.param
    if kind == "memory":
        return "memory://"
    if kind == "sqlite":
        return f"sqlite:///{tmp_path}/sessions.db"
    dsn: str = request.getfixturevalue("pg_dsn")
    pg_reset(dsn)
    return dsn


@pytest.fixture(params=["sqlite", "postgresql"])
def api_store(request: pytest.FixtureRequest, tmp_path: object) -> str:
    """A store URL for the HTTP API tests: SQLite and PostgreSQL (a new, empty store each)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/sessions.db"
    dsn: str = request.getfixturevalue("pg_dsn")
    pg_reset(dsn)
    return dsn


@contextmanager
def limited_role_database(prefix: str, limit: int, password: str | None = None) -> Iterator[str]:
    """The URL of a database owned by a role of its own that may hold ``limit`` connections
    (a superuser has no such limit), with ``password`` in the URL if given (trust auth ignores
    it); both dropped afterwards."""
    name = f"{prefix}_{os.getpid()}"
    admin: Any = _admin_connect()
    admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    admin.execute(f"DROP ROLE IF EXISTS {name}")
    admin.execute(f"CREATE ROLE {name} LOGIN CONNECTION LIMIT {limit}")
    admin.execute(f"CREATE DATABASE {name} OWNER {name}")
    parts = urlsplit(PG_ADMIN)
    user = name if password is None else f"{name}:{password}"
    netloc = f"{user}@{parts.hostname}:{parts.port or 5432}"
    try:
        yield urlunsplit(parts._replace(netloc=netloc, path=f"/{name}"))
    finally:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.execute(f"DROP ROLE IF EXISTS {name}")
        admin.close()


@pytest.fixture
def states_read(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The state column of each session row the SQL stores turn into a record (None where a
    lock read left it out)."""
    from agentscript.store import schema

    seen: list[Any] = []
    real = schema.session_from_row

    def spying(row: Sequence[Any], *kept: str | None) -> Any:
        seen.append(row[5])
        return real(row, *kept)

    monkeypatch.setattr(schema, "session_from_row", spying)
    return seen
