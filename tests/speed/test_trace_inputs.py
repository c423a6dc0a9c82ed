"""Issue 10: an ``LLM_STEP`` records only the messages added since the session's previous LLM
call (``input.messagesFrom`` names where they start), and the full input the model received
can be rebuilt exactly from the trace files, in Python and with the documented jq recipe."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tests.fakes.tour import AGENT, TURNS

import agentscript
from agentscript.models.base import ModelRequest, ModelResponse, TextSink
from agentscript.models.scripted import Move, ScriptedModel
from agentscript.trace_inputs import rebuild_messages


class Witness:
    """Delegates to a scripted model and keeps, per call, the messages it was given."""

    def __init__(self, inner: ScriptedModel) -> None:
        self.inner = inner
        self.received: list[list[dict[str, Any]]] = []

    async def complete(
        self, request: ModelRequest, stream: TextSink | None = None
    ) -> ModelResponse:
        self.received.append([m.to_json() for m in request.messages])
        return await self.inner.complete(request, stream=stream)


def play(tmp_path: Path) -> tuple[Witness, list[dict[str, Any]], list[Path]]:
    path = tmp_path / "a.agent"
    path.write_text(AGENT, encoding="utf-8")
    agent = agentscript.load(path)
    witness = Witness(ScriptedModel())
    session = agent.session(
        model=witness,
        actions={"lookup": lambda ref: {"status": f"{ref} late"}},
        trace_dir=tmp_path / "traces",
    )
    traces, files = [], []
    for moves in TURNS:
        witness.inner.begin_turn(moves)
        reply = session.send("next")
        assert reply.error is None, reply.error
        assert reply.trace_file is not None
        traces.append(reply.trace)
        files.append(Path(reply.trace_file))
    return witness, traces, files


def test_llm_steps_record_only_new_messages_and_where_they_start(tmp_path: Path) -> None:
    witness, traces, _ = play(tmp_path)
    steps = [s for t in traces for s in t["planTrace"]["steps"] if s["type"] == "LLM_STEP"]
    assert len(steps) == len(witness.received) >= 10
    assert steps[0]["input"]["messagesFrom"] == 0
    for step, before, now in zip(steps[1:], witness.received, witness.received[1:], strict=False):
        start = step["input"]["messagesFrom"]
        assert now[:start] == before[:start]  # the part left out was in the previous call
        assert step["input"]["messages"] == now[start:]
        assert len(step["input"]["messages"]) <= 4  # a delta, never the whole history
    # system and instructions stay complete in every step.
    assert all(s["input"]["system"] == "Be brief." and s["input"]["instructions"] for s in steps)


def test_the_full_input_is_rebuilt_from_trace_files_exactly(tmp_path: Path) -> None:
    witness, _, files = play(tmp_path)
    documents = [json.loads(f.read_text(encoding="utf-8")) for f in files]
    assert rebuild_messages(documents) == witness.received


JQ_RECIPE = (Path(__file__).resolve().parents[2] / "docs" / "tracing.md").read_text(
    encoding="utf-8"
)


def jq_program() -> str:
    """The rebuild recipe exactly as docs/tracing.md shows it (between the marker lines)."""
    block = JQ_RECIPE.split("<!-- rebuild-recipe -->")[1]
    command = block.split("```sh\n", 1)[1].split("```", 1)[0]
    return command.split("'", 1)[1].rsplit("'", 1)[0]


@pytest.mark.skipif(shutil.which("jq") is None, reason="install jq to check the jq recipe")
def test_the_documented_jq_recipe_rebuilds_the_same_inputs(tmp_path: Path) -> None:
    witness, _, files = play(tmp_path)
    done = subprocess.run(
        ["jq", "-s", jq_program(), *map(str, files)],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    rebuilt = json.loads(done.stdout)
    assert [step["messages"] for step in rebuilt] == witness.received
    assert all("messagesFrom" not in step for step in rebuilt)


@pytest.mark.skipif(shutil.which("jq") is None, reason="install jq to check the jq recipe")
def test_the_documented_jq_recipe_rebuilds_trimmed_and_restored_sessions(tmp_path: Path) -> None:
    """Restored before every turn, its history trimmed (``input.messagesDropped``)."""
    from agentscript.limits import Limits

    path = tmp_path / "a.agent"
    path.write_text(AGENT, encoding="utf-8")
    agent = agentscript.load(path)
    witness = Witness(ScriptedModel())
    limits = Limits(max_history_chars=3000)
    options: dict[str, Any] = {
        "model": witness,
        "actions": {"lookup": lambda ref: {"status": f"{ref} late"}},
        "trace_dir": tmp_path / "traces",
        "limits": limits,
    }
    session = agent.session(**options)
    files = []
    for number in range(20):
        if number:
            session = agent.restore(json.dumps(session.to_json()), **options)
        witness.inner.begin_turn(TURNS[number % len(TURNS)])
        reply = session.send(f"{number} " + "x" * 300)
        assert reply.error is None and reply.trace_file is not None
        files.append(reply.trace_file)
    steps = [json.loads(Path(f).read_text(encoding="utf-8")) for f in files]
    assert any(
        s["input"].get("messagesDropped") for t in steps for s in t["planTrace"]["steps"]
        if s["type"] == "LLM_STEP"
    )  # fmt: skip
    done = subprocess.run(
        ["jq", "-s", jq_program(), *files[::-1]],  # any order: the recipe sorts by turn
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    rebuilt = json.loads(done.stdout)
    assert [step["messages"] for step in rebuilt] == witness.received
    assert all("messagesFrom" not in s and "messagesDropped" not in s for s in rebuilt)


def test_a_restored_session_goes_on_from_the_previous_call_its_state_names(
    tmp_path: Path,
) -> None:
    """The saved state says which of its history's messages the previous call was given
    (``llm_input``), so the restored session's first step is a delta as a live one's is."""
    play(tmp_path)  # writes the agent file
    agent = agentscript.load(tmp_path / "a.agent")
    first = agent.session(model=ScriptedModel([Move(text="one")]))
    one = first.send("hello")
    saved = first.to_json()
    assert saved["llm_input"]["messages"] == 1  # ["hello"]; "one" is its answer
    again = agent.restore(saved, model=ScriptedModel([Move(text="two")]))
    reply = again.send("more")
    [step] = [s for s in reply.trace["planTrace"]["steps"] if s["type"] == "LLM_STEP"]
    assert step["input"]["messagesFrom"] == 1
    assert [m["content"] for m in step["input"]["messages"]] == ["one", "more"]
    [_, full] = rebuild_messages([one.trace, reply.trace])
    assert [m["content"] for m in full] == ["hello", "one", "more"]


def test_a_restored_session_whose_history_was_changed_starts_with_a_complete_step(
    tmp_path: Path,
) -> None:
    play(tmp_path)  # writes the agent file
    agent = agentscript.load(tmp_path / "a.agent")
    first = agent.session(model=ScriptedModel([Move(text="one")]))
    first.send("hello")
    saved = first.to_json()
    saved["history"][0]["content"] = "hello, edited"
    again = agent.restore(saved, model=ScriptedModel([Move(text="two")]))
    reply = again.send("more")
    [step] = [s for s in reply.trace["planTrace"]["steps"] if s["type"] == "LLM_STEP"]
    assert step["input"]["messagesFrom"] == 0
    assert [m["content"] for m in step["input"]["messages"]] == ["hello, edited", "one", "more"]


def test_the_history_checks_read_only_new_messages_so_a_turn_costs_the_same_at_turn_40(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Flat per-turn cost, pinned by counting (never timing): the messages the size cap and
    the answered-calls check read per turn, and no full scan of the history in a plain turn."""
    from agentscript.engine import history, kernel

    read = [0]
    real_chars = history.message_chars

    def counting_chars(message: Any) -> int:
        read[0] += 1
        return real_chars(message)

    def no_full_scan(messages: Any) -> Any:
        raise AssertionError("a full scan of the history in a plain turn")

    monkeypatch.setattr(history, "message_chars", counting_chars)
    monkeypatch.setattr(kernel, "unanswered_calls", no_full_scan)
    path = tmp_path / "a.agent"
    path.write_text(AGENT, encoding="utf-8")
    model = ScriptedModel()
    session = agentscript.load(path).session(
        model=model, actions={"lookup": lambda ref: {"status": f"{ref} late"}}
    )
    per_turn = []
    for _ in range(40):
        model.begin_turn([Move(calls=[("look", {"ref": "A"})]), Move(text="A is late.")])
        read[0] = 0
        assert session.send("next").error is None
        per_turn.append(read[0])
    assert len(session.state.history) >= 160
    assert per_turn[1] == per_turn[39] <= 8
