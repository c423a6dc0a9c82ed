"""Action targets: how an action definition's ``target`` URI becomes a call.

Resolution order for one call of action ``name`` with target ``scheme://path``:

1. a stub from the conversation file or test (``StubBook``), by action name;
2. a callable passed to the session for that action name;
3. the handler registered for the target's scheme (``python://`` is built in);
4. otherwise the call fails with an error that names the action and the fix.

Every call runs under a timeout; a synchronous handler runs in a worker thread so a hung
function cannot block the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import inspect
import sys
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentscript.errors import RunFailure

Outputs = dict[str, Any]
# A handler receives the request and returns the outputs (sync or async).
Handler = Callable[["ActionRequest"], Outputs | Awaitable[Outputs]]
# A per-action callable receives the inputs as keyword arguments.
ActionFunction = Callable[..., Any]

DEFAULT_TIMEOUT = 30.0


class ActionError(RunFailure):
    """An action failed; the message is shown in traces and (for LLM calls) to the model."""


@dataclass(slots=True)
class ActionRequest:
    name: str  # the action definition name
    target: str | None  # the target URI, e.g. "flow://Get_Order"
    inputs: dict[str, Any]
    agent_dir: Path | None = None

    @property
    def scheme(self) -> str | None:
        if not self.target or "://" not in self.target:
            return None
        return self.target.split("://", 1)[0].lower()

    @property
    def path(self) -> str:
        return self.target.split("://", 1)[1] if self.target and "://" in self.target else ""


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
                book.entries[name] = [_stub(item) for item in spec]
            else:
                book.entries[name] = _stub(spec)
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


def _stub(spec: Any) -> StubResult:
    if not isinstance(spec, Mapping):
        raise ValueError("a stub is a mapping with 'outputs' or 'error'")
    unknown = set(spec) - {"outputs", "error"}
    if unknown:
        raise ValueError(f"unknown stub key(s) {sorted(unknown)}: use 'outputs' or 'error'")
    if "error" in spec:
        return StubResult(error=str(spec["error"]))
    outputs = spec.get("outputs", {})
    if outputs is None:
        outputs = {}
    if not isinstance(outputs, Mapping):
        raise ValueError("stub 'outputs' must be a mapping of output names to values")
    return StubResult(outputs=dict(outputs))


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
    ) -> None:
        self.stubs = stubs or StubBook()
        self.functions = dict(functions or {})
        self.handlers: dict[str, Handler] = {"python": python_handler}
        self.handlers.update({k.lower(): v for k, v in (handlers or {}).items()})
        self.agent_dir = agent_dir
        self.timeout = timeout
        # Per-action overrides by action name: a slow report generator may need more.
        self.timeouts = dict(timeouts or {})

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
            if stub.error is not None:
                raise ActionError(stub.error)
            return dict(stub.outputs or {})
        call: Callable[[], Any]
        if request.name in self.functions:
            call = functools.partial(self.functions[request.name], **request.inputs)
        else:
            handler = self.handlers.get(request.scheme or "")
            if handler is None:
                raise ActionError(_no_handler_message(request))
            call = functools.partial(handler, request)
        try:
            result = await asyncio.wait_for(_call_any(call), timeout=limit)
        except TimeoutError:
            raise ActionError(f"action '{request.name}' timed out after {limit:g} s") from None
        except ActionError:
            raise
        except Exception as exc:  # the action's own failure, reported, never a traceback
            raise ActionError(
                f"action '{request.name}' failed: {type(exc).__name__}: {exc}"
            ) from None
        if result is None:
            return {}
        if not isinstance(result, Mapping):
            raise ActionError(
                f"action '{request.name}' returned {type(result).__name__}; it must return a dict of outputs"
            )
        return dict(result)


async def _call_any(call: Callable[[], Any]) -> Any:
    """Run a sync or async callable; sync code runs on its own daemon thread.

    Not the loop's default executor: ``asyncio.run`` waits for that executor's threads when it
    shuts down, so a hung tool would hold the turn (and the process) after its timeout fired.
    A daemon thread is abandoned instead.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if future.done():  # the caller timed out and went on
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def worker() -> None:
        try:
            result, error = call(), None
        except BaseException as exc:  # handed to the awaiting turn, which reports it
            result, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop may be closed by now
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=worker, name="agentscript-action", daemon=True).start()
    result = await future
    if inspect.isawaitable(result):
        return await result
    return result


def _no_handler_message(request: ActionRequest) -> str:
    target = request.target or "(no target)"
    scheme = request.scheme
    fix = f"add a stub to the conversation file (actions: {{{request.name}: {{outputs: {{...}}}}}})"
    if scheme:
        fix += f", pass actions={{'{request.name}': function}} to the session, or register a handler for '{scheme}://'"
    return f"action '{request.name}' ({target}) has no handler: {fix}"


def python_handler(request: ActionRequest) -> Any:
    """``python://package.module:function``: import and call with the inputs as keywords."""
    spec = request.path
    module_name, _, function_name = spec.partition(":")
    if not module_name or not function_name:
        raise ActionError(
            f"python target '{request.target}' must look like python://package.module:function"
        )
    if request.agent_dir is not None:
        folder = str(request.agent_dir)
        if folder not in sys.path:
            sys.path.insert(0, folder)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ActionError(
            f"cannot import '{module_name}' for action '{request.name}': {exc}"
        ) from None
    function = getattr(module, function_name, None)
    if not callable(function):
        raise ActionError(
            f"'{module_name}' has no function '{function_name}' (action '{request.name}')"
        )
    return function(**request.inputs)
