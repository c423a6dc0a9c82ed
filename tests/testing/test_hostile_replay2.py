"""Damaged recordings, recordings kept when a run stops on an error, and cases sharing a name:
a recording is never a traceback, never half-written, and one case never overwrites another's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import LIVE_ENV as ENV
from helpers import LIVE_SPEC, run_test
from helpers import LIVE_TURN as TURN

from agentscript.testing import replay
from agentscript.testing.replay import RecordingError, ReplayStore
from fakes.llm_servers import OpenAIServer, Reply

HEADER = '{"format": "agentscript-replay/1", "calls": '


def _record(*extra: str) -> tuple[str, ...]:
    return ("--record", "--model", "openai:m", *extra)


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (HEADER.encode() + b"[]}", "'calls' must be an object"),
        (HEADER.encode() + b'"x"}', "'calls' must be an object"),
        (HEADER.encode() + b'{"k": "text"}}', "recorded call 'k'"),
        (HEADER.encode() + b'{"k": {"hash": "a"}}}', "'response' must be an object"),
        (HEADER.encode() + b'{"k": {"hash": "a", "response": {"tool_calls": [1]}}}}', "tool call"),
        (b'{"format": "agentscript-replay/1", "calls": {"\xff\xfe": 1}}', "not UTF-8"),
        (b"not json at all", "invalid JSON"),
        (b'{"format": "other"}', "not a recording"),
        # An integer longer than Python reads, a call given twice (the second won silently).
        (HEADER.encode() + b'{"k": ' + b"9" * 5_000 + b"}}", "an integer of 5000 digits"),
        (
            HEADER.encode() + b'{\n"k": {"hash": "a"},\n"k": {"hash": "b"}}}',
            "invalid JSON at line 1: an object gives the key 'k' twice",
        ),
    ],
)
def test_damaged_recording_is_a_one_line_usage_error_naming_the_file(
    order_copy: Path, content: bytes, said: str
) -> None:
    spec = order_copy / "live.yaml"
    spec.write_text(LIVE_SPEC, encoding="utf-8")
    recording = order_copy / "live.yaml.replay.json"
    recording.write_bytes(content)
    code, out, err = run_test(str(spec), env=ENV)
    assert code == 2, out + err
    assert "Traceback" not in out + err
    assert len(err.strip().splitlines()) == 1, err
    assert str(recording) in err and said in err
    assert "re-record" in err
    assert recording.read_bytes() == content  # nothing is lost: the user decides


def test_recording_that_is_a_folder_is_a_usage_error(order_copy: Path) -> None:
    spec = order_copy / "live.yaml"
    spec.write_text(LIVE_SPEC, encoding="utf-8")
    (order_copy / "live.yaml.replay.json").mkdir()
    code, out, err = run_test(str(spec), env=ENV)
    assert code == 2, out + err
    assert "not a regular file" in err and "Traceback" not in out + err


def test_damaged_recording_stops_the_run_before_any_live_call(order_copy: Path) -> None:
    good = order_copy / "live.yaml"
    good.write_text(LIVE_SPEC, encoding="utf-8")
    bad = order_copy / "later.yaml"
    bad.write_text(LIVE_SPEC.replace("name: Live", "name: Later"), encoding="utf-8")
    (order_copy / "later.yaml.replay.json").write_text(HEADER + "[]}", encoding="utf-8")
    with OpenAIServer(list(TURN)) as server:
        code, _, err = run_test(
            str(good), str(bad), *_record("--base-url", server.base_url), env=ENV
        )
        asked = len(server.requests)
    assert code == 2 and "later.yaml.replay.json" in err
    assert asked == 0


def test_failed_save_leaves_the_old_recording_whole_and_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.yaml.replay.json"
    old = HEADER + '{"a|1|router|0": {"hash": "h", "prompt": "p", "response": {"text": "x"}}}}\n'
    path.write_text(old, encoding="utf-8")
    store = ReplayStore.open(path)
    store.calls["b|1|router|0"] = {"hash": "h2", "prompt": "q", "response": {"text": "y"}}
    store.dirty = True

    def refuse(source: str, target: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(replay.os, "replace", refuse)
    with pytest.raises(RecordingError, match="cannot save the recording: No space left"):
        store.save()
    assert path.read_text(encoding="utf-8") == old
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


WHITEBOX_CASE = """  - utterance: "Where is my order?"
    x-agentscript:
      assert: [{instructions_snapshot: {name: snap}}]
      model:
        - tool: go_to_orders
        - say: "ok"
