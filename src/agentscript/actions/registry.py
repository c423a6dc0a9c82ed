"""Action targets: how an action definition's ``target`` URI becomes a call.

Resolution order for one call of action ``name`` with target ``scheme://path``:

1. a stub from the conversation file or test (``StubBook``), by action name;
2. a callable passed to the session for that action name;
3. the handler registered for the target's scheme (``python://`` is built in); when
   ``[actions.targets]`` of ``agentscript.toml`` maps the target to a ``python://`` one, that
   target runs instead, exactly as if the agent had written it (``request.ran`` says which);
4. otherwise the call fails with an error that names the action and the fix.

How a call runs (``actions/settings.py`` chooses per agent or per action):

* ``async def`` callables and handlers are awaited on the running loop under
  ``asyncio.timeout``;
* synchronous ones run on a long-lived bounded pool of daemon threads (``actions/threads.py``),
  inline on the loop's thread when the agent opts in, or in worker processes
  (``actions/process.py``) when a timeout must really stop them.

Contract of :meth:`ActionRunner.run`: outputs as a dict, or an :class:`ActionError`. Whatever
the action raises (``SystemExit`` and ``KeyboardInterrupt`` included) becomes an ActionError;
only the turn's own cancellation passes through. What the action prints to stdout/stderr is
captured (``actions/capture.py``) into ``request.printed`` for the trace, never written to the
host's streams.

An ActionError's message reaches the API client, the server's log, the trace and the model, so:
every URL in it is shown as a target is (``redaction.shown_urls``: a backend's exception names
the URL it called, password and ``?key=`` included); it holds at most :data:`MAX_ERROR_CHARS`
of the failure's text (then a note of how many more there were), cut before the URLs are
shown (``redaction.shown_head``: a text of megabytes would hold the loop for seconds); a
failure is worded the same in every isolation mode; and when ``[actions.targets]`` ran
another target, the message names both
(``action 'x' (flow://X, run as python://m:f by [actions.targets]) failed: ...``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from weakref import WeakKeyDictionary

from agentscript.actions.capture import Printed, captured
from agentscript.actions.context import IDEMPOTENCY_KEY, with_turn_context
from agentscript.actions.modules import import_target
from agentscript.actions.process import (
    CallFailure,
    Claim,
    PythonCall,
    WorkerGone,
    described,
    shared_processes,
)
from agentscript.actions.settings import ActionSettings, Isolation
from agentscript.actions.threads import shared_threads
from agentscript.errors import RunFailure
from agentscript.redaction import shown_head, shown_target

Outputs = dict[str, Any]
# A handler receives the request and returns the outputs (sync or async).
Handler = Callable[["ActionRequest"], Outputs | Awaitable[Outputs]]
# A per-action callable receives the inputs as keyword arguments.
ActionFunction = Callable[..., Any]

DEFAULT_TIMEOUT = 30.0
# How early asyncio may fire a timer (it compares deadlines with the clock's resolution): a
# TimeoutError before the limit less this is the action's own, not the runner's.
_TIMER_SLACK = time.get_clock_info("monotonic").resolution
# Characters of a failure's text an ActionError keeps (the model reads it, the trace and the
# API client hold it): enough for an error body listing a few dozen fields. Showing its URLs
# runs on the loop at up to ~1 µs a character (4 ms here); an exception's text is unbounded.
MAX_ERROR_CHARS = 4_000


class ActionError(RunFailure):
    """An action failed; the message is shown in traces and (for LLM calls) to the model."""


@dataclass(slots=True)
class ActionRequest:
    name: str  # the action definition name
    target: str | None  # the target URI as the agent wrote it, e.g. "flow://Get_Order"
    inputs: dict[str, Any]
    agent_dir: Path | None = None
    # What the call wrote to stdout/stderr ({"stdout": ..., "stderr": ...}, non-empty only).
    printed: dict[str, str] | None = None
    # The python:// target [actions.targets] ran instead of ``target`` (None: none did).
    ran: str | None = None
    # A stub (a conversation file's or a test's) answered the call: no code ran.
    stubbed: bool = False

    @property
    def runs(self) -> str | None:
        """The target that is run: the mapped one, else the agent's."""
        return self.ran or self.target

    @property
    def scheme(self) -> str | None:
        runs = self.runs
        if not runs or "://" not in runs:
            return None
        return runs.split("://", 1)[0].lower()

    @property
    def path(self) -> str:
        runs = self.runs
        return runs.split("://", 1)[1] if runs and "://" in runs else ""


@dataclass(slots=True)
class StubResult:
    outputs: Outputs | None = None
    error: str | None = None


