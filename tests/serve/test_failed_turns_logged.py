"""A turn that fails inside (the model failed) is answered 200 with ``error`` in its JSON: it
logs one WARNING line naming its request, session, turn and error, streamed or not, by the
route or the fast path, with or without --access-log; and an access line says which error an
error answer was (``422 message_too_long``) and that such a turn failed (``200 turn_error``).
Before, the first left no line at all without --access-log, and a bare ``200`` with it."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

from agentscript.models.base import Message, ModelError
from agentscript.models.function import Answer, AnswerFunction, FunctionInfo, FunctionModel
from agentscript.server import sse
from agentscript.server.agents import load_agents, serve_agents
from agentscript.server.app import create_app
from agentscript.server.auth import ApiKeys
from agentscript.server.config import ServerConfig
from agentscript.server.logs import JsonLines, WithRequestId
from agentscript.store import store_from_url

from .harness import NOTES

MARK = "BREAK-7731"  # in the user's text, makes the model fail
BREAK = f"please {MARK} now"
CUSTOMER = "Ada Lovelace-5512"  # a variable's value
PROVIDER_DOWN = "the provider is down"
# Not application/json: FastAPI reads it as JSON, the fast path leaves it to the route.
ROUTE = {"Content-Type": "application/merge-patch+json"}
STREAM = {"Accept": "text/event-stream"}


def answer(messages: list[Message], info: FunctionInfo) -> str:
    if MARK in messages[-1].content:
        raise ModelError(PROVIDER_DOWN)
    return "noted"


@asynccontextmanager
async def client(
    config: ServerConfig | None = None, model: AnswerFunction = answer
) -> AsyncIterator[httpx.AsyncClient]:
    loaded = load_agents([NOTES])
    served = serve_agents(loaded, {a.name: FunctionModel(model) for a in loaded})
    app = create_app(
        served, store_from_url("memory://"), config=config, keys=ApiKeys.of(), purge_every=None
    )
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as c,
    ):
        yield c


@contextmanager
def records(caplog: pytest.LogCaptureFixture, logger: str, level: int) -> Iterator[None]:
    """Capture ``logger``'s records with the request id the server's handler gives them."""
    named = WithRequestId()
    caplog.handler.addFilter(named)
    try:
        with caplog.at_level(level, logger=logger):
            yield
    finally:
        caplog.handler.removeFilter(named)


async def new_session(c: httpx.AsyncClient) -> str:
    created = await c.post("/v1/agents/Notes/sessions", json={"variables": {"customer": CUSTOMER}})
    assert created.status_code == 201, created.text
    return str(created.json()["session_id"])


async def send(
    c: httpx.AsyncClient, sid: str, text: str, request_id: str, **headers: str
) -> httpx.Response:
    return await c.post(
        f"/v1/sessions/{sid}/messages",
        json={"text": text},
        headers={"X-Request-ID": request_id, **headers},
    )


def failed_turn(response: httpx.Response) -> dict[str, Any]:
    """The turn JSON of a failed turn, answered as JSON or as the stream's ``turn`` event."""
    assert response.status_code == 200, response.text
    if response.headers["content-type"].startswith("text/event-stream"):
        name, turn = sse.parse(response.text)[-1]
        assert name == "turn", response.text
    else:
        turn = response.json()
    assert turn["error"] == f"the model failed: {PROVIDER_DOWN}", turn
    return dict(turn)


