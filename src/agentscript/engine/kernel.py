"""The turn machinery both formats share: one rule each, used by Agent Script's
:class:`~agentscript.engine.turn.TurnRunner` and Mantle's ``MantleTurnRunner``.

- **Failure** (:func:`fail_turn`): a failed turn ends with one message to the user, an
  ``ERROR_STEP`` and a ``RESPONSE_STEP`` of kind ``error``. The history rule: every tool call
  already in the history gets an answer, then the message said to the user is appended as an
  assistant message, so after a failed turn the history is ``[..., user, (calls and their
  answers), assistant]`` in both formats: the model sees next turn that this one failed, and
  the roles keep alternating as providers require. A call whose action ran before the failure
  is answered with what it returned and a note (:func:`ran_then_failed`), never as "not
  completed": the model must not run it again. Any other exception (a bug, a model or
  observer raising something else) fails the turn the same way as an internal error
  (:func:`internal_error`), with URL credentials removed from its text.
- **LLM-call budget** (:func:`spend_llm_call`): ``Limits.max_llm_calls`` per turn.
- **Argument bounds** (:func:`bounds_problem`): size and depth of a tool call's arguments,
  checked before their values are read; a value JSON cannot print (an integer of more than
  4300 digits) is refused like any other bad argument, never raised.
- **Yes/no** (:func:`read_yes_no`): the user's plain answer to a confirmation question.
- **Tool-call window** (:class:`ToolCallWindow`): the assistant message making tool calls,
  their answers in order, and what was said meanwhile held back until every call is answered.
- **Last check before a model call** (:func:`check_answered`): a request whose history has a
  tool call without an answer is never sent.

Nothing here knows either format's agent model; the runners pass in what they own.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentscript.engine.history import HistoryLedger
from agentscript.errors import LimitReached, TurnError, UnansweredToolCall
from agentscript.expr.values import nested_deeper_than
from agentscript.limits import Limits
from agentscript.models.base import Message, ToolCall
from agentscript.redaction import shown_urls, url_at_end
from agentscript.trace import TurnTrace
from agentscript.trace_steps import ResponseKind, error_step, response_step

__all__ = [
    "NO",
    "TURN_ENDING",
    "YES",
    "LimitReached",
    "ToolCallWindow",
    "TurnResult",
    "answer_unanswered",
    "bounds_problem",
    "check_answered",
    "fail_turn",
    "internal_error",
    "ran_then_failed",
    "read_yes_no",
    "spend_llm_call",
    "unanswered_calls",
]

YES = frozenset(
    {
        "yes",
        "y",
        "yeah",
        "yep",
        "sure",
        "ok",
        "okay",
        "confirm",
        "confirmed",
        "go ahead",
        "please do",
        "do it",
    }
)
NO = frozenset({"no", "n", "nope", "cancel", "stop", "don't", "do not", "decline", "never mind"})

# The failures that end a turn (and only the turn): the runner answers them with the agent's
# error message. Every one is a TurnError (model failure, deterministic failure, limit).
TURN_ENDING = (TurnError,)

NOT_COMPLETED = "not completed: the turn was stopped"

# An internal error's text reaches the user's client (reply.error, the trace); a longer one is
# a dump, not a message.
MAX_INTERNAL_ERROR_CHARS = 500
# What of an internal error's text is scrubbed at most: scrubbing removes credentials and
# queries, so more than is shown is kept for it.
SCRUBBED_CHARS = 4 * MAX_INTERNAL_ERROR_CHARS


@dataclass
class TurnResult:
    """What a turn runner hands back to the session."""

    messages: list[str] = field(default_factory=list)
    # The nodes that had control, in order; a delegate (control came back) is not one of them.
    path: list[str] = field(default_factory=list)
    # The nodes that ran as delegates (``@subagent.x`` called as a tool), in order.
    delegated: list[str] = field(default_factory=list)
    escalated: bool = False
    ended: bool = False
    error: str | None = None
    exhausted: bool = False  # the scripted model had no move left
    confirmation: str | None = None
    buttons: list[dict[str, Any]] = field(default_factory=list)  # Mantle response buttons


def read_yes_no(text: str) -> bool | None:
    """The user's plain yes/no (None when the answer needs interpreting)."""
    answer = text.strip().lower().rstrip(".!")
    if answer in YES:
        return True
    if answer in NO:
        return False
    return None


def spend_llm_call(used: int, limits: Limits) -> int:
    """Count one more LLM call of the turn; past ``Limits.max_llm_calls`` the turn ends."""
    used += 1
    if used > limits.max_llm_calls:
        raise LimitReached(
            "max_llm_calls",
            limits.max_llm_calls,
            f"more than {limits.max_llm_calls} LLM calls in one turn",
        )
    return used


def bounds_problem(name: str, arguments: Any, limits: Limits) -> tuple[str, str] | None:
    """Why the arguments of a call to ``name`` are refused for size or depth, with the
    ``Limits`` field that applies (None when they fit).

    Every call of the model is bounded this way, engine tools included.
    """
    try:
        size = len(json.dumps(arguments, default=repr))
    except ValueError:  # an int too long to print (Python's digit limit)
        return f"the arguments of '{name}' are not JSON data", "max_argument_chars"
    except RecursionError:  # nested beyond what the encoder walks
        return f"arguments of '{name}' are nested too deeply", "max_argument_depth"
    if size > limits.max_argument_chars:
        return f"arguments of '{name}' are too large ({size} characters)", "max_argument_chars"
    if nested_deeper_than(arguments, limits.max_argument_depth):
        return f"arguments of '{name}' are nested too deeply", "max_argument_depth"
    return None


