"""The LLM judge against a local stand-in OpenAI server, recorded replays going stale when the
agent changes, and a Mantle scenario whose user is played by a model."""

from __future__ import annotations

import json
from datetime import UTC, datetime, tzinfo
from pathlib import Path

import pytest
from conftest import write_scenario
from helpers import LIVE_ENV as ENV
from helpers import LIVE_SPEC, run_json, run_test
from helpers import LIVE_TURN as TURN

from agentscript.mantle.run import prompt
from fakes.llm_servers import OpenAIServer, Reply


def record(path: Path, script: list[Reply], *options: str) -> tuple[int, str]:
    """``agentscript test PATH --record`` with a fake model server answering ``script``
    (``openai:m``): the exit code and what went to stderr."""
    with OpenAIServer(script) as server:
        code, _, err = run_test(
            str(path), "--record", "--model", "openai:m", "--base-url", server.base_url,
            *options, env=ENV,
        )  # fmt: skip
    return code, err


def _outcome_spec(order_copy: Path) -> Path:
    spec = order_copy / "specs" / "Order_Status-testSpec.yaml"
    text = spec.read_text(encoding="utf-8")
    spec.write_text(
        text.replace(
            "    expectedTopic: Order_Management\n",
            "    expectedTopic: Order_Management\n"
            "    expectedOutcome: The agent gives the delivery date and apologises.\n",
            1,
        ),
        encoding="utf-8",
    )
    return spec


def _judge(score: float, why: str = "ok") -> Reply:
    return Reply(text=json.dumps({"score": score, "reasoning": why}))


def test_judge_verdict_saves_prompt_model_score_threshold_and_reasoning(order_copy: Path) -> None:
    spec = _outcome_spec(order_copy)
    with OpenAIServer([_judge(0.9, "Date given, apology made.")]) as server:
        code, data = run_json(
            str(spec),
            "-k",
            "order",
            "--judge",
            "openai:judge-test",
            "--base-url",
            server.base_url,
            env=ENV,
        )
        asked = server.requests[0].body
    assert code == 0
    verdict = next(r for r in data["testCases"][0]["testResults"] if r["judged"])
    assert verdict["name"] == "bot_response_rating" and verdict["result"] == "PASS"
    judge = verdict["judge"]
    assert judge["model"] == "openai:judge-test" or "judge-test" in judge["model"]
    assert judge["score"] == 0.9 and judge["threshold"] == 0.6
    assert judge["reasoning"] == "Date given, apology made."
    assert "apologises" in judge["prompt"]["user"]
    assert "February 10, 2026" in judge["prompt"]["user"]
    assert asked["model"] == "judge-test"


def test_judged_failure_blocks_only_with_judge_blocking(order_copy: Path) -> None:
    spec = _outcome_spec(order_copy)
    with OpenAIServer([_judge(0.2, "no apology")]) as server:
        code, _, out = run_test(
            str(spec), "-k", "order", "--judge", "openai:j", "--base-url", server.base_url, env=ENV
        )
    assert code == 0
    with OpenAIServer([_judge(0.2, "no apology")]) as server:
        code, out, _ = run_test(
            str(spec),
            "-k",
            "order",
            "--judge",
            "openai:j",
            "--base-url",
            server.base_url,
            "--judge-blocking",
            env=ENV,
        )
    assert code == 1
    assert "no apology" in out


def test_judge_runs_k_times_and_reports_the_pass_rate(order_copy: Path) -> None:
    spec = _outcome_spec(order_copy)
    with OpenAIServer([_judge(0.9), _judge(0.1, "bad"), _judge(0.8)]) as server:
        _, data = run_json(
            str(spec),
            "-k",
            "order",
            "--judge",
            "openai:j",
            "--judge-runs",
            "3",
            "--base-url",
            server.base_url,
            env=ENV,
        )
    verdict = next(r for r in data["testCases"][0]["testResults"] if r["judged"])
    assert verdict["judge"]["passRate"] == 2 / 3
    assert [r["passed"] for r in verdict["judge"]["runs"]] == [True, False, True]
    assert verdict["result"] == "PASS"


def test_unparsable_judge_answer_is_a_failed_verdict_not_a_crash(order_copy: Path) -> None:
    spec = _outcome_spec(order_copy)
    with OpenAIServer([Reply(text="looks fine to me")]) as server:
        _, data = run_json(
            str(spec), "-k", "order", "--judge", "openai:j", "--base-url", server.base_url, env=ENV
        )
    verdict = next(r for r in data["testCases"][0]["testResults"] if r["judged"])
    assert verdict["result"] == "FAILURE"
    assert "did not answer with JSON" in verdict["metricExplainability"]


