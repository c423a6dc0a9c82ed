"""``agentscript fmt PATH...``: format ``.agent`` files in place, or check (``--check``) or
show (``--diff``) what would change."""

from __future__ import annotations

import click

from agentscript.cli.common import exit_with
from agentscript.commands import ExitCode


@click.command()
@click.argument("paths", nargs=-1, required=True)
@click.option(
    "--check", "check_only", is_flag=True, help="Do not write; exit 1 if a file would change."
)
@click.option("--diff", "show_diff", is_flag=True, help="Print a unified diff instead of writing.")
@click.option("--fix", "apply_fixes", is_flag=True, help="Also apply the safe lint fixes.")
def fmt(paths: tuple[str, ...], check_only: bool, show_diff: bool, apply_fixes: bool) -> None:
    """Format .agent files canonically (idempotent; the tree is preserved)."""
    from agentscript.discover import agent_files, any_unreadable
    from agentscript.formatting import format_path

    files = [p for p in agent_files(paths) if not p.is_dir()]
    if not files:
        click.echo("no .agent files found", err=True)
        exit_with(ExitCode.USAGE)
    changed = 0
    failed = False
    unreadable = False  # a file that could not be read: bad input (USAGE), as for validate
    for path in files:
        result = format_path(path, fix=apply_fixes)
        if result.problems:
            unreadable = unreadable or any_unreadable(result.problems)
            for diag in result.problems:
                click.echo(diag.format(), err=True)
            if result.text is not None and result.problems[0].code != "internal-error":
                click.echo(f"{path}: not formatted (fix the errors first)", err=True)
            failed = True
            continue
        if not result.changed:
            continue
        changed += 1
        if show_diff:
            click.echo(result.diff(), nl=False)
        elif check_only:
            click.echo(f"would reformat {path}")
        else:
            try:
                result.write()
            except OSError as exc:
                click.echo(
                    f"{path}: not written ({exc.strerror or exc}); it is unchanged", err=True
                )
                failed = True
                continue
            click.echo(f"reformatted {path}")
    if unreadable:
        exit_with(ExitCode.USAGE)
    if failed:
        exit_with(ExitCode.USAGE if changed == 0 else ExitCode.FAILED)
    if (check_only or show_diff) and changed:
        exit_with(ExitCode.FAILED)


__all__ = ["fmt"]
