"""Session stores for ``agentscript serve``: one Protocol, three backends.

``store_from_url`` picks one: ``sqlite:///PATH`` (or a bare path; the default is
``.agentscript/sessions.db``), ``postgresql://...`` (or ``postgres://``), ``memory://``.
"""

from __future__ import annotations

import re

from agentscript.store.base import (
    STORE_FORMAT,
    DamagedRecord,
    SessionBusy,
    SessionGone,
    SessionLock,
    SessionRecord,
    Store,
    StoreError,
    StoreUnreachable,
    TurnConflict,
    TurnOutcome,
    TurnRecord,
    new_revision,
)
from agentscript.store.memory import MemoryStore

DEFAULT_STORE = "sqlite:///.agentscript/sessions.db"


# The start of a libpq key=value connection string ("host=db dbname=app ..."), which no
# SQLite path of a user begins with.
_CONNINFO = re.compile(
    r"\s*(host|hostaddr|port|dbname|user|password|passfile|sslmode|service|connect_timeout)\s*=",
    re.IGNORECASE,
)


def store_from_url(url: str | None, *, max_connections: int | None = None) -> Store:
    """The store a ``--store`` URL names (ValueError for an unknown scheme).
    ``max_connections``: how many database connections a PostgreSQL store opens at most
    (its default when None; ``serve --store-connections``)."""
    url = url or DEFAULT_STORE
    if url.startswith(("postgresql://", "postgres://")):
        from agentscript.store.postgres import MAX_CONNECTIONS, PostgresStore

        if url.split("://", 1)[1].split("/", 1)[0].count("@") > 1:
            # libpq would end the user part at the first @ and take the rest of the
            # password for a host name, then print it in its error.
            raise ValueError(
                "the store URL has more than one @ before its host: write an @ in the "
                "password as %40"
            )

        return PostgresStore(url, max_connections=max_connections or MAX_CONNECTIONS)
    if url == "memory://":
        return MemoryStore()
    if url.startswith("sqlite:///"):
        path = url[len("sqlite:///") :]
    elif "://" in url:
        raise ValueError(
            f"unknown store {url!r}; use sqlite:///PATH, postgresql://... or memory://"
        )
    else:
        path = url
        if _CONNINFO.match(url):
            # Taken for a file name, it would be created, and printed with its password.
            raise ValueError(
                "the store looks like a PostgreSQL key=value connection string; write it as a "
                "URL: postgresql://USER:PASSWORD@HOST:PORT/DBNAME"
            )
    if not path:
        raise ValueError("sqlite:/// needs a file path, e.g. sqlite:///.agentscript/sessions.db")
    from agentscript.store.sqlite import SQLiteStore

    return SQLiteStore(path)


__all__ = [
    "DEFAULT_STORE",
    "STORE_FORMAT",
    "DamagedRecord",
    "MemoryStore",
    "SessionBusy",
    "SessionGone",
    "SessionLock",
    "SessionRecord",
    "Store",
    "StoreError",
    "StoreUnreachable",
    "TurnConflict",
    "TurnOutcome",
    "TurnRecord",
    "new_revision",
    "store_from_url",
]