def test_recording_goes_stale_when_a_prompt_changes_and_refresh_rerecords_only_it(
    order_copy: Path,
) -> None:
    spec = order_copy / "live.yaml"
    spec.write_text(LIVE_SPEC, encoding="utf-8")
    code, _ = record(spec, list(TURN))
    assert code == 0
    recording = json.loads((order_copy / "live.yaml.replay.json").read_text(encoding="utf-8"))
    assert sorted(recording["calls"]) == [
        "Live/Test Case #1|1|Order_Management|0",
        "Live/Test Case #1|1|router|0",
    ]
    agent = order_copy / "order_status.agent"
    agent.write_text(
        agent.read_text(encoding="utf-8").replace(
            "Route the customer's request.", "Route every request."
        ),
        encoding="utf-8",
    )
    code, out, _ = run_test(str(spec), "--no-fail-on-assertion", env=ENV)
    assert code == 1  # a stale recording is an error, not an assertion failure
    assert "ERROR   " in out and "is stale" in out
    assert "STALE recording Live/Test Case #1|1|router|0" in out
    assert "-Route the customer's request." in out and "+Route every request." in out
    with OpenAIServer([TURN[0]]) as server:
        code, out, _ = run_test(
            str(spec),
            "--refresh-stale",
            "--model",
            "openai:m",
            "--base-url",
            server.base_url,
            env=ENV,
        )
        assert len(server.requests) == 1  # only the stale router call went live
    assert code == 0, out
    # Said as done, not as a failure (it printed "STALE recording ..." as in a failed run).
    assert "STALE" not in out
    assert "re-recorded Live/Test Case #1|1|router|0 (its prompt changed" in out
    assert "+Route every request." in out
    code, _, _ = run_test(str(spec), env=ENV)
    assert code == 0


def test_mantle_scenario_user_played_by_a_model(card_bank_copy: Path) -> None:
    scenarios = write_scenario(
        card_bank_copy,
        "greet.yml",
        """scenario:
  name: Greeting
  simulation_context: You are a customer who just says hello.
  max_turns: 3
  goals:
    criteria: [The agent greets the customer.]
    assertions:
      - bot_uttered: {text_matches: "Hello there"}
      - tool_not_executed: {tool_name: order_replacement}
""",
    ).parent
    script = [
        Reply(text="Hi!"),  # the simulated user
        Reply(text="Hello there, how can I help?"),  # the agent
        Reply(text="###STOP###"),  # the simulated user is done
        _judge(1.0, "greeted"),  # the criterion
    ]
    with OpenAIServer(script) as server:
        code, data = run_json(
            str(scenarios),
            "--model",
            "openai:m",
            "--base-url",
            server.base_url,
            "--judge-blocking",
            env=ENV,
        )
    case = data["testCases"][0]
    assert code == 0, json.dumps(case, indent=1)
    assert [r["name"] for r in case["testResults"]] == [
        "criterion",
        "bot_uttered",
        "tool_not_executed",
    ]
    assert case["inputs"]["utterance"] == "Hi!"


def test_a_case_with_no_recording_and_no_model_is_an_error(order_copy: Path) -> None:
    spec = order_copy / "live.yaml"
    spec.write_text(LIVE_SPEC, encoding="utf-8")
    code, data = run_json(str(spec), env=ENV)
    assert code == 1
    case = data["testCases"][0]
    assert case["status"] == "ERROR"
    assert "no recorded answer for call Live/Test Case #1|1|router|0" in case["errorMessage"]


