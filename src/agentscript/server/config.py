"""Every bound and switch of the server, as one dataclass with documented defaults.

Each field can be overridden by the caller (``agentscript serve`` options, ``create_app``);
an error caused by a bound names its field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class ServerConfig:
    # Largest request body accepted, in bytes (413 above it).
    max_body_bytes: int = 256 * 1024
    # Longest user message, in characters (422 above it).
    max_message_chars: int = 16_000
    # Turns running at once in this process; one more gets 503 with Retry-After.
    max_concurrent_turns: int = 64
    # Of those, turns one API key may run at once (without keys, all clients are one); one
    # more gets 429 with Retry-After. 0: no share, a key may take every slot.
    max_turns_per_key: int = 0
    # How long a message waits for another turn of its session before 409 (seconds).
    lock_wait: float = 30.0
    # Requests per second per API key (token bucket, ``rate_burst`` deep); 0 turns it off.
    # ``serve --rate-limit`` sets the burst to two seconds' worth (:func:`burst_for`).
    rate_limit: float = 20.0
    rate_burst: int = 40
    # Sessions expire this many seconds after their last turn; None keeps them.
    session_ttl: float | None = None
    # PostgreSQL store: connections each worker opens at most (plus one for its presence
    # lock); the same as agentscript.store.postgres.MAX_CONNECTIONS, which a test pins.
    store_connections: int = 16
    # Sessions kept in memory after their turn, so that their next turn here skips the
    # restore (server/live.py; the store stays the truth); 0 restores every turn.
    live_sessions: int = 1000
    # After SIGTERM, how long turns already running may take to finish and commit (seconds);
    # those still running then are cancelled, uncommitted. Below Kubernetes' default 30 s
    # before SIGKILL, so that a rolling update ends every turn cleanly.
    shutdown_grace: int = 25
    # With --workers N: seconds a worker's event loop may leave its supervisor's ping
    # unanswered before the worker is killed and replaced (server/pings.py); 0: never. Well
    # above a healthy loop's longest pause (an inline python:// action computing a while);
    # uvicorn's own check allowed 5 s.
    worker_timeout: float = 30.0
    # With --workers N: seconds a worker may take from its start until its server listens
    # (imports, the store opened, migrations run); 0: unbounded. Past the PostgreSQL store's
    # own bounds on reaching the database (a connect timeout of 10 s an address, 5 s checks),
    # after which a worker exits as one that could not reach it and is started again later;
    # this catches what never ends (an import that blocks).
    worker_start_timeout: float = 60.0
    # Largest page of GET /v1/sessions: the API's own bound on ``limit``. A page reads no
    # state (only each session's summary columns), so a full page costs little.
    max_page: int = 1000
    # One log line per request (server/logs.py); server errors, store failures and failed
    # turns are logged either way, a client's 4xx only with it.
    access_log: bool = False
    # Origins allowed by CORS; empty: CORS off (no CORS headers at all).
    cors_origins: list[str] = field(default_factory=list)
    # Answer only requests addressed to a loopback name and not sent by another site's page
    # (server/local.py): what `serve` sets when it runs without API keys.
    local_only: bool = False


def burst_for(rate_limit: float) -> int:
    """The bucket's depth for ``rate_limit`` requests a second: two seconds' worth, at least
    one request (40 for the default 20). A fixed depth let ``--rate-limit 1`` take 40
    requests at once."""
    return max(1, math.ceil(2 * rate_limit))