# --- the history: every tool call has its answer --------------------------------------------


def unanswered_calls(history: list[Message]) -> list[ToolCall]:
    """Tool calls in ``history`` with no tool message answering them."""
    answered = {m.tool_call_id for m in history if m.role == "tool"}
    return [c for m in history for c in m.tool_calls if c.id not in answered]


def answer_unanswered(history: list[Message], reason: str = NOT_COMPLETED) -> list[str]:
    """Give every unanswered tool call an error answer, right after its call's existing
    answers (providers want answers next to their calls); returns the ids answered."""
    missing = {c.id for c in unanswered_calls(history)}
    if not missing:
        return []
    fixed: list[Message] = []
    owed: list[ToolCall] = []  # calls of the last assistant message still to answer

    def settle() -> None:
        fixed.extend(Message.tool_result(call, {"error": reason}) for call in owed)
        owed.clear()

    for message in history:
        if message.role != "tool":
            settle()
        fixed.append(message)
        owed.extend(c for c in message.tool_calls if c.id in missing)
    settle()
    history[:] = fixed
    return sorted(missing)


def check_answered(history: list[Message], ledger: HistoryLedger | None = None) -> None:
    """The last check before a model call: refuse to send a tool call without its answer.
    With the session's ``ledger`` only the messages added since its last look are read."""
    if ledger is not None:
        ledger.sync(history)
        missing = ledger.unanswered()
    else:
        missing = unanswered_calls(history)
    if missing:
        raise UnansweredToolCall([c.id for c in missing])


class ToolCallWindow:
    """The span of history from an assistant message making tool calls to their answers.

    ``open`` appends the calls; ``answer`` appends one call's result; what is said while the
    window is open (a tool's ``context.send``, an escalation message) is held by ``say`` and
    follows the answers on ``close``. ``close`` answers any call still open (the step was cut
    short by a failure), so it always leaves every call answered; use it in ``finally``.
    """

    def __init__(self, history: list[Message]) -> None:
        self.history = history
        self.calls: list[ToolCall] = []
        self.said: list[Message] = []
        self._answered: set[str] = set()

    def open(self, text: str, calls: list[ToolCall]) -> None:
        self.calls = list(calls)
        self.history.append(Message("assistant", text, tool_calls=list(calls)))

    def answer(self, call: ToolCall, result: Any) -> None:
        self._answered.add(call.id)
        self.history.append(Message.tool_result(call, result))

    def say(self, text: str) -> None:
        self.said.append(Message("assistant", text))

    def close(self, reason: str = NOT_COMPLETED) -> None:
        for call in self.calls:
            if call.id not in self._answered:
                self.answer(call, {"error": reason})
        self.history.extend(self.said)
        self.said = []


# --- failure ---------------------------------------------------------------------------------


def ran_then_failed(answer: dict[str, Any], error: Exception) -> dict[str, Any]:
    """The answer of a call whose action ran (``answer``) but whose follow-up (its callback)
    failed with ``error``: what the action did stays visible, so the model does not run it
    again as it would a call "not completed"."""
    return {**answer, "note": f"the action ran; its follow-up failed: {error}"}


def internal_error(exc: Exception) -> TurnError:
    """``exc`` (not a TurnError: a bug, a model, sink or observer raising something else) as
    the TurnError that fails the turn. Its text names the exception's type; a URL in it loses
    its user, password and query string, where credentials travel (``redaction.shown_urls``,
    as for an action's error: a URL ends at whitespace, not at a quote a password may hold)."""
    detail = str(exc)
    cut = len(detail) > SCRUBBED_CHARS
    if cut:
        # Cut before scrubbing (a few microseconds a URL or path: a text of megabytes would
        # hold the loop for seconds), keeping room for what scrubbing removes; a URL the cut
        # went through is dropped whole (its password may be all that was kept of it).
        detail = detail[:SCRUBBED_CHARS]
        detail = detail[: url_at_end(detail)]
    detail = shown_urls(detail)
    if cut or len(detail) > MAX_INTERNAL_ERROR_CHARS:
        detail = detail[:MAX_INTERNAL_ERROR_CHARS] + "..."
    text = f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
    return TurnError(f"internal error: {text}")


def fail_turn(
    *,
    history: list[Message],
    trace: TurnTrace,
    result: TurnResult,
    say: Callable[[str], None],
    error: Exception,
    text: str,
    node: str | None,
) -> None:
    """End the turn on ``error`` with ``text`` said to the user through ``say`` (the turn's
    ``Speech.say``, so a stream gets it too; the history rule above); an ``error`` that is not
    a TurnError is reported as an :func:`internal_error`."""
    if not isinstance(error, TurnError):
        error = internal_error(error)
    result.exhausted = error.exhausted
    result.error = str(error)
    error_step(trace, message=str(error), node=node)
    answer_unanswered(history)
    say(text)
    history.append(Message("assistant", text))
    response_step(trace, text=text, node=node, kind=ResponseKind.ERROR)