def test_two_criteria_on_one_line_are_recorded_apart_and_replay(card_bank_copy: Path) -> None:
    # `criteria: [a, b]` puts both criteria on one line, so both had the key criterion#6: the
    # second's answer replaced the first's and replaying found that call stale. The first
    # keeps the plain key (recordings made before still replay), the second is `#6 #2`.
    scenarios = write_scenario(
        card_bank_copy,
        "two.yml",
        """scenario:
  name: Two
  simulation_context: You are a customer who just says hello.
  max_turns: 3
  goals:
    criteria: [The agent greets the user., The agent tells the balance.]
""",
    ).parent
    script = [
        Reply(text="Hi!"),  # the simulated user
        Reply(text="Hello there, how can I help?"),  # the agent
        Reply(text="###STOP###"),
        _judge(1.0, "greeted"),
        _judge(0.9, "balance told"),
    ]
    code, _ = record(scenarios, script, "--judge-blocking")
    assert code == 0
    calls = json.loads((scenarios / "two.yml.replay.json").read_text(encoding="utf-8"))["calls"]
    assert sorted(k for k in calls if "|judge|" in k) == [
        "Two/Two|1|judge|criterion#6 #2|0",
        "Two/Two|1|judge|criterion#6|0",
    ]
    code, data = run_json(str(scenarios), "--judge-blocking", env=ENV)  # replayed, no model
    case = data["testCases"][0]
    assert code == 0, json.dumps(case, indent=1)
    judged = [r for r in case["testResults"] if r["judged"]]
    assert [(r["result"], r["judge"]["reasoning"]) for r in judged] == [
        ("PASS", "greeted"),
        ("PASS", "balance told"),
    ]


def test_two_rating_steps_without_id_are_recorded_apart_and_replay(order_copy: Path) -> None:
    # Format C steps without an `id` take their test's line: two ratings shared one key.
    spec = order_copy / "eval.json"
    rating = {"type": "evaluator.bot_response_rating", "threshold": 3.0}
    spec.write_text(
        json.dumps(
            {
                "x-agentscript": {"actions": {
                    "get_delivery_date": {"outputs": {"delivery_date": "February 10, 2026"}},
                    "check_if_late": {"outputs": {"is_late": False}},
                }},
                "tests": [{"id": "t1", "steps": [
                    {"type": "agent.create_session", "context_variables": {"Id": "1234"}},
                    {"type": "agent.send_message", "utterance": "Where is my order?"},
                    {**rating, "expected": "The agent gives a date."},
                    {**rating, "expected": "The agent is polite."},
                ]}],
            },
            indent=1,
        ),
        encoding="utf-8",
    )  # fmt: skip
    code, _ = record(spec, [*TURN, _judge(1.0, "date"), _judge(0.8, "polite")])
    assert code == 0
    calls = json.loads((order_copy / "eval.json.replay.json").read_text(encoding="utf-8"))
    judged = {k.split("|judge|")[1] for k in calls["calls"] if "|judge|" in k}
    plain = min(judged, key=len)  # bot_response_rating#<the test's line>|0
    assert judged == {plain, plain.replace("|0", " #2|0")}, judged
    code, data = run_json(str(spec), "--judge-blocking", env=ENV)
    assert code == 0, json.dumps(data, indent=1)
    verdicts = [r for r in data["testCases"][0]["testResults"] if r["judged"]]
    assert [r["judge"]["reasoning"] for r in verdicts] == ["date", "polite"]


def test_a_mantle_recording_replays_in_a_later_minute(
    card_bank_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A Mantle system prompt states the current minute: hashed as it was, every recording
    # of a Mantle agent was stale a minute after it was made.
    scenarios = write_scenario(
        card_bank_copy,
        "hello.yml",
        """scenario:
  name: Hello
  simulation_context: You are a customer who just says hello.
  max_turns: 3
""",
    ).parent

    def at(minute: int) -> None:
        class Clock(datetime):
            @classmethod
            def now(cls, tz: tzinfo | None = None) -> Clock:
                return cls(2026, 12, 5, 17, minute, tzinfo=UTC)

        monkeypatch.setattr(prompt, "datetime", Clock)

    at(43)
    script = [Reply(text="Hi!"), Reply(text="Hello there."), Reply(text="###STOP###")]
    code, err = record(scenarios, script)
    assert code == 0, err
    recorded = (scenarios / "hello.yml.replay.json").read_text(encoding="utf-8")
    assert "Current date and time: <now>" in recorded and "17:43" not in recorded
    at(44)
    code, data = run_json(str(scenarios), env=ENV)  # replayed, no model
    assert code == 0, json.dumps(data["testCases"][0], indent=1)
    # What the agent is told still counts: another persona is a stale recording.
    agent_file = card_bank_copy / "agent.yml"
    agent_file.write_text(
        agent_file.read_text(encoding="utf-8").replace("brief, friendly", "terse"),
        encoding="utf-8",
    )
    code, data = run_json(str(scenarios), env=ENV)
    assert code != 0 and "is stale" in data["testCases"][0]["errorMessage"]
