"""Check one input path (an ``.agent`` file or a Mantle project folder) into diagnostics.

``validate_path`` never raises: a missing file is a ``file-not-found`` diagnostic, and a bug
of ours is an ``internal-error`` diagnostic naming the file (``internal_error``), so one bad
input never hides the report on the others. Used by ``agentscript validate`` and by anything
else that checks files (a server, the test runner, an editor).
"""

from __future__ import annotations

from pathlib import Path

from agentscript.diagnostics import Diagnostic, Span, error


def internal_error(path: str | Path, exc: BaseException) -> Diagnostic:
    """The diagnostic reporting that agentscript itself failed on ``path``."""
    diag = error(
        "internal-error",
        f"agentscript failed on this file ({type(exc).__name__}: {exc}); please report it",
        Span(1, 1, 1, 1),
    )
    diag.file = str(path)
    return diag


def validate_path(path: Path, dialect: str | None = None, lints: bool = True) -> list[Diagnostic]:
    """Every diagnostic of ``path``, in source order (a Mantle folder in its loader's order).

    ``lints`` adds the anti-pattern warnings and ``[[assert]]`` rules of
    :mod:`agentscript.authoring.lints` to a file or project without errors."""
    from agentscript.check import check
    from agentscript.loader import parse_file
    from agentscript.mantle import load_project

    try:
        if path.is_dir():
            project, diagnostics = load_project(path)
            if lints and project is not None and not any(d.is_error for d in diagnostics):
                from agentscript.authoring.lints import lint_project

                diagnostics = diagnostics + lint_project(project)
            return diagnostics
        if not path.exists():
            diag = error("file-not-found", "no such file", Span(1, 1, 1, 1))
            diag.file = str(path)
            return [diag]
        doc, diagnostics = parse_file(path)
        if doc is None:
            return diagnostics
        result = check(doc, dialect=dialect)
        diagnostics = diagnostics + result.diagnostics
        if lints and not any(d.is_error for d in diagnostics):
            from agentscript.authoring.lints import file_lints
            from agentscript.loader import read_source

            text, _problem = read_source(path)
            diagnostics += file_lints(str(path), result.outline, (text or "").replace("\r\n", "\n"))
        return sorted(diagnostics, key=lambda d: (d.span.line, d.span.column))
    except Exception as exc:  # a bug of ours must not hide the rest of the report
        return [internal_error(path, exc)]


__all__ = ["internal_error", "validate_path"]