@dataclass
class StubBook:
    """Canned action results: one result for every call, or a list consumed in order."""

    entries: dict[str, StubResult | list[StubResult]] = field(default_factory=dict)
    _used: dict[str, int] = field(default_factory=dict)

    @staticmethod
    def from_data(data: Mapping[str, Any]) -> StubBook:
        """Build from the conversation file's ``actions:`` mapping (already validated)."""
        book = StubBook()
        for name, spec in data.items():
            if isinstance(spec, list):
                book.entries[name] = [_stub(item, f"{name}[{i}]") for i, item in enumerate(spec)]
            else:
                book.entries[name] = _stub(spec, str(name))
        return book

    def has(self, name: str) -> bool:
        return name in self.entries

    def take(self, name: str) -> StubResult:
        entry = self.entries[name]
        if isinstance(entry, StubResult):
            return entry
        index = self._used.get(name, 0)
        self._used[name] = index + 1
        if index >= len(entry):
            return StubResult(
                error=f"stub for action '{name}' has only {len(entry)} result(s); call {index + 1} has none"
            )
        return entry[index]

    def state(self) -> dict[str, int]:
        return dict(self._used)

    def restore(self, used: Mapping[str, int]) -> None:
        self._used = dict(used)


def _stub(spec: Any, name: str) -> StubResult:
    """One stub; a ValueError naming the action (``name``, ``name[i]`` in a list)."""
    if not isinstance(spec, Mapping):
        raise ValueError(f"{name}: a stub is a mapping with 'outputs' or 'error'")
    unknown = set(spec) - {"outputs", "error"}
    if unknown:
        raise ValueError(f"{name}: unknown stub key(s) {sorted(unknown)}: use 'outputs' or 'error'")
    if "error" in spec:
        return StubResult(error=_stub_error(spec["error"], name))
    outputs = spec.get("outputs", {})
    if outputs is None:
        outputs = {}
    if not isinstance(outputs, Mapping):
        raise ValueError(f"{name}: stub 'outputs' must be a mapping of output names to values")
    return StubResult(outputs=dict(outputs))


# The failure of a stub whose error text is empty (and what chat --record writes for one).
NO_MESSAGE = "the action failed"


def _stub_error(value: Any, name: str) -> str:
    """The failure text of an ``error:`` stub. Only text (or a number) is one: a list or a
    mapping would reach the user as a Python repr, a binary value as ``b'...'``. A null
    ``error:`` is refused rather than taken as a success: a stub with an ``error`` key was
    written to fail, and ``outputs`` says a success. An empty text is a failure without a
    message (``chat --record`` wrote one for an action that failed so, before it wrote
    :data:`NO_MESSAGE`)."""
    if isinstance(value, str) and not value.strip():
        return NO_MESSAGE
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return str(value)
    if value is None:
        got = "null"
    elif isinstance(value, bytes | bytearray):
        got = "a binary (!!binary) value"
    elif isinstance(value, Mapping):
        got = "a mapping"
    elif isinstance(value, list):
        got = "a list"
    else:
        got = "true/false" if isinstance(value, bool) else type(value).__name__
    raise ValueError(
        f"{name}: stub 'error' must be the failure's text, got {got} "
        "(for a call that succeeds, give 'outputs' instead)"
    )


# Which action callables (and handlers) are ``async def``, for every runner of the process.
_ASYNC: WeakKeyDictionary[Callable[..., Any], bool] = WeakKeyDictionary()


