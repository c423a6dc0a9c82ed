"""``LLM_STEP`` inputs without copying: each step records only the messages added since the
session's previous LLM call, and where they start.

Writing side (:class:`MessageLog`, one per session): for each call the log finds the run of
leading messages the new request shares with the previous call's request (the same objects),
and the step records ``input.messagesFrom`` (its length), ``input.messagesDropped`` (where in
the previous request it starts, when not at 0: the history's oldest messages were trimmed) and
``input.messages`` (the rest). The history only grows between calls, is trimmed at its front,
or is cut and restored around a delegation, so the shared run is found in O(1) on the common
path (the previous first and last messages still in place) and by one scan otherwise.
``system``, ``instructions`` and ``tools`` stay complete in every step.

Across a save and a restore: :meth:`MessageLog.mark` says which of the history's leading
messages the previous call was given, from which position of its messages, with a digest of
them (:class:`Mark`), which ``Session.to_json`` saves as ``llm_input``; a restored session's
log is seeded from it (:meth:`MessageLog.expect`) once the restored history's messages are
checked against the digest, so its first step is a delta like a live session's. A state without it, or whose
history no longer has those messages, gives a complete first step (``messagesFrom: 0``).
:meth:`MessageLog.resume` leaves a kept session's log exactly as that restore would seed it.

Reading side (:func:`rebuild_messages`): walking a session's ``LLM_STEP``\\ s in order (trace
files by turn, steps in order), the full input of a step is the previous step's full input
from ``messagesDropped`` (0 when absent), ``messagesFrom`` messages of it, then the step's
``messages``. A step whose ``messagesFrom`` is null or missing is complete (written by code
that attaches no log, or before this format). The jq equivalent is in ``docs/tracing.md``.

Contract: the log never copies a message and never changes the request.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from agentscript.models.base import Message

DIGEST_PREFIX = "sha256:"
# A saved ``dropped`` beyond this is no count a session wrote (a history that long would be
# far over MAX_SESSION_CHARS): such a state gets a complete step, not a number a trace or a
# store could not hold.
MAX_DROPPED = 2**31


class Mark(NamedTuple):
    """The history's first ``length`` messages were the previous call's messages from position
    ``dropped`` on; ``digest`` hashes those messages (every field a trace writes of them) and
    ``dropped``."""

    dropped: int
    length: int
    digest: str

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"messages": self.length, "digest": self.digest}
        if self.dropped:
            data["dropped"] = self.dropped
        return data


class Delta(NamedTuple):
    """``messages[:start]`` are the previous call's ``[dropped : dropped + start]``."""

    dropped: int
    start: int
    new: Sequence[Message]


class MessageLog:
    """What the session's previous LLM call was given (references, not copies): its messages
    from position ``base`` on start with ``sent`` (``base`` is 0 but in a log seeded from a
    saved session whose history was trimmed since that call)."""

    __slots__ = ("_expected", "_hashes", "base", "sent")

    def __init__(self) -> None:
        self.base = 0
        self.sent: Sequence[Message] = ()
        # _hashes[i]: the digest of sent[i], for the first len(_hashes) messages (made when
        # a mark needs them: a session never saved never hashes).
        self._hashes: list[bytes] = []
        # A restored session's mark, checked against its history on first use.
        self._expected: tuple[Sequence[Message], int, str] | None = None

    def delta(self, messages: Sequence[Message]) -> Delta:
        """How ``messages`` (the next call's) continue the previous call's; they become the
        previous call's."""
        self._settle()
        at, start = _shared(self.sent, messages)
        dropped = self.base + at if start else 0
        self._hashes = self._hashes[at : at + start]
        self.base, self.sent = 0, messages
        return Delta(dropped, start, messages[start:])

    def mark(self, history: Sequence[Message]) -> Mark | None:
        """What the next call needs to know of the previous one, relative to ``history``
        (None when the history shares none of its messages)."""
        self._settle()
        at, count = _shared(self.sent, history)
        if not count:
            return None
        hashes = self._hashed(at + count)[at : at + count]
        dropped = self.base + at
        return Mark(dropped, count, _digest(dropped, hashes))

    def resume(self, history: Sequence[Message]) -> None:
        """Keep only what :meth:`mark` saves: the log is then the one a restore of this
        session's saved state seeds (:meth:`expect`), so the next step is the same."""
        self._settle()
        at, count = _shared(self.sent, history)
        self._hashes = self._hashes[at : at + count]
        self.base, self.sent = (self.base + at, history[:count]) if count else (0, ())

    def expect(self, history: Sequence[Message], saved: Mapping[str, Any] | None) -> None:
        """Seed the log from a saved ``llm_input`` (already type-checked) and the restored
        ``history``; the digest is checked when the log is first used. Anything that does
        not fit leaves the log empty: the next step is complete."""
        self.base, self.sent, self._hashes, self._expected = 0, (), [], None
        if not saved:
            return
        count, dropped, digest = saved["messages"], saved.get("dropped", 0), saved["digest"]
        if 0 < count <= len(history) and dropped <= MAX_DROPPED:
            self._expected = (tuple(history[:count]), dropped, digest)

    def checkpoint(self) -> tuple[Any, ...]:
        """The log as it is, for :meth:`rollback`."""
        return self.base, self.sent, self._hashes, self._expected

    def rollback(self, checkpoint: tuple[Any, ...]) -> None:
        """Back to a :meth:`checkpoint`: the steps since were never recorded (a turn that
        raised writes no trace), so the next step must not be a delta of them."""
        self.base, self.sent, self._hashes, self._expected = checkpoint

    def settle(self) -> None:
        """Check a restored mark now rather than at the first step: a host that restores a
        large session off its event loop (``agentscript serve``) hashes its history there."""
        self._settle()

    def _settle(self) -> None:
        """Check a restored mark against the messages it names (once)."""
        if self._expected is None:
            return
        messages, dropped, digest = self._expected
        self._expected = None
        hashes = [message_digest(m) for m in messages]
        if _digest(dropped, hashes) == digest:
            self.base, self.sent, self._hashes = dropped, messages, hashes

    def _hashed(self, size: int) -> list[bytes]:
        """``_hashes`` made up to ``size`` messages of ``sent``."""
        hashes = self._hashes
        for message in self.sent[len(hashes) : size]:
            hashes.append(message_digest(message))
        return hashes


