"""What a turn commits when its state is too large to keep.

A committed state must be one every worker can restore, and every restore refuses a state
longer than ``restore.MAX_SESSION_CHARS``. A turn's additions are bounded one by one, never as
a sum (``engine/fitting.py``), so a finished turn's state can be over it: committed as it is,
every worker would refuse the session (each answered 500). The service writes the state's text
once, measures it (one ``len``), and only when it is over the limit calls :func:`fit_commit`,
which gives what to commit instead:

- the turn's state with its history shrunk to fit (``fitting.fit_session``; the trace's
  ``EVENT_STEP state_fitted`` says what was dropped), the session kept for the next turn;
- or, when even that does not fit (the variables alone may be too large), the state stored
  before the turn (``fitting.kept_before``) with what the turn counted and the confirmation it
  answered: the turn's actions ran, so a held call it answered must not wait for a yes again.
  The turn failed: its result, its trace and its stream say so, as a failed turn's do
  (:class:`SaidSink` streams the error after the turn's own text), and the session that ran it
  is not kept (it no longer matches what is stored).

Nothing here commits: the caller commits what :func:`fit_commit` returns, under the lock it
holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from agentscript import jsontext
from agentscript.engine import restore
from agentscript.engine.fitting import fit_session, kept_before, record_fitting
from agentscript.engine.session import Reply, Session
from agentscript.engine.speech import SEPARATOR
from agentscript.store import SessionRecord
from agentscript.trace import TurnTrace
from agentscript.trace_steps import ResponseKind, Step, error_step, response_step

# The service's logger: these lines are about its turns.
log = logging.getLogger("agentscript.server")


@dataclass(slots=True)
class Saved:
    """The state a turn commits (``text`` is its JSON, as stored), and whether the session
    that ran the turn may be kept for the next one (it holds that state)."""

    state: dict[str, Any]
    text: str
    ended: bool
    escalated: bool
    keep: bool = True


class SaidSink:
    """A turn's token hook that notes whether it was given text, so that a message the server
    says after the turn (:meth:`say`) is streamed as the turn's own messages are
    (``engine/speech.py``): after ``"\\n\\n"``, as a token of its own, when text came before."""

    __slots__ = ("given", "sink")

    def __init__(self, sink: Callable[[str], None]) -> None:
        self.sink = sink
        self.given = False

    def __call__(self, piece: str) -> None:
        if piece:
            self.given = True
        self.sink(piece)

    def say(self, text: str) -> None:
        """``text`` as a failed turn's message: never raising (``Speech.say_failure``)."""
        with contextlib.suppress(Exception):
            if self.given:
                self.sink(SEPARATOR)
            self.given = True
            self.sink(text)


async def fit_commit(
    saved: Saved,
    session: Session,
    reply: Reply,
    result: dict[str, Any],
    *,
    on_step: Callable[[Step], None] | None,
    said: SaidSink | None,
    read_stored: Callable[[], Awaitable[SessionRecord]],
    restore_stored: Callable[[SessionRecord], Session],
) -> Saved:
    """What to commit instead of ``saved``, the state ``session`` was left in by the turn
    that gave ``reply`` and ``result`` (its turn JSON, ``turn`` set), when ``saved.text`` is
    longer than ``restore.MAX_SESSION_CHARS``: the state with its history shrunk to fit, or,
    when even that does not fit, the state from before the turn, the turn failed (``result``
    and ``reply.trace`` say so, ``on_step`` is given the steps added, ``said`` streams the
    error) and its session not kept.

    ``read_stored`` reads the session's record as stored, under the turn's lock, and raises
    when its state cannot be read; ``restore_stored`` restores it, only to check it (it runs
    in a thread). Both are called only when the shrunk state does not fit either."""
    limit = restore.MAX_SESSION_CHARS
    number = result["turn"]
    trace = TurnTrace.extending(reply.trace, on_step)
    # A rare path over tens of megabytes: off the event loop, as a large restore is.
    fitted = await asyncio.to_thread(fit_session, session, saved.text, limit)
    if fitted.state is not None and fitted.text is not None:
        record_fitting(trace, fitted, session.state.current_node)
        log.warning(
            "turn %d of session %s: its state was larger than MAX_SESSION_CHARS (%d "
            "characters); %d messages of earlier exchanges, %d tool results and %d texts of "
            "the turn were dropped to keep it",
            number,
            session.id,
            limit,
            fitted.dropped,
            fitted.results,
            fitted.texts,
            extra={"fields": {"session_id": session.id, "turn": number}},
        )
        return Saved(fitted.state, fitted.text, saved.ended, saved.escalated)
    stored = await read_stored()
    state = stored.state
    kept = await asyncio.to_thread(
        kept_before,
        lambda: restore_stored(stored),
        session,
        state,
        stored.state_text or jsontext.dumps(state),
        limit,
    )
    before = kept.session
    error = (
        f"the session's state after this turn would be larger than MAX_SESSION_CHARS "
        f"({limit} characters) even without its results and earlier exchanges; the turn "
        "was not kept: the session is as it was before it"
    )
    node = before.state.current_node
    if kept.fitted is not None:  # the state from before it, shrunk to take its counters
        record_fitting(trace, kept.fitted, node)
    error_step(trace, message=error, node=node)
    response_step(trace, text=error, node=node, kind=ResponseKind.ERROR)
    reply.trace["response"] = error
    if said is not None:
        said.say(error)
    # The answer tells what the session now is: nothing of the turn's is in it but what
    # it counted and a confirmation it answered (gone: ``confirmation`` None says so).
    result.update(
        response=error,
        error=error,
        node=node,
        variables=before.variables,
        confirmation=None,
        ended=stored.ended,
        escalated=stored.escalated,
        displayable=[],
    )
    result.pop("buttons", None)
    return Saved(kept.state, kept.text, stored.ended, stored.escalated, keep=False)