class ActionRunner:
    """Runs actions for one agent: stubs, per-action callables, scheme handlers."""

    def __init__(
        self,
        *,
        stubs: StubBook | None = None,
        functions: Mapping[str, ActionFunction] | None = None,
        handlers: Mapping[str, Handler] | None = None,
        agent_dir: Path | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        timeouts: Mapping[str, float] | None = None,
        settings: ActionSettings | None = None,
    ) -> None:
        self.settings = settings or ActionSettings()
        self.stubs = stubs or StubBook()
        self.functions = dict(functions or {})
        self.handlers: dict[str, Handler] = {"python": python_handler}
        self.handlers.update({k.lower(): v for k, v in (handlers or {}).items()})
        self.agent_dir = agent_dir
        self.timeout = timeout
        # Per-action overrides by action name: a slow report generator may need more.
        self.timeouts = dict(timeouts or {})

    def _is_async(self, target: Callable[..., Any]) -> bool:
        """Whether ``target`` is ``async def`` (remembered for the process, as long as the
        callable lives: inspect costs a few µs, and a server makes a runner per session)."""
        try:
            known = _ASYNC.get(target)
        except TypeError:  # a callable that cannot be weakly referenced
            return inspect.iscoroutinefunction(target)
        if known is None:
            known = inspect.iscoroutinefunction(target)
            with contextlib.suppress(TypeError):
                _ASYNC[target] = known
        return known

    def register(self, scheme: str, handler: Handler) -> None:
        """Route every target ``scheme://...`` to ``handler`` (e.g. "flow", "apex", "https")."""
        self.handlers[scheme.lower()] = handler

    async def run(self, request: ActionRequest, *, timeout: float | None = None) -> Outputs:
        """The outputs of one call (stub, callable or handler, in that order), under
        ``timeout`` (default: the action's own limit, else the runner's); every failure is
        an ActionError."""
        request.agent_dir = self.agent_dir
        limit = timeout if timeout is not None else self.timeouts.get(request.name, self.timeout)
        if self.stubs.has(request.name):
            stub = self.stubs.take(request.name)
            request.stubbed = True
            if stub.error is not None:
                raise ActionError(stub.error)
            return dict(stub.outputs or {})
        function = self.functions.get(request.name)
        target: Callable[..., Any]
        if function is not None:
            target, args, is_async = function, request.inputs, self._is_async(function)
        else:
            handler = self._handler(request)
            target, args = functools.partial(handler, request), {}
            is_async = self._is_async(handler)
        printed = Printed(self.settings.output_limit)
        loop = asyncio.get_running_loop()
        expires = loop.time() + limit
        try:
            result = await self._call(request, target, args, is_async, limit, printed)
        except TimeoutError as exc:
            if loop.time() + _TIMER_SLACK < expires:  # the action's own (a socket's)
                raise ActionError(_shown(_raised(request, exc))) from None
            raise ActionError(f"{_subject(request)} timed out after {limit:g} s") from None
        except ActionError as exc:
            # A handler's (python_handler's import failure, a worker's answer) or the
            # action's own: its text may quote a backend's too.
            text = str(exc)
            if (shown := _shown(text)) != text:
                raise ActionError(shown) from None
            raise
        except WorkerGone as exc:
            raise ActionError(f"{_subject(request)} failed: {exc}") from None
        except (Exception, SystemExit, KeyboardInterrupt) as exc:
            # The action's own failure, reported, never a traceback; an action calling
            # sys.exit() must not end the host.
            raise ActionError(_shown(_raised(request, exc))) from None
        finally:
            request.printed = printed.to_json() or None
        if result is None:
            return {}
        if not isinstance(result, Mapping):
            raise ActionError(
                f"{_subject(request)} returned {type(result).__name__}; it must return a dict of outputs"
            )
        return dict(result)

    def _handler(self, request: ActionRequest) -> Handler:
        """The handler of the target that runs: the python:// target ``[actions.targets]``
        maps the agent's to (recorded in ``request.ran``), else the agent's own. A mapping is
        per target, so it wins over a handler registered for the whole scheme."""
        mapped = self.settings.targets.get(request.target) if request.target else None
        if mapped is not None:
            request.ran = mapped
        handler = self.handlers.get(request.scheme or "")
        if handler is None:
            raise ActionError(_no_handler_message(request))
        return handler

    async def _call(
        self,
        request: ActionRequest,
        target: Callable[..., Any],
        args: dict[str, Any],
        is_async: bool,
        limit: float,
        printed: Printed,
    ) -> Any:
        if is_async:
            async with asyncio.timeout(limit):
                with captured(printed):
                    return await target(**args)
        deadline = asyncio.get_running_loop().time() + limit
        mode = self.settings.mode(request.name)
        if mode is Isolation.INLINE:
            result = _inline_call(printed, target, args, deadline)
        elif mode is Isolation.PROCESS:
            async with asyncio.timeout_at(deadline):
                return await self._in_process(request, target, args, printed)
        else:
            # Run in a copy of the caller's context, so turn context (actions/context.py)
            # reaches the action on the pool's thread.
            context = contextvars.copy_context()
            call = functools.partial(context.run, _captured_call, printed, target, args)
            pool = shared_threads(self.settings.workers)
            result = await pool.run(call, deadline=deadline, wait=self.settings.loop_wait)
        if type(result) is not dict and inspect.isawaitable(result):
            # a sync function that returned a coroutine
            async with asyncio.timeout_at(deadline):
                with captured(printed):
                    return await result
        return result

    async def _in_process(
        self,
        request: ActionRequest,
        target: Callable[..., Any],
        args: dict[str, Any],
        printed: Printed,
    ) -> Any:
        call: Callable[[], Any]
        if isinstance(target, functools.partial) and target.func is python_handler:
            module, function = _python_target(request)
            folder = str(request.agent_dir) if request.agent_dir is not None else None
            call = PythonCall(folder, module, function, dict(request.inputs), IDEMPOTENCY_KEY.get())
        else:
            call = functools.partial(target, **args)
        pool = shared_processes(self.settings.workers)
        claim = Claim()
        try:
            run = pool.runner(call, claim, printed.limit)
        except TypeError as exc:
            raise ActionError(f"{_subject(request)} cannot run isolated: {exc}") from None
        try:
            ok, value, streams = await shared_threads().submit(run)
        except asyncio.CancelledError:
            claim.cancel()  # timed out (or the turn was cancelled): stop it for real
            raise
        for index, (text, size) in enumerate(streams):
            if size:
                printed.add_kept(index, text, size)
        if not ok:
            raise ActionError(_worker_failure(request, value))
        return value


