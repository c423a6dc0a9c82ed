"""Room for what a turn adds: every state a turn leaves is one ``restore`` accepts.

``AgentBase.restore`` refuses a saved session larger than ``MAX_SESSION_CHARS``
(``engine/restore.py``). Every single value a turn keeps has its own bound (an action's
outputs ``Limits.max_output_chars``, a model reply ``max_reply_chars``, ...), but a turn may
keep many of them: 72 tool results of 990,000 characters made a state of 71 million, which the
session that ran the turn went on with and every other worker refused as damaged. The history
trim before a turn does not help: it keeps the last exchange whatever its size.

The session opens a :class:`TurnRoom` around each turn (:func:`keeping`); what joins the
history is held to it where it joins:

- a tool's result (``ToolCallWindow.answer``, both formats): past the room it is replaced by
  an error result saying the tool ran and why its result was dropped, with an ``EVENT_STEP``
  ``result_dropped`` naming the limit; the model reads it and the turn goes on;
- a Mantle tool's ``context.send`` text (``mantle/run/tool_execution.py``): refused inside
  the tool (an error result for the model unless the tool catches it), ``EVENT_STEP``
  ``send_refused``;
- a model reply (``engine/llm.call_model``): one that does not fit fails the turn
  (:class:`StateTooLarge`, the failed-turn rule), never entering the history;
- the user's message (``Session._run_turn``): older exchanges are dropped to make room (the
  last one too, unlike the usual trim); a message that does not fit even then refuses the
  turn.

The room is two bounds: ``Limits.max_turn_chars``, what the history the turn works on grew by
(counted like ``max_history_chars``; results and sends only are refused by it), and what the
whole saved state would take, counted in the largest form restore reads (the standard
library's spaced, ASCII-escaped JSON, or the walk of a saved mapping), held under
``MAX_SESSION_CHARS`` with headroom for the model's last reply and the failure messages.
Sizes come from the session's :class:`~.history.HistoryLedger` (only new messages are counted)
with a cheap ceiling first; the exact count is made only when the ceiling comes near the bound.

What no check sees (a Mantle response rendered from large memory values, the variables a turn
writes) is caught at the end of the turn by :meth:`TurnRoom.settle`: older exchanges are
dropped, then the turn's own exchange is replaced by its user message and a failure, then the
variables go back to what they were when the turn started. It never runs under the defaults.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from agentscript.engine import restore as _restore
from agentscript.engine.history import (
    HistoryLedger,
    message_ceiling,
    message_chars,
    stored_chars,
)
from agentscript.engine.state import SessionState
from agentscript.errors import TurnError
from agentscript.jsonsafe import json_size
from agentscript.jsontext import dumps_bytes
from agentscript.limits import Limits
from agentscript.models.base import Message, ToolCall
from agentscript.trace import TurnTrace
from agentscript.trace_steps import event_step

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "SESSION_LIMIT",
    "StateTooLarge",
    "TurnRoom",
    "active_room",
    "keeping",
    "send_refusal",
]

# The name a refusal by the saved-session bound gives as its ``limit``.
SESSION_LIMIT = "MAX_SESSION_CHARS"
# What Session.to_json adds to the state: the agent's name and hash, ``llm_input``, the
# signature, the format tag.
_FRAME = 16_384
# Characters a byte of compact UTF-8 JSON may take in a saved session: the walk of a saved
# mapping counts a float as 24 characters and JSON spells one in 3 or more (``1.0``); every
# other value the walk counts at most as its bytes, plus one for ``null``. JSON text spaced
# and escaped to ASCII takes at most 4 characters a byte (an escape is 6 characters for 2
# bytes, or 12 for 4; ", " is 2 for 1).
_BYTES_CEILING = 8


def session_cap() -> int:
    """``MAX_SESSION_CHARS``, read when needed (tests lower it)."""
    return int(_restore.MAX_SESSION_CHARS)


class StateTooLarge(TurnError):
    """What the turn would keep does not fit in a saved session."""

    def __init__(self, message: str) -> None:
        super().__init__(
            f"{message} ({SESSION_LIMIT} = {session_cap()}, the most a saved session holds); "
            "the turn was stopped"
        )
        self.limit = SESSION_LIMIT


def _rest(state: SessionState) -> dict[str, Any]:
    """Everything ``SessionState.to_json`` saves but the history (shared, not copied)."""
    pending = state.pending_confirmation
    return {
        "session_id": state.session_id,
        "variables": state.variables,
        "current_node": state.current_node,
        "resume_node": state.resume_node,
        "pending_confirmation": pending.to_json() if pending is not None else None,
        "stub_usage": state.stub_usage,
        "extra": state.extra,
    }


def rest_ceiling(state: SessionState) -> int:
    """At least what the state but its history takes in a saved session (one compact
    serialisation: microseconds for a usual state)."""
    try:
        return _BYTES_CEILING * len(dumps_bytes(_rest(state))) + _FRAME
    except (TypeError, ValueError):  # nothing a turn keeps; counted exactly then
        return rest_stored(state)


def rest_stored(state: SessionState) -> int:
    """What the state but its history takes in the largest form restore reads."""
    data = _rest(state)
    try:
        text = len(json.dumps(data, default=repr))
    except ValueError:  # an integer too long to print: no saved session holds one
        text = 0
    return max(text, json_size(data)) + _FRAME


def _headroom(cap: int) -> int:
    """What is left unbooked for what no check sees (the failure messages, a few said
    texts): a 64th of the bound, a million characters by default."""
    return cap // 64


def _reply_room(cap: int, limits: Limits) -> int:
    """What a tool result or a send must leave for the model's reply after it: twice the
    longest reply, at most an eighth of the bound."""
    return min(2 * limits.max_reply_chars, cap // 8)


class TurnRoom:
    """The room of one turn of ``state`` (see the module's docstring). Made after the trim
    that starts the turn; the session's ``ledger`` keeps the history's sizes."""

    def __init__(
        self, state: SessionState, ledger: HistoryLedger, limits: Limits, trace: TurnTrace
    ) -> None:
        self.state = state
        self.ledger = ledger
        self.limits = limits
        self.trace = trace
        ledger.sync(state.history)
        self.start_len = len(state.history)
        self.start_chars = ledger.chars
        # For the last resort only (settle): a write replaces a value, never changes it in place.
        self.start_variables = dict(state.variables)
        self._rest_ceiling = rest_ceiling(state)
        self._rest_exact: int | None = None
        # Said while tool calls wait for their answers (ToolCallWindow.say): in the history
        # once the calls are answered, counted here until then.
        self._held: list[Message] = []
        self.held_chars = 0
        self.held_ceiling = 0

    # --- sizes ---------------------------------------------------------------------------

    def added_chars(self) -> int:
        """What the history the turn works on grew by since the turn started, counted like
        ``Limits.max_history_chars`` (a delegated subagent's history included while it runs)."""
        self.ledger.sync(self.state.history)
        return self.ledger.chars - self.start_chars + self.held_chars

    def _fits(self, message: Message | None, leave: int) -> bool:
        """Whether the saved state, with ``message`` added, stays ``leave`` characters under
        the bound: by the ceiling when it is far enough, else exactly."""
        cap = session_cap() - leave
        history = self.state.history
        ledger = self.ledger
        ledger.sync(history)
        new = message_ceiling(message) if message is not None else 0
        if ledger.ceiling + self.held_ceiling + self._rest_ceiling + new <= cap:
            return True
        if self._rest_exact is None:
            # Once a turn: variables a turn writes after this are the headroom's.
            self._rest_exact = rest_stored(self.state)
        new = stored_chars(message) if message is not None else 0
        held = sum(stored_chars(m) for m in self._held)
        return ledger.stored(history) + held + self._rest_exact + new <= cap

    def total_fits(self) -> bool:
        """Whether the state as it is now fits in a saved session (no headroom): the
        variables are counted again, as they are now."""
        self._rest_ceiling = rest_ceiling(self.state)
        self._rest_exact = None
        return self._fits(None, 0)

    def _refusal(self, message: Message, what: str, *, turn_bound: bool) -> tuple[str, str] | None:
        """Why ``message`` may not join the history, and the limit's name; None when it fits.
        ``turn_bound``: held to ``Limits.max_turn_chars`` too (a result or a send)."""
        cap = session_cap()
        if turn_bound:
            most = self.limits.max_turn_chars
            added = self.added_chars() + message_chars(message)
            if added > most:
                return (
                    f"{what} would take what this turn added to the history to {added} "
                    f"characters, past Limits.max_turn_chars ({most})",
                    "max_turn_chars",
                )
        leave = _headroom(cap) + (_reply_room(cap, self.limits) if turn_bound else 0)
        if self._fits(message, leave):
            return None
        return (
            f"{what} would make the saved session larger than the {cap} characters it may "
            f"hold ({SESSION_LIMIT})",
            SESSION_LIMIT,
        )

    # --- the checks ----------------------------------------------------------------------

    def admit_result(self, call: ToolCall, message: Message, node: str | None) -> Message:
        """``message`` (the answer to ``call``), or, when it does not fit, an error result
        saying the tool ran and why its result was dropped (``EVENT_STEP result_dropped``)."""
        size = message_chars(message)
        refusal = self._refusal(message, f"the result ({size} characters)", turn_bound=True)
        if refusal is None:
            return message
        reason, limit = refusal
        error = f"'{call.name}' ran, but its result was dropped: {reason}. Ask for less."
        dropped = Message.tool_result(call, {"error": error})
        if stored_chars(dropped) >= stored_chars(message):
            return message  # the error would take as much room: every call has its answer
        event_step(
            self.trace,
            event="result_dropped",
            node=node,
            tool=call.name,
            call_id=call.id,
            chars=size,
            limit=limit,
            reason=reason,
        )
        return dropped

    def send_refusal(self, text: str, tool: str, node: str | None) -> tuple[str, str] | None:
        """Why a tool's ``context.send`` of ``text`` may not be said, with the limit's name;
        None when it may."""
        return self._refusal(
            Message("assistant", text), f"the text ({len(text)} characters)", turn_bound=True
        )

    def check_reply(self, message: Message) -> None:
        """StateTooLarge when the model's reply (as the history would keep it) does not fit."""
        refusal = self._refusal(message, "the model's reply", turn_bound=False)
        if refusal is not None:
            raise StateTooLarge(refusal[0])

    def make_room(self, text: str) -> str | None:
        """Make room for the user's message ``text`` and a reply: the oldest exchanges are
        dropped, the last one too if need be (``EVENT_STEP history_trimmed``). Why the turn
        cannot take the message even then, None when it can."""
        message = Message("user", text)
        cap = session_cap()
        leave = _headroom(cap) + _reply_room(cap, self.limits)
        if self._fits(message, leave):
            return None
        history = self.state.history
        rest = self._rest_exact if self._rest_exact is not None else rest_stored(self.state)
        budget = cap - leave - rest - stored_chars(message)
        dropped = _trim_stored(history, budget, keep_last=False)
        if dropped:
            self._restart()
            self._trimmed(dropped, "the message and a reply would not fit")
        if self._fits(message, leave):
            return None
        return str(
            StateTooLarge(
                f"the message ({len(text)} characters) and a reply would make the saved "
                "session too large"
            )
        )

    def _trimmed(self, dropped: int, why: str) -> None:
        event_step(
            self.trace,
            event="history_trimmed",
            node=self.state.current_node,
            tool=None,
            dropped=dropped,
            limit=SESSION_LIMIT,
            reason=f"{why} in a saved session ({SESSION_LIMIT} = {session_cap()} characters)",
        )

    def _restart(self) -> None:
        """The history was cut at its front: the turn starts from what is left."""
        self.ledger.sync(self.state.history)
        self.start_len = len(self.state.history)
        self.start_chars = self.ledger.chars

    # --- the window's held messages ------------------------------------------------------

    def hold(self, message: Message) -> None:
        self._held.append(message)
        self.held_chars += message_chars(message)
        self.held_ceiling += message_ceiling(message)

    def release(self, messages: Sequence[Message]) -> None:
        """``messages`` held before joined the history (or were dropped with their window)."""
        gone = {id(m) for m in messages}
        kept = [m for m in self._held if id(m) not in gone]
        if len(kept) == len(self._held):
            return
        self._held = kept
        self.held_chars = sum(message_chars(m) for m in kept)
        self.held_ceiling = sum(message_ceiling(m) for m in kept)

    # --- the end of the turn -------------------------------------------------------------

    def settle(self, fail: Callable[[Exception], None]) -> int:
        """Make the state fit a saved session if what no check saw made it too large; the
        number of older messages dropped (0 almost always). ``fail`` fails the turn (the
        runner's failure rule) once its own exchange has to go."""
        if self.total_fits():
            return 0
        history = self.state.history
        cap = session_cap()
        # 1. the older exchanges, as the trim before a turn drops them
        rest = rest_stored(self.state)
        dropped = _trim_stored(history, cap - _headroom(cap) - rest, keep_last=True)
        if dropped:
            self._trimmed(dropped, "the history this turn left would not fit")
        if self.total_fits():
            return dropped
        # 2. the turn's own exchange: its user message stays, then the failure
        start = max(self.start_len - dropped, 0)
        if start < len(history) and history[start].role == "user":
            del history[start + 1 :]
        else:
            del history[start:]
        fail(StateTooLarge("what this turn added to the history does not fit in a saved session"))
        if self.total_fits():
            return dropped
        # 3. the variables the turn wrote
        self.state.variables.clear()
        self.state.variables.update(self.start_variables)
        return dropped


def _trim_stored(history: list[Message], budget: int, *, keep_last: bool) -> int:
    """Drop the oldest whole exchanges (from one user message to the next) until what is
    left takes at most ``budget`` characters in a saved session (:func:`stored_chars`);
    the number of messages dropped. ``keep_last``: never the last exchange; else the whole
    history may go."""
    sizes = [stored_chars(m) for m in history]
    total = sum(sizes)
    if total <= budget:
        return 0
    starts = [i for i, m in enumerate(history) if m.role == "user" and i > 0]
    if not keep_last:
        starts.append(len(history))
    cut = 0
    for index in starts:
        total -= sum(sizes[cut:index])
        cut = index
        if total <= budget:
            break
    del history[:cut]
    return cut


def send_refusal(
    room: TurnRoom | None,
    text: str,
    *,
    tool: str,
    node: str | None,
    limits: Limits,
    trace: TurnTrace,
) -> str | None:
    """Why a tool's ``context.send`` of ``text`` is refused (``EVENT_STEP send_refused``
    naming the limit), None when it may be said: a text longer than
    ``Limits.max_output_chars`` (the bound of what one tool call gives), or one the turn's
    ``room`` has no place for."""
    most = limits.max_output_chars
    refusal: tuple[str, str] | None = None
    if len(text) > most:
        refusal = (
            f"the text ({len(text)} characters) is longer than Limits.max_output_chars ({most})",
            "max_output_chars",
        )
    elif room is not None:
        refusal = room.send_refusal(text, tool, node)
    if refusal is None:
        return None
    reason, limit = refusal
    event_step(
        trace,
        event="send_refused",
        node=node,
        tool=tool,
        chars=len(text),
        limit=limit,
        reason=reason,
    )
    return f"context.send was refused, nothing was said: {reason}"


# ------------------------------------------------------------------------ the turn's room

_active: ContextVar[TurnRoom | None] = ContextVar("agentscript_turn_room", default=None)


def active_room() -> TurnRoom | None:
    """The room of the turn running in this context, if any."""
    return _active.get()


@contextlib.contextmanager
def keeping(room: TurnRoom | None) -> Iterator[TurnRoom | None]:
    """Make ``room`` the active one for the duration of a turn."""
    token = _active.set(room)
    try:
        yield room
    finally:
        _active.reset(token)
