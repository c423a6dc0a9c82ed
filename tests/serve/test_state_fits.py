"""A turn never commits a state that no restore accepts (longer than ``MAX_SESSION_CHARS``).

An audit found one turn of 72 parallel tool calls, each result 990,000 characters (under
``Limits.max_output_chars``, which bounds one output, not their sum), committing a state of 71
million characters: the worker that kept the session went on, and every other answered ``500
session_damaged`` for it from then on. Now the server measures the state it writes: one too
long has its history shrunk to fit (earlier exchanges first, then the turn's largest results,
then its texts; ``EVENT_STEP state_fitted``), and one that still does not fit (its variables
alone are too large) fails the turn and keeps the state from before it.

The limit is lowered here (``restore`` reads it when called), so the states stay small; each
test runs on SQLite and PostgreSQL, with two servers on one store, as two workers are.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from tests.fakes import fitting
from tests.fakes.fitting import CAP, CONFIG, DROPPED_RESULT, answer, write_agent

from agentscript import jsontext
from agentscript.models.base import Message
from agentscript.models.function import FunctionInfo, FunctionModel
from agentscript.server.config import ServerConfig
from agentscript.server.live import LiveSessions

from .harness import api, new_session, say, stored_state

small_cap = fitting.small_cap  # the fixture


@pytest.fixture
def agent_path(tmp_path: Path) -> str:
    folder = tmp_path / "fits"
    folder.mkdir()
    return str(write_agent(folder, config=CONFIG))


@asynccontextmanager
async def server(
    store_url: str, path: str, received: list[list[dict[str, Any]]]
) -> AsyncIterator[httpx.AsyncClient]:
    """A server of the agent at ``path``; ``received`` gets the messages of every model call."""

    def witnessed(messages: list[Message], info: FunctionInfo) -> Any:
        received.append([m.to_json() for m in messages])
        return answer(messages, info)

    config = ServerConfig(rate_limit=0, live_sessions=1000)
    async with api(
        store_url, paths=(path,), config=config, model=lambda: FunctionModel(witnessed)
    ) as client:
        yield client


@asynccontextmanager
async def two_servers(
    store_url: str, path: str
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient, list[Any], list[Any]]]:
    """Two servers on one store (two workers), with the model calls each received."""
    one: list[Any] = []
    two: list[Any] = []
    async with AsyncExitStack() as stack:
        first = await stack.enter_async_context(server(store_url, path, one))
        second = await stack.enter_async_context(server(store_url, path, two))
        yield first, second, one, two


def live_of(client: httpx.AsyncClient) -> LiveSessions:
    live: LiveSessions = client._transport.app.state.service.live  # type: ignore[attr-defined]
    return live


async def trace(client: httpx.AsyncClient, sid: str, turn: int) -> dict[str, Any]:
    response = await client.get(f"/v1/sessions/{sid}/turns/{turn}/trace")
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found


def steps(found: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [s for s in found["planTrace"]["steps"] if s["type"] == kind]


def fitted_step(found: dict[str, Any]) -> dict[str, Any]:
    (step,) = [s for s in steps(found, "EVENT_STEP") if s["event"] == "state_fitted"]
    return step


@dataclass(frozen=True)
class Workers:
    """Two servers on one store, the model calls each received, and a session made on the
    first."""

    first: httpx.AsyncClient
    second: httpx.AsyncClient
    first_received: list[Any]
    second_received: list[Any]
    sid: str


def on_two_workers(store_url: str, path: str, body: Callable[[Workers], Awaitable[None]]) -> None:
    """Runs ``body`` with two servers of the agent at ``path`` on the store at ``store_url``."""

    async def main() -> None:
        async with two_servers(store_url, path) as (first, second, one, two):
            await body(Workers(first, second, one, two, await new_session(first, "Fits")))

    asyncio.run(main())


def test_a_turn_of_72_large_results_is_kept_within_the_limit_and_restores_on_another_worker(
    api_store: str, agent_path: str, small_cap: int, caplog: pytest.LogCaptureFixture
) -> None:
    async def main(w: Workers) -> None:
        with caplog.at_level(logging.WARNING, logger="agentscript.server"):
            result = await say(w.first, w.sid, "fetch " + " ".join(["10000"] * 72))
        assert result["error"] is None and result["response"] == "done"
        text = stored_state(api_store, w.sid)
        # Another worker restores it (it answered 500 session_damaged); its model sees
        # error results in place of the dropped ones, for the same calls.
        await say(w.second, w.sid, "hello")
        assert len(text) <= CAP
        step = fitted_step(await trace(w.first, w.sid, 1))
        dropped = step["resultsDropped"]
        assert 0 < dropped < 72 and step["dropped"] == 0 and step["limit"] == CAP
        # One warning naming the session and turn, and none of the content.
        (line,) = [r.getMessage() for r in caplog.records if "MAX_SESSION_CHARS" in r.message]
        assert w.sid in line and "turn 1" in line and "xxxx" not in line
        (messages,) = w.second_received
        calls = [c["id"] for m in messages for c in m.get("tool_calls", [])]
        tools = [m for m in messages if m["role"] == "tool"]
        assert [m["tool_call_id"] for m in tools] == calls and len(calls) == 72
        contents = [m["content"] for m in tools]
        assert contents.count(DROPPED_RESULT) == dropped
        assert all(c == DROPPED_RESULT or len(c) > 10000 for c in contents)
        assert messages == [*json.loads(text)["history"], {"role": "user", "content": "hello"}]

    on_two_workers(api_store, agent_path, main)


def test_the_session_kept_after_a_fitted_turn_is_the_one_stored(
    api_store: str, agent_path: str, small_cap: int
) -> None:
    async def main(w: Workers) -> None:
        await say(w.first, w.sid, "fetch " + " ".join(["10000"] * 72))
        stored = json.loads(stored_state(api_store, w.sid))
        hits = live_of(w.first).hits
        w.first_received.clear()
        await say(w.first, w.sid, "hello")
        assert live_of(w.first).hits == hits + 1  # the kept session ran it
        (messages,) = w.first_received
        assert messages == [*stored["history"], {"role": "user", "content": "hello"}]
        assert DROPPED_RESULT in [m["content"] for m in messages]

    on_two_workers(api_store, agent_path, main)


def test_earlier_exchanges_are_dropped_before_any_result_of_the_turn(
    api_store: str, agent_path: str, small_cap: int
) -> None:
    async def main(w: Workers) -> None:
        for size in (100000, 100001, 100002):
            await say(w.first, w.sid, f"fetch {size}")
        text = stored_state(api_store, w.sid)
        await say(w.second, w.sid, "hello")
        assert len(text) <= CAP
        step = fitted_step(await trace(w.first, w.sid, 3))
        # The first exchange: the user's message, the call, its result and the reply.
        assert (step["dropped"], step["resultsDropped"], step["textsDropped"]) == (4, 0, 0)
        (messages,) = w.second_received
        assert messages[0] == {"role": "user", "content": "fetch 100001"}
        results = [json.loads(m["content"]) for m in messages if m["role"] == "tool"]
        assert [len(r["text"]) for r in results] == [100001, 100002]

    on_two_workers(api_store, agent_path, main)


def test_a_turn_whose_variables_cannot_fit_fails_and_the_session_stays_as_before_it(
    api_store: str, agent_path: str, small_cap: int
) -> None:
    async def main(w: Workers) -> None:
        await say(w.first, w.sid, "fetch 10")
        before = json.loads(stored_state(api_store, w.sid))
        # Two variables of 160,000 characters: no shrinking of the history fits them.
        result = await say(w.first, w.sid, "keep 160000")
        error = result["error"]
        assert error is not None and f"MAX_SESSION_CHARS ({CAP} characters)" in error
        assert "was not kept" in error and result["response"] == error
        assert result["variables"] == {"a": "", "b": ""} and result["turn"] == 2
        found = await trace(w.first, w.sid, 2)
        assert len(steps(found, "ACTION_STEP")) == 2  # what happened stays in the trace
        assert [s["message"] for s in steps(found, "ERROR_STEP")] == [error]
        assert found["planTrace"]["steps"][-1]["kind"] == "error"
        text = stored_state(api_store, w.sid)
        assert len(text) <= CAP
        state = json.loads(text)
        assert state["history"] == before["history"]
        assert state["variables"] == before["variables"]
        assert state["turn"] == 2  # a failed turn is a turn, and its model calls count
        calls = before["extra"]["usage"]["llm_calls"]
        assert state["extra"]["usage"]["llm_calls"] == calls + 2
        # Not kept: this worker restores the state from before the turn, as any other.
        hits = live_of(w.first).hits
        w.first_received.clear()
        assert (await say(w.first, w.sid, "hello"))["error"] is None
        assert live_of(w.first).hits == hits
        hello = {"role": "user", "content": "hello"}
        assert w.first_received == [[*before["history"], hello]]
        assert (await trace(w.first, w.sid, 3))["turn"] == 3
        result = await say(w.second, w.sid, "again")
        assert result["error"] is None and result["turn"] == 4
        ok, again = {"role": "assistant", "content": "ok"}, {"role": "user", "content": "again"}
        assert w.second_received == [[*before["history"], hello, ok, again]]

    on_two_workers(api_store, agent_path, main)


def test_a_turn_writes_its_state_once(
    api_store: str, agent_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The size check costs no second serialisation: the state the server measured is the
    text the store writes. (A guard on the fix's cost: one serialisation before it too.)"""
    written: list[str] = []
    real = jsontext.dumps

    def counted(value: Any) -> str:
        text = real(value)
        if isinstance(value, dict) and "history" in value and "agent" in value:
            written.append(text)
        return text

    monkeypatch.setattr(jsontext, "dumps", counted)

    async def main(w: Workers) -> None:
        written.clear()
        await say(w.first, w.sid, "fetch 10")
        assert written == [stored_state(api_store, w.sid)]

    on_two_workers(api_store, agent_path, main)
