"""``--trace-dir`` that cannot be written: ``run`` and ``chat`` refuse it before the first turn,
and a trace file that fails mid-session (a full disk) loses no turn: the reply stands, names no
trace file, and the session says why once (``EVENT_STEP`` ``trace_not_written``)."""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

import agentscript
from agentscript.chat import run_chat
from agentscript.cli import main
from agentscript.models.base import ModelRequest, ModelResponse, TextSink
from agentscript.trace import TurnTrace

SHOP = Path(__file__).parent / "agents_models" / "shop.agent"
ORDER_AGENT = (
    Path(__file__).resolve().parents[1] / "examples" / "order_status" / "order_status.agent"
)
ORDER_CONVERSATION = ORDER_AGENT.parent / "late_order.yaml"


class Says:
    """A model that answers every request with the next text (no streaming)."""

    name = "says:test"

    def __init__(self, *texts: str) -> None:
        self.texts = list(texts)

    async def complete(
        self, request: ModelRequest, *, stream: TextSink | None = None
    ) -> ModelResponse:
        return ModelResponse(text=self.texts.pop(0))


def invoke(*args: str | Path, input: str | None = None) -> Result:
    result = CliRunner().invoke(main, [str(a) for a in args], input=input)
    assert "Traceback" not in result.output + result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


@pytest.fixture
def under_a_file(tmp_path: Path) -> Path:
    """A --trace-dir that cannot be created: its parent is a regular file."""
    (tmp_path / "afile").write_text("not a folder\n", encoding="utf-8")
    return tmp_path / "afile" / "traces"


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every trace file write fails as on a full disk; the list counts the attempts."""
    attempts: list[int] = []

    def write(self: TurnTrace, directory: Path) -> Path:
        attempts.append(self.turn)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(TurnTrace, "write", write)
    return attempts


def not_written(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        step
        for step in trace["planTrace"]["steps"]
        if step["type"] == "EVENT_STEP" and step["event"] == "trace_not_written"
    ]


# ---------------------------------------------------------------------- checked up front


def test_run_refuses_a_trace_dir_it_cannot_write(under_a_file: Path) -> None:
    result = invoke(
        "run", ORDER_AGENT, "--conversation", ORDER_CONVERSATION, "--trace-dir", under_a_file
    )
    assert result.exit_code == 2
    assert result.stderr == f"--trace-dir {under_a_file}: cannot write traces: Not a directory\n"
    assert result.stdout == ""


def test_chat_refuses_a_trace_dir_it_cannot_write(tmp_path: Path, under_a_file: Path) -> None:
    record = tmp_path / "chat.yaml"
    result = invoke(
        "chat",
        SHOP,
        "--model",
        "openai:gpt-test",
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--trace-dir",
        under_a_file,
        "--record",
        record,
        input="hi\n",
    )
    assert result.exit_code == 2
    assert result.stderr == f"--trace-dir {under_a_file}: cannot write traces: Not a directory\n"
    assert result.stdout == ""
    assert not record.exists()


def test_run_creates_a_missing_trace_dir(tmp_path: Path) -> None:
    traces = tmp_path / "new" / "traces"
    result = invoke("run", ORDER_AGENT, "--conversation", ORDER_CONVERSATION, "--trace-dir", traces)
    assert result.exit_code == 0, result.output
    assert list(traces.rglob("*.json"))
    assert not list(traces.glob(".agentscript-check*"))  # the write check leaves nothing


# ---------------------------------------------------------------------- failing mid-session


def test_a_trace_that_cannot_be_written_does_not_lose_the_turn(
    tmp_path: Path, full_disk: list[int]
) -> None:
    session = agentscript.load(SHOP).session(model=Says("One.", "Two."), trace_dir=tmp_path)

    first = session.send("hi")
    second = session.send("again")

    assert full_disk == [1, 2]  # each turn tried
    assert (first.error, first.text, first.trace_file) == (None, "One.", None)
    assert (second.error, second.text, second.trace_file) == (None, "Two.", None)
    [event] = not_written(first.trace)
    assert event["reason"] == (
        f"cannot write the trace file under {tmp_path}: No space left on device"
    )
    assert not_written(second.trace) == []  # reported once, not every turn


def test_a_trace_failure_is_reported_again_after_a_trace_was_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = TurnTrace.write
    failing = {1, 3}

    def write(self: TurnTrace, directory: Path) -> Path:
        if self.turn in failing:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(self, directory)

    monkeypatch.setattr(TurnTrace, "write", write)
    session = agentscript.load(SHOP).session(model=Says("1", "2", "3"), trace_dir=tmp_path)
    replies = [session.send(text) for text in ("a", "b", "c")]

    assert [r.trace_file is not None for r in replies] == [False, True, False]
    assert [len(not_written(r.trace)) for r in replies] == [1, 0, 1]


def test_chat_records_a_turn_whose_trace_could_not_be_written(
    tmp_path: Path, full_disk: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    record = tmp_path / "chat.yaml"
    code = run_chat(
        agentscript.load(SHOP),
        model=Says("One.", "Two."),
        interactive=False,
        lines=["hi", "again"],
        trace_dir=tmp_path / "traces",
        record=record,
    )

    captured = capsys.readouterr()
    assert code == 0
    assert captured.out == "One.\n\nTwo.\n\n"
    assert captured.err.count("cannot write the trace file") == 1
    assert "internal error" not in captured.err
    turns = yaml.safe_load(record.read_text(encoding="utf-8"))["turns"]
    assert [t["user"] for t in turns] == ["hi", "again"]


def test_run_transcript_says_a_trace_was_not_written(tmp_path: Path, full_disk: list[int]) -> None:
    result = invoke(
        "run", ORDER_AGENT, "--conversation", ORDER_CONVERSATION, "--trace-dir", tmp_path
    )
    assert result.exit_code == 0, result.output
    assert full_disk
    assert result.stdout.count("warning:   cannot write the trace file") == 1
    assert "  trace:  " not in result.stdout


def test_run_json_says_on_stderr_that_a_trace_was_not_written(
    tmp_path: Path, full_disk: list[int]
) -> None:
    result = invoke(
        "run", ORDER_AGENT, "--conversation", ORDER_CONVERSATION, "--json", "--trace-dir", tmp_path
    )
    assert result.exit_code == 0, result.output
    assert result.stderr == (
        f"warning: cannot write the trace file under {tmp_path}: No space left on device\n"
    )
    assert all(turn["trace_file"] is None for turn in json.loads(result.stdout)["turns"])
