"""Sessions over HTTP, without HTTP: create, read, run a turn, list, delete, owner by owner.

The routes call this module and only this one. It drives the engine through its public API
(``agent.session``, ``agent.restore``, ``Session.send_async``, ``Session.to_json``) and keeps
these promises:

- a turn runs under its session's store lock and commits state + turn record + trace in one
  transaction; if anything fails before the commit, the session is as before the turn;
- a message with an Idempotency-Key that a committed turn already carried gets that turn's
  stored result, and nothing runs; the key reaches ``python://`` actions that accept it;
- a committed state is one every worker can restore: a state longer than
  ``restore.MAX_SESSION_CHARS`` has its history shrunk to fit (``commit_fit.py``), or, if
  it still does not fit, the turn fails and the session keeps its state from before it (with
  what the turn counted, and without a held call the turn answered: it ran);
- a session belongs to its creator's key: to any other key it does not exist (404);
- a stored session whose agent changed shape is refused (409), never restored; one whose state
  cannot be read, or fails the engine's restore checks, is damaged (500), and ``GET`` of it
  answers as a turn would.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, overload

from agentscript import jsontext
from agentscript.actions.context import IDEMPOTENCY_KEY
from agentscript.engine import restore
from agentscript.engine.restore import SessionRestoreError
from agentscript.engine.session import Session
from agentscript.playback import TurnReport
from agentscript.server import requestid
from agentscript.server.agents import ServedAgent
from agentscript.server.commit_fit import SaidSink, Saved, fit_commit
from agentscript.server.config import ServerConfig
from agentscript.server.errors import ApiError, DuplicateKey, IncompatibleSession
from agentscript.server.live import LiveSessions, SessionOwners
from agentscript.server.metrics import Metrics
from agentscript.server.shutdown import SHUTDOWN_SLICE, ShutdownClock
from agentscript.store import (
    DamagedRecord,
    SessionGone,
    SessionLock,
    SessionRecord,
    Store,
    TurnOutcome,
    TurnRecord,
    new_revision,
)

log = logging.getLogger("agentscript.server")

StepSink = Callable[[dict[str, Any]], None]
TokenSink = Callable[[str], None]

# A stored state of this many characters or more is restored in a thread. Its checks take
# about 0.15 s a million characters (a history at ``max_history_chars`` is 4 million), which
# on the event loop would stall every other session of the worker; a state under this, the
# usual size, restores in under 10 ms, quicker inline than through a thread's hand-off.
RESTORE_IN_THREAD_CHARS = 64_000

# The error a turn's spans are exported with when the engine ended it but its commit did not
# happen (the store failed, the request was cut, another request committed its key first): the
# client was not given its result.
NOT_COMMITTED = "the turn was not committed"


@dataclass
class TurnHooks:
    """Optional observers of a running turn (the SSE stream), and a signal that it started."""

    on_token: TokenSink | None = None
    on_step: StepSink | None = None
    on_start: Callable[[], None] | None = None


def turn_json(text: str, reply: Any, before: dict[str, Any]) -> dict[str, Any]:
    """The turn JSON of ``agentscript run --json`` for one reply (the same function builds it),
    without what only applies to conversation files."""
    data = TurnReport(text, reply, [], before).to_json()
    for key in ("trace_file", "failed_expectations"):
        data.pop(key, None)
    data["confirmation"] = reply.confirmation
    return data


# Characters of a failed turn's error in its log line (the turn JSON has all of it): a
# provider's error body can run to kilobytes.
MOST_LOGGED_ERROR_CHARS = 1000


def log_failed_turn(session_id: str, turn: int, error: str) -> None:
    """Log a turn that ended in an error (the model failed or timed out, a limit was reached;
    not a message to a session that had ended, the client's doing): it is answered 200 with
    the error in its JSON, so without this line it left none in the log, with or without
    ``--access-log``. The error's text, the
    session and turn, and (the log's own field) the request's id; never the user's message or
    a variable's value. Its request's access line says ``turn_error`` too
    (:data:`.requestid.outcome`)."""
    if len(error) > MOST_LOGGED_ERROR_CHARS:
        error = error[:MOST_LOGGED_ERROR_CHARS] + "..."
    log.warning(
        "turn %d of session %s failed: %s",
        turn,
        session_id,
        error,
        extra={"fields": {"session_id": session_id, "turn": turn}},
    )
    requestid.outcome.set(requestid.TURN_ERROR)


# Seconds a cancelled turn gets at shutdown to give its lease back (a store round trip).
GIVE_BACK_WAIT = 5.0


# The largest page of GET /v1/sessions/{id}/turns, and its default: a session's turns are
# never trimmed (1,000 turns of 16,000 characters made a 32 MB answer, built on the loop).
MAX_TURNS_PAGE = 1000
# And the stored results (JSON bytes) at which a page of them ends, at the turn that reaches
# it: 1,000 such turns (32 kB results) made a 32 MB answer, built on the event loop in 140 ms
# and held whole for a client that did not read it; 1 MiB is about 32 of them, a few ms.
MAX_TURNS_PAGE_BYTES = 1 << 20


class SessionService:
    def __init__(
        self,
        agents: Mapping[str, ServedAgent],
        store: Store,
        config: ServerConfig,
        metrics: Metrics,
    ) -> None:
        self.agents = dict(agents)
        self.store = store
        self.config = config
        self.metrics = metrics
        self.live = LiveSessions(config.live_sessions, ttl=config.session_ttl)
        self.owners = SessionOwners()
        # Streamed turns run as tasks; held here so none is dropped before it commits.
        self.background: set[asyncio.Task[Any]] = set()
        # The task of every turn running: the max_concurrent_turns count, and what shutdown
        # waits for.
        self.running_turns: set[asyncio.Task[Any]] = set()
        # How many of those each key (owner) runs, counted with max_turns_per_key set.
        self.turns_by_owner: dict[str, int] = {}
        # Turns cancelled (at shutdown: nothing else cancels a turn) while their commit was on
        # its way to the store: the database may have applied it (the shutdown log says so).
        self.cut_while_committing = 0

    async def finish_turns(self, seconds: float) -> int:
        """At shutdown, once uvicorn has waited for the requests: let the turns running without
        a client (a stream whose reader left) commit, within ``seconds`` of the moment the
        shutdown began (``ShutdownClock``), then cancel them; wait until every cancelled turn
        has given its lease back. How many turns were cut."""
        late = set(self.background)
        ShutdownClock.mark()  # with no connection open, the shutdown begins here
        # In slices: a stop at once (ShutdownClock.end) ends the wait within one.
        while late and (left := ShutdownClock.left(seconds)) > 0:
            _done, late = await asyncio.wait(late, timeout=min(left, SHUTDOWN_SLICE))
        for task in late:
            task.cancel()
        # uvicorn cancels the requests past its grace without waiting for them to end.
        cut = late | {task for task in self.running_turns if not task.done()}
        if cut:
            await asyncio.wait(cut, timeout=GIVE_BACK_WAIT)
        return len(cut)

    # ------------------------------------------------------------------ agents

    def agent(self, name: str) -> ServedAgent:
        served = self.agents.get(name)
        if served is None:
            raise ApiError(
                404, "agent_not_found", f"no agent {name!r}; served: {sorted(self.agents)}"
            )
        return served

    # ------------------------------------------------------------------ sessions

    def _expiry(self) -> float | None:
        ttl = self.config.session_ttl
        return time.time() + ttl if ttl else None

    async def create(
        self,
        owner: str,
        agent_name: str,
        variables: dict[str, Any],
        *,
        any_declared: bool = False,
        operator_set: Collection[str] = (),
    ) -> dict[str, Any]:
        """A new session of the agent, started with ``variables``: only its linked and mutable
        ones (``ServedAgent.refused_variables``), unless ``any_declared`` (the playground
        without API keys, whose user is the agent's author, presets any of them). Names in
        ``operator_set`` carry the values the server's operator gave (the playground's
        ``--var`` and ``--stubs``), which a client only sends back."""
        served = self.agent(agent_name)
        for name, value in variables.items():
            if any(lone_surrogate(text) is not None for text in strings(name, value)):
                raise ApiError(
                    422,
                    "invalid_variable",
                    f"@variables.{ascii(name)[1:-1]}: not Unicode text (a lone surrogate)",
                )
        refused = (
            None
            if any_declared
            else served.refused_variables(n for n in variables if n not in operator_set)
        )
        if refused is not None:
            raise ApiError(422, "invalid_variable", refused)
        session_id = uuid.uuid4().hex
        try:
            session = served.agent.session(
                model=served.model,
                variables=variables,
                session_id=session_id,
                stubs=served.stubs_for(session_id),
            )
        except ValueError as exc:  # unknown or ill-typed variable: the message names it
            raise ApiError(422, "invalid_variable", str(exc)) from None
        revision = new_revision()
        record = SessionRecord(
            session_id=session_id,
            agent=served.name,
            owner=owner,
            agent_version=served.version,
            state=session.to_json(),
            expires_at=self._expiry(),
            revision=revision,
        )
        await self.store.create_session(record)
        self.owners.learn(session_id, owner)
        if served.overrides is None:
            self.live.keep(session_id, 0, served.version, session, revision)
            self.metrics.kept_sessions = len(self.live)
        return {
            "session_id": session_id,
            "agent": served.name,
            "messages": [session.welcome] if session.welcome else [],
        }

    async def record(self, owner: str, session_id: str, *, state: bool = True) -> SessionRecord:
        """The session if ``owner`` owns it, else :class:`SessionGone` (absent, expired, or
        another key's). Without ``state`` its state is neither read nor given (``{}``): a
        caller that checks the owner, or reads the turn count, needs none of it, and a state
        at the history limit is 4 MB to read (1-6 ms of the event loop on SQLite, 4 ms on
        PostgreSQL, against 0.5 and 0.3 ms without it)."""
        read = self.store.get_session if state else self.store.get_session_summary
        record = await read(session_id)
        if record is None:
            self.forget(session_id)
            raise SessionGone(session_id)
        self.owners.learn(session_id, record.owner)
        if record.owner != owner:
            raise SessionGone(session_id)
        return record

    def forget(self, session_id: str) -> None:
        """The session is gone from the store (deleted, or expired): nothing of it stays here,
        nor in the kept and active sessions of ``/metrics``."""
        self.live.drop(session_id)
        self.owners.forget(session_id)
        self.metrics.forget(session_id)
        self.metrics.kept_sessions = len(self.live)

    def forget_expired(self) -> None:
        """Drop the kept sessions whose records have expired (``--session-ttl``)."""
        self.live.drop_expired()
        self.metrics.kept_sessions = len(self.live)

    async def owned(self, owner: str, session_id: str) -> None:
        """:class:`SessionGone` (404) unless ``owner`` owns the session, without a read when
        this worker knows its owner already. Before a turn queues for the session's lock:
        another key's message must not wait for the owner's turn, which would tell it that
        the session exists and is busy, and queue it ahead of the owner's next message. A
        session deleted since is found gone under the lock."""
        known = self.owners.get(session_id)
        if known is None:
            await self.record(owner, session_id, state=False)
        elif known != owner:
            raise SessionGone(session_id)

    def view(self, record: SessionRecord, compatible: bool | None = None) -> dict[str, Any]:
        """``GET /v1/sessions/{id}`` of the stored ``record``; ``compatible`` as the restore
        check found it (else as :meth:`compatible` tells it from the record)."""
        readable(record)
        state = record.state
        pending = state.get("pending_confirmation")
        extra = state.get("extra")
        mantle = (extra.get("mantle") if isinstance(extra, dict) else None) or {}
        stack = mantle.get("stack") if isinstance(mantle, dict) else None
        if pending is None and isinstance(mantle, dict):
            # A Mantle session keeps the call that waits for a yes/no in its skill stack's
            # state (``extra.mantle.pending``), never in ``pending_confirmation``.
            pending = shown_pending(mantle.get("pending"))
        if stack is None and self.mantle(record):
            stack = []  # none before its first turn: its stack is empty, not absent
        return {
            "session_id": record.session_id,
            "agent": record.agent,
            "turns": record.turns,
            "variables": state.get("variables") or {},
            "node": state.get("current_node"),
            "skill_stack": (
                [f.get("skill") if isinstance(f, dict) else None for f in stack]
                if isinstance(stack, list)
                else None
            ),
            "ended": record.ended,
            "escalated": record.escalated,
            "pending_confirmation": pending,
            "created_at": record.created_at,
            "updated_at": record.updated_at,
            "expires_at": record.expires_at,
            "compatible": self.compatible(record) if compatible is None else compatible,
        }

    def mantle(self, record: SessionRecord) -> bool:
        """Whether the session is of a Mantle project this server serves (a session of an
        agent no longer served is shown as stored)."""
        served = self.agents.get(record.agent)
        return served is not None and served.description["format"] == "mantle"

    def compatible(self, record: SessionRecord) -> bool:
        """Whether this server can run the session's next turn, from the record's summary
        alone (the list reads no state): it serves the session's agent at the version the
        session recorded, the hash its restore compares (else a message answers 409
        session_incompatible). Told in views and lists, so that after an upgrade a client
        finds the sessions to start anew without sending each a message. A session an earlier
        agentscript recorded (:meth:`ServedAgent.knows`) is judged by its state in its view
        only."""
        served = self.agents.get(record.agent)
        return served is not None and served.knows(record.agent_version)

    async def get(self, owner: str, session_id: str) -> dict[str, Any]:
        record = readable(await self.record(owner, session_id))
        # Checked as the next turn checks it, so a damaged state is refused alike, never shown;
        # a session kept in memory at this state was committed here, checked already (a full
        # restore per poll would stall the worker on a long history).
        if self.live.holds(record):
            return self.view(record)
        try:
            await self._restored(record, checking=True)
        except IncompatibleSession:
            # Another version of the agent saved it: shown as stored; a turn answers 409.
            return self.view(record, compatible=False)
        return self.view(record, compatible=True)

    async def delete(self, owner: str, session_id: str) -> None:
        await self.record(owner, session_id, state=False)
        self.forget(session_id)
        if not await self.store.delete_session(session_id):
            raise SessionGone(session_id)

    async def list(
        self, owner: str, agent: str | None, limit: int, cursor: str | None
    ) -> dict[str, Any]:
        records = await self.store.list_sessions(
            owner=owner, agent=agent, limit=limit + 1, after=cursor
        )
        page = records[:limit]
        more = len(records) > limit
        return {
            "sessions": [
                {
                    "session_id": r.session_id,
                    "agent": r.agent,
                    "turns": r.turns,
                    "ended": r.ended,
                    "updated_at": r.updated_at,
                    "compatible": self.compatible(r),
                }
                for r in page
            ],
            "next_cursor": page[-1].session_id if more and page else None,
        }

    async def turns(
        self, owner: str, session_id: str, limit: int = MAX_TURNS_PAGE, after: int = 0
    ) -> dict[str, Any]:
        """A page of the session's turns (those after turn ``after``, at most ``limit``, ending
        at the one whose result brings the page's to MAX_TURNS_PAGE_BYTES), and the turn to ask
        the next page after, or None on the last page."""
        record = await self.record(owner, session_id, state=False)
        turns = await self.store.list_turns(
            session_id, after, limit + 1, max_bytes=MAX_TURNS_PAGE_BYTES
        )
        page = turns[:limit]
        # A page cut at its size has no turn past it to show that more follow: the session's
        # turn count, read just before, does. A turn committed in between is missed as by a
        # read a moment earlier, never skipped: the next read after this page finds it.
        more = len(turns) > limit or (bool(page) and page[-1].turn < record.turns)
        return {
            "session_id": session_id,
            "turns": [turn_line(t) for t in page],
            "next_after": page[-1].turn if more else None,
        }

    async def trace(self, owner: str, session_id: str, turn: int) -> dict[str, Any]:
        await self.record(owner, session_id, state=False)
        found = await self.store.get_turn(session_id, turn)
        if found is None:
            raise ApiError(404, "turn_not_found", f"session {session_id} has no turn {turn}")
        return readable(found, "trace").trace

    # ------------------------------------------------------------------ turns

    async def replay(
        self, owner: str, session_id: str, key: str | None, text: str
    ) -> dict[str, Any] | None:
        """The stored result of the committed turn that carried ``key``, if any
        (:class:`DuplicateKey` if that turn's message was not ``text``); :class:`SessionGone`
        unless ``owner`` owns the session."""
        await self.owned(owner, session_id)
        if key is None:
            return None
        found = await self.store.find_turn(session_id, key)
        return None if found is None else _replayed(found, key, text)

    async def send(
        self,
        owner: str,
        session_id: str,
        text: str,
        key: str | None,
        hooks: TurnHooks | None = None,
    ) -> dict[str, Any]:
        """Run one turn and commit it; the turn JSON plus ``turn`` and ``trace_url``."""
        hooks = hooks or TurnHooks()
        if len(text) > self.config.max_message_chars:
            raise ApiError(
                422,
                "message_too_long",
                f"the message has {len(text)} characters; the limit (max_message_chars) "
                f"is {self.config.max_message_chars}",
            )
        at = lone_surrogate(text)
        if at is not None:
            raise ApiError(
                422,
                "invalid_text",
                f"the message is not Unicode text: a lone surrogate (\\u{ord(text[at]):04x}) "
                f"at character {at}",
            )
        # The owner is checked before the turn takes a slot or queues for the lock.
        stored = await self.replay(owner, session_id, key, text)
        if stored is not None:
            if hooks.on_start:
                hooks.on_start()
            return stored
        running = len(self.running_turns)
        if running >= self.config.max_concurrent_turns:
            raise ApiError(
                503,
                "too_many_turns",
                f"{running} turns are running (max_concurrent_turns); retry shortly",
                headers={"Retry-After": "1"},
            )
        # Counted only when a share is set: nothing per turn otherwise.
        share = self.config.max_turns_per_key
        mine = self.turns_by_owner.get(owner, 0) if share else 0
        if share and mine >= share:
            # One client's burst must not take every slot from the others: its own excess
            # is a 429, as its rate is, while other keys still find slots.
            raise ApiError(
                429,
                "too_many_turns_for_key",
                f"{mine} turns of this API key are running (max_turns_per_key); retry shortly",
                headers={"Retry-After": "1"},
            )
        # Every turn runs in a task of its own (a request's, or a stream's background task).
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("SessionService.send runs in an asyncio task")
        self.running_turns.add(task)
        if share:
            self.turns_by_owner[owner] = mine + 1
        self.metrics.in_progress += 1
        try:
            return await self._locked_turn(owner, session_id, text, key, hooks)
        finally:
            self.metrics.in_progress -= 1
            self.running_turns.discard(task)
            if share:
                left = self.turns_by_owner.pop(owner) - 1
                if left:
                    self.turns_by_owner[owner] = left

    async def _locked_turn(
        self, owner: str, session_id: str, text: str, key: str | None, hooks: TurnHooks
    ) -> dict[str, Any]:
        locked = False  # the session's record was read under its lock
        # The turn's spans end once its outcome is known (``Session.export_later``), in the
        # ``finally`` below: a turn that could not be kept failed, though the engine ended it
        # well (``failed`` then says how).
        finish_export: Callable[..., None] | None = None
        failed: dict[str, Any] = {}
        committed = False
        # The revision of the session kept here, if any: a row that still has it is read
        # without its state, which the kept session makes useless (4 MB at the history limit).
        # Asked by the store once this turn heads the session's local queue: a turn of this
        # session running here meanwhile took the session out, and keeps it at its commit's.
        try:
            async with self.store.lock_session(
                session_id, self.config.lock_wait, kept=lambda: self.live.revision(session_id)
            ) as lock:
                record = lock.session
                locked = True
                if record.owner != owner:
                    raise SessionGone(session_id)
                if key is not None:
                    # Another worker may have committed this key while we waited for the lock.
                    found = await self.store.find_turn(session_id, key)
                    if found is not None:
                        result = _replayed(found, key, text)
                        if hooks.on_start:
                            hooks.on_start()
                        return result
                # The kept session, if the row still holds the state its commit wrote (the same
                # revision): the stored state was then not even read. A state written since by
                # anything but a commit (an operator's UPDATE) has lost its revision
                # (store/schema.py, migration 5), so it is read and checked here: a damaged one
                # is refused on every worker alike, even one that kept the session, and the row
                # stays as found until the operator repairs or deletes it.
                session = self.live.take(record)
                if session is None:
                    if record.withheld:
                        # Left out for the kept session, which left meanwhile (dropped to make
                        # room while this turn waited for the lock): read now, under the lock.
                        record = await lock.read_state()
                    readable(record)
                    self.metrics.session_loads["restored"] += 1
                    session = await self._restored(record)
                else:
                    self.metrics.session_loads["kept"] += 1
                said = SaidSink(hooks.on_token) if hooks.on_token is not None else None
                session.on_text = said
                session.on_step = hooks.on_step
                if hooks.on_start:
                    hooks.on_start()
                before = session.variables
                started = time.perf_counter()
                session.export_later = True
                token = IDEMPOTENCY_KEY.set(key)
                try:
                    reply = await session.send_async(text)
                finally:
                    IDEMPOTENCY_KEY.reset(token)
                finish_export = reply.finish_export
                number = record.turns + 1
                result = turn_json(text, reply, before)
                result["turn"] = number
                result["trace_url"] = trace_url(session_id, number)
                # Not detached: the commit below writes it out before the session runs again
                # (the memory store copies it). Written here, once, for the store too: a state
                # no restore accepts must not be committed (every other worker would refuse
                # the session), and only its text says how long it is.
                state = session.to_json(detached=False)
                saved = Saved(
                    state, jsontext.dumps(state), reply.ended, reply.escalated or record.escalated
                )
                if len(saved.text) > restore.MAX_SESSION_CHARS:
                    saved = await fit_commit(
                        saved,
                        session,
                        reply,
                        result,
                        on_step=hooks.on_step,
                        said=said,
                        read_stored=lambda: stored_state(lock),
                        restore_stored=lambda stored: self._restore(stored, checking=True),
                    )
                    if not saved.keep:
                        failed = {
                            "error": result["error"],
                            "ended": saved.ended,
                            "escalated": saved.escalated,
                        }
                outcome = TurnOutcome(
                    state=saved.state,
                    state_text=saved.text,
                    record=TurnRecord(session_id, number, result, reply.trace, key),
                    ended=saved.ended,
                    escalated=saved.escalated,
                    expires_at=self._expiry(),
                )
                try:
                    await lock.commit(outcome)
                except ValueError as exc:
                    raise DuplicateKey(str(exc)) from None
                except asyncio.CancelledError:
                    self.cut_while_committing += 1
                    raise
                committed = True
                if self.agents[record.agent].overrides is None and saved.keep:
                    self.live.keep(
                        session_id, number, record.agent_version, session, outcome.revision
                    )
                self.metrics.kept_sessions = len(self.live)
                self.metrics.turn(
                    record.agent, session_id, time.perf_counter() - started, reply.trace
                )
                # Here, once committed, for every turn that ran: answered as JSON or streamed
                # (the stream's task runs this too), by the route or the fast path.
                if result.get("error") is not None:
                    if reply.refused:  # the session had ended: the client's doing, like a 4xx
                        requestid.outcome.set(requestid.SESSION_ENDED)
                    else:
                        log_failed_turn(session_id, number, str(result["error"]))
                return result
        except SessionGone:
            if not locked:  # no such session, or it expired: not another key's
                self.forget(session_id)
            raise
        finally:
            if finish_export is not None:
                if not committed:  # the client is told of a failure: so is the telemetry
                    raised = sys.exc_info()[1]
                    failed = {
                        "error": NOT_COMMITTED,
                        "error_type": type(raised).__name__ if raised else "TurnError",
                    }
                finish_export(**failed)

    async def _restored(self, record: SessionRecord, *, checking: bool = False) -> Session:
        """:meth:`_restore`, in a thread for a large state (:data:`RESTORE_IN_THREAD_CHARS`)."""
        text = record.state_text
        if text is None or len(text) < RESTORE_IN_THREAD_CHARS:
            return self._restore(record, checking=checking)
        return await asyncio.to_thread(self._restore, record, checking=checking)

    def _restore(self, record: SessionRecord, *, checking: bool = False) -> Session:
        """The stored session, restored to run its next turn (``checking``: only to check it,
        without the model and stubs a turn gets). :class:`IncompatibleSession` (409) for a
        session of another agent or version of it, which a new session mends;
        :class:`DamagedRecord` (500) for a state the engine's restore checks refuse, or that
        names another session than its row: written by hand or damaged, never by a server."""
        served = self.agents.get(record.agent)
        if served is None:
            raise IncompatibleSession(
                f"session {record.session_id} belongs to agent {record.agent!r}, which this "
                "server does not serve"
            )
        if not served.knows(record.agent_version):
            raise IncompatibleSession(
                f"session {record.session_id} was created by another version of agent "
                f"{record.agent!r} (its variables, subagents, skills, blocks, steps or tools "
                "changed); start a new session"
            )
        named = record.state.get("session_id")
        if isinstance(named, str) and named != record.session_id:
            # Its turns would run, be traced and committed under the other session's id.
            raise DamagedRecord(record.session_id, "state", "it names another session")
        try:
            session = served.agent.restore(
                record.state_text if record.state_text is not None else record.state,
                model=(
                    served.model
                    if checking
                    else served.model_for(record.session_id, record.turns + 1)
                ),
                stubs=None if checking else served.stubs_for(record.session_id),
            )
            if not checking:
                # Hashed here, on the restore's thread for a large state, not at the turn's
                # first model call on the event loop (16-51 ms at the history limit).
                session.inputs.settle()
            return session
        except SessionRestoreError as exc:
            if exc.field in IDENTITY_FIELDS:
                raise IncompatibleSession(
                    f"session {record.session_id} cannot be restored ({exc}); start a new session"
                ) from None
            # The reason of a field's check may quote the value: only the reasons about the
            # whole text (not JSON, too deep, too large) and its signature are given, which
            # quote none of it.
            if exc.field == "(session)":
                reason = exc.reason
            elif exc.field == "signature":
                reason = f"signature {exc.reason}"
            else:
                reason = f"the restore checks refuse its {exc.field}"
            raise DamagedRecord(record.session_id, "state", reason) from None
        except (ValueError, KeyError, TypeError) as exc:
            raise DamagedRecord(
                record.session_id,
                "state",
                f"the restore checks fail on it ({type(exc).__name__})",
            ) from None


# The fields of a saved session whose check failing means another agent, or another version
# of it or of agentscript, saved it (409 session_incompatible, as a changed agent version):
# its format, and the agent's identity (missing in format 1).
IDENTITY_FIELDS = frozenset({"format", "agent", "agent.name", "agent.hash"})


# The fields of a Mantle session's held call that its view shows (docs/serve.md): not the
# runtime's own bookkeeping (``turn``, the turn that held it, which only says whether a yes
# may answer it yet, and which sessions saved before it was recorded lack).
PENDING_VIEW_FIELDS = ("skill", "tool", "arguments", "source", "block", "step")


def shown_pending(pending: Any) -> Any:
    """A Mantle session's held call as its view shows it (the documented fields)."""
    if not isinstance(pending, dict):
        return pending
    return {key: pending[key] for key in PENDING_VIEW_FIELDS if key in pending}


def lone_surrogate(text: str) -> int | None:
    """Where ``text`` holds a lone surrogate, or None. JSON can escape one (``"\\ud800"``) but
    UTF-8 cannot encode it: taken in, it would fail the answer after the turn committed."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def strings(*values: Any) -> Iterator[str]:
    """Every string in ``values``, nested lists and objects (keys too) included."""
    for value in values:
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            yield from strings(*value.keys(), *value.values())
        elif isinstance(value, list):
            yield from strings(*value)


def trace_url(session_id: str, turn: int) -> str:
    return f"/v1/sessions/{session_id}/turns/{turn}/trace"


def mounted(root: str, result: dict[str, Any]) -> dict[str, Any]:
    """``result`` with its ``trace_url`` below ``root``, the path the app is mounted at (stored
    results hold it from the app's own root)."""
    if root and "trace_url" in result:
        return {**result, "trace_url": root + result["trace_url"]}
    return result


def _replayed(found: TurnRecord, key: str, text: str) -> dict[str, Any]:
    """The stored result of a committed turn found by its Idempotency-Key, for a retry of the
    same message. A key sent again with another message is a client's bug (a key reused
    for the next message would silently answer it with the previous turn): refused."""
    result = dict(readable(found, "result").result)
    user = result.get("user")
    if isinstance(user, str) and user != text:
        raise DuplicateKey(
            f"Idempotency-Key {key!r} was used by turn {found.turn} of this session for another "
            "message; send a new key with each new message"
        )
    return result


def turn_line(turn: TurnRecord) -> dict[str, Any]:
    """A turn's line in ``GET /v1/sessions/{id}/turns``; a turn whose stored result cannot be
    read is listed with ``damaged`` saying why, so the other turns stay listed."""
    line = {
        "turn": turn.turn,
        "user": turn.result.get("user"),
        "response": turn.result.get("response"),
        "node": turn.result.get("node"),
        "error": turn.result.get("error"),
        "created_at": turn.created_at,
        "trace_url": trace_url(turn.session_id, turn.turn),
    }
    if "result" in turn.damaged:
        line["damaged"] = str(damage(turn, "result"))
    return line


@overload
def readable(record: SessionRecord, column: str = "state") -> SessionRecord: ...
@overload
def readable(record: TurnRecord, column: str) -> TurnRecord: ...
def readable(record: SessionRecord | TurnRecord, column: str = "state") -> Any:
    """``record``, unless the part of it the caller uses (``column``) could not be read from
    the store: then :class:`DamagedRecord`, which names the session, turn and reason."""
    if column in record.damaged:
        raise damage(record, column)
    return record


async def stored_state(lock: SessionLock) -> SessionRecord:
    """The locked session's record with its state, as stored (:meth:`SessionLock.read_state`),
    checked :func:`readable`."""
    return readable(await lock.read_state())


def damage(record: SessionRecord | TurnRecord, column: str) -> DamagedRecord:
    turn = record.turn if isinstance(record, TurnRecord) else None
    return DamagedRecord(record.session_id, column, record.damaged[column], turn)


async def purge_loop(service: SessionService, every: float) -> None:
    """Delete expired sessions every ``every`` seconds, and forget the ones this worker kept,
    until cancelled."""
    while True:
        await asyncio.sleep(every)
        service.forget_expired()
        try:
            await service.store.purge_expired()
        except Exception:  # the next round tries again; a failed purge loses nothing
            continue
