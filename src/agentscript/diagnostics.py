"""Source positions and diagnostics shared by every stage of the pipeline."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from agentscript.errors import UsageError


class Severity(StrEnum):
    """How bad a diagnostic is: only errors stop a file from loading."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


class Span(NamedTuple):
    """A region of source text. Lines and columns are 1-based; the end is exclusive.

    A named tuple rather than a frozen dataclass: the parser builds hundreds of thousands of
    spans per megabyte, and a tuple is built several times faster while staying immutable,
    hashable and comparable.
    """

    line: int
    column: int
    end_line: int
    end_column: int

    @staticmethod
    def point(line: int, column: int) -> Span:
        """The one character at ``line``/``column``."""
        return Span(line, column, line, column + 1)

    def to(self, other: Span) -> Span:
        """The span that starts where this one starts and ends where ``other`` ends."""
        return Span(self[0], self[1], other[2], other[3])


UNKNOWN_SPAN = Span(1, 1, 1, 1)


@dataclass(slots=True)
class Diagnostic:
    """A problem found in a file: a stable ``code``, a message for people, and where."""

    code: str
    message: str
    span: Span
    severity: Severity = Severity.ERROR
    file: str | None = None
    # Related notes (e.g. "first defined here"), kept short.
    notes: list[str] = field(default_factory=list)

    @property
    def is_error(self) -> bool:
        """Whether this diagnostic is an error."""
        return self.severity is Severity.ERROR

    def to_json(self) -> dict[str, object]:
        """A flat JSON object (``validate --json``); notes are not included."""
        return {
            "file": self.file,
            "line": self.span.line,
            "column": self.span.column,
            "end_line": self.span.end_line,
            "end_column": self.span.end_column,
            "severity": self.severity.value,
            "code": self.code,
            "message": self.message,
        }

    def format(self) -> str:
        """``file:line:column: severity[code]: message``, the compiler-style one-liner."""
        where = f"{self.file}:" if self.file else ""
        return (
            f"{where}{self.span.line}:{self.span.column}: "
            f"{self.severity.value}[{self.code}]: {self.message}"
        )


def error(code: str, message: str, span: Span) -> Diagnostic:
    """An error diagnostic without a file (the caller sets ``file`` when it knows it)."""
    return Diagnostic(code, message, span, Severity.ERROR)


def warning(code: str, message: str, span: Span) -> Diagnostic:
    """A warning diagnostic without a file."""
    return Diagnostic(code, message, span, Severity.WARNING)


def info(code: str, message: str, span: Span) -> Diagnostic:
    """An info diagnostic without a file."""
    return Diagnostic(code, message, span, Severity.INFO)


class AgentScriptError(UsageError):
    """Raised by :func:`agentscript.load` when a file has errors; carries every diagnostic."""

    def __init__(self, diagnostics: list[Diagnostic], path: str | None = None) -> None:
        self.diagnostics = diagnostics
        self.path = path
        errors = [d for d in diagnostics if d.is_error]
        head = errors[0].format() if errors else "no errors"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        super().__init__(f"{head}{more}")
