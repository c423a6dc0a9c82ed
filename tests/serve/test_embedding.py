"""The serve app built from Python and mounted inside an application's own, as docs/serve.md
shows ("From Python"): its store opens with the host's lifespan and every route works under
the mount's prefix."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2 as httpx
import pytest
from fastapi import FastAPI
from starlette._utils import get_route_path
from starlette.types import Receive, Scope, Send

from agentscript.server.agents import load_agents, serve_agents
from agentscript.server.app import create_app
from agentscript.server.auth import ApiKeys
from agentscript.server.config import ServerConfig
from agentscript.server.fastpath import MessageFastPath, route_path
from agentscript.server.standin import StandInModel
from agentscript.store import store_from_url

from .harness import NOTES


def test_serve_app_mounted_in_a_host_app_runs_turns_under_its_prefix(tmp_path: Path) -> None:
    agents = load_agents([NOTES])
    served = serve_agents(agents, {agent.name: StandInModel() for agent in agents})
    agent_app = create_app(
        served,
        store_from_url(f"sqlite:///{tmp_path}/sessions.db"),
        config=ServerConfig(session_ttl=3600),
        keys=ApiKeys.of("secret-key"),
    )

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        async with agent_app.router.lifespan_context(agent_app):  # opens and closes the store
            yield

    host = FastAPI(lifespan=lifespan)
    host.mount("/agents", agent_app)

    @host.get("/")
    def home() -> dict[str, str]:
        return {"app": "host"}

    async def main() -> None:
        auth = {"Authorization": "Bearer secret-key"}
        async with (
            host.router.lifespan_context(host),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=host), base_url="http://app", headers=auth
            ) as client,
        ):
            assert (await client.get("/")).json() == {"app": "host"}
            assert (await client.get("/agents/readyz")).status_code == 200
            handed_on = watch_fast_path(agent_app)
            created = await client.post("/agents/v1/agents/Notes/sessions", json={})
            assert created.status_code == 201, created.text
            sid = created.json()["session_id"]
            sent = await client.post(f"/agents/v1/sessions/{sid}/messages", json={"text": "hi"})
            assert sent.status_code == 200, sent.text
            assert sent.json()["turn"] == 1 and sent.json()["response"] == "You said: hi"
            assert handed_on == ["/agents/v1/agents/Notes/sessions"]  # not the message
            # Links lead below the mount: in the answer, the turn list and the stream.
            trace_url = sent.json()["trace_url"]
            assert trace_url == f"/agents/v1/sessions/{sid}/turns/1/trace"
            assert (await client.get(trace_url)).json()["turn"] == 1
            listed = (await client.get(f"/agents/v1/sessions/{sid}/turns")).json()["turns"]
            assert [t["trace_url"] for t in listed] == [trace_url]
            streamed = await client.post(
                f"/agents/v1/sessions/{sid}/messages",
                json={"text": "again"},
                headers={"Accept": "text/event-stream"},
            )
            assert f'"trace_url":"/agents/v1/sessions/{sid}/turns/2/trace"' in streamed.text
            view = (await client.get(f"/agents/v1/sessions/{sid}")).json()
            assert view["turns"] == 2 and view["expires_at"] is not None
            anonymous = await client.get(
                f"/agents/v1/sessions/{sid}", headers={"Authorization": ""}
            )
            assert anonymous.status_code == 401

    asyncio.run(main())


def watch_fast_path(app: FastAPI) -> list[str]:
    """The paths of the requests the message fast path hands on to the routes from now on."""
    layer = app.middleware_stack
    while not isinstance(layer, MessageFastPath):
        layer = layer.app  # type: ignore[union-attr]
    inner = layer.app
    handed_on: list[str] = []

    async def recording(scope: Scope, receive: Receive, send: Send) -> None:
        handed_on.append(scope["path"])
        await inner(scope, receive, send)

    layer.app = recording
    return handed_on


@pytest.mark.parametrize(
    ("root_path", "path", "below"),
    [
        ("", "/v1/sessions/s1/messages", "/v1/sessions/s1/messages"),
        ("/agents", "/agents/v1/sessions/s1/messages", "/v1/sessions/s1/messages"),
        ("/a/b", "/a/b/v1/sessions/s1/messages", "/v1/sessions/s1/messages"),
        # A server that stripped the prefix already; a prefix that is not a whole segment.
        ("/agents", "/v1/sessions/s1/messages", "/v1/sessions/s1/messages"),
        ("/agents", "/agentsx/v1/sessions/s1/messages", "/agentsx/v1/sessions/s1/messages"),
    ],
)
def test_fast_path_reads_the_path_below_the_mount_as_starlette_does(
    root_path: str, path: str, below: str
) -> None:
    scope = {"type": "http", "path": path, "root_path": root_path}
    assert route_path(scope) == below == get_route_path(scope)
