"""``agentscript chat AGENT``: talk to an agent with a real model (``chat.run_chat``)."""

from __future__ import annotations

import click

from agentscript.cli.common import (
    enable_otel,
    exit_with,
    interruptible,
    load_agent_or_exit,
    trace_dir_or_exit,
    writing_stdout,
)
from agentscript.cli.options import (
    dialect_option,
    otel_option,
    stub_missing_tools_option,
    trace_dir_option,
    var_option,
)
from agentscript.commands import SHOW_CHOICES


@click.command()
@click.argument("agent")
@click.option("--model", "model_spec", default=None, help="Model spec, e.g. openai:gpt-4o-mini.")
@click.option("--base-url", default=None, help="Server URL (Ollama, vLLM, a gateway, ...).")
@var_option
@trace_dir_option
@click.option(
    "--show",
    multiple=True,
    type=click.Choice(SHOW_CHOICES),
    help="After each reply, show the resolved prompt, the tools offered, or the turn's steps.",
)
@click.option(
    "--record",
    type=click.Path(dir_okay=False),
    default=None,
    help="Save the chat as a conversation file that `agentscript run` replays "
    "(a new file: an existing one is refused unless --overwrite).",
)
@click.option("--overwrite", is_flag=True, help="Let --record replace a file that already exists.")
@click.option("--no-stream", is_flag=True, help="Print each reply whole instead of streaming it.")
@click.option(
    "--stubs",
    type=click.Path(dir_okay=False),
    default=None,
    help="A conversation file whose 'actions:' answer actions that have no local backend "
    "(flow://, apex://, ...) and whose 'variables:' are initial values.",
)
@stub_missing_tools_option
@dialect_option
@otel_option
def chat(
    agent: str,
    model_spec: str | None,
    base_url: str | None,
    variables: tuple[str, ...],
    trace_dir: str | None,
    show: tuple[str, ...],
    record: str | None,
    overwrite: bool,
    no_stream: bool,
    stubs: str | None,
    stub_missing_tools: bool,
    dialect: str | None,
    otel: str | None,
) -> None:
    """Chat with AGENT using a real model (one message per line when stdin is not a terminal)."""
    from agentscript.chat import run_chat

    with interruptible(), writing_stdout():
        loaded = load_agent_or_exit(agent, dialect, stub_missing_tools=stub_missing_tools)
        enable_otel(loaded, otel)
        traces = trace_dir_or_exit(trace_dir)
        code = run_chat(
            loaded,
            model_spec=model_spec,
            base_url=base_url,
            variables=variables,
            show=show,
            trace_dir=traces,
            record=record,
            stream=not no_stream,
            stubs=stubs,
            overwrite=overwrite,
        )
    exit_with(code)


__all__ = ["chat"]
