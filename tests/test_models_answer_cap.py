"""The bound on a whole answer's size in the SDK clients (models/answer_cap.py).

The answers of the stand-in servers carry a Content-Length (tests/test_models_openai.py and
test_models_anthropic.py cover that path through real HTTP); a chunked body has none, and
is counted as it arrives.
"""

from __future__ import annotations

import asyncio
import importlib
from typing import Any

import pytest

from agentscript.models import answer_cap, sdk_provider


@pytest.mark.parametrize("sdk_name", ["openai", "anthropic"])
def test_a_whole_answer_without_a_length_is_counted_as_it_arrives(
    monkeypatch: pytest.MonkeyPatch, sdk_name: str
) -> None:
    monkeypatch.setattr(sdk_provider, "MAX_ANSWER_BYTES", 10)
    library_name = answer_cap._http_library(
        importlib.import_module(sdk_name).DefaultAsyncHttpxClient
    )
    library = importlib.import_module(library_name)
    sent: list[int] = []

    class Chunks(library.AsyncByteStream):  # type: ignore[misc, name-defined]
        async def __aiter__(self) -> Any:
            for number in range(5):
                sent.append(number)
                yield b"abcd"

    async def read() -> bytes:
        response = library.Response(200, stream=Chunks())
        await answer_cap._hook(library_name)(response)
        return bytes(await response.aread())

    with pytest.raises(sdk_provider.AnswerTooLarge, match="over 10 bytes"):
        asyncio.run(read())
    assert sent == [0, 1, 2]  # read no further than the bound


def library_of(sdk_name: str) -> tuple[str, Any]:
    name = answer_cap._http_library(importlib.import_module(sdk_name).DefaultAsyncHttpxClient)
    return name, importlib.import_module(name)


def test_an_event_stream_is_bounded_too() -> None:
    # An answer labelled as a stream is read whole by the SDK when it did not ask for one.
    name, library = library_of("openai")
    response = library.Response(
        200, headers={"content-type": "text/event-stream"}, content=b"x" * 100
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sdk_provider, "MAX_ANSWER_BYTES", 10)
        with pytest.raises(sdk_provider.AnswerTooLarge):
            asyncio.run(answer_cap._hook(name)(response))


@pytest.mark.parametrize("encoding", ["gzip", "br", "deflate, gzip"])
def test_a_compressed_answer_is_refused_before_it_is_decoded(encoding: str) -> None:
    name, library = library_of("anthropic")
    response = library.Response(200, headers={"content-encoding": encoding}, content=b"\x1f\x8b")
    with pytest.raises(sdk_provider.AnswerRefused, match=r"came compressed \("):
        asyncio.run(answer_cap._hook(name)(response))
