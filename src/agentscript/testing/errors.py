"""Errors of the test runner, split by audience.

:class:`SpecError` is the spec author's mistake (a bad field, a wrong type, an unknown agent,
a JSONPath that does not parse): it names the file and line and ends with the fix. Nothing in
``testing/`` lets a traceback reach the user for bad input.
"""

from __future__ import annotations

from pathlib import Path


class SpecError(ValueError):
    """A test spec cannot be used; ``str()`` is ``file:line: message``."""

    def __init__(self, path: Path | str | None, line: int | None, message: str) -> None:
        self.path = Path(path) if path is not None else None
        self.line = line
        self.message = message
        where = str(self.path) if self.path is not None else "spec"
        if line is not None:
            where = f"{where}:{line}"
        super().__init__(f"{where}: {message}")


class NotASpec(SpecError):
    """The file is not a test spec at all (skipped when a folder is searched)."""
