"""Loaded agents and their sessions: the Python API of the runtime.

>>> agent = agentscript.load("examples/order_status/order_status.agent")
>>> session = agent.session(model=my_model, variables={"order_ID": "1234"})
>>> reply = session.send("Where is my order?")
>>> reply.text, reply.node, reply.trace["planTrace"]["steps"][0]["type"]
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from agentscript.actions.registry import ActionFunction, ActionRunner, Handler, StubBook
from agentscript.actions.settings import ActionSettings, load_settings
from agentscript.check.outline import AgentOutline
from agentscript.engine.budgets import Budget, BudgetMeter, OnExceed, Usage, metering
from agentscript.engine.given import bounded, some
from agentscript.engine.history import HistoryLedger, trim_history
from agentscript.engine.kernel import TurnResult, internal_error
from agentscript.engine.loop import run_sync
from agentscript.engine.procedures import render_text
from agentscript.engine.program import Program
from agentscript.engine.restore import Checker, check_common, decode, fingerprint, sign, verify
from agentscript.engine.restore_agent import agent_shape, check_agent_state
from agentscript.engine.state import STATE_FORMATS, SessionState
from agentscript.engine.turn import TurnRunner
from agentscript.expr.evaluate import Env, EvalError
from agentscript.expr.values import TypeMismatch, coerce_to_type
from agentscript.limits import Limits
from agentscript.models.base import Model
from agentscript.trace import TurnTrace
from agentscript.trace_inputs import MessageLog
from agentscript.trace_steps import error_step, event_step

if TYPE_CHECKING:
    from agentscript.integrations.otel import Telemetry
    from agentscript.models.fallback import FallbackSettings


class TurnRunnerLike(Protocol):
    """What :meth:`AgentBase.new_turn` returns: runs one turn, then says what it ran."""

    actions_run: list[str]
    displayable: list[dict[str, Any]]

    async def run(self) -> TurnResult: ...


@dataclass
class Reply:
    """What one turn produced."""

    text: str  # every message of the turn, joined by blank lines
    messages: list[str]
    node: str | None  # the subagent the turn ended in
    path: list[str]  # the nodes that had control, in order (delegates are in ``delegated``)
    actions: list[str]  # tools and actions run, in order
    escalated: bool
    ended: bool
    error: str | None
    displayable: list[dict[str, Any]]
    confirmation: str | None  # the question, when a call waits for a yes/no
    variables: dict[str, Any]
    trace: dict[str, Any]
    trace_file: str | None = None
    exhausted: bool = False  # the scripted model had no move left
    refused: bool = False  # the turn was not run (e.g. the session had ended)
    # LLM calls, tokens and cost of this turn and of the whole session (engine/budgets.py).
    usage: dict[str, Any] | None = None
    session_usage: dict[str, Any] | None = None
    delegated: list[str] = field(default_factory=list)  # nodes run as delegates, in order
    # Buttons offered with the turn's responses ({title, payload}; Mantle projects).
    buttons: list[dict[str, Any]] = field(default_factory=list)
    # Messages of the history's oldest exchanges dropped before this turn to fit
    # Limits.max_history_chars (the model no longer sees them); 0 when none were.
    history_trimmed: int = 0
    # Set when the session's ``export_later`` deferred the turn's telemetry: ends its spans,
    # with the turn's own outcome updated by the keyword arguments given (``error``,
    # ``ended``, ``escalated``...), once. Not part of what a reply says.
    finish_export: Callable[..., None] | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.error is None


class AgentBase(ABC):
    """What every loaded agent offers: sessions. Subclasses say how a turn runs.

    :class:`Agent` runs Agent Script files; ``agentscript.mantle.MantleAgent`` runs Mantle
    projects. Both are created by :func:`agentscript.load`.
    """

    name: str
    path: Path | None
    handlers: dict[str, Handler]
    # Caps and prices for every session (from agentscript.toml; a session may override).
    budget: Budget | None
    integration_config: Any
    # Sessions' default bounds: the `[limits]` of agentscript.toml when loaded by `load`.
    limits: Limits = Limits()
    # Whether `[actions.targets]` applies: Agent Script actions name Salesforce targets
    # (flow://, apex://) a deployment maps to Python; Mantle tools are Python already.
    maps_targets: bool = False

    def __init__(self, *, path: Path | None, name: str) -> None:
        self.path = path
        self.name = name
        self.handlers = {}
        self.budget = None
        self.integration_config = None
        # OpenTelemetry export of every turn (integrations/otel.py), when configured.
        self.telemetry: Telemetry | None = None
        # The [resilience] fallback model the CLI wraps the chosen model with (models/fallback.py).
        self.fallback: FallbackSettings | None = None
        # How sync actions run (thread pool, inline, worker processes): the [actions] table of
        # the agent's agentscript.toml, read when the loader loads the agent (else at the first
        # session) and kept; assign to override.
        self._action_settings: ActionSettings | None = None

    def load_action_settings(self) -> ActionSettings:
        """Read and check the ``[actions]`` table of the agent's ``agentscript.toml`` now, keep
        it for every session, and return it (``ActionConfigError`` naming the file and the
        key when it is malformed). ``agentscript.load`` calls it so a bad table stops the load
        (a server started, then failed every new session) and a file edited later is not
        read; an agent built otherwise reads it at its first session."""
        settings = load_settings(self.path)
        if not self.maps_targets and settings.targets:
            settings = replace(settings, targets={})
        self._action_settings = settings
        return settings

    @property
    def action_settings(self) -> ActionSettings:
        if self._action_settings is None:
            return self.load_action_settings()
        return self._action_settings

    @action_settings.setter
    def action_settings(self, settings: ActionSettings) -> None:
        self._action_settings = settings

    @abstractmethod
    def new_turn(
        self,
        state: SessionState,
        runner: ActionRunner,
        trace: TurnTrace,
        text: str,
        *,
        model: Model,
        limits: Limits,
        stream: Callable[[str], None] | None,
    ) -> TurnRunnerLike:
        """The object that runs one turn."""

    @abstractmethod
    def initial_variables(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Every variable's starting value, ``given`` ones included (checked)."""

    @abstractmethod
    def welcome(self, variables: Mapping[str, Any]) -> str:
        """The message shown when a session starts."""

    @abstractmethod
    def state_shape(self) -> Any:
        """What saved sessions depend on (variables, nodes or skills, tools), as JSON data;
        its hash is stored in every saved session and compared on restore."""

    @abstractmethod
    def check_saved(self, checker: Checker, payload: dict[str, Any]) -> dict[str, Any]:
        """Check the agent-specific parts of a saved session (variables, node or skill
        stack, pending confirmation, ``extra``); the checked variables. Raises
        SessionRestoreError."""

    def identity(self) -> dict[str, str]:
        """``{"name", "hash"}``: which agent, in which compiled form, a session belongs to."""
        return {"name": self.name, "hash": self.state_hash}

    @functools.cached_property
    def state_hash(self) -> str:
        """The hash of :meth:`state_shape`, computed once: it reads the compiled program or
        project, fixed when the agent is loaded (a server saves and restores on every turn)."""
        return fingerprint(self.state_shape())

    def register_handler(self, scheme: str, handler: Handler) -> None:
        """Run every action whose target is ``scheme://...`` with ``handler`` (all sessions)."""
        self.handlers[scheme.lower()] = handler

    def session(
        self,
        *,
        model: Model,
        actions: Mapping[str, ActionFunction] | None = None,
        variables: Mapping[str, Any] | None = None,
        stubs: StubBook | None = None,
        limits: Limits | None = None,
        trace_dir: str | Path | None = None,
        session_id: str | None = None,
        budget: Budget | None = None,
    ) -> Session:
        """A new session; ``variables`` override the declared defaults (ValueError for
        unknown or ill-typed ones)."""
        state = SessionState(
            session_id or uuid.uuid4().hex[:16], self.initial_variables(bounded(variables or {}))
        )
        return Session(
            self,
            state,
            model=model,
            actions=actions,
            stubs=stubs,
            limits=limits,
            trace_dir=trace_dir,
            budget=budget,
        )

    def restore(
        self,
        data: Mapping[str, Any] | str,
        *,
        model: Model,
        actions: Mapping[str, ActionFunction] | None = None,
        stubs: StubBook | None = None,
        limits: Limits | None = None,
        trace_dir: str | Path | None = None,
        budget: Budget | None = None,
        variables: Mapping[str, Any] | None = None,
    ) -> Session:
        """Rebuild a session saved with :meth:`Session.to_json`, checked in full first.

        Raises :class:`SessionRestoreError` (``field``, ``reason``) at the first problem: a bad
        signature when ``AGENTSCRIPT_SESSION_KEY`` is set, another agent or another version
        of it, a wrong type, an unknown or missing variable, an unknown node or skill, a
        malformed history or pending confirmation.

        ``variables`` are values the host knows better than the stored data (linked ones such
        as the verified customer id): checked like ``session(variables=...)`` (ValueError),
        they replace the stored values.
        """
        payload = decode(data)
        verify(payload)
        # Restore lets in what a turn under the session's limits would: no larger, no deeper.
        checker = Checker(limits or self.limits)
        check_common(checker, payload, set(STATE_FORMATS), self.name, self.identity()["hash"])
        payload["variables"] = self.check_saved(checker, payload)
        if variables:
            fresh = self.initial_variables(bounded(variables))
            payload["variables"].update({name: fresh[name] for name in variables})
        history = checker.history(payload.get("history", []))
        state = SessionState.from_json(payload)
        state.history = history
        session = Session(
            self,
            state,
            model=model,
            actions=actions,
            stubs=stubs,
            limits=limits,
            trace_dir=trace_dir,
            budget=budget,
        )
        session.runner.stubs.restore(state.stub_usage)
        # The next LLM_STEP goes on from the previous call's, as the session's would have.
        session.inputs.expect(history, payload.get("llm_input"))
        return session