def _captured_call(printed: Printed, target: Callable[..., Any], args: dict[str, Any]) -> Any:
    with captured(printed):
        return target(**args)


def _inline_call(
    printed: Printed, target: Callable[..., Any], args: dict[str, Any], deadline: float
) -> Any:
    """``target(**args)`` on the loop's thread; a TimeoutError when it ends past ``deadline``.

    The call holds the loop's thread until it returns, so no timer could fire before that:
    none is armed (it would only cost time). Its clock is read when it ends instead: a call
    that ran past its timeout is a timed-out call, whatever it returned or raised, as the
    thread mode (which stops waiting at the deadline) would have reported it: the isolation
    mode never changes what the model is told.
    """
    clock = asyncio.get_running_loop().time
    try:
        result = _captured_call(printed, target, args)
    except (Exception, SystemExit, KeyboardInterrupt):
        if clock() >= deadline:
            raise TimeoutError from None
        raise
    if clock() >= deadline:
        raise TimeoutError
    return result


def _subject(request: ActionRequest) -> str:
    """The action a message is about: its name, and when ``[actions.targets]`` ran another
    target than the agent's, both targets (the mapping is what an operator must look at)."""
    if request.ran is None:
        return f"action '{request.name}'"
    target = shown_target(request.target) if request.target else "(no target)"
    return (
        f"action '{request.name}' ({target}, run as {shown_target(request.ran)} "
        "by [actions.targets])"
    )


def _shown(text: str) -> str:
    """A failure's ``text`` as an ActionError may hold it: its first :data:`MAX_ERROR_CHARS`,
    every URL without its credentials."""
    return shown_head(text, MAX_ERROR_CHARS)


def _raised(request: ActionRequest, exc: BaseException) -> str:
    return _failed(request, f"{type(exc).__name__}: {described(exc)}")


def _failed(request: ActionRequest, why: str) -> str:
    return f"{_subject(request)} failed: {why}"


def _cannot_import(request: ActionRequest, module: str, why: str) -> str:
    if request.ran is None:
        return f"cannot import '{module}' for action '{request.name}': {why}"
    return _failed(request, f"cannot import '{module}': {why}")


def _no_function(request: ActionRequest, module: str, function: str) -> str:
    if request.ran is None:
        return f"'{module}' has no function '{function}' (action '{request.name}')"
    return _failed(request, f"'{module}' has no function '{function}'")


def _worker_failure(request: ActionRequest, failure: CallFailure) -> str:
    """A worker process's :class:`CallFailure`, worded as the same failure on a thread is."""
    if failure.kind in ("import", "lookup"):
        module, function = _python_target(request)
        if failure.kind == "import":
            return _cannot_import(request, module, failure.text)
        return _no_function(request, module, function)
    if failure.kind == "action":  # the action's own ActionError: its message as it wrote it
        return failure.text
    if failure.kind == "unsendable":
        return _failed(request, f"its result cannot be sent back: {failure.text}")
    return _failed(request, failure.text)


def _no_handler_message(request: ActionRequest) -> str:
    target = shown_target(request.target) if request.target else "(no target)"
    scheme = request.scheme
    fix = f"add a stub to the conversation file (actions: {{{request.name}: {{outputs: {{...}}}}}})"
    if scheme:
        fix += f", pass actions={{'{request.name}': function}} to the session, or register a handler for '{scheme}://'"
    return f"action '{request.name}' ({target}) has no handler: {fix}"


def _python_target(request: ActionRequest) -> tuple[str, str]:
    module_name, _, function_name = request.path.partition(":")
    if not module_name or not function_name:
        raise ActionError(
            f"python target '{request.runs}' must look like python://package.module:function"
        )
    return module_name, function_name


def python_handler(request: ActionRequest) -> Any:
    """``python://package.module:function``: import (as the agent's own module when it is in
    the agent's folder, see ``actions/modules.py``) and call with the inputs as keywords."""
    module_name, function_name = _python_target(request)
    try:
        module = import_target(request.agent_dir, module_name)
    except Exception as exc:
        raise ActionError(_cannot_import(request, module_name, described(exc))) from None
    function = getattr(module, function_name, None)
    if not callable(function):
        raise ActionError(_no_function(request, module_name, function_name))
    return function(**with_turn_context(function, request.inputs))
