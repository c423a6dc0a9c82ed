"""The ``agentscript`` click group and the one table of commands it offers.

Each command lives in its own module; adding one is a line in ``COMMANDS`` (see the package
docstring for the pattern).
"""

from __future__ import annotations

import click

from agentscript.cli.authoring import check_gates, graph, lsp, prompts
from agentscript.cli.chat import chat
from agentscript.cli.fmt import fmt
from agentscript.cli.playground import playground
from agentscript.cli.run import run
from agentscript.cli.serve import serve
from agentscript.cli.test import test_cmd
from agentscript.cli.validate import validate


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="agentscript")
def main() -> None:
    """Parse, check, format and run Agent Script agents and Mantle skill projects."""


# The commands, in the order `agentscript --help` lists them.
COMMANDS: tuple[click.Command, ...] = (
    validate,
    fmt,
    run,
    chat,
    test_cmd,
    prompts,
    graph,
    check_gates,
    lsp,
    serve,
    playground,
)

for _command in COMMANDS:
    main.add_command(_command)

__all__ = ["COMMANDS", "main"]
