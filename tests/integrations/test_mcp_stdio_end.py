"""``agentscript mcp-serve`` over stdio answers every request it read before stdin ended (a
file redirected to stdin, a client that closed its end), within ``--shutdown-grace``; and a
client that no longer reads stdout does not hold a stopped server."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import select
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from tests.fakes.llm_servers import OpenAIServer, Reply
from tests.integrations.test_mcp_serve import AGENT, _arguments
from tests.integrations.test_mcp_stdio_stop import HELLO, WAIT, _message, _request

from agentscript.commands import ExitCode
from agentscript.integrations.mcp_stdio import OwedAnswers, StdinReader, StdioStop
from agentscript.server.shutdown import ShutdownClock

CALL = {"name": "ask", "arguments": {"message": "1"}}
INITIALIZED = b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n'
# The stdout pipe's size in the test of a client that does not read it (Linux's default).
PIPE_BYTES = 64 * 1024


def _serve(
    agent: Path, model: OpenAIServer, *extra: str, **streams: Any
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, *_arguments(agent, model.base_url, *extra)],
        stderr=subprocess.PIPE,
        env={**os.environ, "OPENAI_API_KEY": "sk-test"},
        **streams,
    )


def test_mcp_serve_over_stdio_answers_every_request_of_a_file_before_it_ends(
    tmp_path: Path,
) -> None:
    agent = tmp_path / "echo.agent"
    agent.write_text(AGENT)
    requests = tmp_path / "requests.jsonl"
    # tools/list last: it comes while the call waits for the model, right before the end.
    requests.write_bytes(
        _request(1, "initialize", HELLO)
        + INITIALIZED
        + _request(2, "tools/call", CALL)
        + _request(3, "tools/list")
    )
    with OpenAIServer([Reply(text="Late answer.", delay=0.3)]) as model, requests.open() as stdin:
        proc = _serve(agent, model, stdin=stdin, stdout=subprocess.PIPE)
        try:
            out, errors = proc.communicate(timeout=WAIT)
        finally:
            if proc.returncode is None:
                proc.kill()
                proc.wait()
    answers = {answer["id"]: answer for answer in map(json.loads, out.splitlines())}
    assert proc.returncode == 0
    assert sorted(answers) == [1, 2, 3]  # the notification owes none
    assert answers[2]["result"]["structuredContent"]["text"] == "Late answer."
    assert [tool["name"] for tool in answers[3]["result"]["tools"]] == ["ask", "send"]
    assert b"cut" not in errors and b"Traceback" not in errors


def test_mcp_serve_over_stdio_exits_when_its_stdout_is_not_read_after_a_stop(
    tmp_path: Path,
) -> None:
    agent = tmp_path / "echo.agent"
    agent.write_text(AGENT)
    # An answer of twice its text (text and structured content), about 6 times the pipe: its
    # write blocks the SDK's stdout writer while the client reads nothing.
    huge = Reply(text="x" * 190_000)  # the engine's Limits.max_reply_chars is 200 000
    with OpenAIServer([huge]) as model:
        proc = _serve(
            agent, model, "--shutdown-grace", "0", stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        fcntl.fcntl(proc.stdout.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        try:
            proc.stdin.write(_request(1, "initialize", HELLO))
            proc.stdin.flush()
            assert json.loads(proc.stdout.readline())["id"] == 1
            proc.stdin.write(INITIALIZED + _request(2, "tools/call", CALL))
            proc.stdin.flush()
            # The pipe has bytes again: the writer began the answer it cannot finish.
            readable, _, _ = select.select([proc.stdout.fileno()], [], [], WAIT)
            assert readable
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=WAIT)  # before: it waited for that writer for good
        finally:
            if proc.returncode is None:
                proc.kill()
                proc.wait()
            proc.stdin.close()
        errors = proc.stderr.read().decode()
    assert code == 0
    assert errors.rstrip().endswith(
        "ERROR agentscript.mcp: shutdown: stdout is not read: "
        "exiting with answers unwritten after the 0 s grace"
    )


def _stop(owed: int, grace: float) -> StdioStop:
    """A stop of a server that read ``owed`` requests, not answered."""
    answers = OwedAnswers()
    for ident in range(owed):
        answers.read(_message(_request(ident, "tools/call", CALL)))
    tools: Any = None  # only a signal's drain refuses calls
    return StdioStop(tools, StdinReader(0), answers, grace)


@pytest.fixture(autouse=True)
def _no_shutdown_left() -> Any:
    yield
    ShutdownClock.reset()  # process-wide: no other test starts in a stop


def test_the_end_of_stdin_waits_for_the_answers_owed(caplog: pytest.LogCaptureFixture) -> None:
    stop = _stop(1, WAIT)

    async def scenario() -> list[str]:
        steps = []
        async with anyio.create_task_group() as tasks:

            async def end() -> None:
                await stop.stdin_ended()
                steps.append("end passed on")

            tasks.start_soon(end)
            await anyio.wait_all_tasks_blocked()
            steps.append("answered")
            stop.owed.sent(_message(b'{"jsonrpc": "2.0", "id": 0, "result": {}}'))
        return steps

    assert anyio.run(scenario) == ["answered", "end passed on"]
    assert stop.exit_code == ExitCode.OK and "cut" not in caplog.text


def test_the_end_of_stdin_cuts_past_the_grace_with_the_signals_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stop = _stop(2, 0.2)
    with caplog.at_level(logging.ERROR, "agentscript.mcp"):
        anyio.run(stop.stdin_ended)
    assert stop.exit_code == ExitCode.OK
    assert caplog.messages == ["shutdown: 2 turn(s) cut after the 0.2 s grace"]


async def _signal_while_waiting(stop: StdioStop, sig: signal.Signals, answer: bool) -> None:
    """``sig`` while the end of stdin waits for an answer owed, which comes if ``answer``."""
    async with anyio.create_task_group() as tasks:
        ended = anyio.Event()

        async def end() -> None:
            await stop.stdin_ended()
            ended.set()

        tasks.start_soon(end)
        await anyio.wait_all_tasks_blocked()
        stop.on_signal(sig, tasks)
        await anyio.wait_all_tasks_blocked()
        if answer:
            assert not ended.is_set()
            stop.owed.sent(_message(b'{"jsonrpc": "2.0", "id": 0, "result": {}}'))
        with anyio.fail_after(WAIT):
            await ended.wait()


def test_a_ctrl_c_while_the_end_of_stdin_waits_cuts_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stop = _stop(1, WAIT)
    with caplog.at_level(logging.ERROR, "agentscript.mcp"):
        anyio.run(_signal_while_waiting, stop, signal.SIGINT, False)
    assert stop.exit_code == ExitCode.INTERRUPTED
    assert caplog.messages == ["stopped at once: 1 request(s) cut"]


def test_a_sigterm_while_the_end_of_stdin_waits_changes_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # As a second SIGTERM during a signal's drain: it is stopping gracefully already.
    stop = _stop(1, WAIT)
    with caplog.at_level(logging.ERROR, "agentscript.mcp"):
        anyio.run(_signal_while_waiting, stop, signal.SIGTERM, True)
    assert stop.exit_code == ExitCode.OK
    assert caplog.messages == []