@pytest.mark.parametrize("access_log", [False, True], ids=["no-access-log", "access-log"])
def test_a_failed_turn_logs_one_warning_naming_its_request_session_turn_and_error(
    caplog: pytest.LogCaptureFixture, access_log: bool
) -> None:
    async def main() -> str:
        async with client(ServerConfig(access_log=access_log)) as c:
            sid = await new_session(c)
            assert (await send(c, sid, "a good turn", "ok-1")).json()["error"] is None
            failed_turn(await send(c, sid, BREAK, "fast-2"))
            failed_turn(await send(c, sid, BREAK, "route-3", **ROUTE))
            failed_turn(await send(c, sid, BREAK, "stream-4", **STREAM))
            failed_turn(await send(c, sid, BREAK, "stream-route-5", **STREAM, **ROUTE))
            keyed = {"Idempotency-Key": "k-1"}
            failed_turn(await send(c, sid, BREAK, "keyed-6", **keyed))
            # The same message sent again: the stored turn, which ran (and was logged) once.
            assert failed_turn(await send(c, sid, BREAK, "again-7", **keyed))["turn"] == 6
            return sid

    with records(caplog, "agentscript.server", logging.WARNING):
        sid = asyncio.run(main())
    warned = [r for r in caplog.records if r.name == "agentscript.server"]
    assert [(r.levelname, r.request_id) for r in warned] == [  # type: ignore[attr-defined]
        ("WARNING", "fast-2"),
        ("WARNING", "route-3"),
        ("WARNING", "stream-4"),
        ("WARNING", "stream-route-5"),
        ("WARNING", "keyed-6"),
    ]
    lines = [r.getMessage() for r in warned]
    assert lines == [
        f"turn {n} of session {sid} failed: the model failed: {PROVIDER_DOWN}" for n in range(2, 7)
    ]
    # The session and turn as fields of their own in a JSON line; never the user's text or a
    # variable's value.
    as_json = json.loads(JsonLines().format(warned[0]))
    assert as_json["session_id"] == sid and as_json["turn"] == 2
    assert as_json["request_id"] == "fast-2" and as_json["level"] == "WARNING"
    text = caplog.text
    assert MARK not in text and CUSTOMER not in text


def test_a_failed_turns_error_is_bounded_in_its_log_line(caplog: pytest.LogCaptureFixture) -> None:
    """A provider's error can carry its whole response body: the log line keeps its start."""
    long = "x" * 5000

    def failing(messages: list[Message], info: FunctionInfo) -> str:
        raise ModelError(long)

    async def main() -> None:
        async with client(model=failing) as c:
            sid = await new_session(c)
            sent = await send(c, sid, "hi", "long-1")
            assert sent.json()["error"].endswith(long)  # the client gets all of it

    with caplog.at_level(logging.WARNING, logger="agentscript.server"):
        asyncio.run(main())
    [line] = [r.getMessage() for r in caplog.records if r.name == "agentscript.server"]
    assert line.endswith("x...") and len(line) < 1200


