"""The bound on the size of an answer's body for the SDK clients.

The SDKs read a whole (not streamed) answer into memory before parsing it, with no bound of
their own: a server that sends 300 MB would hold 300 MB, and more once parsed, in a process
that serves many sessions. A response hook wraps each answer's body, whole or streamed, in a
stream that counts its bytes and stops at
:data:`~agentscript.models.sdk_provider.MAX_ANSWER_BYTES`, the bound the lean client keeps on a
whole answer (a stream's text stops far earlier, at ``Limits.max_reply_chars``). The client
asks for uncompressed answers and refuses compressed ones: the bound counts bytes as they
arrive, before any decoding.

The SDKs bring their own HTTP library (``httpx`` or its successor ``httpx2``, by version), and
a body stream must be of that library's class: it is found from the SDK's client class.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from agentscript.models import sdk_provider


def http_client(sdk: Any) -> Any:
    """The SDK's own default async client (its timeouts, limits, proxies), with the bound.
    It asks for answers as they are (``Accept-Encoding: identity``): the bound counts the bytes
    that arrive, and a compressed body may expand a thousandfold once decoded."""
    client_class = sdk.DefaultAsyncHttpxClient
    return client_class(
        headers={"Accept-Encoding": "identity"},
        event_hooks={"response": [capped_answers(client_class)]},
    )


def capped_answers(client_class: type) -> Callable[[Any], Awaitable[None]]:
    """The response hook that bounds every answer body of an httpx client of
    ``client_class`` (the MCP client's too: ``integrations/mcp_client.py``)."""
    return _hook(_http_library(client_class))


def _http_library(client_class: type) -> str:
    """The name of the HTTP library ``client_class`` is built on (``httpx``, ``httpx2``)."""
    for base in client_class.__mro__:
        top = base.__module__.split(".")[0]
        if top.startswith("httpx"):
            return top
    raise RuntimeError(f"{client_class!r} is not an httpx client")


@functools.cache
def _hook(library: str) -> Callable[[Any], Awaitable[None]]:
    byte_stream = importlib.import_module(library).AsyncByteStream

    class CappedBody(byte_stream):  # type: ignore[misc, valid-type]
        def __init__(self, inner: Any, most: int) -> None:
            self._inner = inner
            self._most = most

        async def __aiter__(self) -> AsyncIterator[bytes]:
            size = 0
            async for piece in self._inner:
                size += len(piece)
                if size > self._most:
                    raise sdk_provider.AnswerTooLarge(self._most)
                yield piece

        async def aclose(self) -> None:
            await self._inner.aclose()

    async def cap_answer(response: Any) -> None:
        """Response hook: bound an answer's body, streamed or whole (a stream's text is
        bounded by the reply limit long before: ``Limits.max_reply_chars``), and refuse one
        compressed though the client asked for none."""
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise sdk_provider.AnswerRefused(
                f"the answer came compressed ({encoding[:40]}) though none was asked for; "
                "it was dropped"
            )
        most = sdk_provider.MAX_ANSWER_BYTES
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > most:
            raise sdk_provider.AnswerTooLarge(most)  # the client closes it unread
        response.stream = CappedBody(response.stream, most)

    return cap_answer
