"""A fallback model: when the primary model fails (after its own retries), another answers.

>>> model = FallbackModel(primary, fallback)          # doctest: +SKIP

Each fallback is recorded in the answer's ``events`` (``{"event": "fallback", "from", "to",
"reason"}``), which the trace shows on the ``LLM_STEP`` as ``modelEvents``. After
``open_after`` failures in a row the primary is not tried at all for ``cooldown`` seconds
(so a provider that is down does not cost a timeout on every call), then it is tried again.
A failure of the fallback too is the turn's model failure, carrying both stories.

Configured per agent in ``agentscript.toml``::

    [resilience]
    fallback = "anthropic:claude-haiku-4-5"   # a model spec
    open_after = 3                            # failures in a row before skipping the primary
    cooldown = 60                             # seconds the primary is skipped
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agentscript.models.base import (
    Model,
    ModelError,
    ModelRequest,
    ModelResponse,
    ScriptExhausted,
    TextSink,
)


@dataclass(frozen=True, slots=True)
class FallbackSettings:
    """The ``[resilience]`` table of ``agentscript.toml``."""

    fallback: str
    open_after: int = 3
    cooldown: float = 60.0


class FallbackModel:
    """``primary``, and ``fallback`` when the primary fails."""

    def __init__(
        self,
        primary: Model,
        fallback: Model,
        *,
        open_after: int = 3,
        cooldown: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.primary = primary
        self.fallback = fallback
        self.name = primary.name
        self.open_after = open_after
        self.cooldown = cooldown
        self._clock = clock
        self._failures = 0
        self._skip_until = 0.0

    async def complete(
        self, request: ModelRequest, *, stream: TextSink | None = None
    ) -> ModelResponse:
        events: list[dict[str, Any]] = []
        if self._clock() < self._skip_until:
            events.append(self._event("the primary failed repeatedly; skipped during cooldown"))
        else:
            try:
                response = await self.primary.complete(request, stream=stream)
            except ScriptExhausted:
                raise
            except ModelError as exc:
                self._failures += 1
                if self._failures >= self.open_after:
                    self._skip_until = self._clock() + self.cooldown
                events.extend(exc.events)
                events.append(self._event(str(exc)))
            else:
                self._failures = 0
                return response
        try:
            response = await self.fallback.complete(request, stream=stream)
        except ModelError as exc:
            exc.events = (*events, *exc.events)
            raise
        response.events = [*events, *response.events]
        response.answered_by = response.answered_by or self.fallback.name
        return response

    def _event(self, reason: str) -> dict[str, Any]:
        return {
            "event": "fallback",
            "from": self.primary.name,
            "to": self.fallback.name,
            "reason": reason,
        }


def parse_resilience(table: Mapping[str, Any], *, where: str) -> FallbackSettings | None:
    """The ``[resilience]`` table, or None when it names no fallback. Raises ModelError."""
    if not table:
        return None
    unknown = sorted(set(table) - {"fallback", "open_after", "cooldown"})
    if unknown:
        raise ModelError(
            f"{where}: [resilience] has unknown key(s) {unknown}; known: fallback, open_after, cooldown"
        )
    fallback = table.get("fallback")
    if not isinstance(fallback, str) or ":" not in fallback:
        raise ModelError(
            f'{where}: [resilience] fallback must be a model spec, e.g. "openai:gpt-4o-mini"'
        )
    open_after = table.get("open_after", 3)
    cooldown = table.get("cooldown", 60.0)
    if isinstance(open_after, bool) or not isinstance(open_after, int) or open_after < 1:
        raise ModelError(f"{where}: [resilience] open_after must be a whole number >= 1")
    if isinstance(cooldown, bool) or not isinstance(cooldown, int | float) or cooldown < 0:
        raise ModelError(f"{where}: [resilience] cooldown must be a number of seconds >= 0")
    return FallbackSettings(fallback, open_after, float(cooldown))
