"""Front-end helpers shared by the commands: exiting with an ``ExitCode``, loading an
agent to run (its errors rendered with carets, then exit ``USAGE``) and ``--otel``."""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import click

from agentscript.commands import ExitCode
from agentscript.diagnostics import AgentScriptError
from agentscript.render import CONFIG_CODES, render_load_errors


def exit_with(code: int) -> NoReturn:
    """End the command with ``code`` (an ``ExitCode`` value)."""
    sys.exit(int(code))


def load_agent_or_exit(
    path: str, dialect: str | None = None, *, stub_missing_tools: bool = False
) -> Any:
    """The loaded agent (``.agent`` file or Mantle project); on errors, print them and exit."""
    from agentscript.loader import load

    try:
        return load(path, dialect=dialect, stub_missing_tools=stub_missing_tools)
    except AgentScriptError as exc:
        for text in render_load_errors(exc.diagnostics, path, sys.stderr.isatty()):
            click.echo(text, err=True)
        checked = dialect or "the file's '# @dialect:' header, else agentforce"
        click.echo(f"{path}: cannot run an agent with errors (dialect: {checked})", err=True)
        about_the_agent = any(d.code not in CONFIG_CODES for d in exc.diagnostics)
        if dialect != "agentscript" and str(path).endswith(".agent") and about_the_agent:
            click.echo(
                "hint: --dialect agentscript checks without the Salesforce-org rules",
                err=True,
            )
        if any(d.code == "mantle-unresolved-tool" for d in exc.diagnostics):
            click.echo(
                "hint: pass --stub-missing-tools to run the missing tools as stubs "
                "(give their results under 'actions:' in the conversation file)",
                err=True,
            )
        exit_with(ExitCode.USAGE)


def enable_otel(agent: Any, mode: str | None) -> None:
    """``--otel MODE``: export each turn of ``agent`` as an OpenTelemetry trace
    (``integrations.otel.telemetry_for``); a missing extra or bad setting exits ``USAGE``."""
    if mode is None:
        return
    from agentscript.integrations.otel import TelemetryConfigError, telemetry_for

    try:
        agent.telemetry = telemetry_for(mode)
    except TelemetryConfigError as exc:
        click.echo(f"error: {exc}", err=True)
        exit_with(ExitCode.USAGE)


__all__ = ["enable_otel", "exit_with", "load_agent_or_exit"]
