"""Check one input path (an ``.agent`` file or a Mantle project folder) into diagnostics,
and the ``agentscript.toml`` files the checked paths use.

``validate_path`` never raises: a missing file is a ``file-not-found`` diagnostic, and a bug
of ours is an ``internal-error`` diagnostic naming the file (``internal_error``), so one bad
input never hides the report on the others. ``config_results`` reports each
``agentscript.toml`` once, with the diagnostics ``agentscript.load`` raises for it, and
never connects to anything. An ``.agent`` file's diagnostics end with a warning for each key
of ``[actions.targets]`` none of its actions (connected subagents included) targets
(``unmatched_target_warnings``): the mapping depends on the agent, so it is reported with the
agent, on the toml file's line. Used by ``agentscript validate`` and by anything else that
checks files (a server, the test runner, an editor).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from agentscript.diagnostics import Diagnostic, Span, error, warning

if TYPE_CHECKING:
    from agentscript.check.outline import AgentOutline


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
        # The agent's own diagnostics in source order, then those on its agentscript.toml.
        return sorted(diagnostics, key=lambda d: (d.span.line, d.span.column)) + (
            unmatched_target_warnings(path, result.outline)
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


def unmatched_target_warnings(path: Path, outline: AgentOutline) -> list[Diagnostic]:
    """``unmatched-action-target`` (warning) for each key of the ``[actions.targets]`` that
    applies to the agent at ``path`` that nothing the action runner may run for it has as
    its target (:func:`_runner_targets`): a typo, so the mapping never runs. On the key's
    line of the toml file. A table that does not load is ``config_diagnostics``' to report,
    so it gives no warning here. Targets are named as a trace shows them
    (``redaction.shown_target``): the message goes to CI logs, and a URL target may hold a
    password or an API key."""
    from agentscript.actions.settings import ActionConfigError, load_settings, unmatched_targets
    from agentscript.models.config import find_config
    from agentscript.redaction import shown_target

    try:
        targets = load_settings(path).targets
    except ActionConfigError:
        return []
    agent_targets = _runner_targets(outline)
    unmatched = unmatched_targets(targets, agent_targets)
    config = find_config(path)
    if not unmatched or config is None:
        return []
    text = _text_or_empty(config)
    named = ", ".join(shown_target(t) for t in agent_targets) if agent_targets else "none"
    found: list[Diagnostic] = []
    for target in unmatched:
        diag = warning(
            "unmatched-action-target",
            f"[actions.targets] maps {shown_target(target)!r}, but no action or connected "
            f"subagent of {path.name} has that target, so the mapping never runs (a typo?); "
            f"its action targets: {named}",
            _key_span(text, target),
        )
        diag.file = str(config)
        found.append(diag)
    return found


def _runner_targets(outline: AgentOutline) -> list[str]:
    """Every target the action runner may be asked to run for the agent, sorted: its
    subagents' actions (``run`` and tool calls) and its connected subagents (``agent://...``,
    called like an action, ``engine/program.py``). A delegation (``@subagent.x``) runs a node
    of the agent, never the runner."""
    actions = {a.target for node in outline.subagents.values() for a in node.actions.values()}
    connected = {c.target for c in outline.connected_subagents.values()}
    return sorted(t for t in actions | connected if t)


def _text_or_empty(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def _key_span(text: str, key: str) -> Span:
    """Where ``key`` is written, quoted, in the toml ``text`` (the file's start if not found:
    an escaped or multi-line key)."""
    for number, line in enumerate(text.splitlines(), start=1):
        for quote in ('"', "'"):
            column = line.find(f"{quote}{key}{quote}")
            if column >= 0:
                return Span(number, column + 1, number, column + len(key) + 3)
    return Span(1, 1, 1, 1)


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
    "unmatched_target_warnings",
    "validate_path",
]
