"""What every SDK-backed provider shares: credentials, client, retries, and error wording.

A provider subclasses :class:`SdkModel`, names its SDK and environment in class attributes,
and implements only its protocol: building the request, sending it, parsing the answer and
assembling a stream. The SDK is an optional extra, imported only when a model is built.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import importlib.util
import json
import os
import sys
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from typing import Any, ClassVar, Protocol

from agentscript.errors import TurnError
from agentscript.models.base import Message, ModelError, ModelRequest, ModelResponse, TextSink
from agentscript.models.retry import (
    RetriesExhausted,
    RetryPolicy,
    call_with_retries,
    describe_status,
    is_transient_status,
    parse_retry_after,
    redact,
    server_message,
)
from agentscript.redaction import shown_url

# Local servers ignore the key, but the SDKs (and some servers) insist that one is sent.
PLACEHOLDER_API_KEY = "agentscript-no-key"
# An answer may take this many times the model's timeout in all. The timeout itself bounds
# each wait for the stream's next event (each read of a whole answer), but a server that keeps
# sending (keep-alive comments, empty deltas, a byte at a time) would otherwise hold the turn,
# and its session's lease, forever.
WHOLE_STREAM_TIMEOUTS = 10
# An answer's body larger than this is dropped unread: a whole answer by the SDK clients
# (models/answer_cap.py, which bounds their streams too) and by the lean one. A real answer
# is a few kB.
MAX_ANSWER_BYTES = 64 * 1024 * 1024


class AnswerRefused(Exception):
    """An answer refused before it was read (too large, or compressed though the client asked
    for none): never retried, it would come again."""


class AnswerTooLarge(AnswerRefused):
    """An answer's body outgrew MAX_ANSWER_BYTES."""

    def __init__(self, most: int) -> None:
        super().__init__(f"the answer is over {most} bytes; it was dropped")