def test_the_access_line_says_which_error_and_that_a_turn_failed_inside(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        config = ServerConfig(access_log=True, max_message_chars=20)
        async with client(config) as c:
            sid = await new_session(c)
            await send(c, sid, "fine", "ok-1")
            await send(c, sid, MARK, "fast-2")
            await send(c, sid, MARK, "stream-3", **STREAM)
            await send(c, sid, MARK, "route-4", **ROUTE)
            await send(c, sid, "x" * 21, "long-5")
            await send(c, sid, "x" * 21, "long-stream-6", **STREAM)
            await c.post(
                f"/v1/sessions/{sid}/messages",
                json={"txt": "typo"},
                headers={"X-Request-ID": "typo-7"},
            )
            await c.get("/v1/sessions/nobody", headers={"X-Request-ID": "gone-8"})
            await c.get("/v1/no-such-route", headers={"X-Request-ID": "route-9"})
            await send(c, sid, "fine again", "ok-10")

    with records(caplog, "agentscript.access", logging.INFO):
        asyncio.run(main())
    lines = {
        r.request_id: r  # type: ignore[attr-defined]
        for r in caplog.records
        if r.name == "agentscript.access"
    }

    def said(request_id: str) -> str:
        """What follows the path: the status, the error's code if any, the time."""
        return str(lines[request_id].getMessage().split(" ", 3)[3])

    assert re.fullmatch(r"200 [\d.]+ms", said("ok-1")) and re.fullmatch(
        r"200 [\d.]+ms", said("ok-10")
    )
    for request_id in ("fast-2", "stream-3", "route-4"):
        assert re.fullmatch(r"200 turn_error [\d.]+ms", said(request_id)), said(request_id)
    for request_id in ("long-5", "long-stream-6"):
        assert re.fullmatch(r"422 message_too_long [\d.]+ms", said(request_id))
    assert re.fullmatch(r"422 invalid_request [\d.]+ms", said("typo-7"))
    assert re.fullmatch(r"404 session_not_found [\d.]+ms", said("gone-8"))
    assert re.fullmatch(r"404 not_found [\d.]+ms", said("route-9"))
    # A field of its own in a JSON line, only where there is one.
    fields = {i: getattr(r, "fields", {}) for i, r in lines.items()}
    assert fields["fast-2"]["error_code"] == "turn_error"
    assert fields["long-5"]["error_code"] == "message_too_long"
    assert "error_code" not in fields["ok-1"] and "error_code" not in fields["ok-10"]
    assert json.loads(JsonLines().format(lines["long-5"]))["error_code"] == "message_too_long"


ENDING_AGENT = """\
system:
    instructions: "Say goodbye when asked."
    messages:
        welcome: "Hi!"
        error: "Sorry."

config:
    developer_name: "Ending"

start_agent main:
    description: "Main"
    reasoning:
        instructions: ->
            | End the session when the user says bye.
        actions:
            bye: @utils.end_session
                description: "End the session"
"""


def test_a_message_to_an_ended_session_is_the_clients_doing_not_a_warning(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """The session had ended, so the turn was refused: answered 200 with the refusal as its
    ``error``, as before, but its access line says ``session_ended`` and no warning is logged
    (a client's mistake, as a 4xx is), where a model failure still logs one."""
    (tmp_path / "ending.agent").write_text(ENDING_AGENT)

    def ending(messages: list[Message], info: FunctionInfo) -> Answer:
        if MARK in messages[-1].content:
            raise ModelError(PROVIDER_DOWN)
        return info.call("bye") if "bye" in messages[-1].content else "noted"

    async def main() -> str:
        loaded = load_agents([tmp_path / "ending.agent"])
        served = serve_agents(loaded, {a.name: FunctionModel(ending) for a in loaded})
        app = create_app(
            served,
            store_from_url("memory://"),
            config=ServerConfig(access_log=True),
            keys=ApiKeys.of(),
            purge_every=None,
        )
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c,
        ):
            sid = (await c.post("/v1/agents/Ending/sessions", json={})).json()["session_id"]
            failed_turn(await send(c, sid, BREAK, "broken-1"))
            assert (await send(c, sid, "bye", "bye-2")).json()["ended"] is True
            for request_id, headers in (("after-3", {}), ("after-stream-4", STREAM)):
                answer = await send(c, sid, "still there?", request_id, **headers)
                assert answer.status_code == 200
                if headers:
                    name, turn = sse.parse(answer.text)[-1]
                    assert name == "turn"
                else:
                    turn = answer.json()
                assert turn["error"].startswith("the session has ended"), turn
            return str(sid)

    with records(caplog, "agentscript", logging.INFO):
        sid = asyncio.run(main())
    warned = [r.getMessage() for r in caplog.records if r.name == "agentscript.server"]
    assert warned == [f"turn 1 of session {sid} failed: the model failed: {PROVIDER_DOWN}"]
    said = {
        r.request_id: r.getMessage().split(" ", 3)[3]  # type: ignore[attr-defined]
        for r in caplog.records
        if r.name == "agentscript.access"
    }
    assert re.fullmatch(r"200 turn_error [\d.]+ms", said["broken-1"])
    assert re.fullmatch(r"200 [\d.]+ms", said["bye-2"])
    assert re.fullmatch(r"200 session_ended [\d.]+ms", said["after-3"])
    assert re.fullmatch(r"200 session_ended [\d.]+ms", said["after-stream-4"])
