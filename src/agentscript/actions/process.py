"""Process isolation for synchronous actions: worker processes a timeout really stops.

Opt-in per agent or per action (``[actions] isolation = "process"`` in ``agentscript.toml``,
see ``actions/settings.py``). Each call takes an idle worker process (or starts one, up to
``max_workers``), sends it the call and waits for the answer under the action's timeout. On a
timeout the worker is killed and forgotten, so the action stops using CPU at once and the next
call gets a fresh worker; a worker that dies (``os._exit``, a crash) is replaced the same way.

What runs in a worker: ``python://module:function`` targets (imported in the worker under the
agent's own package, ``actions/modules.py``) and callables that pickle by reference (top-level
functions). Inputs and outputs cross the process boundary by pickling, so they must be plain
data; a call that cannot be sent is an action error naming the fix. Output the action prints
is captured in the worker (under the caller's ``output_limit``) and returned with the result
and how much was written, so the caller's record counts what was not kept; ``SystemExit`` ends
the call, not the worker. A failed call answers a :class:`CallFailure`, which the caller words
as a failure of the same call on a thread is worded (``actions/registry.py``).

Workers are started with ``spawn`` (a fresh interpreter, no inherited threads or locks), about
50-100 ms each, once; a call to a warm worker costs two pickles and a pipe round trip.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import pickle
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentscript.actions.capture import DEFAULT_LIMIT, Printed, captured

DEFAULT_MAX_WORKERS = 4

# What a call printed: each stream's kept text and how many characters it wrote.
Streams = tuple[tuple[str, int], tuple[str, int]]


@dataclass(frozen=True, slots=True)
class CallFailure:
    """Why a call in a worker failed. ``kind``: ``"import"`` (the module of a python:// target
    did not import; ``text`` says why), ``"lookup"`` (it has no such function), ``"action"``
    (the action raised ActionError: ``text`` is its message, shown as it is), ``"raised"`` (any
    other exception: ``text`` is ``Type: message``), ``"unsendable"`` (its result could not be
    pickled)."""

    kind: str
    text: str = ""


class TargetMissing(Exception):
    """The module or function of a python:// target is not there (``failure`` says which)."""

    def __init__(self, failure: CallFailure) -> None:
        super().__init__(failure.text)
        self.failure = failure


def described(exc: BaseException) -> str:
    """``str(exc)``, or a note when that raises (an action's own exception may break it)."""
    try:
        return str(exc)
    except Exception:
        return "(its message could not be read)"


@dataclass(frozen=True, slots=True)
class PythonCall:
    """Import ``module`` (as the agent in ``folder`` sees it) and call ``function(**inputs)``."""

    folder: str | None
    module: str
    function: str
    inputs: dict[str, Any]
    # The turn's Idempotency-Key (actions/context.py): a context variable does not cross
    # into the worker process, so it travels with the call.
    idempotency_key: str | None = None

    def __call__(self) -> Any:
        from agentscript.actions.context import with_key
        from agentscript.actions.modules import import_target

        try:
            module = import_target(Path(self.folder) if self.folder else None, self.module)
        except Exception as exc:  # as python_handler catches it, so both word it alike
            raise TargetMissing(CallFailure("import", described(exc))) from None
        function = getattr(module, self.function, None)
        if not callable(function):
            raise TargetMissing(CallFailure("lookup"))
        return function(**with_key(function, self.inputs, self.idempotency_key))


