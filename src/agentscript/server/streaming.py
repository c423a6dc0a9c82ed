"""A turn streamed as Server-Sent Events (``Accept: text/event-stream``), for the message
route and its fast path alike: the turn runs as a task of its own, held by the service so that
it commits even when the client goes away, and its events (``sse.py``) go out as it records
them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from agentscript.server import requestid, sse
from agentscript.server.errors import CUT_AT_SHUTDOWN, log_failure, status_of
from agentscript.server.service import GIVE_BACK_WAIT, SessionService, TurnHooks, mounted

# Seconds the last event of a stream cut at shutdown may take to go out.
LAST_WRITE = 0.2


async def stream_turn(
    service: SessionService,
    who: str,
    session_id: str,
    text: str,
    key: str | None,
    root: str = "",
) -> Response:
    """Start the turn; once it holds its lock, stream its events. Errors before that are
    ordinary statuses (404, 409, ...); errors after it are an ``error`` event."""
    events: asyncio.Queue[str | None] = asyncio.Queue()
    started = asyncio.Event()
    pending: list[dict[str, Any]] = []

    def on_step(step: dict[str, Any]) -> None:
        # A step is filled in after it is added: send each one when the next begins.
        if pending:
            events.put_nowait(sse.event("step", pending.pop()))
        pending.append(step)

    def on_token(delta: str) -> None:
        events.put_nowait(sse.event("token", {"text": delta}))

    async def run() -> str | None:
        """The turn; what went wrong with it, for its request's access line (the outcome the
        service marked in this task, or the code of the ``error`` event)."""
        try:
            result = await service.send(
                who,
                session_id,
                text,
                key,
                TurnHooks(on_token=on_token, on_step=on_step, on_start=started.set),
            )
            if pending:
                events.put_nowait(sse.event("step", pending.pop()))
            events.put_nowait(sse.event("turn", mounted(root, result)))
        except Exception as exc:
            if not started.is_set():
                raise
            status, code, message = status_of(exc)
            log_failure(exc, code, message)
            events.put_nowait(sse.error_event(status, code, message))
            return code
        finally:
            events.put_nowait(None)
        return requestid.outcome.get()

    task = asyncio.create_task(run())
    # Held until the turn ends, so it runs to its commit even if the client goes away.
    service.background.add(task)
    task.add_done_callback(service.background.discard)
    waiter = asyncio.create_task(started.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        # Cut at the end of the shutdown grace while waiting for the session: its client is
        # told nothing was committed (CountRequests), so the turn must not go on to commit.
        task.cancel()
        raise
    finally:
        waiter.cancel()
    if task.done() and not started.is_set():
        task.result()  # raises the error, mapped to its status

    return EventStream(events, task)


class EventStream(StreamingResponse):
    """A turn's events (``events``: None after the last), written as they come.

    The events a turn records between two waits (a model answer, an action) arrive together:
    they go out as one write, not one write (and one pass through every middleware) each,
    which doubled a streamed turn's CPU. A client that leaves ends the writing, never the
    ``turn`` (it runs to its commit): one bare task waits for the disconnect, where Starlette's
    response ran a task group of two beside the writing under ASGI servers before spec 2.4
    (uvicorn's), a tenth of a streamed turn's extra CPU (docs/performance.md). A server that
    tells of a gone client by raising (ASGI 2.4) ends the writing alike.

    uvicorn cancels a request still running at the end of the shutdown grace: a turn that
    still runs, or a reader that fell behind. The first is cut then and there, and its client
    told so in a last ``error`` event; the second's turn ended, committed or not, and its own
    last event, queued, is the truth, so nothing else is said. What is left is written only
    if it goes at once (:data:`LAST_WRITE`): a reader behind by megabytes takes nothing more,
    and waiting for it would hold the server's stop; uvicorn then logs that the response did
    not complete."""

    def __init__(self, events: asyncio.Queue[str | None], turn: asyncio.Task[str | None]) -> None:
        self.events = events
        self.turn = turn
        super().__init__(
            self._chunks(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def _chunks(self) -> AsyncIterator[str]:
        ended = False
        while not ended:
            text, ended = self._ready([await self.events.get()])
            if text:
                yield text

    def _ready(self, taken: list[str | None]) -> tuple[str, bool]:
        """``taken`` and every event queued after it, as one text; whether the end was among
        them."""
        while not self.events.empty():
            taken.append(self.events.get_nowait())
        return "".join(item for item in taken if item is not None), None in taken

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gone = asyncio.ensure_future(_disconnected(receive))
        gone.add_done_callback(lambda _: self.events.put_nowait(None))
        try:
            await self.stream_response(send)
        except OSError:
            pass
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()  # handled: the stream ends here
            await self._cut(send)
        finally:
            gone.cancel()
            self._tell_outcome()

    def _tell_outcome(self) -> None:
        """Hand what went wrong with the turn (``turn_error``, an ``error`` event's code) to
        the request's task, where its access line reads it: the turn ran in a task of its own,
        whose context the request's does not see. Unknown while the turn still runs (its
        client left): its own log line, if it fails, comes later."""
        turn = self.turn
        if not turn.done():
            return
        if turn.cancelled():  # cut at shutdown, as its last event said
            found: str | None = "shutting_down"
        elif turn.exception() is None:
            found = turn.result()
        else:
            return
        if found is not None:
            requestid.outcome.set(found)

    async def _cut(self, send: Send) -> None:
        """End a stream cut at the end of the shutdown grace. A turn still running is cut here,
        not a moment later at the service's shutdown, where it could commit meanwhile after its
        client had been told otherwise; then what its events still hold, and the cut's ``error``
        event when it was cut before it ended, go out in one bounded write."""
        if not self.turn.done():
            self.turn.cancel()
            await asyncio.wait({self.turn}, timeout=GIVE_BACK_WAIT)
        text, _ended = self._ready([])
        if self.turn.cancelled():
            text += sse.error_event(503, "shutting_down", CUT_AT_SHUTDOWN)
        with contextlib.suppress(TimeoutError, OSError):
            async with asyncio.timeout(LAST_WRITE):
                if text:
                    await send(
                        {"type": "http.response.body", "body": text.encode(), "more_body": True}
                    )
                await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _disconnected(receive: Receive) -> None:
    """Returns when the client has gone (the request's body was read already)."""
    while (await receive())["type"] != "http.disconnect":
        pass
