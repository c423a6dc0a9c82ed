"""``agentscript validate PATH...``: check ``.agent`` files, folders of them, or Mantle
projects, and the ``agentscript.toml`` each uses (once per file, as ``agentscript.load``
would: ``validation.config_results``); exit ``FAILED`` on errors and ``USAGE`` when a path
cannot be read. ``--connect`` also checks the actions against the MCP servers and OpenAPI
documents they name (``integrations.connect_check``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from agentscript.cli.common import exit_with, writing_stdout
from agentscript.cli.options import dialect_option
from agentscript.commands import ExitCode

if TYPE_CHECKING:
    from agentscript.diagnostics import Diagnostic


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
@click.option(
    "--connect",
    is_flag=True,
    help="Also connect to the MCP servers and OpenAPI documents of agentscript.toml and "
    "check the actions against their tools and operations.",
)
def validate(
    paths: tuple[str, ...], fmt: str, dialect: str | None, no_lints: bool, connect: bool
) -> None:
    """Check .agent files, folders of them, or Mantle project folders."""
    from agentscript.discover import agent_files, any_unreadable
    from agentscript.render import render_load_errors, render_report
    from agentscript.validation import config_results, validate_path

    results: list[tuple[Path, list[Diagnostic]]] = [
        (path, validate_path(path, dialect, lints=not no_lints)) for path in agent_files(paths)
    ]
    configs = config_results(path for path, _ in results)
    if connect:
        from agentscript.integrations.connect_check import connect_results

        connect_results(
            _with_usable_config(results, configs), echo=lambda line: click.echo(line, err=True)
        )
    if not results:
        click.echo("no .agent files or Mantle projects found", err=True)
        exit_with(ExitCode.USAGE)
    all_diags = [d for _, diags in [*configs, *results] for d in diags]
    with writing_stdout():
        if fmt == "json":
            click.echo(json.dumps([d.to_json() for d in all_diags], indent=2))
        else:
            color = sys.stdout.isatty()
            for config, diags in configs:  # shown as `agentscript run` shows them: no source line
                for text in render_load_errors(diags, config, color=color):
                    click.echo(text)
            for text in render_report(results, color=color):
                click.echo(text)
            errors = sum(d.is_error for d in all_diags)
            warnings = sum(d.severity.value == "warning" for d in all_diags)
            summary = f"{len(results)} file(s) checked: {errors} error(s), {warnings} warning(s)"
            click.echo(summary, err=True)
    if any_unreadable(all_diags):
        exit_with(ExitCode.USAGE)  # a path that cannot be read is bad input, not a finding
    exit_with(ExitCode.FAILED if any(d.is_error for d in all_diags) else ExitCode.OK)


def _with_usable_config(
    results: list[tuple[Path, list[Diagnostic]]], configs: list[tuple[Path, list[Diagnostic]]]
) -> list[tuple[Path, list[Diagnostic]]]:
    """The ``results`` whose ``agentscript.toml`` has no error: connecting with a malformed
    one would only report its error again, at the agent's first action."""
    from agentscript.models.config import find_config

    broken = {config for config, diags in configs if any(d.is_error for d in diags)}
    return [result for result in results if find_config(result[0]) not in broken]


__all__ = ["validate"]
