"""Front-end helpers shared by the commands: exiting with an ``ExitCode`` and loading an
agent to run (its errors rendered with carets, then exit ``USAGE``)."""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import click

from agentscript.commands import ExitCode
from agentscript.diagnostics import AgentScriptError
from agentscript.render import render_diagnostic, source_lines


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
        lines = source_lines(path)
        for diag in exc.diagnostics:
            if diag.is_error:
                click.echo(render_diagnostic(diag, lines, sys.stderr.isatty()), err=True)
        checked = dialect or "the file's '# @dialect:' header, else agentforce"
        click.echo(f"{path}: cannot run an agent with errors (dialect: {checked})", err=True)
        if dialect != "agentscript" and str(path).endswith(".agent"):
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


__all__ = ["exit_with", "load_agent_or_exit"]
