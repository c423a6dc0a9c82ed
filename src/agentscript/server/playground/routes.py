"""The playground's routes, added to the ``serve`` app by :func:`mount_playground`.

- ``GET /`` redirects to the page, ``/playground/``; its assets are under
  ``/playground/static/`` (files shipped in this package: no CDN, no build step). The page
  names every URL relative to its own (and ``/playground`` redirects to ``playground/``, so
  that it is always read from a URL ending in a slash): served under a prefix by a proxy, it
  works whether or not the server was told the prefix (``root_path``);
- ``GET /v1/agents/{agent}/graph``: the agent's control graph (404 ``graph_unavailable``
  when ``agentscript.authoring`` is not installed);
- ``/playground/api/...``: the page's extras over the session API (config, conversation
  files in and out, full session state with the skill stack, trace zip).

Routes stay thin (parse, authenticate, call, return); sessions and turns go through the same
:class:`SessionService` as the public API, so what the page shows is what a client gets.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path as FilePath
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Path, Request
from fastapi.responses import FileResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from agentscript.server.agents import ServedAgent
from agentscript.server.app import NAME, SESSION_ID, authenticate
from agentscript.server.errors import ApiError
from agentscript.server.playground import export, info
from agentscript.server.playground.sessions import PlaygroundSessions
from agentscript.server.service import SessionService
from agentscript.store import SessionRecord, Store, TurnRecord

STATIC = FilePath(__file__).parent / "static"
# A conversation file pasted or uploaded into the page (the body limit applies first).
MAX_CONVERSATION_CHARS = 200_000
# Turns of a session that the exports (conversation file, trace zip) take at most: each is
# built in memory from every turn's trace, so a longer session is refused rather than read.
MAX_EXPORT_TURNS = 1000

Owner = Annotated[str, Depends(authenticate)]
SessionId = Annotated[str, Path(pattern=SESSION_ID)]
AgentName = Annotated[str, Path(pattern=NAME)]


class ConversationText(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(max_length=MAX_CONVERSATION_CHARS)


class NewSession(BaseModel):
    model_config = ConfigDict(extra="forbid")
    variables: dict[str, Any] = Field(default_factory=dict)
    # A conversation file (YAML) to replay: its moves answer the session's turns in order.
    conversation: str | None = Field(default=None, max_length=MAX_CONVERSATION_CHARS)


async def _parse(text: str) -> Any:
    """The conversation file ``text``, parsed off the event loop: YAML of a few hundred KB
    can take a second, and every other request would wait for it."""
    from agentscript.conversation import ConversationError, parse_conversation

    try:
        return await run_in_threadpool(parse_conversation, text)
    except ConversationError as exc:
        raise ApiError(422, "invalid_conversation", str(exc)) from None


# The page and its assets: no inline script or style, nothing from elsewhere, never framed.
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
        "form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


class PageFiles(StaticFiles):
    """The page's assets, with :data:`PAGE_HEADERS` and ``Cache-Control: no-cache``, as the
    page itself: a browser revalidates them (ETag, 304), so an upgraded server never runs
    the new page with the old script or style."""

    def file_response(self, *args: Any, **kwargs: Any) -> Response:
        response = super().file_response(*args, **kwargs)
        response.headers.update(PAGE_HEADERS)
        response.headers["Cache-Control"] = "no-cache"
        return response


def mount_playground(
    app: FastAPI,
    agents: Mapping[str, ServedAgent],
    sessions: PlaygroundSessions,
    *,
    variables: Mapping[str, Any] | None = None,
    model: str = "",
) -> None:
    """Add the page and its routes to ``app``; every served agent gets ``sessions`` as its
    per-session overrides (stubs, scripted replays)."""
    service: SessionService = app.state.service
    defaults = dict(variables or {})
    for served in agents.values():
        served.overrides = sessions
    extras = {name: {"guards": info.guards(s.agent)} for name, s in agents.items()}

    # Relative redirects: a proxy that serves the app under a prefix keeps it, told or not.
    @app.get("/", include_in_schema=False)
    async def root(request: Request) -> RedirectResponse:
        # The prefix itself without its slash (https://host/agents) resolves a relative URL
        # beside it, out of the prefix: told the prefix (--root-path), name it.
        root_path = request.scope.get("root_path", "")
        return RedirectResponse(f"{root_path}/playground/" if root_path else "playground/")

    @app.get("/playground", include_in_schema=False)
    async def page_without_slash(request: Request) -> RedirectResponse:
        # The page's URLs are relative to its directory, which this URL is not.
        query = request.url.query
        return RedirectResponse("playground/" + (f"?{query}" if query else ""))

    @app.get("/playground/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(
            STATIC / "index.html", headers={"Cache-Control": "no-cache", **PAGE_HEADERS}
        )

    app.mount("/playground/static", PageFiles(directory=STATIC), name="playground-static")

    @app.get("/v1/agents/{agent}/graph")
    async def graph(agent: AgentName, _who: Owner) -> dict[str, Any]:
        """The agent's control graph (nodes, edges with guards)."""
        data = info.graph_json(service.agent(agent).agent)
        if data is None:
            raise ApiError(
                404,
                "graph_unavailable",
                "the graph needs agentscript.authoring, which this installation lacks",
            )
        return data

    @app.get("/playground/api/config", include_in_schema=False)
    async def config(_who: Owner) -> dict[str, Any]:
        return {
            "agents": [{**s.description, **extras[s.name]} for s in agents.values()],
            "variables": defaults,
            "model": model,
            "stubs": sorted(sessions.default_stubs),
        }

    @app.post("/playground/api/conversations", include_in_schema=False)
    async def read_conversation(body: ConversationText, _who: Owner) -> dict[str, Any]:
        """A conversation file as JSON: variables, stubbed action names, turns with moves."""
        parsed = await _parse(body.text)
        return {
            "variables": parsed.variables,
            "actions": sorted(parsed.stubs),
            "turns": [
                {"user": t.user, "model": [m.to_json() for m in t.moves]} for t in parsed.turns
            ],
        }

    @app.post("/playground/api/agents/{agent}/sessions", status_code=201, include_in_schema=False)
    async def new_session(agent: AgentName, body: NewSession, who: Owner) -> dict[str, Any]:
        script = await _parse(body.conversation) if body.conversation is not None else None
        if script is not None and script.stubs and app.state.keys.enabled:
            # Every key holder could then fake what an action answered (an identity check
            # passed, say) and have the actions after it run for real on that answer.
            raise ApiError(
                422,
                "stubs_not_allowed",
                "a server with API keys takes no stubbed actions from its clients (the "
                f"conversation stubs {', '.join(sorted(script.stubs))}): remove its "
                "'actions:', or replay it where no keys are set (agentscript playground)",
            )
        values = {**(script.variables if script else {}), **body.variables}
        # Without keys the page's user wrote the agent and presets any of its variables;
        # with keys it is a client like any other (POST /v1/agents/{agent}/sessions).
        # The operator's own values (--var, --stubs), which the page offers and sends back,
        # are not the client's to be refused.
        operator_set = {n for n, v in values.items() if n in defaults and defaults[n] == v}
        created = await service.create(
            who,
            agent,
            values,
            any_declared=not app.state.keys.enabled,
            operator_set=operator_set,
        )
        sessions.register(created["session_id"], values, script)
        return {
            **created,
            "variables": values,
            "scripted_turns": len(script.turns) if script else 0,
        }

    @app.get("/playground/api/sessions/{session_id}/state", include_in_schema=False)
    async def state(session_id: SessionId, who: Owner) -> dict[str, Any]:
        record = await service.record(who, session_id)
        view = service.view(record)
        mantle = (record.state.get("extra") or {}).get("mantle") or {}
        view["stack"] = mantle.get("stack") if isinstance(mantle, dict) else None
        return view

    @app.get("/playground/api/sessions/{session_id}/conversation.yaml", include_in_schema=False)
    async def conversation(session_id: SessionId, who: Owner) -> Response:
        # The exports need the session's agent and turn count, never its state.
        record = await service.record(who, session_id, state=False)
        known = sessions.get(session_id)
        turns = await _exported_turns(service.store, record)
        text = await run_in_threadpool(
            export.conversation_yaml, record.agent, known.variables if known else {}, turns
        )
        return Response(
            text,
            media_type="application/yaml",
            headers={
                "Content-Disposition": f'attachment; filename="{record.agent}-{session_id[:8]}.yaml"'
            },
        )

    @app.get("/playground/api/sessions/{session_id}/traces.zip", include_in_schema=False)
    async def traces(session_id: SessionId, who: Owner) -> Response:
        record = await service.record(who, session_id, state=False)
        turns = await _exported_turns(service.store, record)
        return Response(
            await run_in_threadpool(export.traces_zip, record.agent, session_id, turns),
            media_type="application/zip",
            headers={"Content-Disposition": f'attachment; filename="traces-{session_id[:8]}.zip"'},
        )


async def _exported_turns(store: Store, record: SessionRecord) -> list[TurnRecord]:
    """Every turn of the session with its trace, read in one query; 422 ``export_too_large``
    past :data:`MAX_EXPORT_TURNS` turns (a file holding only some would replay otherwise)."""
    if record.turns > MAX_EXPORT_TURNS:
        raise ApiError(
            422,
            "export_too_large",
            f"session {record.session_id} has {record.turns} turns; the playground exports "
            f"at most {MAX_EXPORT_TURNS}: read its traces one turn at a time "
            f"(GET /v1/sessions/{record.session_id}/turns/N/trace)",
        )
    # The turns the record counted: one committed since then is not half in the export.
    return await store.list_turns_with_traces(record.session_id, record.turns)