# ASCII JSON (lone surrogates escaped): one encoding for any text; made once (a restored
# session hashes every message of its history: about 50 ms for 4 million characters).
_ENCODE = json.JSONEncoder(separators=(",", ":"), default=repr).encode


def message_digest(message: Message) -> bytes:
    """One message's hash, of every field a trace or a saved session writes of it."""
    fields = [
        message.role,
        message.content,
        message.tool_call_id,
        message.name,
        [[call.id, call.name, call.arguments] for call in message.tool_calls],
    ]
    try:
        text = _ENCODE(fields)
    except (TypeError, ValueError, RecursionError):  # no JSON form: matches nothing restored
        text = f"unhashable:{id(message)}"
    return hashlib.sha256(text.encode("ascii")).digest()


def _digest(dropped: int, hashes: Sequence[bytes]) -> str:
    """The digest of a mark: its messages' hashes and where they were in the previous call
    (a saved offset that was changed is as much a mismatch as a changed message)."""
    return DIGEST_PREFIX + hashlib.sha256(b"%d:" % dropped + b"".join(hashes)).hexdigest()


def _shared(sent: Sequence[Message], messages: Sequence[Message]) -> tuple[int, int]:
    """``(at, count)``: ``messages[:count]`` are ``sent[at : at + count]`` (the same objects),
    ``at`` being where ``messages[0]`` is in ``sent``; ``(0, 0)`` when it is not there."""
    if not sent or not messages:
        return 0, 0
    first = messages[0]
    if first is sent[0]:
        at = 0
    else:  # the history's front was trimmed: one scan, only on such a call
        at = next((i for i, m in enumerate(sent) if m is first), -1)
        if at < 0:
            return 0, 0
    size = len(sent) - at
    if size <= len(messages) and messages[size - 1] is sent[-1]:
        return at, size  # appended to: the common path
    count = 0
    for old, new in zip(sent[at:], messages, strict=False):
        if old is not new:
            break
        count += 1
    return at, count


def rebuild_messages(traces: Iterable[Mapping[str, Any]]) -> list[list[dict[str, Any]]]:
    """The full ``messages`` input of every ``LLM_STEP`` in ``traces`` (one session's trace
    documents, in turn order), in order."""
    inputs: list[list[dict[str, Any]]] = []
    previous: list[dict[str, Any]] = []
    for trace in traces:
        for step in trace.get("planTrace", {}).get("steps", []):
            if step.get("type") != "LLM_STEP":
                continue
            data = step.get("input") or {}
            start = data.get("messagesFrom")
            added = list(data.get("messages") or [])
            if start is None:
                previous = added
            else:
                dropped = data.get("messagesDropped") or 0
                previous = previous[dropped : dropped + start] + added
            inputs.append(previous)
    return inputs
