"""``agentscript prompts``, ``graph``, ``check-gates`` and ``lsp``: reviewing an agent before it
runs (the logic is in :mod:`agentscript.authoring`)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from agentscript.cli.common import exit_with
from agentscript.commands import ExitCode


@click.command()
@click.argument("agent")
@click.option("--node", default=None, help="Only this node (subagent) or Mantle skill.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json", "markdown"]),
    default="text",
    show_default=True,
)
def prompts(agent: str, node: str | None, fmt: str) -> None:
    """Every effective prompt of each node, labelled with the condition that selects it."""
    from agentscript.authoring.commands import prompts_command

    exit_with(prompts_command(Path(agent), node, fmt, sys.stdout, sys.stderr))


@click.command()
@click.argument("agent")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["mermaid", "dot", "svg", "json"]),
    default="mermaid",
    show_default=True,
)
def graph(agent: str, fmt: str) -> None:
    """The agent's control graph: nodes, transitions with their guards, delegations, ends."""
    from agentscript.authoring.commands import graph_command

    exit_with(graph_command(Path(agent), fmt, sys.stdout, sys.stderr))


@click.command("check-gates")
@click.argument("agent")
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
def check_gates(agent: str, fmt: str) -> None:
    """Each gated tool: when the model sees it, what can open it; and the [[assert]] rules."""
    from agentscript.authoring.commands import gates_command

    exit_with(gates_command(Path(agent), fmt, sys.stdout, sys.stderr))


@click.command()
def lsp() -> None:
    """Run the language server on stdin/stdout (for editors; needs agentscript[lsp])."""
    try:
        from agentscript.authoring.lsp import run_lsp
    except ImportError as exc:
        click.echo(
            f"agentscript lsp needs the language server extra ({exc.name} is missing): "
            "pip install 'agentscript[lsp]'",
            err=True,
        )
        exit_with(ExitCode.USAGE)
    exit_with(run_lsp())


__all__ = ["check_gates", "graph", "lsp", "prompts"]
