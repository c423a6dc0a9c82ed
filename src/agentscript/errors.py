"""The project's exceptions, split by audience.

Three bases, so a caller can tell at a glance whose problem an exception is:

- :class:`UsageError`: the caller's mistake (a broken agent file, a bad option, a value that
  does not fit its declaration). The message says what to fix; nothing ran.
- :class:`RunFailure`: a model or an action failed while a turn ran. A turn answers it with
  the agent's error message and an ``ERROR_STEP``; the session stays usable (S11, S12).
- :class:`Signal`: internal control flow (a transition, a bound reached inside an evaluator).
  It never leaves the engine; seeing one outside is a bug.

Every exception keeps its data in fields (``limit``, ``value``, ``exhausted``, ...), not only
in its text, so servers and test runners can act on it without parsing messages.
"""

from __future__ import annotations


class UsageError(Exception):
    """The caller's mistake: fix the input and try again."""


class SessionRestoreError(UsageError, ValueError):
    """A saved session that cannot be restored: ``field`` is where, ``reason`` is why."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"cannot restore the session: {field}: {reason}")
        self.field = field
        self.reason = reason


class RunFailure(Exception):
    """A model or action failure that ends the running turn (never the session)."""


class Signal(Exception):
    """Internal control flow; caught inside the engine."""


class TurnError(RunFailure):
    """The turn cannot go on (model failure, deterministic failure, limit).

    ``exhausted`` marks the scripted model running out of moves: `agentscript run` then
    reports that the conversation file and the engine disagree.
    """

    def __init__(self, message: str, *, exhausted: bool = False) -> None:
        super().__init__(message)
        self.exhausted = exhausted


class LimitReached(TurnError):
    """A per-turn bound of :class:`~agentscript.limits.Limits` was passed.

    ``limit`` is the name of the ``Limits`` field (also named in the message), ``value`` the
    bound that applied.
    """

    def __init__(self, limit: str, value: int | float, message: str) -> None:
        super().__init__(f"{message} (Limits.{limit} = {value}); the turn was stopped")
        self.limit = limit
        self.value = value


class UnansweredToolCall(TurnError):
    """A model call was about to be sent with a tool call that has no answer in the history.

    Providers reject such a request; the engine refuses to send it and ends the turn (the
    failure handling then answers the call, so the next turn starts from a valid history).
    """

    def __init__(self, call_ids: list[str]) -> None:
        super().__init__(
            f"internal error: tool call(s) {call_ids} have no answer in the history; "
            "the model was not called"
        )
        self.call_ids = call_ids
