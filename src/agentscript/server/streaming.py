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

from agentscript.server import sse
from agentscript.server.errors import log_failure, status_of
from agentscript.server.service import SessionService, TurnHooks, mounted


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

    async def run() -> None:
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
        finally:
            events.put_nowait(None)

    task = asyncio.create_task(run())
    # Held until the turn ends, so it runs to its commit even if the client goes away.
    service.background.add(task)
    task.add_done_callback(service.background.discard)
    waiter = asyncio.create_task(started.wait())
    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    if task.done() and not started.is_set():
        task.result()  # raises the error, mapped to its status

    async def body_iter() -> AsyncIterator[str]:
        # The events a turn records between two waits (a model answer, an action) arrive
        # together: they go out as one write, not one write (and one pass through every
        # middleware) each, which doubled a streamed turn's CPU. None, the end, comes last.
        ended = False
        while not ended:
            ready = [await events.get()]
            while not events.empty():
                ready.append(events.get_nowait())
            ended = ready[-1] is None
            text = "".join(item for item in ready if item is not None)
            if text:
                yield text

    return EventStream(
        body_iter(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


class EventStream(StreamingResponse):
    """A turn's events, written as they come, without a task listening for the client's
    disconnect beside them, as Starlette's response runs under ASGI servers before spec 2.4
    (uvicorn's): a gone client cancels nothing here (the turn runs to its commit), a server
    drops what is sent to a closed connection, and the task cost a tenth of a streamed turn's
    extra CPU (docs/performance.md). A server that tells of a gone client by raising (ASGI
    2.4) ends the writing; the turn goes on."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        with contextlib.suppress(OSError):
            await self.stream_response(send)
