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
not inherit the context) and goes to the original streams. :meth:`Printed.to_json` shows each
URL in the text without its user, password, query string and fragment
(``redaction.shown_urls``: a client library's log line names the URL it called), and a URL the
cap cut through not at all (its password may be all that was kept of it).
"""

from __future__ import annotations

import io
import sys
import threading
from collections.abc import Iterable
from contextvars import ContextVar
from typing import Any, TextIO

from agentscript.redaction import shown_urls, url_at_end

# Enough for a traceback or a debugging print; a chatty action cannot grow the trace unbounded.
DEFAULT_LIMIT = 16_000


class Printed:
    """The text one action call wrote to stdout and stderr (lists made on the first write)."""

    __slots__ = ("limit", "parts", "sizes")

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self.limit = limit
        self.parts: tuple[list[str], list[str]] | None = None
        self.sizes = [0, 0]

    def add(self, index: int, text: str) -> None:
        if self.parts is None:
            self.parts = ([], [])
        kept = self.sizes[index]
        self.sizes[index] = kept + len(text)
        if kept < self.limit:
            self.parts[index].append(text[: self.limit - kept])

    def add_kept(self, index: int, text: str, size: int) -> None:
        """Count ``size`` characters written, of which ``text`` (their start) was kept where
        they were written (an action's worker process, with the same limit)."""
        if self.parts is None:
            self.parts = ([], [])
        kept = self.sizes[index]
        self.sizes[index] = kept + size
        if kept < self.limit:
            self.parts[index].append(text[: self.limit - kept])

    def streams(self) -> tuple[tuple[str, int], tuple[str, int]]:
        """Each stream's kept text and how many characters it was written (for
        :meth:`add_kept` in another process)."""
        parts = self.parts or ([], [])
        return ("".join(parts[0]), self.sizes[0]), ("".join(parts[1]), self.sizes[1])

    def to_json(self) -> dict[str, str]:
        """``{"stdout": ..., "stderr": ...}`` with only the non-empty streams, URLs shown
        without their credentials."""
        out: dict[str, str] = {}
        if self.parts is None:
            return out
        for index, name in enumerate(("stdout", "stderr")):
            parts = self.parts[index]
            if not parts:
                continue
            text = "".join(parts)
            if self.sizes[index] > len(text):
                text = text[: url_at_end(text)]  # a URL the cap cut through: its end is unknown
            dropped = self.sizes[index] - len(text)
            text = shown_urls(text)
            if dropped > 0:
                text += f"\n[... {dropped} more characters not kept]"
            out[name] = text
        return out


_current: ContextVar[Printed | None] = ContextVar("agentscript_action_output", default=None)


class _Proxy:
    """Stands in for stdout or stderr while actions run.

    Not an ``io.IOBase``: that one's finaliser closes and flushes, which would flush the real
    stream each time a proxy is dropped. The two proxies are made once and reused.
    """

    def __init__(self, index: int) -> None:
        self.index = index
        self.original: TextIO | None = sys.__stdout__ if index == 0 else sys.__stderr__

    def write(self, text: str) -> int:
        printed = _current.get()
        if printed is None:
            # No stream at all (pythonw, a closed stdout): what the host writes is dropped.
            return self.original.write(text) if self.original is not None else len(text)
        printed.add(self.index, str(text))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if _current.get() is None and self.original is not None:
            self.original.flush()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        if _current.get() is not None or self.original is None:
            return False
        return self.original.isatty()

    def fileno(self) -> int:
        if _current.get() is not None:
            # An action asking for the real descriptor gets none: writing to it would bypass
            # the capture.
            raise io.UnsupportedOperation("fileno")
        if self.original is None:
            raise io.UnsupportedOperation("fileno")
        return self.original.fileno()

    def __getattr__(self, name: str) -> Any:  # encoding, errors, buffer...
        return getattr(self.original, name)


_lock = threading.Lock()
_running = 0
_proxies = (_Proxy(0), _Proxy(1))


def _enter() -> None:
    global _running
    with _lock:
        # Also while other actions run: code that replaced a proxy meanwhile (a host's
        # redirect_stdout; a test runner swapping streams while a timed-out action still runs
        # on its thread) would otherwise get every later action's output, and the trace none.
        # Its stream becomes the one the proxy writes the host's output to, and is put back.
        out, err = _proxies
        if sys.stdout is not out:
            out.original = _host_stream(sys.stdout, out)
            sys.stdout = out
        if sys.stderr is not err:
            err.original = _host_stream(sys.stderr, err)
            sys.stderr = err
        _running += 1


def _host_stream(stream: Any, proxy: _Proxy) -> Any:
    """The stream ``proxy`` writes the host's output to, when ``stream`` replaced it: never
    a proxy (stdout and stderr swapped would send a write back and forth for ever)."""
    return proxy.original if isinstance(stream, _Proxy) else stream


def _leave() -> None:
    global _running
    with _lock:
        _running -= 1
        if _running == 0:
            # Put back only our own proxies: code that replaced them meanwhile keeps its stream.
            out, err = _proxies
            if sys.stdout is out:
                sys.stdout = out.original
            if sys.stderr is err:
                sys.stderr = err.original


class captured:  # used like a function: ``with captured(printed):``
    """Capture what the block writes to stdout/stderr (in this context only) into ``printed``
    (a new :class:`Printed` when None). A class, not ``@contextmanager``: it runs around every
    action call, and a generator-based one costs a few µs more."""

    __slots__ = ("printed", "token")

    def __init__(self, printed: Printed | None = None) -> None:
        self.printed = printed if printed is not None else Printed()

    def __enter__(self) -> Printed:
        _enter()
        self.token = _current.set(self.printed)
        return self.printed

    def __exit__(self, *exc: object) -> None:
        _current.reset(self.token)
        _leave()
