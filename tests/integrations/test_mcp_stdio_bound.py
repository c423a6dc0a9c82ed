"""``agentscript mcp-serve`` over stdio: one message is at most ``MAX_WIRE_MESSAGE_BYTES``. A
longer line is dropped as it is read (``BoundedLines``), answered with a JSON-RPC error and
logged in one line, and the next lines are served."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.integrations.test_mcp_serve import AGENT, _arguments

from agentscript.integrations.mcp_server import MAX_WIRE_MESSAGE_BYTES
from agentscript.integrations.mcp_stdio import TOO_LARGE_CODE, TOO_LARGE_TEXT, BoundedLines

# Hangs are bounded by this, never timed.
WAIT = 60.0


class ChunkedStream:
    """A byte stream given in fixed chunks; it notes what the reader held at each read."""

    def __init__(self, data: Iterator[bytes]) -> None:
        self.data = data
        self.lines: BoundedLines | None = None
        self.held_at_reads: list[int] = []

    async def read(self) -> bytes:
        assert self.lines is not None
        self.held_at_reads.append(self.lines.held)
        return next(self.data, b"")


def read_all(chunks: Iterator[bytes], limit: int) -> tuple[list[str], list[int], ChunkedStream]:
    """The lines ``BoundedLines`` gives, the sizes of the lines it dropped, and the stream."""
    stream = ChunkedStream(chunks)
    dropped: list[int] = []

    async def too_long(size: int) -> None:
        dropped.append(size)

    async def collect() -> list[str]:
        lines = stream.lines = BoundedLines(stream.read, limit, too_long)
        return [line async for line in lines]

    return asyncio.run(collect()), dropped, stream


def pieces(data: bytes, size: int) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


def test_a_huge_line_is_dropped_as_it_is_read_never_held_whole() -> None:
    limit, chunk, huge = 64 * 1024, 4096, 32 * 1024 * 1024

    def stream() -> Iterator[bytes]:
        yield b'{"id": 1}\n'
        for _ in range(huge // chunk):
            yield b"x" * chunk
        yield b'\n{"id": 2}\n'

    lines, dropped, source = read_all(stream(), limit)
    assert lines == ['{"id": 1}', '{"id": 2}']
    assert dropped == [huge]
    # Before each read it held at most the bound, so never more than the bound and one chunk.
    assert len(source.held_at_reads) > huge // chunk
    assert max(source.held_at_reads) <= limit


def test_a_line_of_exactly_the_bound_passes_and_one_byte_more_is_dropped() -> None:
    limit = 100
    data = b"a" * limit + b"\n" + b"b" * (limit + 1) + b"\n" + b"ok\n"
    for size in (1, 7, len(data)):  # split anywhere, or a too-long line whole in one read
        lines, dropped, _ = read_all(pieces(data, size), limit)
        assert lines == ["a" * limit, "ok"]
        assert dropped == [limit + 1]


def test_the_last_line_without_a_newline_counts_as_a_line() -> None:
    assert read_all(pieces(b'{"a": 1}\n{"b": 2}', 3), 100)[:2] == (['{"a": 1}', '{"b": 2}'], [])
    assert read_all(pieces(b"ok\n" + b"z" * 500, 64), 100)[:2] == (["ok"], [500])


def test_bad_utf8_is_replaced_as_the_sdk_reader_does() -> None:
    assert read_all(iter([b"caf\xe9\n"]), 100)[0] == ["caf\ufffd"]


def _request(ident: int, method: str, params: dict[str, Any] | None = None) -> bytes:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": ident, "method": method}
    if params is not None:
        body["params"] = params
    return json.dumps(body).encode() + b"\n"


async def _answer(proc: asyncio.subprocess.Process) -> dict[str, Any]:
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), WAIT)
    assert line, "mcp-serve closed stdout"
    answer: dict[str, Any] = json.loads(line)
    return answer


async def _drive_with_an_oversized_line(agent: Path) -> tuple[list[dict[str, Any]], str, int]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        # No model call is made: the URL is never reached.
        *_arguments(agent, "http://127.0.0.1:9/v1"),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "OPENAI_API_KEY": "sk-test"},
    )
    assert proc.stdin is not None and proc.stderr is not None
    try:
        # A valid request, padded past the bound: without it, the server answers id 7.
        pad = "x" * (MAX_WIRE_MESSAGE_BYTES + 1)
        proc.stdin.write(_request(7, "ping", {"pad": pad}))
        hello = {"protocolVersion": "2025-06-18", "capabilities": {}}
        proc.stdin.write(
            _request(1, "initialize", {**hello, "clientInfo": {"name": "t", "version": "1"}})
        )
        await proc.stdin.drain()
        answers = [await _answer(proc), await _answer(proc)]
        proc.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        proc.stdin.write(_request(2, "tools/list"))
        await proc.stdin.drain()
        answers.append(await _answer(proc))
        proc.stdin.close()
        code = await asyncio.wait_for(proc.wait(), WAIT)
        errors = (await proc.stderr.read()).decode()
    finally:
        if proc.returncode is None:
            proc.kill()
    return answers, errors, code


def test_mcp_serve_over_stdio_answers_an_oversized_line_and_serves_the_next(
    tmp_path: Path,
) -> None:
    agent = tmp_path / "echo.agent"
    agent.write_text(AGENT)
    (too_large, initialized, tools), errors, code = asyncio.run(
        _drive_with_an_oversized_line(agent)
    )
    assert too_large == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": TOO_LARGE_CODE,
            "message": TOO_LARGE_TEXT,
            "data": {"max_bytes": MAX_WIRE_MESSAGE_BYTES},
        },
    }
    assert TOO_LARGE_CODE == -32600 and TOO_LARGE_TEXT == "message too large"
    assert initialized["id"] == 1 and "serverInfo" in initialized["result"]
    assert tools["id"] == 2 and sorted(t["name"] for t in tools["result"]["tools"]) == [
        "ask",
        "send",
    ]
    logged = [line for line in errors.splitlines() if "MAX_WIRE_MESSAGE_BYTES" in line]
    assert len(logged) == 1 and "dropped a message of" in logged[0]
    assert code == 0


MALFORMED = [
    b"not json at all\n",
    b"[1,2]\n",
    b'{"jsonrpc":"2.0","id":2}\n',
    b'{"jsonrpc":"2.0","id":6,"method":"tools/call","params":"zzz"}\n',
    b'{"jsonrpc":"2.0","id":"six","method":"ping","params":[]}\n',
    b"   \n",  # a blank line is no message: passed over
    b'{"jsonrpc":"2.0","id":3,"result":5}\n',  # a malformed answer: logged, never answered
]


async def _drive_with_malformed_lines(agent: Path) -> tuple[list[dict[str, Any]], str, int]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *_arguments(agent, "http://127.0.0.1:9/v1"),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "OPENAI_API_KEY": "sk-test"},
    )
    assert proc.stdin is not None and proc.stderr is not None
    try:
        hello = {"protocolVersion": "2025-06-18", "capabilities": {}}
        proc.stdin.write(
            _request(1, "initialize", {**hello, "clientInfo": {"name": "t", "version": "1"}})
        )
        proc.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        proc.stdin.writelines([*MALFORMED, _request(7, "ping")])
        await proc.stdin.drain()
        answers = [await _answer(proc)]
        while answers[-1].get("id") != 7:  # the ping comes last: what is answered comes before
            answers.append(await _answer(proc))
        proc.stdin.close()
        code = await asyncio.wait_for(proc.wait(), WAIT)
        errors = (await proc.stderr.read()).decode()
    finally:
        if proc.returncode is None:
            proc.kill()
    return answers[1:-1], errors, code


def test_mcp_serve_over_stdio_answers_lines_that_are_not_json_rpc_messages(
    tmp_path: Path,
) -> None:
    # The SDK's transport hands such a line on as an exception and its dispatcher drops it: a
    # client waiting for id 6 waited for ever, and nothing was logged.
    agent = tmp_path / "echo.agent"
    agent.write_text(AGENT)
    answers, errors, code = asyncio.run(_drive_with_malformed_lines(agent))
    assert [(a["id"], a["error"]["code"]) for a in answers] == [
        (None, -32700),
        (None, -32600),
        (2, -32600),
        (6, -32600),
        ("six", -32600),
    ]
    assert answers[0]["error"]["message"].startswith("Parse error: Invalid JSON: ")
    assert answers[2]["error"]["message"] == "Invalid Request: method: Field required"
    assert answers[3]["error"]["message"].startswith("Invalid Request: params: ")
    logged = [line for line in errors.splitlines() if "malformed" in line]
    assert len(logged) == 6, errors  # one line each, the dropped answer's included
    assert "dropped a malformed answer (id 3)" in logged[-1]
    assert "not json at all" not in errors  # what was read is not logged
    assert code == 0
