"""``agentscript mcp-serve`` over stdio stops on a signal while its stdin stays open, as the
server over HTTP stops: the first ``SIGTERM`` or Ctrl-C lets the requests read get their
answer within ``--shutdown-grace`` (exit 0), a second Ctrl-C cuts them (exit 130)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from tests.fakes.llm_servers import OpenAIServer, Reply
from tests.integrations.test_mcp_serve import AGENT, _arguments

from agentscript.integrations.mcp_stdio import OwedAnswers, StdinReader

# Hangs are bounded by this, never timed.
WAIT = 30.0
HELLO = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "t", "version": "1"},
}


def _request(ident: int | str, method: str, params: dict[str, Any] | None = None) -> bytes:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": ident, "method": method}
    if params is not None:
        body["params"] = params
    return json.dumps(body).encode() + b"\n"


@dataclass
class Stopped:
    """What a client of a stopped ``mcp-serve`` saw: its answers, the log and the exit code."""

    answers: list[dict[str, Any]]
    errors: str
    code: int


async def _stop(
    agent: Path, model: OpenAIServer, signals: list[signal.Signals], *, call: bool, extra: list[str]
) -> Stopped:
    """Start ``mcp-serve``, initialize, make one ``ask`` call if ``call`` (the signals come once
    its model request is made), send ``signals`` while stdin stays open, and wait for it."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *_arguments(agent, model.base_url, *extra),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "OPENAI_API_KEY": "sk-test"},
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        proc.stdin.write(_request(1, "initialize", HELLO))
        await proc.stdin.drain()
        # Answered: the server reads stdin, its signal handlers are in place.
        answers = [json.loads(await asyncio.wait_for(proc.stdout.readline(), WAIT))]
        proc.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        if call:
            proc.stdin.write(
                _request(2, "tools/call", {"name": "ask", "arguments": {"message": "1"}})
            )
        await proc.stdin.drain()
        if call:
            with anyio.fail_after(WAIT):
                while not model.requests:
                    await asyncio.sleep(0.05)
        for sig in signals:
            proc.send_signal(sig)
            await asyncio.sleep(0.2)  # handled one at a time, as a user would press them
        code = await asyncio.wait_for(proc.wait(), WAIT)
        out = await proc.stdout.read()
        answers += [json.loads(line) for line in out.splitlines()]
        return Stopped(answers, (await proc.stderr.read()).decode(), code)
    finally:
        if proc.returncode is None:
            proc.kill()
        proc.stdin.close()


def _run(
    tmp_path: Path,
    signals: list[signal.Signals],
    *,
    delay: float | None = None,
    extra: tuple[str, ...] = (),
) -> Stopped:
    """A real ``mcp-serve`` stopped by ``signals``; with ``delay``, while one ``ask`` waits
    that long for the model."""
    agent = tmp_path / "echo.agent"
    agent.write_text(AGENT)
    script = [] if delay is None else [Reply(text="Late answer.", delay=delay)]
    with OpenAIServer(script) as model:
        return asyncio.run(_stop(agent, model, signals, call=delay is not None, extra=list(extra)))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_mcp_serve_over_stdio_stops_on_a_signal_while_stdin_stays_open(
    tmp_path: Path, sig: signal.Signals
) -> None:
    stopped = _run(tmp_path, [sig])
    # As `serve` and mcp-serve over HTTP: a graceful stop, even by Ctrl-C, exits 0.
    assert stopped.code == 0
    assert "Traceback" not in stopped.errors and "Aborted" not in stopped.errors
    assert [answer["id"] for answer in stopped.answers] == [1]


def test_mcp_serve_over_stdio_answers_the_running_call_on_sigterm(tmp_path: Path) -> None:
    # The model answers after the signal: the call runs through the shutdown.
    stopped = _run(tmp_path, [signal.SIGTERM], delay=0.5)
    assert stopped.code == 0
    call = stopped.answers[-1]
    assert call["id"] == 2 and call["result"]["structuredContent"]["text"] == "Late answer."
    assert "Traceback" not in stopped.errors and "cut" not in stopped.errors


