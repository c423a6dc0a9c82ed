"""The checker of Agent Script: schema, name resolution and diagnostics with official codes.

``check(doc)`` validates a parsed :class:`~agentscript.syntax.tree.Document` against the
``agentforce`` (default) or ``agentscript`` dialect and returns the diagnostics plus an
:class:`~agentscript.check.outline.AgentOutline` that the engine builds its IR from.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentscript.check.context import DIALECTS, Context
from agentscript.check.outline import AgentOutline
from agentscript.check.procedures import ProcedureChecker
from agentscript.check.rules import run_rules, unused_variables
from agentscript.check.structure import StructureChecker
from agentscript.diagnostics import Diagnostic, Span
from agentscript.syntax.tree import Document

__all__ = ["DIALECTS", "AgentOutline", "CheckResult", "check"]


@dataclass(slots=True)
class CheckResult:
    """What :func:`check` found: its diagnostics (the parser's are not repeated) and the
    outline the engine builds its IR from."""

    diagnostics: list[Diagnostic]
    outline: AgentOutline

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.is_error]

    @property
    def has_errors(self) -> bool:
        return any(d.is_error for d in self.diagnostics)


def resolve_dialect(doc: Document, dialect: str | None) -> str:
    """The explicit dialect, else the file's `# @dialect:` header, else agentforce."""
    if dialect is None and doc.dialect is not None:
        dialect = doc.dialect[0].lower()
    return dialect or "agentforce"


def check(doc: Document, *, dialect: str | None = None) -> CheckResult:
    """Check ``doc``; diagnostics are sorted by position and carry ``doc.path``.

    The parser's own diagnostics are not repeated here (they live in ``doc.diagnostics``).
    """
    name = resolve_dialect(doc, dialect)
    outline = AgentOutline(dialect=name)
    ctx = Context(dialect=name, outline=outline)
    if name not in DIALECTS:
        ctx.error(
            "unknown-dialect",
            f"Unknown dialect '{name}'; use one of: {', '.join(DIALECTS)}. Checking as agentforce.",
            Span(1, 1, 1, 2),
        )
        ctx.dialect = outline.dialect = "agentforce"
    structure = StructureChecker(ctx)
    jobs = structure.run(doc)
    ProcedureChecker(ctx, structure).run(jobs)
    run_rules(ctx, jobs)
    unused_variables(ctx)
    diagnostics = ctx.diagnostics
    for diagnostic in diagnostics:
        diagnostic.file = doc.path
    diagnostics.sort(key=lambda d: (d.span.line, d.span.column))
    return CheckResult(diagnostics, outline)
