"""``agentscript playground``: chat with agents in the browser and watch every decision (the
logic is in :mod:`agentscript.server.playground.command`; needs ``agentscript[serve]``)."""

from __future__ import annotations

from typing import Any

import click

from agentscript.cli.common import exit_with
from agentscript.cli.options import dialect_option, var_option


@click.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--port", default=8000, show_default=True, type=int, help="Port on 127.0.0.1.")
@click.option("--model", "model", default=None, help="Model spec (default: the stand-in model).")
@click.option("--base-url", default=None, help="Server URL (Ollama, vLLM, a gateway, ...).")
@click.option(
    "--stubs",
    type=click.Path(dir_okay=False),
    default=None,
    help="A conversation file whose 'actions:' answer flow://, apex://, ... actions.",
)
@var_option
@dialect_option
def playground(paths: tuple[str, ...], **options: Any) -> None:
    """Chat with agents in the browser and watch every decision (needs agentscript[serve])."""
    from agentscript.server.playground.command import playground_cli

    exit_with(playground_cli(paths, echo=lambda line: click.echo(line, err=True), **options))


__all__ = ["playground"]
