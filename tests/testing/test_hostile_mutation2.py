"""``--mutate`` on hostile folders: a symlink loop is copied as a link (not followed into itself),
mutants are never written through a link into the user's files, and mutation runs never write
the real spec's recording nor a snapshot."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest
from helpers import LIVE_ENV as ENV
from helpers import LIVE_SPEC, ORDER_STUBS, run_test

from agentscript.testing import command, mutation
from agentscript.testing.discovery import AgentCache
from agentscript.testing.readers import read_spec
from agentscript.testing.results import Status
from fakes.llm_servers import FakeCall, OpenAIServer, Reply

# A snapshot of what the subagent %s was shown. With escalate_order, no snapshot can exist: the
# unmutated agent routes "Where is my order?" to Order_Management, and only a mutant whose
# transition goes to escalate_order gets there.
SNAPSHOT_SPEC = (
    "name: Snap\n"
    + ORDER_STUBS
    + """testCases:
  - utterance: "Where is my order?"
    x-agentscript:
      assert: [{instructions_snapshot: {name: shown, node: %s}}]
      model:
        - tool: go_to_orders
        - say: "ok"
"""
)


def test_mutate_copies_a_symlink_loop_as_a_link(order_copy: Path) -> None:
    (order_copy / "sub").mkdir()
    (order_copy / "sub" / "up").symlink_to("..")
    spec = order_copy / "specs" / "Order_Status-testSpec.yaml"
    agent = order_copy / "order_status.agent"
    code, out, err = run_test(str(spec), "--agent", str(agent), "--mutate")
    assert code == 0, out + err
    assert "Traceback" not in out + err
    assert "mutation testing of" in out and "mutation score" in out
    assert (order_copy / "sub" / "up").is_symlink()


def test_mutant_is_not_written_through_a_linked_skill_file(
    tmp_path: Path, card_bank_copy: Path
) -> None:
    project = card_bank_copy
    real = tmp_path / "shared_skill.md"
    skill = project / "skills" / "card_replace" / "skill.md"
    shutil.move(skill, real)
    skill.symlink_to(real)
    before = real.read_bytes()
    code, out, err = run_test(str(project / "conversations"), "--mutate")
    assert code == 0, out + err
    assert "Traceback" not in out + err
    assert "mutation testing of" in out and "killed" in out
    assert real.read_bytes() == before
    assert skill.is_symlink()


def test_mutation_runs_do_not_write_the_real_recording(order_copy: Path) -> None:
    spec = order_copy / "live.yaml"
    spec.write_text(LIVE_SPEC, encoding="utf-8")
    turn = [Reply(calls=[FakeCall.of("go_to_orders", {})]), Reply(text="February 10.")]
    with OpenAIServer(turn) as server:
        code, _, err = run_test(
            str(spec), "--record", "--model", "openai:m", "--base-url", server.base_url, env=ENV
        )
    assert code == 0, err
    recording = order_copy / "live.yaml.replay.json"
    before = recording.read_bytes()
    # Mutants that reach an unrecorded call ask the live model: those answers must stay out.
    with OpenAIServer([Reply(text="mutant answer") for _ in range(100)]) as server:
        code, out, err = run_test(
            str(spec), "--mutate", "--model", "openai:m", "--base-url", server.base_url, env=ENV
        )
        asked = len(server.requests)
    assert code == 0, out + err
    assert "mutation testing of" in out
    assert asked > 0  # the mutants did reach the live model
    assert recording.read_bytes() == before
    assert "mutant answer" not in json.dumps(json.loads(before))


def test_mutation_run_never_writes_a_missing_snapshot(
    order_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = order_copy / "snap.yaml"
    spec.write_text(SNAPSHOT_SPEC % "escalate_order", encoding="utf-8")
    # The unmutated agent never reaches escalate_order, so the command does not run mutants
    # for this suite at all (test_coverage_mutation.py), and neither does _mutation_run (its
    # unmutated copy fails the same way).
    code, _out, err = run_test(str(spec), "--mutate")
    assert code == 1 and "not run: 1 case(s) do not pass" in err
    (agent,) = order_copy.glob("*.agent")
    options = command.TestOptions(paths=[spec])
    with pytest.raises(mutation.UnmutatedCopyFails):
        asyncio.run(command._mutation_run(agent, [read_spec(spec)], options))
    assert not (order_copy / "snap.yaml.snapshots").exists()
    # The mutants' own runs, made to run past that check, must not write the snapshot either.
    real = mutation.run_mutants

    async def past_the_unmutated_copy(
        path: Path, mutants: list[mutation.Mutant], suite_fails: mutation.RunSuite
    ) -> None:
        copies: list[Path] = []

        async def fails(copy: Path) -> bool:
            copies.append(copy)
            return len(copies) > 1 and await suite_fails(copy)

        await real(path, mutants, fails)

    monkeypatch.setattr(mutation, "run_mutants", past_the_unmutated_copy)
    report = asyncio.run(command._mutation_run(agent, [read_spec(spec)], options))
    assert "mutation testing of" in report and "killed" in report
    assert not (order_copy / "snap.yaml.snapshots").exists()


def test_missing_snapshot_fails_its_check_in_a_read_only_run(order_copy: Path) -> None:
    spec = order_copy / "snap.yaml"
    spec.write_text(SNAPSHOT_SPEC % "Order_Management", encoding="utf-8")
    suites = [read_spec(spec)]
    options = command.TestOptions(paths=[spec])
    run = asyncio.run(command.run_suites(suites, AgentCache(), options, read_only=True))
    case = run.cases[0]
    assert case.status() is Status.FAILURE
    assert "does not exist and this run does not write snapshots" in case.verdicts[0].explanation
    assert not (order_copy / "snap.yaml.snapshots").exists()
    # The same spec's ordinary run records the snapshot (its first run) and passes.
    code, out, _ = run_test(str(spec))
    assert code == 0, out
    assert (order_copy / "snap.yaml.snapshots" / "shown.txt").is_file()
