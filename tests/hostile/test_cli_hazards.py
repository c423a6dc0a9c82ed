"""Issue 9, item 6: hazards of the command line, each pinned by a regression test.

Streamed chats over a real HTTP client (a loopback server speaking the OpenAI protocol) run
as a subprocess, so what a user sees on stdout and stderr is what is asserted.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from raw_server import (
    RawServer,
    cut_stream,
    html_page,
    json_string,
    openai_completion,
    openai_stream,
    send,
)

import agentscript
from agentscript.chat import run_chat
from agentscript.cli import main
from agentscript.conversation import ConversationError, parse_conversation
from agentscript.models.base import Message, ModelError, ModelRequest, ModelResponse
from agentscript.models.function import FunctionInfo, FunctionModel
from agentscript.models.openai_provider import OpenAIModel

ROOT = Path(__file__).resolve().parents[2]
SHOP = ROOT / "tests" / "agents_models" / "shop.agent"
ORDERS = ROOT / "examples" / "order_status" / "order_status.agent"
CARD_BANK = ROOT / "examples" / "card_bank"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AGENTSCRIPT_MODEL", "AGENTSCRIPT_CONFIG", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def shop_copy(tmp_path: Path) -> Path:
    """shop.agent and its actions, copied where the test may write."""
    folder = tmp_path / "agent"
    folder.mkdir()
    shutil.copy(SHOP, folder / "shop.agent")
    shutil.copy(SHOP.parent / "shop_actions.py", folder / "shop_actions.py")
    return folder / "shop.agent"


def chat_subprocess(
    server: RawServer, agent: Path, stdin: bytes
) -> subprocess.CompletedProcess[bytes]:
    """``agentscript chat AGENT --model openai:gpt-test`` against ``server``, stdin piped."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "AGENTSCRIPT_"))}
    command = [sys.executable, "-m", "agentscript.cli", "chat", str(agent)]
    command += ["--model", "openai:gpt-test", "--base-url", server.url]
    return subprocess.run(command, input=stdin, capture_output=True, env=env, timeout=120)


def last_user_text(body: dict[str, Any]) -> str:
    users = [m for m in body.get("messages", []) if m.get("role") == "user"]
    return str(users[-1]["content"]) if users else ""


def echo_stream(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    """Streams back 'you said: <the last user message>', keeping the connection open."""
    text = f"you said: {last_user_text(body)}"
    if body.get("stream"):
        send(handler, 200, "text/event-stream", openai_stream(text))
    else:
        send(handler, 200, "application/json", openai_completion(text))


# ---------------------------------------------------------------------- streamed chat


def test_streamed_multi_turn_chat_prints_no_event_loop_errors(shop_copy: Path) -> None:
    # A client left behind by an earlier turn is closed when the garbage collector finds it,
    # which took up to about ten turns in our runs: 16 turns leave no doubt.
    turns = 16
    stdin = "".join(f"message {n}\n" for n in range(turns)).encode()
    with RawServer(echo_stream) as server:
        done = chat_subprocess(server, shop_copy, stdin)
    err = done.stderr.decode()
    assert done.returncode == 0, err
    assert done.stdout.decode().count("you said:") == turns
    assert "Event loop is closed" not in err
    assert "Task exception was never retrieved" not in err


SESSION_SCRIPT = """
import sys
sys.path.insert(0, {here!r})
import agentscript
from agentscript.models.openai_provider import OpenAIModel
from raw_server import RawServer, openai_stream, send

def answer(handler, body):
    send(handler, 200, "text/event-stream", openai_stream("hi there"))

agent = agentscript.load({agent!r})
with RawServer(answer) as server:
    model = OpenAIModel("gpt-test", api_key="k", base_url=server.url)
    session = agent.session(model=model)
    session.on_text = lambda text: None
    clients = set()
    for n in range(16):
        assert session.send(f"message {{n}}").error is None
        clients.add(id(model._client))
print(f"done, {{len(clients)}} client")
"""


def test_session_send_turn_after_turn_with_a_provider_prints_no_event_loop_errors(
    shop_copy: Path,
) -> None:
    # Session.send runs every turn of a thread on one kept loop (engine/loop.py): one client
    # serves all the turns, and it is closed before that loop ends (at exit), not by the
    # garbage collector on a loop that is already closed.
    script = SESSION_SCRIPT.format(here=str(Path(__file__).parent), agent=str(shop_copy))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "AGENTSCRIPT_"))}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, env=env, timeout=120, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "done, 1 client"
    assert "Event loop is closed" not in done.stderr
    assert "Task exception was never retrieved" not in done.stderr


