"""Per-key rate limit: a token bucket per owner, refilled continuously."""

from __future__ import annotations

import math
import time


class RateLimiter:
    """``rate`` requests per second on average, bursts of up to ``burst``; 0 disables it."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = max(1, burst)
        self._buckets: dict[str, tuple[float, float]] = {}  # owner -> (tokens, at)

    def take(self, owner: str, now: float | None = None) -> float:
        """0 when the request may go; else the seconds to wait before retrying."""
        if self.rate <= 0:
            return 0.0
        now = time.monotonic() if now is None else now
        tokens, at = self._buckets.get(owner, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.rate)
        if tokens >= 1.0:
            self._buckets[owner] = (tokens - 1.0, now)
            return 0.0
        self._buckets[owner] = (tokens, now)
        return (1.0 - tokens) / self.rate


def retry_after(seconds: float) -> str:
    """A ``Retry-After`` value: whole seconds, at least 1."""
    return str(max(1, math.ceil(seconds)))


def rate_limited_message(rate: float, wait: float) -> str:
    """What a request past its key's rate limit is told (``serve`` and ``mcp-serve``)."""
    return f"too many requests for this key (rate_limit {rate:g}/s); retry in {wait:.2f} s"
