"""Helpers shared by the benchmarks: best-of-N timing, a bare HTTP/1.1 exchange and a
description of the machine."""

from __future__ import annotations

import asyncio
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# The shared test data beside the checkout (one level further up from a git worktree).
SHARED = next(
    (p / "shared" for p in (REPO.parent, REPO.parent.parent) if (p / "shared").is_dir()),
    REPO.parent / "shared",
)


def best_of(fn: Callable[[], object], *, repeat: int = 7, number: int = 100) -> float:
    """Seconds per call of ``fn``: the best of ``repeat`` runs of ``number`` calls.

    The minimum is the least noisy estimate of the cost itself; slower runs measure the
    machine's other load.
    """
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - start) / number)
    return best


def best_of_each(
    fns: dict[str, Callable[[], object]], *, repeat: int = 7, number: int = 3
) -> dict[str, float]:
    """Seconds per call of each function, each the best of ``repeat`` rounds.

    Each round times every function once (``number`` calls) in turn, so a burst of load
    elsewhere on the machine slows them all alike instead of whichever ran then: the ratios
    between them stay meaningful on a shared machine.
    """
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeat):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(number):
                fn()
            best[name] = min(best[name], (time.perf_counter() - start) / number)
    return best


async def exchange(
    reader: asyncio.StreamReader,
    writer: Any,
    request: bytes,
    on_chunk: Callable[[bytes], object] | None = None,
) -> tuple[int, bytes]:
    """Send ``request`` on a kept-alive connection; the answer's status and whole body, sent
    with Content-Length or chunked. With ``on_chunk``, each chunk of a chunked body goes to it
    as it arrives instead of into the body returned (empty then). The benchmarks' bare HTTP/1.1
    client: it reads to the end of this answer and never past it."""
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ")[1])
    for line in lines:
        if line.lower().startswith(b"content-length:"):
            return status, await reader.readexactly(int(line.split(b":", 1)[1]))
    pieces = []
    while size := int((await reader.readuntil(b"\r\n"))[:-2].split(b";")[0], 16):
        piece = (await reader.readexactly(size + 2))[:-2]
        if on_chunk is None:
            pieces.append(piece)
        else:
            on_chunk(piece)
    await reader.readuntil(b"\r\n")  # the empty trailer
    return status, b"".join(pieces)


def git_commit() -> str:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return done.stdout.strip()


def machine() -> str:
    """One line: commit, cores, CPU, Python."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"commit {git_commit()}, {os.cpu_count()} cores ({cpu}), "
        f"Python {sys.version.split()[0]} ({platform.python_implementation()})"
    )


def micro(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f} µs"
