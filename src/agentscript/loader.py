"""From a path to a checked agent: parse, check, and build the engine's program."""

from __future__ import annotations

import errno
from pathlib import Path

from agentscript.check import check
from agentscript.diagnostics import AgentScriptError, Diagnostic, Span, error
from agentscript.engine.session import Agent, AgentBase
from agentscript.limits import Limits, configured_limits
from agentscript.models.config import find_config
from agentscript.reading import read_file_bytes
from agentscript.syntax import Document, parse


def read_source(path: Path) -> tuple[str | None, Diagnostic | None]:
    """Read a file as UTF-8 (BOM tolerated); a binary or unreadable file is a diagnostic."""
    try:
        data = read_file_bytes(path)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            # The code and words `validate` uses for a missing path, in every command.
            return None, _file_error("file-not-found", "no such file", path)
        return None, _file_error(
            "unreadable-file", f"cannot read file: {exc.strerror or exc}", path
        )
    if b"\x00" in data[:8192]:
        return None, _file_error(
            "binary-file", "this is a binary file, not Agent Script text", path
        )
    try:
        return data.decode("utf-8-sig"), None
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        diag = error(
            "invalid-encoding",
            f"not valid UTF-8 (byte {exc.start}); save the file as UTF-8",
            Span.point(line, 1),
        )
        diag.file = str(path)
        return None, diag


def _file_error(code: str, message: str, path: Path) -> Diagnostic:
    diag = error(code, message, Span(1, 1, 1, 1))
    diag.file = str(path)
    return diag


def parse_file(path: str | Path) -> tuple[Document | None, list[Diagnostic]]:
    file = Path(path)
    text, problem = read_source(file)
    if text is None:
        return None, [problem] if problem else []
    doc = parse(text, str(file))
    return doc, list(doc.diagnostics)


def load(
    path: str | Path, *, dialect: str | None = None, stub_missing_tools: bool = False
) -> AgentBase:
    """Load and check an ``.agent`` file or a Mantle project folder (``agent.yml`` also
    names its folder); raise :class:`AgentScriptError` with every error.

    ``stub_missing_tools`` applies to Mantle projects only: tools whose code is missing are
    replaced by stubs instead of being errors.
    """
    file = Path(path)
    limits = _limits(file)
    if file.is_dir() or file.name in ("agent.yml", "agent.yaml"):
        from agentscript.mantle.runtime import load_mantle_agent

        agent = load_mantle_agent(file, stub_missing_tools=stub_missing_tools)
        agent.limits = limits
        return _integrated(agent, file)
    doc, diagnostics = parse_file(file)
    if doc is None:
        raise AgentScriptError(diagnostics, str(file))
    result = check(doc, dialect=dialect)
    diagnostics = diagnostics + result.diagnostics
    if any(d.is_error for d in diagnostics):
        raise AgentScriptError(diagnostics, str(file))
    loaded = Agent(result.outline, path=file)
    loaded.limits = limits
    return _integrated(loaded, file)


def _integrated(agent: AgentBase, file: Path) -> AgentBase:
    """``agent`` with the integrations of its ``agentscript.toml`` (MCP servers, OpenAPI,
    budgets, resilience, telemetry) and its ``[actions]`` checked; a malformed table is a
    ``config-error`` diagnostic on that file (its message names the table and the fix)."""
    from agentscript.actions.settings import ActionConfigError
    from agentscript.engine.budgets import BudgetConfigError
    from agentscript.integrations.config import ConfigError
    from agentscript.integrations.otel import TelemetryConfigError
    from agentscript.integrations.setup import configure_agent

    try:
        configure_agent(agent)
        # [actions] read now, and kept, not at the first session: a server started fine, then
        # answered every new session 422 invalid_variable for its operator's
        # `isolation = "fork"` (or for the file edited so after its start). Only the table's
        # form is checked: a mapped python:// module or function that does not exist is found
        # when the action runs (`validate` warns: unresolved-python-target), as it may be
        # installed where the agent is deployed.
        agent.load_action_settings()
    except (ConfigError, BudgetConfigError, TelemetryConfigError, ActionConfigError) as exc:
        diag = config_error(file, exc)
        raise AgentScriptError([diag], diag.file) from None
    return agent


def _limits(file: Path) -> Limits:
    """The ``[limits]`` of the ``agentscript.toml`` that applies to ``file`` (defaults when
    there is none); a bad table is an ``invalid-limits`` diagnostic on that file."""
    try:
        limits, _ = configured_limits(file)
    except ValueError as exc:
        diag = limits_error(file, exc)
        raise AgentScriptError([diag], diag.file) from None
    return limits


# `agentscript.load` and `agentscript validate` (validation.config_diagnostics) report a bad
# table of agentscript.toml with these two, so both give the same code, file and position.


def limits_error(file: Path, exc: ValueError) -> Diagnostic:
    """``invalid-limits`` on the ``agentscript.toml`` that applies to ``file``: ``exc`` is
    the ValueError :func:`configured_limits` raised."""
    return _on_config("invalid-limits", f"{exc}; fix the [limits] table", file)


def config_error(file: Path, exc: Exception) -> Diagnostic:
    """``config-error`` on the ``agentscript.toml`` that applies to ``file``: ``exc`` names
    the table and the fix."""
    return _on_config("config-error", str(exc), file)


def _on_config(code: str, message: str, file: Path) -> Diagnostic:
    # A table of the file as a whole has no line of its own: the file's first position.
    return _file_error(code, message, find_config(file) or file)
