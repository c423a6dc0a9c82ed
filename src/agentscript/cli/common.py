"""Front-end helpers shared by the commands: exiting with an ``ExitCode``, loading an
agent to run (its errors rendered with carets, then exit ``USAGE``), ``--otel``,
``--trace-dir`` checked before the first turn, Ctrl-C as ``INTERRUPTED`` and a standard
output that cannot be written (a full disk) as one line, not a traceback."""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import click

from agentscript.commands import ExitCode
from agentscript.diagnostics import AgentScriptError
from agentscript.discover import UNREADABLE_CODES
from agentscript.render import CONFIG_CODES, render_load_errors

# Load errors that say nothing about the agent's source (agentscript.toml, a file that cannot
# be read or is not text): no other dialect would help, so no --dialect hint.
NOT_ABOUT_THE_SOURCE = CONFIG_CODES | UNREADABLE_CODES | {"binary-file", "invalid-encoding"}


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
        if _is_mantle_project(path):  # dialects are an .agent notion
            click.echo(f"{path}: cannot run an agent with errors", err=True)
        else:
            checked = dialect or "the file's '# @dialect:' header, else agentforce"
            click.echo(f"{path}: cannot run an agent with errors (dialect: {checked})", err=True)
        about_the_agent = any(d.code not in NOT_ABOUT_THE_SOURCE for d in exc.diagnostics)
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


def _is_mantle_project(path: str) -> bool:
    """What :func:`agentscript.loader.load` loads as a Mantle project: a folder, or its
    ``agent.yml``."""
    file = Path(path)
    return file.name in ("agent.yml", "agent.yaml") or file.is_dir()


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


def trace_dir_or_exit(trace_dir: str | None) -> Path | None:
    """``--trace-dir``, created and checked writable before the first turn; on failure one
    line (``--trace-dir X: cannot write traces: <reason>``) and exit ``USAGE``."""
    if trace_dir is None:
        return None
    folder = Path(trace_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder, prefix=".agentscript-check-"):
            pass
    except OSError as exc:
        click.echo(f"--trace-dir {trace_dir}: cannot write traces: {exc.strerror or exc}", err=True)
        exit_with(ExitCode.USAGE)
    return folder


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """Ctrl-C in the block (or in the command it decorates) ends the command with
    ``INTERRUPTED`` (130), without click's ``Aborted!`` and its exit status 1."""
    try:
        yield
    except KeyboardInterrupt:
        click.echo("\ninterrupted", err=True)
        exit_with(ExitCode.INTERRUPTED)


# The errors of an output that cannot be written: a full disk or quota, a file too large, a
# terminal gone. Only these are said as "cannot write the output" (chat's whole session runs
# in the block, and an error of anything else must not be reported as the output's).
OUTPUT_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})


@contextlib.contextmanager
def writing_stdout() -> Iterator[None]:
    """Standard output that cannot be written in the block (a full disk, ``> /dev/full``)
    ends the command with one line on stderr and ``FAILED``, not a traceback. A closed pipe
    (``| head``) is left to click, which exits quietly."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in OUTPUT_ERRORS:
            raise  # a closed pipe is click's; another error is not the output's to report
        _drop_stdout()
        click.echo(f"error: cannot write the output: {exc.strerror or exc}", err=True)
        exit_with(ExitCode.FAILED)


def _drop_stdout() -> None:
    """Point the process's stdout at the null device, so the text still buffered is not
    written again (and does not fail again) when the interpreter exits."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        fd = sys.stdout.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)


__all__ = [
    "NOT_ABOUT_THE_SOURCE",
    "enable_otel",
    "exit_with",
    "interruptible",
    "load_agent_or_exit",
    "trace_dir_or_exit",
    "writing_stdout",
]
