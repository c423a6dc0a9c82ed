"""Check one input path (an ``.agent`` file or a Mantle project folder) into diagnostics,
and the ``agentscript.toml`` files the checked paths use.

``validate_path`` never raises: a missing file is a ``file-not-found`` diagnostic, and a bug
of ours is an ``internal-error`` diagnostic naming the file (``internal_error``), so one bad
input never hides the report on the others. ``config_results`` reports each
``agentscript.toml`` once, with the diagnostics ``agentscript.load`` raises for it, and
never connects to anything. Used by ``agentscript validate`` and by anything else that
checks files (a server, the test runner, an editor).

An ``.agent`` file's diagnostics end with the warnings of :mod:`agentscript.target_checks`
on the ``[actions.targets]`` of its toml.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from agentscript.diagnostics import Diagnostic, Span, error
from agentscript.target_checks import python_target_warnings, target_warnings

if TYPE_CHECKING:
    pass


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
        if any(d.is_error for d in diagnostics):
            return sorted(diagnostics, key=lambda d: (d.span.line, d.span.column))
        if lints:
            from agentscript.authoring.lints import file_lints
            from agentscript.loader import read_source

            text, _problem = read_source(path)
            diagnostics += file_lints(str(path), result.outline, (text or "").replace("\r\n", "\n"))
        diagnostics += python_target_warnings(path, doc, result.outline)
        # The agent's own diagnostics in source order, then those on its agentscript.toml.
        return sorted(diagnostics, key=lambda d: (d.span.line, d.span.column)) + (
            target_warnings(path, result.outline, dialect)
        )
    except Exception as exc:  # a bug of ours must not hide the rest of the report
        return [internal_error(path, exc)]


def config_results(paths: Iterable[Path]) -> list[tuple[Path, list[Diagnostic]]]:
    """Each ``agentscript.toml`` that applies to one of ``paths`` (once, however many of
    them share it) with its :func:`config_diagnostics`; files without any are left out."""
    from agentscript.models.config import find_config

    checked: dict[Path, list[Diagnostic]] = {}
    for path in paths:
        config = find_config(path) if path.exists() else None
        if config is not None and config not in checked:
            checked[config] = config_diagnostics(path)
    return [(config, diagnostics) for config, diagnostics in checked.items() if diagnostics]


def config_diagnostics(path: Path) -> list[Diagnostic]:
    """What ``agentscript.load`` raises for the ``agentscript.toml`` that applies to the
    agent at ``path``: ``invalid-limits`` for ``[limits]``, ``config-error`` for the tables
    of the integrations; each on the toml file, made by the loader's own functions."""
    from agentscript.actions.settings import ActionConfigError, load_settings
    from agentscript.engine.budgets import BudgetConfigError
    from agentscript.integrations.config import ConfigError
    from agentscript.limits import configured_limits
    from agentscript.loader import config_error, limits_error

    found: list[Diagnostic] = []
    try:
        configured_limits(path)
    except ValueError as exc:
        found.append(limits_error(path, exc))
    try:
        _check_integration_tables(path)
        load_settings(path)  # as the loader: after the integration tables, in the same try
    except (ConfigError, BudgetConfigError, ActionConfigError) as exc:
        found.append(config_error(path, exc))
    except Exception as exc:  # a bug of ours must not hide the rest of the report
        found.append(internal_error(path, exc))
    return found


def _check_integration_tables(path: Path) -> None:
    """Raise what ``integrations.setup.configure_agent`` raises for a malformed table, but
    start and fetch nothing: an OpenAPI document is read when it is a file, never fetched
    from a URL (``validate --connect`` does that), and no MCP server is started."""
    from agentscript.integrations.config import load_integration_config
    from agentscript.integrations.openapi import load_document, parse_openapi_configs
    from agentscript.integrations.setup import check_tables

    config = load_integration_config(start=path)
    check_tables(config)
    for api in parse_openapi_configs({"openapi": config.openapi}, path=config.path):
        if not api.spec.startswith(("http://", "https://")):
            load_document(api)


__all__ = [
    "config_diagnostics",
    "config_results",
    "internal_error",
    "python_target_warnings",
    "target_warnings",
    "validate_path",
]
