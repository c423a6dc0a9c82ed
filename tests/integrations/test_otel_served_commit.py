"""A served turn's spans say how the turn ended once it is committed, not when the engine ends it.

``agentscript serve`` fails a turn whose state it cannot keep (``server/commit_fit.py``: its
variables alone are over ``MAX_SESSION_CHARS``) after the engine ended it well: its root span
was exported as a success. The server now sets ``Session.export_later`` and ends the spans
itself, once the turn's outcome is known; a session used directly still ends them in
``send_async``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from tests.fakes import fitting
from tests.fakes.fitting import CAP, CONFIG, answer, write_agent
from tests.integrations import test_otel_turns
from tests.integrations.test_otel_turns import (
    STREAM,
    load,
    named,
    root,
    send_served,
    served_app,
    served_session,
    telemetry,
)
from tests.serve.test_store_unavailable_body import failing_commits

from agentscript.models.function import FunctionModel
from agentscript.models.scripted import Move, ScriptedModel
from agentscript.server.agents import load_agents, serve_agents
from agentscript.server.app import create_app
from agentscript.server.config import ServerConfig
from agentscript.server.service import NOT_COMMITTED
from agentscript.store import store_from_url

# The fixtures, found by their names here.
exporter = test_otel_turns.exporter
small_cap = fitting.small_cap


def serve_fits(
    tmp_path: Path, exporter: InMemorySpanExporter, texts: list[str]
) -> list[dict[str, Any]]:
    """The answers of one session of the served ``Fits`` agent (``tests/fakes/fitting.py``)
    to ``texts``, in order, with its spans (content captured) in ``exporter``."""
    folder = tmp_path / "fits"
    folder.mkdir()
    agents = load_agents([str(write_agent(folder, config=CONFIG))])
    for served_agent in agents:
        served_agent.telemetry = telemetry(exporter, capture_content=True)
    served = serve_agents(agents, {a.name: FunctionModel(answer) for a in agents})
    store = store_from_url(f"sqlite:///{tmp_path / 'fits.db'}")
    app = create_app(served, store, config=ServerConfig(rate_limit=0), purge_every=None)
    results: list[dict[str, Any]] = []

    async def scenario() -> None:
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c,
        ):
            created = await c.post("/v1/agents/Fits/sessions", json={})
            assert created.status_code == 201, created.text
            sid = created.json()["session_id"]
            for text in texts:
                sent = await c.post(f"/v1/sessions/{sid}/messages", json={"text": text})
                assert sent.status_code == 200, sent.text
                results.append(sent.json())

    asyncio.run(scenario())
    return results


def test_a_served_turn_that_could_not_be_kept_exports_its_root_span_as_an_error(
    tmp_path: Path, exporter: InMemorySpanExporter, small_cap: int
) -> None:
    # Two variables of 160,000 characters: no shrinking of the history fits them under CAP.
    fetched, kept = serve_fits(tmp_path, exporter, ["fetch 10", "keep 160000"])
    assert fetched["error"] is None
    error = kept["error"]
    assert error is not None and "was not kept" in error and f"({CAP} characters)" in error
    first, second = named(exporter, "invoke_agent")  # one root span a turn
    assert first.status.status_code is StatusCode.UNSET
    assert second.status.status_code is StatusCode.ERROR
    assert second.status.description == error
    attributes = second.attributes or {}
    assert attributes["error.type"] == "TurnError"
    assert attributes["agentscript.turn"] == 2
    assert attributes["agentscript.ended"] is False
    # The turn's own spans are still exported, under it: its model calls and tool runs.
    assert len(named(exporter, "execute_tool")) == 1 + 2
    assert len(named(exporter, "chat ")) == 2 + 2
    # And the steps the server added after the engine, as the engine's are: events.
    events = [(e.name, e.timestamp) for e in second.events]
    assert [name for name, _ in events[-2:]] == ["agentscript.error", "agentscript.response"]
    assert events[-1][1] <= (second.end_time or 0)


def test_an_ordinary_served_turn_exports_its_spans_once_as_before(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    send_served(tmp_path, exporter, [{}, STREAM, {}])
    roots = named(exporter, "invoke_agent")
    assert [s.name for s in roots] == ["invoke_agent spans"] * 3
    assert [s.status.status_code for s in roots] == [StatusCode.UNSET] * 3
    assert [(s.attributes or {})["agentscript.turn"] for s in roots] == [1, 2, 3]
    assert all("error.type" not in (s.attributes or {}) for s in roots)
    chats = named(exporter, "chat ")
    assert len(chats) == 3
    assert all(c.parent is not None and c.status.status_code is StatusCode.UNSET for c in chats)
    assert {c.parent.span_id for c in chats if c.parent} == {
        s.context.span_id for s in roots if s.context
    }


def test_a_session_used_directly_ends_its_spans_inside_send(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    session = load(tmp_path, exporter).session(model=ScriptedModel([Move(text="Hello.")]))
    reply = session.send("hi")
    assert reply.error is None and reply.finish_export is None
    assert root(exporter).status.status_code is StatusCode.UNSET


def test_a_session_that_exports_later_ends_its_spans_once_with_what_its_host_says(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    session = load(tmp_path, exporter).session(model=ScriptedModel([Move(text="Hello.")]))
    session.export_later = True
    reply = session.send("hi")
    assert reply.error is None and not named(exporter, "invoke_agent")
    assert reply.finish_export is not None
    reply.finish_export(error="not kept", ended=True)
    reply.finish_export()  # a second call does nothing
    span = root(exporter)
    assert span.status.status_code is StatusCode.ERROR
    attributes = span.attributes or {}
    assert attributes["error.type"] == "TurnError" and attributes["agentscript.ended"] is True
    assert len(named(exporter, "chat ")) == 1


def test_a_turn_that_raises_ends_its_spans_at_once_even_when_exporting_later(
    tmp_path: Path, exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = load(tmp_path, exporter).session(model=ScriptedModel([Move(text="Hello.")]))
    session.export_later = True

    def broken(*args: object, **kwargs: object) -> object:
        raise RuntimeError("the reply could not be built")

    monkeypatch.setattr(session, "_reply", broken)
    with pytest.raises(RuntimeError):
        session.send("hi")
    span = root(exporter)
    assert span.status.status_code is StatusCode.ERROR
    assert (span.attributes or {})["error.type"] == "RuntimeError"


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "streamed"])
def test_a_served_turn_whose_commit_failed_exports_its_root_span_as_an_error(
    tmp_path: Path, exporter: InMemorySpanExporter, streamed: bool
) -> None:
    # The engine ended the turn well, then the store refused its commit: the client got a
    # 503 and a retry runs the turn again, but the spans said the turn had succeeded.
    app = served_app(tmp_path, exporter, capture_content=True)

    async def scenario() -> None:
        async with served_session(app) as (client, sid):
            async with failing_commits(client):
                sent = await client.post(
                    f"/v1/sessions/{sid}/messages",
                    json={"text": "m0"},
                    headers=STREAM if streamed else {},
                )
            if streamed:
                assert "event: error" in sent.text and "event: turn" not in sent.text
            else:
                assert sent.status_code == 503, sent.text
            sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "m0"})
            assert sent.status_code == 200 and sent.json()["turn"] == 1, sent.text

    asyncio.run(scenario())
    failed, retried = named(exporter, "invoke_agent")
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.status.description == NOT_COMMITTED  # never the store's own error text
    assert (failed.attributes or {})["error.type"] == "StoreError"
    assert retried.status.status_code is StatusCode.UNSET
