"""``agentscript validate PATH...``: check ``.agent`` files, folders of them, or Mantle
projects; exit ``FAILED`` on errors and ``USAGE`` when a path cannot be read."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from agentscript.cli.common import exit_with
from agentscript.cli.options import dialect_option
from agentscript.commands import ExitCode


@click.command()
@click.argument("paths", nargs=-1, required=True)
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@dialect_option
@click.option(
    "--no-lints",
    "no_lints",
    is_flag=True,
    help="Only the checker's diagnostics: skip the anti-pattern lints and [[assert]] rules.",
)
def validate(paths: tuple[str, ...], fmt: str, dialect: str | None, no_lints: bool) -> None:
    """Check .agent files, folders of them, or Mantle project folders."""
    from agentscript.diagnostics import Diagnostic
    from agentscript.discover import agent_files, any_unreadable
    from agentscript.render import render_report
    from agentscript.validation import validate_path

    results: list[tuple[Path, list[Diagnostic]]] = [
        (path, validate_path(path, dialect, lints=not no_lints)) for path in agent_files(paths)
    ]
    if not results:
        click.echo("no .agent files or Mantle projects found", err=True)
        exit_with(ExitCode.USAGE)
    all_diags = [d for _, diags in results for d in diags]
    if fmt == "json":
        click.echo(json.dumps([d.to_json() for d in all_diags], indent=2))
    else:
        for text in render_report(results, color=sys.stdout.isatty()):
            click.echo(text)
        errors = sum(d.is_error for d in all_diags)
        warnings = sum(d.severity.value == "warning" for d in all_diags)
        summary = f"{len(results)} file(s) checked: {errors} error(s), {warnings} warning(s)"
        click.echo(summary, err=True)
    if any_unreadable(all_diags):
        exit_with(ExitCode.USAGE)  # a path that cannot be read is bad input, not a finding
    exit_with(ExitCode.FAILED if any(d.is_error for d in all_diags) else ExitCode.OK)


__all__ = ["validate"]
