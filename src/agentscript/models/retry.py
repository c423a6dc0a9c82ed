"""Retrying transient provider failures, and wording the ones that reach the user.

Providers disable their SDK's own retries and use :func:`call_with_retries` instead, so the
backoff is configurable (tests run with a zero delay) and the attempt count is known when the
final error is worded.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently to retry a transient failure.

    ``max_retries`` counts retries, so a call is attempted at most ``max_retries + 1`` times.
    The delay before retry ``n`` (0-based) is ``base_delay * 2**n`` with jitter, capped at
    ``max_delay``, unless the server said how long to wait (``Retry-After`` on a 429 or
    503): that wait is honoured up to ``max_retry_after`` seconds; a longer one is not
    waited for (the call fails at once, so a fallback model can take over).
    """

    max_retries: int = 2
    base_delay: float = 0.5
    max_delay: float = 8.0
    max_retry_after: float = 30.0

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        if self.base_delay < 0 or self.max_delay < 0:
            raise ValueError("retry delays must be >= 0")

    def delay(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (0-based)."""
        raw = self.base_delay * float(2**retry)
        # Jitter spreads out clients that failed together (e.g. after a shared 429).
        return min(self.max_delay, raw * (0.5 + random.random() / 2))


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta seconds or an HTTP date)."""
    if not value:
        return None
    text = value.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    reference = time.time() if now is None else now
    return max(0.0, when.timestamp() - reference)


# Told of each retry: (retry number from 0, seconds waited, the failure, the server's wait).
RetryListener = Callable[[int, float, BaseException, float | None], None]


class RetriesExhausted(Exception):
    """Raised by :func:`call_with_retries` when a transient failure outlived the policy.

    ``__cause__`` is the last failure; ``attempts`` is how many calls were made.
    """

    def __init__(self, attempts: int) -> None:
        super().__init__(f"gave up after {attempts} attempts")
        self.attempts = attempts


async def call_with_retries(
    operation: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    is_transient: Callable[[BaseException], bool],
    *,
    sleep: Sleep = asyncio.sleep,
    retry_after: Callable[[BaseException], float | None] | None = None,
    on_retry: RetryListener | None = None,
) -> T:
    """Await ``operation()``, retrying while it raises a transient failure.

    A non-transient failure propagates unchanged at once. A transient one that is still
    failing after ``policy.max_retries`` retries becomes :class:`RetriesExhausted` chained
    to the last failure, so callers can word it with the attempt count. ``retry_after``
    reads the server's requested wait from a failure (see :class:`RetryPolicy`);
    ``on_retry`` is told of each retry before its wait.
    """
    attempt = 0
    while True:
        try:
            return await operation()
        except Exception as exc:
            if not is_transient(exc):
                raise
            if attempt >= policy.max_retries:
                raise RetriesExhausted(attempt + 1) from exc
            asked = retry_after(exc) if retry_after is not None else None
            if asked is not None and asked > policy.max_retry_after:
                raise RetriesExhausted(attempt + 1) from exc
            wait = asked if asked is not None else policy.delay(attempt)
            if on_retry is not None:
                on_retry(attempt, wait, exc, asked)
            await sleep(wait)
            attempt += 1


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """Replace every occurrence of each (non-trivial) secret in ``text`` with ``***``."""
    from agentscript.redaction import MIN_SECRET_CHARS, without_secrets

    return without_secrets(text, {s for s in secrets if s and len(s) >= MIN_SECRET_CHARS})


def server_message(body: object, fallback: str = "") -> str:
    """The human part of an error body, in either the OpenAI or the Anthropic shape.

    Both wrap it as ``{"error": {"message": ...}}``; some OpenAI-compatible servers put it at
    the top level or send plain text.
    """
    message: Any = None
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            message = error.get("message")
        elif isinstance(error, str):
            message = error
        if message is None:
            message = body.get("message") or body.get("detail")
    elif isinstance(body, str):
        message = body
    text = str(message).strip() if message else fallback.strip()
    if len(text) > 500:
        text = text[:500] + "..."
    return text


def describe_status(
    provider: str,
    status: int,
    message: str,
    *,
    model: str,
    key_env: str,
    attempts: int = 1,
) -> str:
    """A sentence a user can act on, for an HTTP error status from ``provider``."""
    detail = f": {message}" if message else ""
    tries = f" after {attempts} attempts" if attempts > 1 else ""
    if status == 401:
        # The server's wording for a bad key can quote part of it, so it is left out.
        return f"{provider} rejected the API key (HTTP 401). Check {key_env}."
    if status == 403:
        return (
            f"{provider} refused access (HTTP 403){detail}. "
            f"Check that the key in {key_env} may use model '{model}'."
        )
    if status == 404:
        return (
            f"{provider} does not know model '{model}' (HTTP 404){detail}. "
            "Check the model name and the base URL."
        )
    if status == 429:
        return f"{provider} is rate limiting requests or the quota is used up (HTTP 429){tries}{detail}"
    if status >= 500:
        return f"{provider} had a server error (HTTP {status}){tries}{detail}"
    if 400 <= status < 500:
        return f"{provider} refused the request (HTTP {status}){detail}"
    return f"{provider} failed (HTTP {status}){tries}{detail}"


def is_transient_status(status: int) -> bool:
    """Statuses worth retrying: timeouts, conflicts, rate limits and server errors."""
    return status in (408, 409, 429) or status >= 500