class Agent(AgentBase):
    """A checked Agent Script agent, ready to start sessions. Create with
    :func:`agentscript.load`."""

    maps_targets = True

    def __init__(
        self, outline: AgentOutline, *, path: Path | None = None, name: str | None = None
    ) -> None:
        super().__init__(
            path=path, name=name or outline.agent_name or (path.stem if path else "agent")
        )
        self.outline = outline
        self.program = Program(outline)

    def new_turn(
        self,
        state: SessionState,
        runner: ActionRunner,
        trace: TurnTrace,
        text: str,
        *,
        model: Model,
        limits: Limits,
        stream: Callable[[str], None] | None,
    ) -> TurnRunnerLike:
        return TurnRunner(
            program=self.program,
            state=state,
            runner=runner,
            trace=trace,
            user_input=text,
            model=model,
            limits=limits,
            stream=stream,
        )

    def initial_variables(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Defaults of every declared variable, overridden by ``given`` (linked ones included)."""
        declared = self.outline.variables
        unknown = sorted(set(given) - set(declared))
        if unknown:
            raise ValueError(
                f"unknown variable(s) {some(unknown)}; declared: {some(sorted(declared))}"
            )
        values: dict[str, Any] = {}
        env = Env({"variables": {}, "knowledge": self.outline.knowledge})
        for name, info in declared.items():
            if info.default is None:
                values[name] = None
                continue
            try:
                values[name] = self.program.compiled(info.default)(env)
            except EvalError as exc:
                raise ValueError(f"default of @variables.{name}: {exc.message}") from None
        for name, value in given.items():
            info = declared[name]
            try:
                values[name] = coerce_to_type(value, info.type)
            except TypeMismatch as exc:
                raise ValueError(f"@variables.{name}: {exc.message}") from None
        return values

    def state_shape(self) -> Any:
        return agent_shape(self.program)

    def check_saved(self, checker: Checker, payload: dict[str, Any]) -> dict[str, Any]:
        return check_agent_state(self.program, checker, payload)

    def welcome(self, variables: Mapping[str, Any]) -> str:
        env = Env({"variables": variables, "knowledge": self.outline.knowledge})
        return render_text(self.program, self.outline.messages.welcome, env, [])


class Session:
    """One conversation with an agent. Not thread-safe: one turn at a time."""

    def __init__(
        self,
        agent: AgentBase,
        state: SessionState,
        *,
        model: Model,
        actions: Mapping[str, ActionFunction] | None = None,
        stubs: StubBook | None = None,
        limits: Limits | None = None,
        trace_dir: str | Path | None = None,
        budget: Budget | None = None,
    ) -> None:
        self.agent = agent
        self.state = state
        self.model = model
        self.limits = limits or agent.limits
        self.trace_dir = Path(trace_dir) if trace_dir is not None else None
        self.runner = ActionRunner(
            stubs=stubs,
            functions=actions,
            handlers=agent.handlers,
            agent_dir=agent.path.parent if agent.path else None,
            timeout=self.limits.action_timeout,
            timeouts=self.limits.action_timeouts,
            settings=agent.action_settings,
        )
        self.welcome = agent.welcome(state.variables)
        # Session totals survive save/restore in the state's extension data.
        self.meter = BudgetMeter(
            budget or agent.budget or Budget(), Usage.from_json(state.extra.get("usage") or {})
        )
        self.inputs = MessageLog()  # LLM_STEPs record only new messages (trace_inputs.py)
        # The history's size and open calls (engine/history.py); made by the first turn, so
        # an idle session does not hold its sets.
        self.ledger: HistoryLedger | None = None
        self.on_text: Callable[[str], None] | None = None
        # Called with each trace step as it is added (filled in as the turn goes on).
        self.on_step: Callable[[dict[str, Any]], None] | None = None
        # The last trace file could not be written (reported once, by ``_write_trace``).
        self._trace_write_failed = False
        # Set by a host that decides a turn's outcome after the engine (``agentscript serve``
        # fails a turn whose state it cannot keep): a turn that returns does not end its
        # telemetry spans, its reply's ``finish_export`` does. A turn that raises ends them.
        self.export_later = False

    @property
    def id(self) -> str:
        return self.state.session_id

    @property
    def variables(self) -> dict[str, Any]:
        return dict(self.state.variables)

    @property
    def ended(self) -> bool:
        return self.state.ended

    def history_chars(self) -> int:
        """About the JSON size of the history, as ``Limits.max_history_chars`` counts it (the
        messages added since the last count are counted; the rest is known)."""
        if self.ledger is None:
            self.ledger = HistoryLedger()
        self.ledger.sync(self.state.history)
        return self.ledger.chars

    def resume(self) -> None:
        """Go on as if just restored from this session's own :meth:`to_json`: the next turn's
        first ``LLM_STEP`` goes on from what the saved state says of the previous call
        (``llm_input``), as a restored session's does, and no observer of an earlier turn is
        called. A host that keeps sessions in memory between turns (``agentscript serve``)
        calls it so that a turn's trace is the same whether the session was kept or restored.
        The history's ledger is kept: it holds what a restored session counts again from the
        same history (its size, its calls), so a kept turn reads only the new messages."""
        self.inputs.resume(self.state.history)
        self.on_text = None
        self.on_step = None

    def send(self, text: str) -> Reply:
        """Run one turn synchronously (not from inside a running event loop). Each calling
        thread keeps one event loop for every turn it runs (``engine/loop.py``)."""
        return run_sync(self.send_async(text))

    async def send_async(self, text: str) -> Reply:
        state = self.state
        state.turn += 1
        plan_id = f"{state.session_id}-{state.turn}"
        trace = TurnTrace(self.agent.name, state.session_id, plan_id, state.turn, text)
        trace.inputs = self.inputs
        if self.ledger is None:
            self.ledger = HistoryLedger()
        trace.ledger = self.ledger
        trace.observer = _silenced_once_raising(self.on_step) if self.on_step is not None else None
        telemetry = self.agent.telemetry
        observer = telemetry.observe(trace) if telemetry is not None else None
        logged = self.inputs.checkpoint()
        try:
            reply = await self._run_turn(trace, text)
        except BaseException as exc:
            # No trace is written for this turn: the next step is no delta of its steps.
            self.inputs.rollback(logged)
            # A turn that raised or was cancelled (a shutdown's cut, a client's timeout)
            # started: its span ends too, as a failure, or it would vanish from the export.
            if observer is not None:
                observer.finish(error=_why_stopped(exc), error_type=type(exc).__name__)
            raise
        if observer is not None:
            outcome: dict[str, Any] = {
                "error": reply.error,
                "escalated": reply.escalated,
                "ended": reply.ended,
                "cost": None if reply.refused else self._known_cost(),
                "refused": reply.refused,
            }
            if self.export_later:
                reply.finish_export = _finish_once(observer.finish, outcome)
            else:
                observer.finish(**outcome)
        return reply

    def _known_cost(self, usage: Usage | None = None) -> float | None:
        """The cost of ``usage`` (the turn's by default), where prices are known for every
        model it used; else None. Without a ``[prices]`` table nothing is priced: a turn whose
        calls all failed (none recorded, so none found unpriced) said 0.0 where a turn that
        went well said nothing. Every cost that leaves the session goes through here."""
        if not self.meter.budget.prices:
            return None
        return (usage if usage is not None else self.meter.turn).cost

    def _session_usage(self) -> dict[str, Any]:
        """The session's totals as :attr:`Reply.session_usage` shows them: ``cost`` under
        :meth:`_known_cost`'s rule. The saved state keeps the meter's own figures
        (``extra.usage``): session caps go on from them after a restore."""
        shown = self.meter.session.to_json()
        cost = self._known_cost(self.meter.session)
        shown["cost"] = None if cost is None else round(cost, 8)
        return shown

    async def _run_turn(self, trace: TurnTrace, text: str) -> Reply:
        """Run the turn ``trace`` records, or refuse it when the session has ended (a trace
        with its ERROR_STEP all the same, in the trace file and the export)."""
        state = self.state
        if state.ended:
            message = "the session has ended; start a new session to continue"
            error_step(trace, message=message, node=state.current_node)
            return self._reply(TurnResult(error=message), trace, refused=True)
        dropped = trim_history(state.history, self.limits.max_history_chars, self.ledger)
        if dropped:
            event_step(
                trace,
                event="history_trimmed",
                node=state.current_node,
                tool=None,
                dropped=dropped,
                reason=f"the history was longer than Limits.max_history_chars "
                f"({self.limits.max_history_chars} characters)",
            )
        runner = self.agent.new_turn(
            state,
            self.runner,
            trace,
            text,
            model=self.model,
            limits=self.limits,
            stream=self.on_text,
        )
        with metering(self.meter):
            result = await runner.run()
        state.extra["usage"] = self.meter.session.to_json()
        if self.meter.hit is not None and self.meter.budget.on_exceed is OnExceed.ESCALATE:
            result.escalated = True
        state.stub_usage = self.runner.stubs.state()
        return self._reply(
            result,
            trace,
            actions=runner.actions_run,
            displayable=runner.displayable,
            history_trimmed=dropped,
        )

    def _reply(
        self,
        result: TurnResult,
        trace: TurnTrace,
        *,
        actions: list[str] | None = None,
        displayable: list[dict[str, Any]] | None = None,
        refused: bool = False,
        history_trimmed: int = 0,
    ) -> Reply:
        text = "\n\n".join(m for m in result.messages if m)
        trace.response = text
        cost = self._known_cost()
        if cost is not None and not refused:
            trace.usage["cost"] = round(cost, 8)
        trace_file = (
            self._write_trace(trace, self.trace_dir) if self.trace_dir is not None else None
        )
        return Reply(
            text=text,
            messages=list(result.messages),
            node=self.state.current_node,
            path=list(result.path),
            delegated=list(result.delegated),
            actions=list(actions or []),
            escalated=result.escalated,
            ended=result.ended or self.state.ended,
            error=result.error,
            displayable=list(displayable or []),
            confirmation=result.confirmation,
            variables=dict(self.state.variables),
            trace=trace.to_json(),
            trace_file=trace_file,
            exhausted=result.exhausted,
            refused=refused,
            usage=dict(trace.usage),
            session_usage=self._session_usage(),
            buttons=list(result.buttons),
            history_trimmed=history_trimmed,
        )

    def _write_trace(self, trace: TurnTrace, directory: Path) -> str | None:
        """Write the turn's trace file under ``directory``; its path, or None when it could not
        be written (a full disk, a folder made read-only mid-session). The turn stands all the
        same: the first failure in a row adds an ``EVENT_STEP`` ``trace_not_written`` with the
        ``reason`` to this turn's trace (``reply.trace``), and later failures add nothing until
        a trace file is written again."""
        try:
            path = str(trace.write(directory))
        except OSError as exc:
            if not self._trace_write_failed:
                self._trace_write_failed = True
                event_step(
                    trace,
                    event="trace_not_written",
                    node=self.state.current_node,
                    tool=None,
                    reason=f"cannot write the trace file under {directory}: {exc.strerror or exc}",
                )
            return None
        self._trace_write_failed = False
        return path

    def to_json(self, *, detached: bool = True) -> dict[str, Any]:
        """The session's state as JSON-compatible data (see :meth:`AgentBase.restore`), with
        the agent's identity, signed when ``AGENTSCRIPT_SESSION_KEY`` is set. Once a model was
        called, ``llm_input`` says which of the history's messages that call was given (with
        their digest, ``trace_inputs.py``): the restored session's next ``LLM_STEP`` then
        records only the messages added since, as this session's would.

        The result is a copy the session never changes. ``detached=False`` skips deep-copying
        the variables and extension state (about 40 µs a turn in ``agentscript serve``), so the
        result shares them with the session: for a caller that writes it out before the
        session runs again, as the server's commit does."""
        self.state.stub_usage = self.runner.stubs.state()
        data = self.state.to_json(detached=detached)
        mark = self.inputs.mark(self.state.history)
        if mark is not None:  # what the next LLM_STEP's delta needs (trace_inputs.py)
            data["llm_input"] = mark.to_json()
        data["agent"] = self.agent.identity()
        return sign(data)


def _finish_once(finish: Callable[..., None], outcome: dict[str, Any]) -> Callable[..., None]:
    """``finish`` of ``outcome`` updated by the keyword arguments given, on the first call
    only: a turn's spans are exported once."""
    pending = [finish]

    def finish_export(**overrides: Any) -> None:
        if pending:
            pending.pop()(**{**outcome, **overrides})

    return finish_export


def _why_stopped(exc: BaseException) -> str:
    """The error a turn that raised ``exc`` is exported with: its text only as an internal
    error shows it (a URL's credentials dropped, the length bounded)."""
    if isinstance(exc, asyncio.CancelledError):
        return "the turn was cancelled before it ended"
    if isinstance(exc, Exception):
        return str(internal_error(exc))
    return type(exc).__name__


def _silenced_once_raising(
    observer: Callable[[dict[str, Any]], None],
) -> Callable[[dict[str, Any]], None]:
    """``observer`` for one turn, not called again after it raised: its exception fails the
    turn (an internal error), and the failure's own steps must not raise it a second time."""
    broken = False

    def observe(step: dict[str, Any]) -> None:
        nonlocal broken
        if broken:
            return
        try:
            observer(step)
        except Exception:
            broken = True
            raise

    return observe