def answer_refused(exc: BaseException | None) -> AnswerRefused | None:
    """The AnswerRefused behind ``exc`` (the SDKs wrap it in a connection error)."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, AnswerRefused):
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


class _SinkFailed(Exception):
    """A turn's own failure raised by the text sink (the reply grew past
    ``Limits.max_reply_chars``): it ends the answer as it is, never retried nor reworded as a
    failure of the model. Anything else the sink raises (a closed pipe) is a stream cut off,
    as before: the turn then fails by the one rule of failed turns."""

    def __init__(self, error: TurnError) -> None:
        super().__init__(str(error))
        self.error = error


class StreamStalled(Exception):
    """A stream that sent no event for the model's timeout, or outlasted its whole time: a
    failure of the model, retried like a timeout while none of its text was shown."""


def nonempty(value: str | None) -> str | None:
    """``value`` unless it is None or only white space."""
    return value if value and value.strip() else None


def reason_text(value: object) -> str | None:
    """A provider's stop reason as text, at most 100 characters (a hostile server's is not
    kept whole), or None when it gave none."""
    return str(value)[:100] if value else None


def parse_tool_arguments(raw: object) -> tuple[dict[str, Any] | None, str]:
    """Arguments as sent by a model -> (JSON object or None, raw text).

    Never raises: text that is not a JSON object gives None so the engine can tell the
    model exactly what was wrong. An empty text means "no arguments".
    """
    if isinstance(raw, dict):
        return raw, json.dumps(raw)
    text = "" if raw is None else str(raw)
    if not text.strip():
        return {}, text
    try:
        # NaN and Infinity are not JSON: refuse them here so traces and state stay strict JSON.
        value = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return None, text
    return (value, text) if isinstance(value, dict) else (None, text)


def answered_call_id(message: Message, provider: str) -> str:
    """The id of the call a tool result answers; both APIs refuse a result without one."""
    if not message.tool_call_id:
        raise ModelError(
            f"Tool result for '{message.name or '?'}' has no tool_call_id; "
            f"the {provider} API needs it to match the call"
        )
    return message.tool_call_id


def unsupported_role(message: Message) -> ModelError:
    return ModelError(
        f"Unsupported message role '{message.role}' (expected user, assistant or tool)"
    )


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


# The SDK modules of the models built so far: imported at first use, or by warm_up_sdks().
_WANTED_SDKS: set[str] = set()


def unloaded_sdks() -> list[str]:
    """The SDK modules of the models built so far that are not imported yet."""
    return sorted(name for name in _WANTED_SDKS if sys.modules.get(name) is None)


def warm_up_sdks() -> list[str]:
    """Import the SDK of every model built so far; their names. ``agentscript serve`` runs this
    once it listens, so no request pays for the import."""
    names = unloaded_sdks()
    for name in names:
        importlib.import_module(name)
    return names


class StreamAssembler(Protocol):
    """Builds one response from the events of a streamed answer."""

    def add(self, event: Any) -> str:
        """Take one event; return its text delta ("" if none)."""
        ...

    def response(self, model: str) -> ModelResponse:
        """The whole answer; ``model`` is used when the stream never named one."""
        ...


# Transport errors (httpx names, which both SDKs wrap) that mean the connection was made and
# then lost, rather than never made.
_BROKEN_CONNECTION = frozenset(
    {"RemoteProtocolError", "ReadError", "WriteError", "ReadTimeout", "ProtocolError"}
)
_NO_CONNECTION = frozenset({"ConnectError", "ConnectTimeout"})


def _causes(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    seen: BaseException | None = exc.__cause__ or exc.__context__
    while seen is not None and len(chain) < 10:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    return chain


def connection_broke(exc: BaseException) -> bool:
    """Whether a connection error means a connection lost mid-answer (not a refused one)."""
    for cause in [exc, *_causes(exc)]:
        name = type(cause).__name__
        if name in _NO_CONNECTION:
            return False
        if name in _BROKEN_CONNECTION:
            return True
    return False


def describe_cause(exc: BaseException) -> str:
    """The innermost cause of ``exc`` as ``Type: message``."""
    inner = [exc, *_causes(exc)][-1]
    return f"{type(inner).__name__}: {inner}" if str(inner) else type(inner).__name__


async def _close_when_loop_ends(client: Any) -> AsyncIterator[None]:
    """Suspends at once; its ``finally`` closes ``client`` when the loop finalizes it."""
    try:
        yield
    finally:
        with contextlib.suppress(Exception):  # closing is best effort
            await client.close()


class SdkModel(ABC):
    """A chat model reached through a vendor SDK's async client.

    ``api_key`` and ``base_url`` default to the provider's environment variables. With a base
    URL and no credential (a local server or proxy), a placeholder key is sent. ``params`` are
    sent with every request; ``request.params`` override them.
    """

    # -- what a provider declares ----------------------------------------------------------

    provider: ClassVar[str]  # as users know it, e.g. "OpenAI"
    prefix: ClassVar[str]  # in model specs, and the name of the package extra
    sdk_module: ClassVar[str]  # the SDK's import name
    client_class: ClassVar[str]  # the SDK's async client
    example_model: ClassVar[str]  # shown when the model name is missing
    key_env: ClassVar[str]
    base_url_env: ClassVar[str]
    auth_token_env: ClassVar[str | None] = None  # a bearer token used when there is no key
    default_host: ClassVar[str]  # named in connection errors when no base URL is set
    reserved_params: ClassVar[frozenset[str]]  # request fields params may not override
    # Error types that are worth another attempt whatever the HTTP status.
    transient_error_types: ClassVar[frozenset[str]] = frozenset()

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        params: dict[str, Any] | None = None,
        retry_base_delay: float = 0.5,
    ) -> None:
        if not model or not model.strip():
            raise ModelError(
                f"{self.provider} model name is empty: write e.g. "
                f"{self.prefix}:{self.example_model}"
            )
        self._check_sdk()
        self.model = model.strip()
        self.name = f"{self.prefix}:{self.model}"
        self.base_url = nonempty(base_url) or nonempty(os.environ.get(self.base_url_env))
        self._api_key = nonempty(api_key) or nonempty(os.environ.get(self.key_env))
        self._auth_token: str | None = None
        if self._api_key is None and self.auth_token_env:
            self._auth_token = nonempty(os.environ.get(self.auth_token_env))
        if self._api_key is None and self._auth_token is None:
            if self.base_url is None:
                raise ModelError(
                    f"No API key for model '{self.name}': set {self.key_env}, "
                    f"or pass --base-url (or set {self.base_url_env}) for a local server"
                )
            self._api_key = PLACEHOLDER_API_KEY
        self.timeout = timeout
        self.params: dict[str, Any] = dict(params or {})
        self.retry = RetryPolicy(max_retries=max_retries, base_delay=retry_base_delay)
        self._client: Any = None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self._closer: AsyncIterator[None] | None = None

    def __repr__(self) -> str:
        where = (
            f", base_url={shown_url(self.base_url, '(the base URL)')!r}" if self.base_url else ""
        )
        return f"{type(self).__name__}({self.model!r}{where})"

    @property
    def _where(self) -> str:
        """The server, as errors name it (no credentials a base URL may carry)."""
        return shown_url(self.base_url, "(the base URL)") if self.base_url else self.default_host

    def _missing_sdk(self) -> ModelError:
        return ModelError(
            f"The {self.provider} provider needs the '{self.sdk_module}' package: "
            f"pip install 'agentscript[{self.prefix}]'"
        )

    def _check_sdk(self) -> None:
        """ModelError now if the SDK is not installed; it is imported at first use (importing
        the OpenAI SDK takes ~0.5 s of CPU, which a server would pay before listening)."""
        try:
            found = importlib.util.find_spec(self.sdk_module)
        except (ImportError, ValueError):
            found = None
        if found is None:
            raise self._missing_sdk()
        _WANTED_SDKS.add(self.sdk_module)

    @functools.cached_property
    def _sdk(self) -> Any:
        try:
            return importlib.import_module(self.sdk_module)
        except ImportError as exc:
            raise self._missing_sdk() from exc

    async def _get_client(self) -> Any:
        # An SDK client's connection pool belongs to the event loop that first used it, so a
        # caller that runs each turn under a fresh asyncio.run() gets a fresh client, while
        # Session.send's kept loop per thread (engine/loop.py) keeps one for all its turns.
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            credentials = (
                {"api_key": self._api_key} if self._api_key else {"auth_token": self._auth_token}
            )
            from agentscript.models.answer_cap import http_client

            self._client = getattr(self._sdk, self.client_class)(
                **credentials,
                base_url=self.base_url,
                timeout=self.timeout,
                max_retries=0,  # retried by call_with_retries, with our own backoff
                http_client=http_client(self._sdk),
            )
            self._client_loop = loop
            # Close it while its loop still runs: asyncio.run(), asyncio.Runner and the kept
            # loops of engine/loop.py finalize open async generators before closing the loop. Left to the garbage collector, the SDK closes
            # a client on whatever loop runs then, and its connections fail there with
            # "Event loop is closed" (printed as "Task exception was never retrieved").
            self._closer = _close_when_loop_ends(self._client)
            await anext(self._closer)
        return self._client

    # -- the protocol, implemented by each provider ----------------------------------------

    @abstractmethod
    def _build_kwargs(self, request: ModelRequest, *, streaming: bool) -> dict[str, Any]:
        """The SDK call's arguments for ``request`` (raise ModelError if it cannot be sent)."""

    @abstractmethod
    async def _send(self, client: Any, kwargs: dict[str, Any]) -> Any:
        """Make the SDK call: an answer object, or an event stream when streaming."""

    @abstractmethod
    def _parse_response(self, answer: Any) -> ModelResponse:
        """A whole (not streamed) answer as a ModelResponse."""

    @abstractmethod
    def _stream_assembler(self) -> StreamAssembler:
        """A fresh assembler for the events of one streamed answer."""

    # -- shared machinery ------------------------------------------------------------------

    def _merged_params(self, request: ModelRequest) -> dict[str, Any]:
        """The model's params overridden by the request's, refusing reserved fields."""
        params = {**self.params, **request.params}
        clash = sorted(self.reserved_params & params.keys())
        if clash:
            raise ModelError(
                f"Model parameter(s) {', '.join(clash)} are set by agentscript and cannot be overridden"
            )
        return params

    async def complete(
        self, request: ModelRequest, *, stream: TextSink | None = None
    ) -> ModelResponse:
        kwargs = self._build_kwargs(request, streaming=stream is not None)
        shown: list[str] = []  # the text already fed to ``stream``
        received: list[int] = [0]  # stream events received, to tell a cut stream from no stream

        async def attempt() -> ModelResponse:
            if stream is not None:
                answer = await self._send(await self._get_client(), kwargs)
                return await self._relay(answer, stream, shown, received)
            # The client's timeout counts single reads: a server sending its body a byte at a
            # time held the turn, and its session's lease, forever.
            whole = self.timeout * WHOLE_STREAM_TIMEOUTS
            try:
                async with asyncio.timeout(whole) as deadline:
                    answer = await self._send(await self._get_client(), kwargs)
            except TimeoutError:
                if not deadline.expired():
                    raise
                raise self._stalled(whole, [], streamed=False) from None
            return self._parse_whole(answer)

        def transient(exc: BaseException) -> bool:
            # Once text reached the sink, a retry would show it twice.
            if shown or answer_refused(exc) is not None:
                return False
            return isinstance(exc, StreamStalled) or self._is_transient(exc)

        events: list[dict[str, Any]] = []

        def note_retry(retry: int, wait: float, exc: BaseException, asked: float | None) -> None:
            event: dict[str, Any] = {
                "event": "retry",
                "model": self.name,
                "retry": retry + 1,
                "waitS": round(wait, 3),
                "reason": self._failure_kind(exc),
            }
            if asked is not None:
                event["retryAfterS"] = asked
            events.append(event)

        try:
            response = await call_with_retries(
                attempt,
                self.retry,
                transient,
                retry_after=self._retry_after,
                on_retry=note_retry,
            )
        except _SinkFailed as failed:
            raise failed.error from None
        except ModelError as exc:
            exc.events = tuple(events)
            raise
        except RetriesExhausted as exc:
            if isinstance(exc.__cause__, StreamStalled):
                error = ModelError(f"{exc.__cause__} ({exc.attempts} attempts)")
            else:
                error = self._model_error(exc.__cause__, attempts=exc.attempts)
            error.events = tuple(events)
            raise error from None
        except Exception as exc:
            refused = answer_refused(exc)
            if refused is not None:
                error = ModelError(f"{self.provider} model '{self.model}': {refused}")
            elif isinstance(exc, StreamStalled):
                error = ModelError(str(exc))
            elif received[0] and not self._is_status_error(exc):
                error = self._cut_error(exc, shown)
            else:
                error = self._model_error(exc, attempts=1)
            error.events = tuple(events)
            raise error from None
        response.events = events + response.events
        return response

    def _retry_after(self, exc: BaseException) -> float | None:
        """The wait a 429 or 503 answer asks for in its Retry-After header."""
        if not isinstance(exc, self._sdk.APIStatusError) or exc.status_code not in (429, 503):
            return None
        headers = getattr(getattr(exc, "response", None), "headers", None) or {}
        return parse_retry_after(headers.get("retry-after"))

    def _failure_kind(self, exc: BaseException) -> str:
        if isinstance(exc, self._sdk.APIStatusError):
            return f"HTTP {exc.status_code}"
        return type(exc).__name__

    def _parse_whole(self, answer: Any) -> ModelResponse:
        """A whole answer parsed, or a clear ModelError when the body was not one: the SDKs
        hand back the raw text (or whatever JSON came) instead of failing."""
        if answer is None or isinstance(answer, str | bytes | list | dict | int | float):
            raise self._not_an_answer("its body is not a JSON answer of that API")
        try:
            return self._parse_response(answer)
        except ModelError:
            raise
        except (AttributeError, TypeError, KeyError, ValueError) as exc:
            raise self._not_an_answer(f"its body has an unexpected shape ({exc})") from None

    def _not_an_answer(self, why: str) -> ModelError:
        where = self._where
        return ModelError(
            f"{self.provider} model '{self.model}': the server at {where} answered, but {why}; "
            f"check that --base-url points at a server speaking the {self.provider} API"
        )

    def _cut_error(self, exc: BaseException, shown: list[str]) -> ModelError:
        """The stream started, then broke: say so (it is not a failure to connect)."""
        where = self._where
        got = sum(len(piece) for piece in shown)
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return ModelError(
            redact(
                f"{self.provider} model '{self.model}': the answer from {where} was cut off "
                f"mid-stream after {got} character(s) of text ({detail})",
                [self._api_key, self._auth_token],
            )
        )

    def _is_status_error(self, exc: BaseException) -> bool:
        return isinstance(exc, self._sdk.APIStatusError)

    async def _relay(
        self, events: Any, sink: TextSink, shown: list[str], received: list[int]
    ) -> ModelResponse:
        """Feed a stream's text to ``sink`` (and ``shown``) as it arrives; return the answer.
        ``received[0]`` counts the events; a stream with none was not a stream at all.

        Each event must come within the model's timeout and the whole stream within
        ``WHOLE_STREAM_TIMEOUTS`` of them: the clients' own timeouts count single reads, which
        a server's keep-alive comments renew without sending any of the answer."""
        if isinstance(events, str | bytes | list | dict):
            raise self._not_an_answer("it did not stream (no server-sent events)")
        assembler = self._stream_assembler()
        loop = asyncio.get_running_loop()
        whole = self.timeout * WHOLE_STREAM_TIMEOUTS
        end = loop.time() + whole
        iterator = aiter(events)
        try:
            # One timeout moved at each event: cheaper than a new one per event.
            async with asyncio.timeout(None) as deadline:
                while True:
                    deadline.reschedule(min(loop.time() + self.timeout, end))
                    try:
                        event = await anext(iterator)
                    except StopAsyncIteration:
                        break
                    received[0] += 1
                    piece = assembler.add(event)
                    if piece:
                        shown.append(piece)
                        try:
                            sink(piece)
                        except TurnError as exc:  # the reply outgrew its limit
                            raise _SinkFailed(exc) from None
        except TimeoutError:
            if not deadline.expired():
                raise  # a client's own timeout, worded by _model_error
            raise self._stalled(whole if loop.time() >= end else self.timeout, shown) from None
        finally:
            await events.close()
        if not received[0]:
            raise self._not_an_answer(
                "its stream held no events (the body is not server-sent events)"
            )
        return assembler.response(self.model)

    def _stalled(self, seconds: float, shown: list[str], *, streamed: bool = True) -> StreamStalled:
        """An answer that went on too long, or a stream that sent nothing of it for too long."""
        where = self._where
        if not streamed:
            return StreamStalled(
                f"{self.provider} model '{self.model}' at {where} did not finish its answer "
                f"within {seconds:g} s; the answer was abandoned"
            )
        got = sum(len(piece) for piece in shown)
        what = (
            f"did not finish its streamed answer within {seconds:g} s"
            if seconds > self.timeout
            else f"sent no part of its answer for {seconds:g} s"
        )
        return StreamStalled(
            f"{self.provider} model '{self.model}' at {where} {what} "
            f"(after {got} character(s) of text); the answer was abandoned"
        )

    def _is_transient(self, exc: BaseException) -> bool:
        sdk = self._sdk
        if isinstance(exc, sdk.APIConnectionError):  # includes timeouts
            return True
        if isinstance(exc, sdk.APIStatusError):
            if getattr(exc, "type", None) in self.transient_error_types:
                return True
            return is_transient_status(int(exc.status_code))
        return False

    def _model_error(self, exc: BaseException | None, *, attempts: int) -> ModelError:
        """A ModelError a user can act on, with every credential redacted."""
        sdk = self._sdk
        provider = self.provider
        tries = f" ({attempts} attempts)" if attempts > 1 else ""
        if isinstance(exc, sdk.APITimeoutError):
            text = (
                f"{provider} model '{self.model}' did not answer within {self.timeout:g} s{tries}"
            )
        elif isinstance(exc, sdk.APIConnectionError) and connection_broke(exc):
            where = self._where
            text = (
                f"The connection to {where} broke before the whole answer arrived{tries} "
                f"({describe_cause(exc)})"
            )
        elif isinstance(exc, sdk.APIConnectionError):
            where = self._where
            text = f"Could not connect to {where}{tries}. Is the server running and the URL right?"
        elif isinstance(exc, sdk.APIStatusError):
            message = server_message(getattr(exc, "body", None), getattr(exc, "message", ""))
            status = int(exc.status_code)
            if status < 400:  # an error event inside a successful stream
                text = f"{provider} reported an error while answering{tries}: {message}"
            else:
                text = describe_status(
                    provider,
                    status,
                    message,
                    model=self.model,
                    key_env=self.key_env,
                    attempts=attempts,
                )
        elif isinstance(exc, sdk.APIError):
            message = server_message(getattr(exc, "body", None), getattr(exc, "message", ""))
            text = f"{provider} reported an error{tries}: {message}"
        elif exc is not None and connection_broke(exc):
            where = self._where
            text = (
                f"The connection to {where} broke before the whole answer arrived{tries} "
                f"({describe_cause(exc)})"
            )
        else:
            text = f"{provider} request failed: {type(exc).__name__}: {exc}"
        return ModelError(redact(text, [self._api_key, self._auth_token]))
