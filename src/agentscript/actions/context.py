"""What an action may learn about the turn that calls it: today, the turn's Idempotency-Key.

``agentscript serve`` sets :data:`IDEMPOTENCY_KEY` around a turn sent with an
``Idempotency-Key`` header. A ``python://`` function that declares a parameter named
``idempotency_key`` receives it (other functions are called as before), so a side effect can be
deduplicated when a turn that never committed is retried. The value is None outside such turns.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

IDEMPOTENCY_KEY: ContextVar[str | None] = ContextVar("agentscript_idempotency_key", default=None)
PARAMETER = "idempotency_key"


def with_turn_context(function: Callable[..., Any], inputs: dict[str, Any]) -> dict[str, Any]:
    """``inputs`` plus ``idempotency_key`` when the turn has one and ``function`` accepts it."""
    return with_key(function, inputs, IDEMPOTENCY_KEY.get())


def with_key(
    function: Callable[..., Any], inputs: dict[str, Any], key: str | None
) -> dict[str, Any]:
    """``inputs`` plus ``idempotency_key=key`` when ``key`` is set and ``function`` accepts it
    (for a call that runs where the context variable cannot reach: a worker process)."""
    if key is None or PARAMETER in inputs:
        return inputs
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):  # builtins without a signature
        return inputs
    if PARAMETER not in parameters:
        return inputs
    return {**inputs, PARAMETER: key}
