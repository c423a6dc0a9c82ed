"""``agentscript mcp-serve AGENT``: serve an agent as an MCP server (tools ``ask`` and
``send``) over stdio or streamable HTTP (``integrations.mcp_server.mcp_serve_command``)."""

from __future__ import annotations

import click

from agentscript.cli.common import exit_with, load_agent_or_exit
from agentscript.cli.options import trace_dir_option
from agentscript.integrations.mcp_server import SHUTDOWN_GRACE
from agentscript.server.config import ServerConfig


@click.command("mcp-serve")
@click.argument("agent")
@click.option("--model", "model_spec", default=None, help="Model spec, e.g. openai:gpt-4o-mini.")
@click.option(
    "--base-url", default=None, help="Base URL of an OpenAI- or Anthropic-compatible API."
)
@click.option(
    "--transport",
    type=click.Choice(["stdio", "streamable-http"]),
    default="stdio",
    show_default=True,
)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8000, show_default=True)
@click.option(
    "--shutdown-grace",
    type=click.IntRange(min=0),
    default=SHUTDOWN_GRACE,
    show_default=True,
    help="Seconds the calls running at SIGTERM (or, over stdio, at the end of stdin) get to finish; then they are cut.",
)
@click.option(
    "--rate-limit",
    default=ServerConfig.rate_limit,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Over streamable HTTP: requests per second per API key (0: no limit).",
)
@trace_dir_option
def mcp_serve(
    agent: str,
    model_spec: str | None,
    base_url: str | None,
    transport: str,
    host: str,
    port: int,
    shutdown_grace: int,
    rate_limit: float,
    trace_dir: str | None,
) -> None:
    """Serve AGENT as an MCP server (tools `ask` and `send`)."""
    from agentscript.integrations.mcp_server import mcp_serve_command

    loaded = load_agent_or_exit(agent)
    exit_with(
        mcp_serve_command(
            loaded,
            model_spec=model_spec,
            base_url=base_url,
            transport=transport,
            host=host,
            port=port,
            trace_dir=trace_dir,
            shutdown_grace=shutdown_grace,
            rate_limit=rate_limit,
            echo=lambda line: click.echo(line, err=True),
        )
    )


__all__ = ["mcp_serve"]
