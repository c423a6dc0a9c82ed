"""What an action prints: captured per call, never written to the host's stdout/stderr.

While at least one action runs, ``sys.stdout`` and ``sys.stderr`` are proxies that send each
write to the buffer of the action running in the current context (a ``ContextVar``, so an
``async def`` action on the event loop and sync actions on worker threads each get their own),
and every other write to the stream that was there before. When the last running action
returns, the original streams are put back: the process-wide change lasts only as long as
actions run (STYLE 14).

Contract: :func:`captured` is a context manager yielding a :class:`Printed` that holds, after
the block, what the code inside it wrote (each stream capped at ``limit`` characters, the rest
counted, not kept). Output of threads the action starts itself is not attributed to it (they do
not inherit the context) and goes to the original streams.
"""

from __future__ import annotations

import io
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TextIO

# Enough for a traceback or a debugging print; a chatty action cannot grow the trace unbounded.
DEFAULT_LIMIT = 16_000


@dataclass(slots=True)
class Printed:
    """The text one action call wrote to stdout and stderr."""

    limit: int = DEFAULT_LIMIT
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)
    sizes: list[int] = field(default_factory=lambda: [0, 0])

    def add(self, index: int, text: str) -> None:
        kept = self.sizes[index]
        self.sizes[index] = kept + len(text)
        if kept < self.limit:
            (self.stdout if index == 0 else self.stderr).append(text[: self.limit - kept])

    def to_json(self) -> dict[str, str]:
        """``{"stdout": ..., "stderr": ...}`` with only the non-empty streams."""
        out: dict[str, str] = {}
        for index, (name, parts) in enumerate((("stdout", self.stdout), ("stderr", self.stderr))):
            if not parts:
                continue
            text = "".join(parts)
            dropped = self.sizes[index] - len(text)
            if dropped > 0:
                text += f"\n[... {dropped} more characters not kept]"
            out[name] = text
        return out


_current: ContextVar[Printed | None] = ContextVar("agentscript_action_output", default=None)


class _Proxy(io.TextIOBase):
    """Stands in for stdout or stderr while actions run."""

    def __init__(self, original: TextIO, index: int) -> None:
        self.original = original
        self.index = index

    def write(self, text: str) -> int:
        printed = _current.get()
        if printed is None:
            return self.original.write(text)
        printed.add(self.index, str(text))
        return len(text)

    def flush(self) -> None:
        if _current.get() is None:
            self.original.flush()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        # An action asking for the real descriptor gets none: writing to it would bypass capture.
        raise io.UnsupportedOperation("fileno")

    def __getattr__(self, name: str) -> Any:  # encoding, errors, buffer...
        return getattr(self.original, name)


_lock = threading.Lock()
_running = 0
_saved: tuple[TextIO, TextIO] | None = None


def _enter() -> None:
    global _running, _saved
    with _lock:
        if _running == 0:
            _saved = (sys.stdout, sys.stderr)
            sys.stdout = _Proxy(sys.stdout, 0)
            sys.stderr = _Proxy(sys.stderr, 1)
        _running += 1


def _leave() -> None:
    global _running, _saved
    with _lock:
        _running -= 1
        if _running == 0 and _saved is not None:
            # Put back only our own proxies: code that replaced them meanwhile keeps its stream.
            if isinstance(sys.stdout, _Proxy):
                sys.stdout = _saved[0]
            if isinstance(sys.stderr, _Proxy):
                sys.stderr = _saved[1]
            _saved = None


@contextmanager
def captured(printed: Printed | None = None) -> Iterator[Printed]:
    """Capture what the block writes to stdout/stderr (in this context only) into ``printed``
    (a new :class:`Printed` when None)."""
    printed = printed if printed is not None else Printed()
    _enter()
    token = _current.set(printed)
    try:
        yield printed
    finally:
        _current.reset(token)
        _leave()
