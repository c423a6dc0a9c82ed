"""``agentscript serve``: agents over HTTP with durable sessions (the logic is in
:mod:`agentscript.server.command`; needs ``agentscript[serve]``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from agentscript.cli.common import exit_with
from agentscript.cli.options import dialect_option
from agentscript.server.config import ServerConfig

F = TypeVar("F", bound=Callable[..., Any])


def _count(flag: str, minimum: int, text: str) -> Callable[[F], F]:
    """An integer bound of the server, its default read from ServerConfig (written once there)."""
    default = getattr(ServerConfig, flag.removeprefix("--").replace("-", "_"))
    return click.option(
        flag, default=default, show_default=True, type=click.IntRange(min=minimum), help=text
    )


@click.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, type=int, help="Port to listen on.")
@click.option(
    "--store",
    default=None,
    envvar="AGENTSCRIPT_STORE",
    show_envvar=True,
    help="sqlite:///PATH (default .agentscript/sessions.db), postgresql://... or memory://; "
    "from the environment, a password stays out of the process list.",
)
@click.option("--workers", default=1, show_default=True, type=int, help="Worker processes.")
@click.option("--model", "model", default=None, help="Model spec, e.g. openai:gpt-4o-mini.")
@click.option("--base-url", default=None, help="Server URL (Ollama, vLLM, a gateway, ...).")
@click.option(
    "--session-ttl", default=None, help="Expire sessions idle this long (e.g. 3600, 12h)."
)
@click.option(
    "--lock-wait",
    default=ServerConfig.lock_wait,
    show_default=True,
    type=float,
    help="Seconds a message waits for another turn of its session before 409.",
)
@click.option(
    "--rate-limit",
    default=ServerConfig.rate_limit,
    show_default=True,
    type=float,
    help="Requests per second per API key (0: no limit).",
)
@_count(
    "--live-sessions",
    0,
    "Sessions kept in memory after a turn so their next turn skips the restore (0: none).",
)
@_count(
    "--max-concurrent-turns",
    1,
    "Turns running at once in each worker; one more gets 503 with Retry-After.",
)
@_count(
    "--max-turns-per-key",
    0,
    "Of those, turns one API key may run at once; one more gets 429 (0: no share).",
)
@_count(
    "--store-connections",
    1,
    "PostgreSQL connections each worker opens at most (plus one for its presence lock).",
)
@_count(
    "--shutdown-grace",
    0,
    "Seconds the turns running at SIGTERM get to finish and commit; then they are cancelled.",
)
@click.option(
    "--worker-timeout",
    default=ServerConfig.worker_timeout,
    show_default=True,
    type=float,
    help="With --workers > 1: seconds a worker may leave its supervisor's ping unanswered "
    "(its event loop stuck) before it is killed and replaced (0: no check).",
)
@click.option(
    "--worker-start-timeout",
    default=ServerConfig.worker_start_timeout,
    show_default=True,
    type=float,
    help="With --workers > 1: seconds a worker may take to start serving before it is killed "
    "and replaced as a failed start (0: no bound).",
)
@click.option(
    "--access-log",
    is_flag=True,
    help="Log one line per request (server errors, store failures and failed turns are "
    "logged anyway).",
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Log lines as text or as one JSON object each.",
)
@click.option("--cors-origin", "cors_origins", multiple=True, help="Allow this browser origin.")
@click.option(
    "--root-path",
    default="",
    help="The path prefix a proxy serves the server under and strips (e.g. /agents): "
    "trace_url and the playground's links then carry it.",
)
@click.option("--playground", is_flag=True, help="Also serve the playground page at /playground/.")
@dialect_option
def serve(paths: tuple[str, ...], **options: Any) -> None:
    """Serve agents over HTTP with durable sessions (needs agentscript[serve])."""
    from agentscript.server.command import serve_cli

    options["cors_origins"] = list(options["cors_origins"])
    exit_with(serve_cli(paths, echo=lambda line: click.echo(line, err=True), **options))


__all__ = ["serve"]
