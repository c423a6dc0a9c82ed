"""``agentscript playground`` and ``serve --playground``: the server with the page mounted.

``playground`` is ``serve`` on 127.0.0.1 with an in-memory store, no rate limit and the stand-in
model unless ``--model`` names one, so it works offline. ``--stubs FILE`` answers actions with no
local backend (``flow://``, ``apex://``, ...) from a conversation file's ``actions:`` and
pre-fills its ``variables:``, as ``chat --stubs`` does; ``--var`` pre-fills (and wins).
Mistakes are reported as :class:`ServeError` before the server binds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agentscript.commands import ExitCode
from agentscript.server.agents import ServedAgent
from agentscript.server.command import (
    STANDIN,
    ServeError,
    ServeOptions,
    serve_command,
)

PATH = "/playground/"


def add_playground(
    app: Any, served: Mapping[str, ServedAgent], options: ServeOptions, model: str
) -> list[str]:
    """Mount the page on ``app``; the lines that describe it (ServeError on bad options)."""
    from agentscript.chat import ChatUsageError, parse_vars
    from agentscript.conversation import ConversationError, load_conversation
    from agentscript.server.playground.routes import mount_playground
    from agentscript.server.playground.sessions import PlaygroundSessions

    if options.workers != 1:
        raise ServeError(
            "--playground runs in one worker (its replays live in memory); drop --workers"
        )
    stubs: dict[str, Any] = {}
    variables: dict[str, Any] = {}
    if options.stubs:
        try:
            canned = load_conversation(options.stubs)
        except ConversationError as exc:
            raise ServeError(f"--stubs: {exc}") from None
        stubs, variables = canned.stubs, dict(canned.variables)
    try:
        given = parse_vars(options.variables)
    except ChatUsageError as exc:
        raise ServeError(str(exc)) from None
    declared = {v["name"] for s in served.values() for v in s.description["variables"]}
    unknown = sorted(set(given) - declared)
    if unknown:
        raise ServeError(
            f"--var {', '.join(unknown)}: no served agent has "
            f"{'this variable' if len(unknown) == 1 else 'these variables'}; "
            f"declared: {', '.join(sorted(declared)) or '(none)'}"
        )
    variables.update(given)
    mount_playground(
        app, served, PlaygroundSessions(default_stubs=stubs), variables=variables, model=model
    )
    return [f"  playground: http://{options.host}:{options.port}{PATH}"]


def playground_cli(
    paths: Sequence[str],
    echo: Callable[[str], None] = print,
    *,
    port: int = 8000,
    model: str | None = None,
    base_url: str | None = None,
    stubs: str | None = None,
    variables: Sequence[str] = (),
    dialect: str | None = None,
) -> ExitCode:
    """What the ``playground`` click command calls; the exit code."""
    options = ServeOptions(
        paths=list(paths),
        port=port,
        store="memory://",
        model=model or (None if base_url else STANDIN),
        base_url=base_url,
        rate_limit=0.0,
        playground=True,
        stubs=stubs,
        variables=list(variables),
        dialect=dialect,
    )
    return serve_command(options, echo)
