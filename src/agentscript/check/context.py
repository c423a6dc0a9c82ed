"""Shared state of one check run: the dialect, the diagnostics being collected, symbol tables."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass, field

from agentscript.check.outline import AgentOutline
from agentscript.diagnostics import Diagnostic, Severity, Span

DIALECTS = ("agentforce", "agentscript")


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate ``name`` was probably meant to be (a close spelling, or the same word in
    another case), else None."""
    pool = list(candidates)
    close = difflib.get_close_matches(name, pool, n=1, cutoff=0.75)
    if close:
        return close[0]
    return {c.lower(): c for c in pool}.get(name.lower())


def suggest(name: str, candidates: Iterable[str]) -> str:
    """A " Did you mean 'x'?" suffix, or "" when nothing is close."""
    hit = closest(name, candidates)
    return "" if hit is None else f" Did you mean '{hit}'?"


@dataclass(slots=True)
class Context:
    dialect: str
    outline: AgentOutline
    diagnostics: list[Diagnostic] = field(default_factory=list)
    # Variables referenced anywhere (for unused-variable).
    used_variables: set[str] = field(default_factory=set)
    # Whether the file has a `knowledge` block (its fields are in outline.knowledge).
    has_knowledge: bool = False

    @property
    def agentforce(self) -> bool:
        return self.dialect == "agentforce"

    def error(self, code: str, message: str, span: Span) -> None:
        self.diagnostics.append(Diagnostic(code, message, span, Severity.ERROR))

    def warning(self, code: str, message: str, span: Span) -> None:
        self.diagnostics.append(Diagnostic(code, message, span, Severity.WARNING))

    def info(self, code: str, message: str, span: Span) -> None:
        self.diagnostics.append(Diagnostic(code, message, span, Severity.INFO))

    def org_error(self, code: str, message: str, span: Span) -> None:
        """A Salesforce-org rule: an error in agentforce, nothing in agentscript."""
        if self.agentforce:
            self.error(code, message, span)