class Claim:
    """A caller's hold on one call: which worker runs it, and whether the caller gave up."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.cancelled = False
        self.worker: _Worker | None = None

    def cancel(self) -> None:
        with self.lock:
            self.cancelled = True
            if self.worker is not None:
                self.worker.kill()


class WorkerGone(Exception):
    """The worker process ended before answering (killed on timeout, or it crashed)."""


def _serve(conn: multiprocessing.connection.Connection) -> None:
    """The worker's loop: one pickled ``(call, output limit)`` in, ``(ok, value or
    CallFailure, Streams)`` out, until EOF."""
    from agentscript.actions.registry import ActionError  # registry imports this module

    while True:
        try:
            call, limit = conn.recv()
        except (EOFError, OSError):
            return
        with captured(Printed(limit)) as printed:
            try:
                outcome: tuple[bool, Any] = (True, call())
            except BaseException as exc:  # SystemExit included: the call fails, the worker stays
                outcome = (False, _failure(exc, ActionError))
        try:
            conn.send((*outcome, printed.streams()))
        except Exception as exc:  # an unpicklable result
            failure = CallFailure("unsendable", described(exc))
            conn.send((False, failure, printed.streams()))


def _failure(exc: BaseException, action_error: type[Exception]) -> CallFailure:
    if isinstance(exc, TargetMissing):
        return exc.failure
    if isinstance(exc, action_error):
        return CallFailure("action", described(exc))
    return CallFailure("raised", f"{type(exc).__name__}: {described(exc)}")


class _Worker:
    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(
            target=_serve, args=(child,), name="agentscript-action-worker", daemon=True
        )
        self.process.start()
        child.close()
        self.killed = False

    def kill(self) -> None:
        """Stop the process; the thread waiting on its pipe then sees EOF and cleans up."""
        self.killed = True
        self.process.kill()


class ActionProcesses:
    """A bounded set of worker processes; a call uses one worker at a time."""

    def __init__(self, max_workers: int = DEFAULT_MAX_WORKERS) -> None:
        self.max_workers = max_workers
        self._idle: list[_Worker] = []
        self._count = 0
        self._ready = threading.Condition()
        self.killed = 0  # workers stopped on a timeout or found dead (for tests and stats)

    def _take(self) -> _Worker:
        with self._ready:
            while not self._idle and self._count >= self.max_workers:
                self._ready.wait()
            while self._idle:
                worker = self._idle.pop()
                if worker.process.is_alive():
                    return worker
                self._count -= 1  # died while idle
                worker.conn.close()
            self._count += 1
        try:
            return _Worker()
        except BaseException:
            self._drop_slot()
            raise

    def _give_back(self, worker: _Worker) -> None:
        if worker.killed:  # the answer came just as its caller gave up
            self._retire(worker)
            return
        with self._ready:
            self._idle.append(worker)
            self._ready.notify()

    def _drop_slot(self) -> None:
        with self._ready:
            self._count -= 1
            self._ready.notify()

    def _retire(self, worker: _Worker) -> None:
        worker.process.join(timeout=5)
        worker.conn.close()
        self.killed += 1
        self._drop_slot()

    def runner(
        self, call: Callable[[], Any], claim: Claim, output_limit: int = DEFAULT_LIMIT
    ) -> Callable[[], tuple[bool, Any, Streams]]:
        """A blocking function that runs ``call`` in a worker; ``claim`` lets a caller that
        gives up (a timeout) stop it: :meth:`Claim.cancel` kills the worker, or keeps the call
        from starting when it is still waiting for one. Returns ``(ok, value, printed)``:
        ``value`` is a :class:`CallFailure` when not ``ok``; ``printed`` keeps up to
        ``output_limit`` characters of each stream."""
        try:
            payload = pickle.dumps((call, output_limit))
        except Exception as exc:
            raise TypeError(
                f"it cannot be sent to a worker process ({exc}); process isolation runs "
                "python:// targets and top-level functions with plain-data inputs"
            ) from None

        def run() -> tuple[bool, Any, Streams]:
            worker = self._take()
            with claim.lock:
                if claim.cancelled:  # the caller gave up while this waited for a worker
                    self._give_back(worker)
                    raise WorkerGone("the call was cancelled before a worker was free")
                claim.worker = worker
            try:
                worker.conn.send_bytes(payload)
                answer: tuple[bool, Any, Streams] = worker.conn.recv()
            except (EOFError, OSError):
                worker.kill()
                self._retire(worker)
                raise WorkerGone("the action's worker process ended before answering") from None
            self._give_back(worker)
            return answer

        return run

    def close(self) -> None:
        with self._ready:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.kill()
            worker.process.join(timeout=5)
            worker.conn.close()


_shared: dict[int, ActionProcesses] = {}
_shared_lock = threading.Lock()


def shared_processes(max_workers: int | None = None) -> ActionProcesses:
    """The process's worker pool of that size, started on first use."""
    size = max_workers or DEFAULT_MAX_WORKERS
    pool = _shared.get(size)
    if pool is None:
        with _shared_lock:
            pool = _shared.setdefault(size, ActionProcesses(size))
    return pool