def test_mcp_serve_over_stdio_cuts_the_running_call_on_a_second_ctrl_c(tmp_path: Path) -> None:
    stopped = _run(tmp_path, [signal.SIGINT, signal.SIGINT], delay=WAIT)
    assert stopped.code == 130
    call = stopped.answers[-1]
    assert call["id"] == 2 and call["error"]["message"] == "Connection closed"
    cut = [line for line in stopped.errors.splitlines() if "cut" in line]
    assert len(cut) == 1 and cut[0].endswith(
        "ERROR agentscript.mcp: stopped at once: 1 request(s) cut"
    )
    assert "Traceback" not in stopped.errors


def test_mcp_serve_over_stdio_cuts_a_call_past_the_shutdown_grace(tmp_path: Path) -> None:
    stopped = _run(tmp_path, [signal.SIGTERM], delay=WAIT, extra=("--shutdown-grace", "1"))
    assert stopped.code == 0
    assert stopped.answers[-1]["error"]["message"] == "Connection closed"
    cut = [line for line in stopped.errors.splitlines() if "cut" in line]
    assert len(cut) == 1 and cut[0].endswith("shutdown: 1 turn(s) cut after the 1 s grace")


def _pipe() -> Iterator[tuple[int, int]]:
    read, write = os.pipe()
    try:
        yield read, write
    finally:
        os.close(read)
        os.close(write)


def test_stdin_reader_waits_on_the_loop_and_ends_when_held_and_ended() -> None:
    async def scenario(read_fd: int, write_fd: int) -> tuple[bytes, bytes]:
        reader = StdinReader(read_fd)
        os.write(write_fd, b"one\n")
        first = await reader.read()
        async with anyio.create_task_group() as tasks:
            got: list[bytes] = []

            async def read_next() -> None:
                got.append(await reader.read())

            tasks.start_soon(read_next)
            await anyio.wait_all_tasks_blocked()  # it waits for the pipe, on no thread
            reader.hold()
            os.write(write_fd, b"two\n")  # held: left in the pipe
            await anyio.wait_all_tasks_blocked()
            assert got == []
            reader.end()
        return first, got[0]

    for read_fd, write_fd in _pipe():
        first, last = anyio.run(scenario, read_fd, write_fd)
        assert (first, last) == (b"one\n", b"")
        assert os.read(read_fd, 100) == b"two\n"


def test_stdin_reader_reads_a_file_the_loop_cannot_watch(tmp_path: Path) -> None:
    data = tmp_path / "requests.jsonl"
    data.write_bytes(b"x" * 100_000)  # two reads

    async def read_all(fd: int) -> bytes:
        reader, out = StdinReader(fd), b""
        while chunk := await reader.read():
            out += chunk
        return out

    fd = os.open(data, os.O_RDONLY)
    try:
        assert anyio.run(read_all, fd) == b"x" * 100_000
    finally:
        os.close(fd)


def _message(line: bytes) -> Any:
    from mcp.shared.message import SessionMessage
    from mcp_types import jsonrpc_message_adapter

    return SessionMessage(jsonrpc_message_adapter.validate_json(line, by_name=False))


def test_owed_answers_count_requests_until_answered_or_cancelled() -> None:
    owed = OwedAnswers()
    owed.read(_message(_request(7, "tools/call", {"name": "ask"})))
    owed.read(_message(_request("8", "ping")))
    owed.read(_message(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}'))
    assert len(owed) == 2
    owed.sent(_message(b'{"jsonrpc": "2.0", "id": "7", "result": {}}'))  # "7" is 7
    assert len(owed) == 1
    cancel = {"method": "notifications/cancelled", "params": {"requestId": 8}}
    owed.read(_message(json.dumps({"jsonrpc": "2.0", **cancel}).encode()))
    assert len(owed) == 0  # the SDK never answers a cancelled request
    owed.sent(_message(b'{"jsonrpc": "2.0", "id": null, "error": {"code": 1, "message": "x"}}'))
    assert len(owed) == 0
