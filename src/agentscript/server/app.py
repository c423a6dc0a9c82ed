"""The ASGI application: thin FastAPI routes over :class:`SessionService`.

Routes parse the request, authenticate (Bearer key -> owner id), apply the rate limit, call
the service, and return JSON. Every error leaves through :func:`_error_response` with the body
``{"error": {"code", "message"}}`` and the status from ``errors.STATUS``; no traceback ever
reaches a client. ``Accept: text/event-stream`` on a message streams the turn (see ``sse.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentscript.server import sse
from agentscript.server.agents import AGENT_NAME, ServedAgent
from agentscript.server.auth import ApiKeys
from agentscript.server.config import ServerConfig
from agentscript.server.errors import (
    CUT_AT_SHUTDOWN,
    ApiError,
    body,
    error_headers,
    log_failure,
    status_of,
)
from agentscript.server.fastpath import JsonTextResponse, MessageFastPath
from agentscript.server.heap import SurvivorFreezer, freeze_startup_heap
from agentscript.server.metrics import ACTIVE_WINDOW, Metrics, method_label
from agentscript.server.middleware import HttpMiddleware
from agentscript.server.ratelimit import RateLimiter, rate_limited_message, retry_after
from agentscript.server.requestid import RequestId
from agentscript.server.service import MAX_TURNS_PAGE, SessionService, mounted
from agentscript.server.shutdown import ShutdownClock
from agentscript.server.streaming import stream_turn
from agentscript.store import Store, StoreError

log = logging.getLogger("agentscript.server")

SESSION_ID = r"^[A-Za-z0-9_-]{1,64}$"
NAME = AGENT_NAME


class CreateSession(BaseModel):
    model_config = ConfigDict(extra="forbid")
    variables: dict[str, Any] = Field(default_factory=dict)


class SendMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str


def _json_media(request: Request) -> bool:
    """Whether the request's Content-Type is one FastAPI reads as JSON (``application/json``
    or ``application/*+json``)."""
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


def _error_response(exc: BaseException) -> JSONResponse:
    status, code, message = status_of(exc)
    log_failure(exc, code, message)
    return JSONResponse(body(code, message), status_code=status, headers=error_headers(exc, code))


class CountRequests(HttpMiddleware):
    """Counts responses by method and status for ``/metrics``; an exception that escaped the
    routes becomes an error response here (never a traceback to the client).

    So does the cancellation uvicorn sends a request whose turn ran past ``--shutdown-grace``
    (nothing else cancels a request: a client that leaves is told by ``receive``):
    ``503 shutting_down`` with ``Retry-After``; a stream says it itself (``streaming.py``).
    uvicorn answered a plain-text ``500`` and logged a traceback."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        super().__init__(app)
        self.metrics = metrics

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        status = 500
        head: Message | None = None  # the response's start, once sent

        async def sending(message: Message) -> None:
            nonlocal status, head
            if message["type"] == "http.response.start":
                status, head = int(message["status"]), message
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()  # handled here: the answer below awaits again
            if head is None:
                cut = ApiError(
                    503,
                    "shutting_down",
                    CUT_AT_SHUTDOWN,
                    headers={"Retry-After": "1", "Connection": "close"},
                )
                response = _error_response(cut)
                status = response.status_code
                await response(scope, receive, send)
        except Exception as exc:
            if head is not None:
                raise
            response = _error_response(exc)
            status = response.status_code
            await response(scope, receive, send)
        finally:
            self.metrics.http[(method_label(str(scope.get("method", ""))), status)] += 1


class JsonCorsMiddleware(CORSMiddleware):
    """Starlette's CORS, with a refused preflight answered like every other error: a JSON
    ``400 cors_refused`` naming what was refused, rather than a plain-text body."""

    def preflight_response(self, request_headers: Headers) -> Response:
        response = super().preflight_response(request_headers)
        if response.status_code != 400:
            return response
        message = bytes(response.body).decode("utf-8", "replace")
        refused = message.removeprefix("Disallowed CORS ")
        headers = {
            name: value
            for name, value in response.headers.items()
            if name not in ("content-length", "content-type")
        }
        return JSONResponse(
            body(
                "cors_refused", f"this preflight request is refused by CORS: {refused} not allowed"
            ),
            status_code=400,
            headers=headers,
        )


class BodyLimit(HttpMiddleware):
    """Refuses request bodies over ``limit`` bytes with 413, before a route reads them.

    A declared Content-Length over the limit is refused at once, from the head. A body without
    one (chunked transfer) is counted as it arrives: past the limit the route is told the client
    went away (it stops reading), its own answer is dropped, and the 413 is sent instead. The
    413 says ``Connection: close``: the rest of the body is not read, and the connection ends
    after the answer (server/httptools_nodelay.py: without a reset that could lose it).
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        super().__init__(app)
        self.limit = limit

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await self._refuse(scope, receive, send)
            return
        seen = 0
        over = False
        answered = False

        async def counted() -> Message:
            nonlocal seen, over
            if over:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    over = True
                    return {"type": "http.disconnect"}
            return message

        async def sending(message: Message) -> None:
            nonlocal answered
            if over and not answered:
                return  # the route's answer to a body it never got whole
            answered = answered or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, sending)
        except Exception:
            if not over or answered:
                raise
        if over and not answered:
            await self._refuse(scope, receive, send)

    def _message(self) -> str:
        return f"the request body is over {self.limit} bytes (max_body_bytes)"

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = JSONResponse(
            body("body_too_large", self._message()),
            status_code=413,
            headers={"Connection": "close"},
        )
        await response(scope, receive, send)


async def authenticate(
    request: Request, authorization: Annotated[str | None, Header()] = None
) -> str:
    """The owner id of the request's API key (401 without a valid one), rate-limited (429)."""
    return owner_of(request.app.state, authorization)


def owner_of(state: Any, authorization: str | None) -> str:
    """:func:`authenticate` for a request's Authorization header and the app's state."""
    who: str | None = state.keys.owner(authorization)
    if who is None:
        raise ApiError(
            401,
            "unauthorized",
            "send a valid API key as 'Authorization: Bearer <key>'",
            headers={"WWW-Authenticate": "Bearer"},
        )
    wait = state.limiter.take(who)
    if wait > 0:
        raise ApiError(
            429,
            "rate_limited",
            rate_limited_message(state.config.rate_limit, wait),
            headers={"Retry-After": retry_after(wait)},
        )
    return who


Owner = Annotated[str, Depends(authenticate)]
SessionId = Annotated[str, Path(pattern=SESSION_ID)]
AgentName = Annotated[str, Path(pattern=NAME)]


async def _open_at_start(
    app: FastAPI, store: Store, on_failure: Callable[[StoreError], None] | None
) -> None:
    """Open ``store`` for the start-up of ``app`` (see :func:`create_app`). Here rather than
    in a wrapper of the whole app, which every request would pass through."""
    app.state.store_failed = None  # this start-up's, not an earlier one's
    try:
        await store.open()
    except StoreError as exc:
        app.state.store_failed = exc
        if on_failure is not None:
            on_failure(exc)
        raise


def create_app(
    agents: Mapping[str, ServedAgent],
    store: Store,
    *,
    config: ServerConfig | None = None,
    keys: ApiKeys | None = None,
    purge_every: float | None = 60.0,
    freeze_heap: bool = False,
    metrics_dir: str | None = None,
    on_store_failure: Callable[[StoreError], None] | None = None,
) -> FastAPI:
    """The server for ``agents`` over ``store`` (opened at start-up, closed at shutdown).

    A store that cannot be opened fails the start-up: ``app.state.store_failed`` keeps the
    error (the exit status of ``agentscript serve`` depends on it), and ``on_store_failure``
    hears it first (the command says it in one line, in place of the traceback uvicorn logs).

    ``freeze_heap``: once started, exempt every object then alive from the cycle collector,
    and freeze the sessions kept between turns as they accumulate (:mod:`.heap`), as
    ``agentscript serve`` does. Off by default: it changes how the whole process collects
    garbage, which a test run or an application embedding this one may not want.

    ``metrics_dir``: the directory where the workers of one server share their figures, so
    that ``/metrics`` answers the whole server's (:mod:`.sharedmetrics`); None: this process's.
    """
    config = config or ServerConfig()
    keys = keys or ApiKeys()
    ttl = config.session_ttl
    # An expired session is no longer active, whichever comes first.
    metrics = Metrics(min(ACTIVE_WINDOW, ttl) if ttl else ACTIVE_WINDOW)
    shared = None
    if metrics_dir is not None:
        from agentscript.server.sharedmetrics import SharedMetrics

        shared = SharedMetrics(metrics, metrics_dir)
    service = SessionService(agents, store, config, metrics)
    if freeze_heap:
        service.live.freezer = SurvivorFreezer()
    limiter = RateLimiter(config.rate_limit, config.rate_burst)
    # The store's kind only, where anyone may read it (/readyz): its URL names hosts, users
    # and files.
    kind = store.url.split(":", 1)[0]
    ready = {"store": False}
    warming: dict[str, asyncio.Task[list[str]]] = {}

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        ShutdownClock.reset()  # a shutdown of an earlier server in this process is not ours
        await _open_at_start(_app, store, on_store_failure)
        ready["store"] = True
        # The model SDKs (the OpenAI one takes ~0.5 s of CPU to import) load once the server
        # listens; /readyz says "not ready" until they are in. (In the loop's thread: in
        # another one, the import fights this one for the GIL and ends later.)
        from agentscript.models.sdk_provider import unloaded_sdks, warm_up_sdks

        async def warm_up() -> list[str]:
            await asyncio.sleep(0.02)  # lets uvicorn bind first
            try:
                return warm_up_sdks()
            finally:
                if freeze_heap:
                    freeze_startup_heap()

        if unloaded_sdks():
            warm = warming["task"] = asyncio.create_task(warm_up())
            warm.add_done_callback(lambda done: done.cancelled() or done.exception())
        elif freeze_heap:
            freeze_startup_heap()

        async def backfill_expiry(ttl: float) -> None:
            """Give the sessions written while no TTL was set an expiry from their last update
            (``Store.backfill_expiry``), in the background: on a large store it can outlast the
            supervisor's start timeout, so the worker is ready without it. A session it has not
            reached yet does not expire until it does; one it never reaches (an error, a
            shutdown first) waits for the next start."""
            try:
                await store.backfill_expiry(ttl)
            except Exception as exc:  # a line, not a failed start: serving needs no backfill
                log.error(
                    "expiry backfill stopped, the sessions not reached get one at the next "
                    "start: %s",
                    exc,
                )

        tasks = []
        backfill = None
        if config.session_ttl:
            backfill = asyncio.create_task(backfill_expiry(config.session_ttl))
            tasks.append(backfill)
        # Awaited by whoever must know every session has its expiry (a test, an embedding app).
        _app.state.expiry_backfill = backfill
        # Without a TTL too: a session keeps the expiry its last write gave it, and one that
        # has passed reads as absent on every server, so it must also be deleted here (a
        # server started again without --session-ttl left such rows on disk forever).
        if purge_every:
            from agentscript.server.service import purge_loop

            tasks.append(asyncio.create_task(purge_loop(service, purge_every)))
        if shared is not None:
            tasks.append(asyncio.create_task(shared.run()))
        try:
            yield
        finally:
            ready["store"] = False
            for task in tasks:
                task.cancel()
            cut = await service.finish_turns(config.shutdown_grace)
            if cut:
                when = "by a stop at once" if ShutdownClock.stopped_at_once() else "after the grace"
                committing = service.cut_while_committing
                if committing:
                    # Cut after their commit was sent: the database may have applied it.
                    log.error(
                        "shutdown: %d turn(s) cut %s, %d of them while committing (those may "
                        "have committed; an Idempotency-Key resent returns them)",
                        cut,
                        when,
                        committing,
                    )
                else:
                    log.error("shutdown: %d turn(s) cut %s, none committed", cut, when)
            if shared is not None:
                with contextlib.suppress(OSError):
                    shared.write()  # the last turns' figures, before the supervisor folds them
            await store.close()

    app = FastAPI(
        title="agentscript serve",
        version="1",
        lifespan=lifespan,
        default_response_class=JsonTextResponse,
        docs_url=None,
        redoc_url=None,
        # A path with a slash too many or too few is a 404 like any other unknown path:
        # Starlette's redirect named whatever host the request's Host header claimed, and
        # answered before any key was checked.
        redirect_slashes=False,
        responses={
            401: {"description": "missing or unknown API key"},
            404: {"description": "not found (or another key's session)"},
            422: {"description": "invalid request"},
            429: {"description": "rate limit, or the key's share of turns; see Retry-After"},
        },
    )
    app.state.service = service
    app.state.store_failed = None
    app.state.metrics = metrics
    app.state.keys = keys
    app.state.limiter = limiter
    app.state.config = config

    @app.exception_handler(ApiError)
    async def api_error(_request: Request, exc: ApiError) -> JSONResponse:
        return _error_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        codes = {400: "invalid_body", 404: "not_found", 405: "method_not_allowed"}
        code = codes.get(exc.status_code, "http_error")
        detail = str(exc.detail)
        if exc.status_code == 400:
            # FastAPI's only 400: a body its JSON parser could not read at all.
            detail = "the body is not JSON in UTF-8 (or nests deeper than a parser can read)"
        return JSONResponse(body(code, detail), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        unread = next((e for e in errors if e.get("type") == "json_invalid"), None)
        if unread is not None:  # syntax, not shape: a 400 like a body that is not UTF-8
            where = unread.get("loc", ("body", "?"))[-1]
            why = str((unread.get("ctx") or {}).get("error", "JSON decode error"))[:200]
            message = f"the body is not JSON: {why} (at character {where})"
            return JSONResponse(body("invalid_body", message), status_code=400)
        problems = []
        for err in errors[:5]:
            where = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
            problems.append(f"{where or 'body'}: {err.get('msg', 'invalid')}")
            if tuple(err.get("loc", ())) == ("body",) and not _json_media(request):
                # FastAPI reads a body as JSON only when its Content-Type says so: say that,
                # rather than that the JSON the client sent is not an object.
                sent = request.headers.get("content-type")
                problems[-1] = (
                    "body: send it as JSON with 'Content-Type: application/json' "
                    f"({'no Content-Type was sent' if sent is None else f'got {sent[:100]!r}'})"
                )
        return JSONResponse(body("invalid_request", "; ".join(problems)), status_code=422)

    @app.exception_handler(Exception)
    async def any_error(_request: Request, exc: Exception) -> JSONResponse:
        return _error_response(exc)

    # HEAD too: load balancers' health checks often send it.
    @app.get("/healthz")
    @app.head("/healthz", include_in_schema=False)  # one operation id per route
    async def healthz() -> dict[str, str]:
        """The process is up."""
        return {"status": "ok"}

    @app.get("/readyz")
    @app.head("/readyz", include_in_schema=False)  # one operation id per route
    async def readyz() -> JSONResponse:
        """The store answers and the agents are loaded."""
        try:
            if not ready["store"]:
                raise ApiError(503, "not_ready", "the store is not open yet")
            warm = warming.get("task")
            if warm is not None and not warm.done():
                raise ApiError(503, "not_ready", "the model SDKs are still loading")
            if warm is not None and warm.exception() is not None:
                raise ApiError(503, "not_ready", f"a model SDK failed to load: {warm.exception()}")
            await store.ping()
        except ApiError as exc:
            return _error_response(exc)
        except Exception as exc:
            # The detail (the store's URL or file, the driver's reason) is for the operator,
            # in the log beside this request's id: this answers anyone.
            log.error("readyz: the %s store does not answer: %s", kind, exc)
            return _error_response(
                ApiError(503, "not_ready", f"the {kind} store does not answer (the log says why)")
            )
        return JSONResponse({"status": "ready", "store": kind, "agents": sorted(agents)})

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics_text() -> PlainTextResponse:
        """Prometheus text format."""
        service.forget_expired()
        text = metrics.render() if shared is None else shared.render()
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    @app.get("/v1/agents")
    async def list_agents(_who: Owner) -> dict[str, Any]:
        return {"agents": [a.description for a in agents.values()]}

    @app.get("/v1/agents/{agent}")
    async def get_agent(agent: AgentName, _who: Owner) -> dict[str, Any]:
        return service.agent(agent).description

    @app.post("/v1/agents/{agent}/sessions", status_code=201)
    async def create_session(
        agent: AgentName, who: Owner, request: CreateSession | None = None
    ) -> dict[str, Any]:
        variables = request.variables if request is not None else {}
        return await service.create(who, agent, variables)

    @app.get("/v1/sessions")
    async def list_sessions(
        who: Owner,
        agent: Annotated[str | None, Query(pattern=NAME)] = None,
        limit: Annotated[int, Query(ge=1, le=ServerConfig.max_page)] = 20,
        cursor: Annotated[str | None, Query(pattern=SESSION_ID)] = None,
    ) -> dict[str, Any]:
        return await service.list(who, agent, min(limit, config.max_page), cursor)

    @app.get("/v1/sessions/{session_id}")
    async def get_session(session_id: SessionId, who: Owner) -> dict[str, Any]:
        return await service.get(who, session_id)

    @app.delete("/v1/sessions/{session_id}", status_code=204)
    async def delete_session(session_id: SessionId, who: Owner) -> Response:
        await service.delete(who, session_id)
        return Response(status_code=204)

    @app.get("/v1/sessions/{session_id}/turns")
    async def list_turns(
        request: Request,
        session_id: SessionId,
        who: Owner,
        limit: Annotated[int, Query(ge=1, le=MAX_TURNS_PAGE)] = MAX_TURNS_PAGE,
        # No upper bound in the schema (schemathesis' coverage phase crashed on this one's under
        # CPython 3.11.7); a number past any turn is one past the last, and the database never
        # sees one it cannot bind.
        after: Annotated[int, Query(ge=0)] = 0,
    ) -> dict[str, Any]:
        listed = await service.turns(who, session_id, limit, min(after, 10**9))
        root = request.scope.get("root_path", "")
        return {**listed, "turns": [mounted(root, turn) for turn in listed["turns"]]}

    @app.get("/v1/sessions/{session_id}/turns/{turn}/trace")
    async def get_trace(
        session_id: SessionId, turn: Annotated[int, Path(ge=1, le=10**9)], who: Owner
    ) -> dict[str, Any]:
        return await service.trace(who, session_id, turn)

    @app.post(
        "/v1/sessions/{session_id}/messages",
        responses={
            200: {
                "description": "The turn JSON, or (Accept: text/event-stream) its events",
                "content": {"text/event-stream": {}},
            },
            409: {"description": "another turn of the session is running"},
        },
    )
    async def send_message(
        request: Request,
        session_id: SessionId,
        message: SendMessage,
        who: Owner,
        idempotency_key: Annotated[
            str | None, Header(max_length=200, pattern=r"^[\x21-\x7e]+$")
        ] = None,
        accept: Annotated[str | None, Header()] = None,
    ) -> Response:
        root = request.scope.get("root_path", "")
        if sse.wants_stream(accept):
            return await stream_turn(service, who, session_id, message.text, idempotency_key, root)
        result = await service.send(who, session_id, message.text, idempotency_key)
        return JsonTextResponse(mounted(root, result))

    # add_middleware wraps what is there: the fast path goes inside CORS and the body limit.
    app.add_middleware(
        MessageFastPath,
        service=service,
        authenticate=functools.partial(owner_of, app.state),
        error_response=_error_response,
    )
    if config.cors_origins:
        app.add_middleware(
            JsonCorsMiddleware,
            allow_origins=config.cors_origins,
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=[
                "Authorization",
                "Content-Type",
                "Idempotency-Key",
                "Accept",
                "X-Request-ID",
            ],
            expose_headers=["X-Request-ID", "Retry-After"],
        )
    app.add_middleware(BodyLimit, limit=config.max_body_bytes)
    app.add_middleware(CountRequests, metrics=metrics)
    if config.local_only:
        from agentscript.server.local import LocalOnly

        app.add_middleware(LocalOnly, allowed_origins=config.cors_origins)
    if config.access_log:
        from agentscript.server.logs import AccessLog

        app.add_middleware(AccessLog)
    # Outermost: the access line and every response (413s and 500s included) carry the id.
    app.add_middleware(RequestId)
    return app
