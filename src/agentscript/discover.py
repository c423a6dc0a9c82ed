"""Which inputs a list of command-line paths means.

``agent_files`` turns paths into the things to check or format: a file stays itself (even if
it does not exist, so the reader reports it), a Mantle project folder stays a folder, and any
other folder expands to every ``.agent`` file below it plus the Mantle projects it holds.
``UNREADABLE_CODES`` are the diagnostic codes that mean an input could not be read at all
(a caller treats them as bad usage, not as findings). Nothing here reads file contents.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from agentscript.diagnostics import Diagnostic

# Diagnostics that mean the input could not be read at all (bad input, not a finding).
UNREADABLE_CODES = frozenset({"file-not-found", "unreadable-file"})


def agent_files(paths: Sequence[str | Path]) -> Iterator[Path]:
    """Each path as given; folders expand to Mantle projects and every ``.agent`` below them.
    An agent reached twice (by its folder and by its own path) comes once, the first time."""
    seen: set[Path] = set()
    for path in _expanded(paths):
        key = path.resolve()
        if key not in seen:
            seen.add(key)
            yield path


def _expanded(paths: Sequence[str | Path]) -> Iterator[Path]:
    from agentscript.mantle import is_mantle_project

    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            if is_mantle_project(path):
                yield path
                continue
            found = sorted(p for p in path.rglob("*.agent") if p.is_file())
            projects = sorted(
                p.parent.parent for p in path.rglob("skill.md") if p.parent.parent.name == "skills"
            )
            yield from found
            yield from dict.fromkeys(p.parent for p in projects if is_mantle_project(p.parent))
        else:
            yield path


def any_unreadable(diagnostics: Iterable[Diagnostic]) -> bool:
    """Whether one of ``diagnostics`` says an input could not be read at all."""
    return any(d.code in UNREADABLE_CODES for d in diagnostics)


__all__ = ["UNREADABLE_CODES", "agent_files", "any_unreadable"]
