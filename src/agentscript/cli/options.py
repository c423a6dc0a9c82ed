"""Click options shared by several commands, each defined once."""

from __future__ import annotations

import click

# Where `run` and `chat` write one trace file per turn.
trace_dir_option = click.option(
    "--trace-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Write one trace file per turn.",
)

stub_missing_tools_option = click.option(
    "--stub-missing-tools",
    is_flag=True,
    help="Mantle projects: run tools whose Python code is missing as stubs (results from the conversation file).",
)

dialect_option = click.option(
    "--dialect",
    type=click.Choice(["agentforce", "agentscript"]),
    default=None,
    help="Dialect to check against (default: the file's '# @dialect:' header, else agentforce).",
)

# `run` and `chat`: export each turn as an OpenTelemetry trace (integrations/otel.py).
otel_option = click.option(
    "--otel",
    type=click.Choice(["console", "otlp"]),
    default=None,
    help="Export each turn as an OpenTelemetry trace: to stderr, or over OTLP (OTEL_* env vars).",
)

__all__ = ["dialect_option", "otel_option", "stub_missing_tools_option", "trace_dir_option"]

var_option = click.option(
    "--var",
    "variables",
    multiple=True,
    metavar="NAME=VALUE",
    help="Initial variable (YAML value); Mantle entries by qualified name (project.customer_id).",
)