def test_non_utf8_byte_on_chat_stdin_does_not_break_later_turns(shop_copy: Path) -> None:
    with RawServer(echo_stream) as server:
        done = chat_subprocess(server, shop_copy, b"caf\xe9\nsecond\nthird\n")
        sent = [last_user_text(b) for b in server.bodies]
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()
    assert sent == ["caf\ufffd", "second", "third"]
    assert "you said: second" in out and "you said: third" in out


# ---------------------------------------------------------------------- --record


def answer_text(messages: list[Message], info: FunctionInfo) -> str:
    return "Hello."


@pytest.mark.parametrize("target", ["agent", "stubs"])
def test_record_refuses_to_overwrite_an_input_file(
    shop_copy: Path, target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    stubs = shop_copy.parent / "stubs.yaml"
    stubs.write_text("variables: {customer: Ann}\n", encoding="utf-8")
    before = {p: p.read_bytes() for p in (shop_copy, stubs)}
    record = shop_copy if target == "agent" else stubs

    code = run_chat(
        agentscript.load(shop_copy),
        model=FunctionModel(answer_text),
        interactive=False,
        lines=["hi"],
        record=record,
        stubs=stubs,
    )

    assert code == 2
    assert "--record" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in before} == before


def test_record_refuses_to_overwrite_the_agents_action_code(
    shop_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    actions = shop_copy.parent / "shop_actions.py"
    before = actions.read_bytes()
    code = run_chat(
        agentscript.load(shop_copy),
        model=FunctionModel(answer_text),
        interactive=False,
        lines=["hi"],
        record=actions,
    )
    assert code == 2
    assert "source file" in capsys.readouterr().err
    assert actions.read_bytes() == before


def test_record_refuses_to_overwrite_a_file_of_a_mantle_project(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "card_bank"
    shutil.copytree(CARD_BANK, project)
    agent_yml = project / "agent.yml"
    before = agent_yml.read_bytes()

    code = run_chat(
        agentscript.load(project),
        model=FunctionModel(answer_text),
        interactive=False,
        lines=["hi"],
        record=agent_yml,
    )

    assert code == 2
    assert "belongs to the agent's project" in capsys.readouterr().err
    assert agent_yml.read_bytes() == before


def test_record_to_a_new_file_still_works(shop_copy: Path) -> None:
    record = shop_copy.parent / "chat.yaml"
    code = run_chat(
        agentscript.load(shop_copy),
        model=FunctionModel(answer_text),
        interactive=False,
        lines=["hi"],
        record=record,
    )
    assert code == 0
    assert yaml.safe_load(record.read_text())["turns"][0]["user"] == "hi"


# ---------------------------------------------------------------------- run exit code


ERRORING_TURN = """
variables: {{order_ID: "1"}}
turns:
  - user: where is my order?
    model: [{{tool: go_to_orders}}, {{say: "never reached"}}]
{expect}
"""


def unmapped(tmp_path: Path) -> Path:
    """The example agent alone, without its folder's ``agentscript.toml``, whose
    ``[actions.targets]`` gives its flows a Python backend: here they have no handler."""
    agent = tmp_path / "agent" / ORDERS.name
    agent.parent.mkdir()
    agent.write_text(ORDERS.read_text(encoding="utf-8"), encoding="utf-8")
    return agent


@pytest.mark.parametrize(
    ("expect", "code"),
    [
        ("", 1),
        ("    expect: {node: Order_Management}", 1),
        ("    expect: {error: true}", 0),
        ('    expect: {error: "has no handler"}', 0),
        ("    expect: {error: false}", 1),
    ],
)
def test_run_exits_1_when_a_turn_errors_unless_its_expect_expects_it(
    tmp_path: Path, expect: str, code: int
) -> None:
    conversation = tmp_path / "c.yaml"
    conversation.write_text(ERRORING_TURN.format(expect=expect), encoding="utf-8")

    result = CliRunner().invoke(
        main, ["run", str(unmapped(tmp_path)), "--conversation", str(conversation)]
    )

    assert result.exit_code == code, result.output
    assert "has no handler" in result.output  # the error itself is always shown


def test_run_json_reports_the_unexpected_error_as_a_failed_expectation(tmp_path: Path) -> None:
    conversation = tmp_path / "c.yaml"
    conversation.write_text(ERRORING_TURN.format(expect=""), encoding="utf-8")

    result = CliRunner().invoke(
        main, ["run", str(unmapped(tmp_path)), "--conversation", str(conversation), "--json"]
    )

    assert result.exit_code == 1
    failures = json.loads(result.output)["turns"][0]["failed_expectations"]
    assert any("no 'expect:' expected" in f for f in failures)


# ---------------------------------------------------------------------- model failures


REQUEST = ModelRequest("You help.", "", [Message("user", "hi")], [])


def complete(server: RawServer, *, streaming: bool) -> ModelResponse:
    model = OpenAIModel("gpt-test", api_key="sk-test", base_url=server.url, max_retries=0)
    sink = (lambda _text: None) if streaming else None
    return asyncio.run(model.complete(REQUEST, stream=sink))


def test_a_stream_cut_mid_answer_is_reported_as_cut_not_as_no_connection() -> None:
    with RawServer(cut_stream) as server, pytest.raises(ModelError) as caught:
        complete(server, streaming=True)
    message = str(caught.value)
    assert "cut off mid-stream after 13 character(s)" in message
    assert "Could not connect" not in message


def test_a_whole_answer_cut_short_is_reported_as_a_broken_connection() -> None:
    with RawServer(cut_stream) as server, pytest.raises(ModelError) as caught:
        complete(server, streaming=False)
    assert "broke before the whole answer arrived" in str(caught.value)
    assert "Could not connect" not in str(caught.value)


@pytest.mark.parametrize("answer", [html_page, json_string], ids=["html", "json-string"])
@pytest.mark.parametrize("streaming", [True, False], ids=["streamed", "whole"])
def test_a_body_that_is_not_an_answer_is_a_clear_model_error(answer: Any, streaming: bool) -> None:
    with RawServer(answer) as server, pytest.raises(ModelError) as caught:
        complete(server, streaming=streaming)
    message = str(caught.value)
    assert "check that --base-url points at a server speaking the OpenAI API" in message
    assert "JSONDecodeError" not in message and "AttributeError" not in message


def test_chat_shows_a_cut_stream_as_cut(shop_copy: Path) -> None:
    with RawServer(cut_stream) as server:
        done = chat_subprocess(server, shop_copy, b"where is it?\n")
    err = done.stderr.decode()
    assert done.returncode == 1
    assert "cut off mid-stream" in err and "Could not connect" not in err


# ---------------------------------------------------------------------- conversation files


@pytest.mark.parametrize("user", ["user:", "user: null", "user: ~", "user: {a: 1}"])
def test_a_turn_whose_user_is_not_text_is_a_file_error(user: str) -> None:
    with pytest.raises(ConversationError, match="'user' must be the user's message as text"):
        parse_conversation(f"turns:\n  - {user}\n    model: [{{say: hi}}]\n")


def test_run_with_user_null_exits_2_naming_the_file(tmp_path: Path) -> None:
    conversation = tmp_path / "c.yaml"
    conversation.write_text("turns:\n  - user: null\n    model: [{say: hi}]\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["run", str(ORDERS), "--conversation", str(conversation)])
    assert result.exit_code == 2
    assert str(conversation) in result.output and "None" not in result.output


def test_an_empty_user_text_is_still_allowed() -> None:
    parsed = parse_conversation('turns:\n  - user: ""\n    model: [{say: hi}]\n')
    assert parsed.turns[0].user == ""


# ---------------------------------------------------------------------- chat output


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "no-stream"])
def test_a_blank_model_reply_prints_a_warning_not_a_blank_line(
    shop_copy: Path, stream: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    # White space is an answer (an empty one is asked again, then fails the turn: the
    # engine's test_an_empty_answer_* tests); the chat still says it showed nothing.
    code = run_chat(
        agentscript.load(shop_copy),
        model=FunctionModel(lambda messages, info: "  "),
        interactive=False,
        lines=["hi"],
        stream=stream,
    )
    captured = capsys.readouterr()
    assert code == 0
    assert "empty" in captured.err


def preamble_then_answer(messages: list[Message], info: FunctionInfo) -> ModelResponse | str:
    if info.calls_before == 0:
        call = info.call("verify", {"email": "a@example.com"})
        return ModelResponse(text="Let me check that.", tool_calls=[call])
    return "You are verified."


def test_text_sent_with_a_tool_call_is_shown_with_no_stream(
    shop_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run_chat(
        agentscript.load(shop_copy),
        model=FunctionModel(preamble_then_answer),
        interactive=False,
        lines=["verify me"],
        stream=False,
    )
    assert code == 0
    assert capsys.readouterr().out == "Let me check that.\nYou are verified.\n\n"


def test_text_sent_with_a_tool_call_is_recorded_and_replayed(shop_copy: Path) -> None:
    record = shop_copy.parent / "chat.yaml"
    code = run_chat(
        agentscript.load(shop_copy),
        model=FunctionModel(preamble_then_answer),
        interactive=False,
        lines=["verify me"],
        record=record,
    )
    assert code == 0
    moves = yaml.safe_load(record.read_text())["turns"][0]["model"]
    assert moves[0] == {
        "say": "Let me check that.",
        "tool": "verify",
        "args": {"email": "a@example.com"},
    }

    result = CliRunner().invoke(
        main, ["run", str(shop_copy), "--conversation", str(record), "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["turns"][0]["response"] == "You are verified."