"""


def test_answers_recorded_before_a_spec_error_are_saved(order_copy: Path) -> None:
    spec = order_copy / "live.yaml"
    spec.write_text(LIVE_SPEC + WHITEBOX_CASE, encoding="utf-8")
    # The second case's snapshot is a folder: a spec error found while running.
    (order_copy / "live.yaml.snapshots" / "snap.txt").mkdir(parents=True)
    with OpenAIServer(list(TURN)) as server:
        code, out, err = run_test(str(spec), *_record("--base-url", server.base_url), env=ENV)
    assert code == 2, out + err
    assert "snap.txt" in err
    recording = json.loads((order_copy / "live.yaml.replay.json").read_text(encoding="utf-8"))
    assert sorted(recording["calls"]) == [
        "Live/Test Case #1|1|Order_Management|0",
        "Live/Test Case #1|1|router|0",
    ]


DUPLICATE_SPEC = """name: D
x-agentscript:
  agent: order_status.agent
testCases:
  - inputs:
      - utterance: "alpha"
      - utterance: "beta"
    scorers:
      - {name: topic_sequence_match, expected: router}
    x-agentscript: {name: same}
"""


def test_cases_sharing_a_name_keep_separate_recordings_and_replay_clean(
    order_copy: Path,
) -> None:
    spec = order_copy / "dup.yaml"
    spec.write_text(DUPLICATE_SPEC, encoding="utf-8")
    with OpenAIServer([Reply(text="echo: alpha"), Reply(text="echo: beta")]) as server:
        code, out, err = run_test(str(spec), *_record("--base-url", server.base_url), env=ENV)
    assert code == 0, out + err
    recording = json.loads((order_copy / "dup.yaml.replay.json").read_text(encoding="utf-8"))
    calls = recording["calls"]
    assert sorted(calls) == ["D/same #2|1|router|0", "D/same|1|router|0"]
    assert calls["D/same|1|router|0"]["response"]["text"] == "echo: alpha"
    assert calls["D/same #2|1|router|0"]["response"]["text"] == "echo: beta"
    code, out, err = run_test(str(spec), env=ENV)
    assert code == 0, out + err
    assert "STALE" not in out and "stale" not in out


def test_unique_case_names_keep_their_plain_recording_keys() -> None:
    from agentscript.testing.runner import recording_keys
    from agentscript.testing.spec import Case, SpecFormat, Suite

    cases = [Case(n, []) for n in ("a", "b", "a", "a #2", "a")]
    keys = recording_keys(Suite(Path("s.yaml"), SpecFormat.CONVERSATION, "S", cases))
    assert [keys[id(c)] for c in cases] == ["S/a", "S/b", "S/a #3", "S/a #2", "S/a #4"]


def test_a_recorded_answer_holding_a_lone_surrogate_is_saved_and_read_back(tmp_path: Path) -> None:
    # A model may answer a lone surrogate (a "\ud800" escape in its JSON): UTF-8 cannot write
    # it raw, so the recording holds its escape and reads back to the same text.
    path = tmp_path / "s.yaml.replay.json"
    store = ReplayStore.open(path)
    store.calls["a|1|router|0"] = {"hash": "h", "prompt": "p", "response": {"text": "x\ud800y"}}
    store.dirty = True
    store.save()
    assert ReplayStore.open(path).calls["a|1|router|0"]["response"]["text"] == "x\ud800y"


def test_a_stale_call_whose_refresh_failed_stays_stale_not_re_recorded(tmp_path: Path) -> None:
    # --refresh-stale listed a call as re-recorded before the live model answered: a live
    # model that failed left it named in refreshedRecordings, its old answer still saved.
    import asyncio

    from agentscript.models.base import ModelError, ModelRequest

    class Down:
        name = "down"

        async def complete(self, request: ModelRequest) -> Any:
            raise ModelError("the live model is down")

    store = ReplayStore(tmp_path / "s.yaml.replay.json", refresh_stale=True)
    store.calls["k1"] = {"hash": "old", "prompt": "before", "response": {"text": "x"}}
    request = ModelRequest(system="s", instructions="now", messages=[], tools=[])
    with pytest.raises(ModelError):
        asyncio.run(store.answer("k1", request, Down()))  # type: ignore[arg-type]
    assert store.refreshed == {} and "k1" in store.stale
    assert store.calls["k1"]["hash"] == "old"
