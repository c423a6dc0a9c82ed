"""Fitting a finished turn's saved session under ``restore.MAX_SESSION_CHARS``.

A turn's additions are bounded (``Limits.max_turn_output_chars`` its action outputs together,
``max_reply_chars`` each reply, ``max_variable_chars`` each variable), the state they build over
turns and variables is not: before the turn budget, 72 parallel calls returning 990,000
characters each left a 71-million-character state, which every restore refuses. A host that
saves the state after each turn (``agentscript serve``) measures the text it writes, and only
when it is too large calls :func:`fit_session`, which shrinks the session's history in place,
in this order, until the state's JSON text fits:

1. the oldest whole exchanges before the turn's own (from its last user message on) are
   dropped, as ``trim_history`` drops them: never a tool call without its result;
2. the turn's tool results, largest first, become an error result for the same call;
3. the turn's assistant texts, largest first, but its last one (the reply), become a marker.

Messages are replaced, never edited (``trace_inputs.MessageLog`` tracks them by identity); the
history's ledger is reset, and the log keeps only the messages before the first one replaced.
The result says what was done, and holds the fitted state and its text, or says that even all
of that was not enough (the variables alone may be too large): the session is then left
part-shrunk, and the host must not run it again; it keeps the state from before the turn
instead (:func:`kept_before`), with what the turn counted and the confirmation it answered
(:func:`carry_over`): the turn's actions ran, and a call the user confirmed must not wait for
a yes again.

Messages are measured as the state's text writes them: ``jsontext`` writes UTF-8 with orjson,
or, when the state holds what orjson cannot write exactly (a lone surrogate), the standard
library's ASCII text, where a non-ASCII character takes 6 characters (12 outside the BMP).

:func:`record_fitting` adds the ``EVENT_STEP`` ``state_fitted`` to the turn's trace (a finished
turn's trace document takes steps through ``TurnTrace.extending``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from agentscript import jsontext
from agentscript.engine.history import exchange_starts
from agentscript.models.base import Message
from agentscript.trace import TurnTrace
from agentscript.trace_steps import Step, event_step

if TYPE_CHECKING:
    from agentscript.engine.session import Session

# Characters the fitted history is aimed below the limit by: what the rest of the state may
# change by when the history does (the ``llm_input`` mark's counts), so that one pass fits.
# A pass that still misses goes on shrinking.
MARGIN = 1_000

# What each shrink is counted under in :class:`Fitted`.
EXCHANGE, RESULT, TEXT = "exchange", "result", "text"

# Where a Mantle session holds a call waiting for a yes/no (``mantle/run/stack.py``): read here
# as data, the engine does not import Mantle.
MANTLE, PENDING = "mantle", "pending"


@dataclass(frozen=True)
class Fitted:
    """What :func:`fit_session` did: messages of earlier exchanges ``dropped``, tool results
    and assistant texts of the turn replaced; the fitted ``state`` and its JSON ``text``, both
    None when it could not fit (``fits`` False)."""

    limit: int
    dropped: int
    results: int
    texts: int
    state: dict[str, Any] | None
    text: str | None

    @property
    def fits(self) -> bool:
        return self.text is not None


def why_dropped(limit: int) -> str:
    """The reason every shrink gives, naming the bound."""
    return f"the saved session would be larger than MAX_SESSION_CHARS ({limit} characters)"


def fit_session(session: Session, text: str, limit: int) -> Fitted:
    """Shrink ``session``'s history in place until its saved state (``to_json``, written by
    ``jsontext.dumps``, as ``text`` is) has at most ``limit`` characters; ``text`` is its
    current, oversized JSON text. Each message is measured once; the state is written again
    after each pass."""
    history = session.state.history
    size = _measure(text)
    sizes = [size(message) for message in history]
    counts = {EXCHANGE: 0, RESULT: 0, TEXT: 0}
    replaced: list[int] = []  # where a message was replaced (after the exchanges dropped)
    shrinks = _shrinks(history, sizes, replaced, why_dropped(limit), size)
    while True:
        need = len(text) - (limit - MARGIN)
        exhausted = True
        for kind, count, freed in shrinks:
            counts[kind] += count
            need -= freed
            if need <= 0:
                exhausted = False
                break
        if session.ledger is not None:  # it assumes messages are never replaced or dropped
            session.ledger.reset()
        # The log of what the last model call was given finds it again in the history from
        # the first and last messages alone, which a replacement between them leaves in
        # place: it keeps only the messages before the first one replaced, so that the saved
        # ``llm_input`` and the next step name no message the history no longer has.
        session.inputs.resume(history[: min(replaced, default=len(history))])
        state = session.to_json(detached=False)
        text = jsontext.dumps(state)
        if len(text) <= limit:
            return Fitted(limit, counts[EXCHANGE], counts[RESULT], counts[TEXT], state, text)
        if exhausted:
            return Fitted(limit, counts[EXCHANGE], counts[RESULT], counts[TEXT], None, None)


def _measure(text: str) -> Callable[[Message], int]:
    """How a message of the state ``text`` is measured. ``jsontext.dumps`` writes a state
    with orjson (UTF-8: never ASCII-only while a message has a non-ASCII character), or with
    the standard library's ASCII escapes when something in it, anywhere, is what orjson cannot
    write exactly (a lone surrogate): a message measured with orjson would then count each
    non-ASCII character as 1 of its 6 (an audit's fit dropped every result of 31 for one)."""
    return _ascii_size if text.isascii() else _size


def _size(message: Message) -> int:
    """The characters ``message`` takes in the state's JSON text (its comma included)."""
    return len(jsontext.dumps(message.to_json())) + 1


def _ascii_size(message: Message) -> int:
    """:func:`_size` in a state written as ASCII: as the standard library escapes it (the
    same text as orjson's for a message that is ASCII already)."""
    data = message.to_json()
    written = jsontext.dumps(data)
    if not written.isascii():
        written = json.dumps(data, separators=(",", ":"), default=repr)
    return len(written) + 1


def _shrinks(
    history: list[Message],
    sizes: list[int],
    replaced: list[int],
    reason: str,
    size: Callable[[Message], int],
) -> Iterator[tuple[str, int, int]]:
    """Shrink ``history`` one step at a time, in the module's order, keeping ``sizes`` (each
    message's ``size``) in step and noting in ``replaced`` where a message was replaced;
    after each step, ``(kind, messages, characters freed)``."""
    # 1. Whole exchanges before the turn's own (its last user message on), oldest first, cut
    # where ``trim_history`` cuts; the turn's exchange then begins the history.
    dropped = 0
    for start in list(exchange_starts(history)):
        cut = start - dropped
        freed = sum(sizes[:cut])
        del history[:cut]
        del sizes[:cut]
        dropped = start
        yield EXCHANGE, cut, freed
    # 2. The turn's tool results, largest first.
    error = json.dumps({"error": f"result dropped: {reason}"}, ensure_ascii=False)
    results = [i for i, message in enumerate(history) if message.role == "tool"]
    for index in sorted(results, key=lambda i: -sizes[i]):
        # The content as Message.tool_result writes it, answering the same call.
        freed = _replace(history, sizes, index, replace(history[index], content=error), size)
        if freed:
            replaced.append(index)
            yield RESULT, 1, freed
    # 3. The turn's assistant texts, largest first, but the last (what the user was answered).
    texts = [i for i, m in enumerate(history) if m.role == "assistant" and m.content]
    marker = f"[text dropped: {reason}]"
    for index in sorted(texts[:-1], key=lambda i: -sizes[i]):
        message = history[index]
        shorter = replace(message, content=marker, tool_calls=list(message.tool_calls))
        freed = _replace(history, sizes, index, shorter, size)
        if freed:
            replaced.append(index)
            yield TEXT, 1, freed


def _replace(
    history: list[Message],
    sizes: list[int],
    index: int,
    message: Message,
    size: Callable[[Message], int],
) -> int:
    """Put ``message`` at ``index``; the characters that freed (none if it is no shorter,
    when it is not put)."""
    new = size(message)
    if new >= sizes[index]:
        return 0
    freed = sizes[index] - new
    history[index], sizes[index] = message, new
    return freed


@dataclass(frozen=True)
class Kept:
    """What a host commits for a turn whose state could not fit (:func:`kept_before`): the
    ``session`` from before the turn (its variables and node are what the answer shows), the
    ``state`` and its JSON ``text``, and what :func:`fit_session` did to that session when the
    turn's counters made it too long (else None)."""

    session: Session
    state: dict[str, Any]
    text: str
    fitted: Fitted | None = None


def kept_before(
    restore: Callable[[], Session], after: Session, state: dict[str, Any], text: str, limit: int
) -> Kept:
    """The state to commit instead of the one a turn left (``after``), which cannot fit:
    the state from before the turn (``state``, its ``text`` as stored, which a restore accepted;
    ``restore`` gives a new session of it) with what the turn counted and the confirmation it
    answered (:func:`carry_over`), measured as any committed state is. The counters may take
    that state, one at the limit, a few characters over: it is then fitted itself (its own
    earlier exchanges first); if even that fails, the state is the stored one again, with only
    the confirmation answered (which makes it shorter), or exactly as stored."""
    before = restore()
    carry_over(before, after)
    carried = before.to_json(detached=False)
    written = jsontext.dumps(carried)
    if len(written) <= limit:
        return Kept(before, carried, written)
    fitted = fit_session(before, written, limit)
    if fitted.state is not None and fitted.text is not None:
        return Kept(before, fitted.state, fitted.text, fitted)
    before = restore()  # the first one is part-shrunk
    if settle_confirmations(before, after):
        settled = before.to_json(detached=False)
        written = jsontext.dumps(settled)
        if len(written) <= limit:
            return Kept(before, settled, written)
    return Kept(before, state, text)


def carry_over(before: Session, after: Session) -> None:
    """``before``, the session as it was before a turn whose state could not fit, takes from
    ``after``, the session that turn left, what the turn counted all the same: its number (a
    failed turn is a turn) and the session's usage totals (its budgets go on from what was
    spent); and what it did that must not be done again (:func:`settle_confirmations`)."""
    before.state.turn = after.state.turn
    usage = after.state.extra.get("usage")
    if isinstance(usage, dict):
        before.state.extra["usage"] = dict(usage)
    settle_confirmations(before, after)


def settle_confirmations(before: Session, after: Session) -> bool:
    """Drop from ``before`` a call waiting for the user's yes/no that the turn ``after`` left
    answered: its actions ran (a "yes" ran the call), so the state from before it, which still
    holds the call, would run it again at the next "yes". A held call stays only if the turn
    left it as it was; one it answered, declined or dropped is gone, and one it held itself is
    not carried (its question was not what the user was answered: the turn's error was; and a
    Mantle call goes with its skill's block pointer, which is not carried). Agent Script keeps
    the call in ``pending_confirmation``, Mantle in ``extra["mantle"]["pending"]``. A call an
    ``execute_tool`` step held is asked again, not run, when the block reaches the step again:
    its pointer is as before the turn, and only Mantle knows where the step leads. True when
    ``before`` changed."""
    changed = False
    state = before.state
    pending = state.pending_confirmation
    if pending is not None and pending != after.state.pending_confirmation:
        state.pending_confirmation = None
        changed = True
    held = state.extra.get(MANTLE)
    if isinstance(held, dict) and held.get(PENDING) is not None:
        left = after.state.extra.get(MANTLE)
        if not isinstance(left, dict) or left.get(PENDING) != held[PENDING]:
            held[PENDING] = None
            changed = True
    return changed


def record_fitting(trace: TurnTrace, fitted: Fitted, node: str | None) -> Step:
    """The ``EVENT_STEP`` ``state_fitted`` saying what :func:`fit_session` did and why."""
    return event_step(
        trace,
        event="state_fitted",
        node=node,
        tool=None,
        dropped=fitted.dropped,
        resultsDropped=fitted.results,
        textsDropped=fitted.texts,
        limit=fitted.limit,
        reason=why_dropped(fitted.limit),
    )
