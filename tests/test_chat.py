"""``agentscript chat`` without HTTP: options, model selection, the display of turns (streamed
or not, never twice), commands, failures, and recording to a conversation file.

The HTTP end-to-end runs are in tests/test_models_engine.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

import agentscript
from agentscript.chat import (
    ChatUsageError,
    Console,
    agent_model_id,
    choose_model,
    describe_turn,
    parse_var,
    parse_vars,
    run_chat,
    summarize_steps,
)
from agentscript.cli import main
from agentscript.conversation import parse_conversation
from agentscript.engine.session import Agent
from agentscript.models import describe_configuration_help
from agentscript.models.base import (
    Message,
    ModelError,
    ModelRequest,
    ModelResponse,
    TextSink,
    ToolCall,
)
from agentscript.models.function import FunctionInfo, FunctionModel
from agentscript.models.recording import (
    RAW_ARGUMENTS_KEY,
    ConversationRecorder,
    RecordingModel,
    action_stub,
    move_of,
)

SHOP = Path(__file__).parent / "agents_models" / "shop.agent"
WELCOME = "Hello! Ask me about your order."


class QueueModel:
    """Answers from a queue; streams text two characters at a time when asked to.

    An item is a ModelResponse or an exception to raise. ``preamble`` text is streamed
    before tool calls, as real models sometimes do.
    """

    name = "queue:test"

    def __init__(self, *items: ModelResponse | Exception) -> None:
        self.items = list(items)
        self.requests: list[ModelRequest] = []
        self.streamed_calls = 0

    async def complete(
        self, request: ModelRequest, *, stream: TextSink | None = None
    ) -> ModelResponse:
        self.requests.append(request)
        item = self.items.pop(0)
        if isinstance(item, Exception):
            raise item
        if stream is not None:
            self.streamed_calls += 1
            text = item.text or ""
            for i in range(0, len(text), 2):
                stream(text[i : i + 2])
        return item


def say(text: str) -> ModelResponse:
    return ModelResponse(text=text)


def call(name: str, **arguments: Any) -> ModelResponse:
    return ModelResponse(tool_calls=[ToolCall(f"id_{name}", name, arguments)])


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AGENTSCRIPT_MODEL", "AGENTSCRIPT_CONFIG", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def shop() -> Agent:
    return agentscript.load(SHOP)


@pytest.fixture
def lone_shop(tmp_path: Path) -> Iterator[Path]:
    """shop.agent copied where no agentscript.toml applies."""
    folder = tmp_path / "agent"
    folder.mkdir()
    shutil.copy(SHOP, folder / "shop.agent")
    shutil.copy(SHOP.parent / "shop_actions.py", folder / "shop_actions.py")
    yield folder / "shop.agent"


def chat(
    agent: Agent, model: QueueModel, lines: list[str], **options: Any
) -> tuple[int, QueueModel]:
    code = run_chat(agent, model=model, interactive=False, lines=lines, **options)
    return code, model


# ---------------------------------------------------------------------- --var


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("count=3", ("count", 3)),
        ("ratio=2.5", ("ratio", 2.5)),
        ("verified=true", ("verified", True)),
        ("verified=False", ("verified", False)),
        ("customer=Ann", ("customer", "Ann")),
        ("customer='3'", ("customer", "3")),
        ("note=a: b", ("note", "a: b")),
        ("note=", ("note", "")),
        ("note=null", ("note", None)),
        ("tags=[a, b]", ("tags", ["a", "b"])),
        ("when=2024-01-02", ("when", "2024-01-02")),
        ("note=x=y", ("note", "x=y")),
        ("note=[unclosed", ("note", "[unclosed")),
    ],
)
def test_parse_var(text: str, expected: tuple[str, Any]) -> None:
    assert parse_var(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("project.authenticated=true", ("project.authenticated", True)),
        ("card_replace.reason=lost", ("card_replace.reason", "lost")),
        ("book-flight.seat_class=economy", ("book-flight.seat_class", "economy")),
        (" user.name = Ada", ("user.name", "Ada")),
    ],
)
def test_parse_var_takes_dotted_mantle_names(text: str, expected: tuple[str, Any]) -> None:
    assert parse_var(text) == expected


@pytest.mark.parametrize(
    "text", ["novalue", "1bad=3", "=3", "a b=1", ".x=1", "a.=1", "a..b=1", "a.1b=2", "é=1"]
)
def test_parse_var_rejects_bad_input(text: str) -> None:
    with pytest.raises(ChatUsageError, match="--var"):
        parse_var(text)


def test_parse_vars_last_wins() -> None:
    assert parse_vars(["count=1", "count=2", "customer=Bo"]) == {"count": 2, "customer": "Bo"}


def test_typed_vars_reach_the_session(shop: Agent, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = chat(shop, QueueModel(), ["/vars"], variables=["count=3", "verified=true"])

    out = capsys.readouterr().out
    assert code == 0
    assert "count = 3\n" in out and "verified = true\n" in out and 'customer = "guest"' in out


@pytest.mark.parametrize(
    ("var", "message"),
    [("nope=1", "unknown variable"), ("count=abc", "@variables.count"), ("bad", "NAME=VALUE")],
)
def test_bad_vars_are_usage_errors(
    shop: Agent, capsys: pytest.CaptureFixture[str], var: str, message: str
) -> None:
    code, model = chat(shop, QueueModel(), ["hi"], variables=[var])

    captured = capsys.readouterr()
    assert code == 2
    assert message in captured.err
    assert captured.out == ""
    assert model.requests == []


def test_dotted_vars_reach_a_mantle_session(capsys: pytest.CaptureFixture[str]) -> None:
    bank = agentscript.load(Path(__file__).parents[1] / "examples" / "card_bank")
    variables = ["project.authenticated=true", "project.customer_name=Ada"]
    code = run_chat(
        bank, model=QueueModel(), interactive=False, lines=["/vars"], variables=variables
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "project.authenticated = true\n" in out and 'project.customer_name = "Ada"' in out


def test_an_unknown_dotted_var_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    bank = agentscript.load(Path(__file__).parents[1] / "examples" / "card_bank")
    code = run_chat(
        bank, model=QueueModel(), interactive=False, lines=["hi"], variables=["project.nope=1"]
    )
    captured = capsys.readouterr()
    assert code == 2 and "project.nope" in captured.err and "Traceback" not in captured.err


def test_unknown_show_is_a_usage_error(shop: Agent, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = chat(shop, QueueModel(), ["hi"], show=["everything"])
    assert code == 2
    assert "--show" in capsys.readouterr().err


# ---------------------------------------------------------------------- model selection


def test_agent_model_id(shop: Agent) -> None:
    assert agent_model_id(shop) == "model://shop_model"


def test_model_flag_wins(shop: Agent, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTSCRIPT_MODEL", "anthropic:claude-x")
    model = choose_model(shop, spec="openai:gpt-flag", base_url="http://127.0.0.1:9/v1")
    assert model.name == "openai:gpt-flag"


def test_model_from_agentscript_toml_next_to_the_agent(lone_shop: Path) -> None:
    (lone_shop.parent / "agentscript.toml").write_text(
        '[models]\n"model://shop_model" = { spec = "openai:gpt-toml", '
        'base_url = "http://127.0.0.1:9/v1" }\n',
        encoding="utf-8",
    )
    model = choose_model(agentscript.load(lone_shop))
    assert model.name == "openai:gpt-toml"
    assert getattr(model, "base_url", None) == "http://127.0.0.1:9/v1"


def test_model_from_environment(lone_shop: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTSCRIPT_MODEL", "openai:gpt-env")
    model = choose_model(agentscript.load(lone_shop), base_url="http://127.0.0.1:9/v1")
    assert model.name == "openai:gpt-env"


def test_no_model_prints_how_to_configure_one(lone_shop: Path) -> None:
    with pytest.raises(ModelError) as info:
        choose_model(agentscript.load(lone_shop))
    assert describe_configuration_help("model://shop_model") in str(info.value)

    result = CliRunner().invoke(main, ["chat", str(lone_shop)], input="hi\n")
    assert result.exit_code == 2
    assert describe_configuration_help("model://shop_model") in result.stderr
    assert "Traceback" not in result.output


def test_bad_spec_is_a_usage_error(lone_shop: Path) -> None:
    result = CliRunner().invoke(main, ["chat", str(lone_shop), "--model", "gpt-4o"], input="hi\n")
    assert result.exit_code == 2
    assert "is not a model spec" in result.stderr


def test_agent_with_errors_is_a_usage_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken.agent"
    broken.write_text("system:\n    instructions: 3\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["chat", str(broken), "--model", "openai:x"], input="hi\n")
    assert result.exit_code == 2
    assert "cannot run an agent with errors" in result.stderr


# ---------------------------------------------------------------------- display and streaming


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_each_reply_is_printed_once(
    shop: Agent, capsys: pytest.CaptureFixture[str], stream: bool
) -> None:
    model = QueueModel(
        say("Hello there, how can I help?"),
        call("verify", email="a@example.com"),
        say("You are verified."),
    )
    code, _ = chat(shop, model, ["hi", "I am a@example.com"], stream=stream)

    captured = capsys.readouterr()
    assert code == 0
    assert captured.out == "Hello there, how can I help?\n\nYou are verified.\n\n"
    assert captured.err == ""
    assert model.streamed_calls == (3 if stream else 0)


def test_text_streamed_before_tool_calls_is_shown_once_and_not_taken_for_the_reply(
    shop: Agent, capsys: pytest.CaptureFixture[str]
) -> None:
    preamble = ModelResponse(
        text="Let me check.",
        tool_calls=[ToolCall("c1", "verify", {"email": "a@example.com"})],
    )
    code, _ = chat(shop, QueueModel(preamble, say("Let me check.")), ["verify me"])

    assert code == 0
    # The final answer repeats the preamble's words: it must still be printed.
    assert capsys.readouterr().out == "Let me check.\nLet me check.\n\n"


def test_model_error_prints_the_agents_error_text_and_goes_on(
    shop: Agent, capsys: pytest.CaptureFixture[str]
) -> None:
    model = QueueModel(ModelError("HTTP 401: bad key"), say("Fine now."))
    code, _ = chat(shop, model, ["hi", "again"])

    captured = capsys.readouterr()
    assert code == 1
    assert captured.out == "Sorry, something went wrong.\n\nFine now.\n\n"
    assert "error: the model failed: HTTP 401: bad key" in captured.err


def test_engine_failure_is_a_message_not_a_traceback(
    shop: Agent, capsys: pytest.CaptureFixture[str]
) -> None:
    model = QueueModel(RuntimeError("kaboom"), say("Still here."))
    code, _ = chat(shop, model, ["hi", "again"])

    captured = capsys.readouterr()
    assert code == 1
    assert "internal error: RuntimeError: kaboom" in captured.err
    assert "Traceback" not in captured.err
    assert captured.out.endswith("Still here.\n\n")


def test_show_details_go_to_stderr_when_scripted(
    shop: Agent, capsys: pytest.CaptureFixture[str]
) -> None:
    model = QueueModel(call("verify", email="a@example.com"), say("Done."))
    chat(shop, model, ["I am a@example.com"], show=["prompt", "tools", "trace"])

    captured = capsys.readouterr()
    assert captured.out == "Done.\n\n"
    err = captured.err
    assert "[main] system:" in err and "| You are a shop assistant. Be brief." in err
    assert "| Help the customer guest. Verify them with verify first." in err
    assert "| The customer is verified: use lookup to find orders." in err
    assert "[main #1] tools: verify, remember; hidden: lookup" in err
    assert "[main #2] tools: verify, lookup, remember; hidden: (none)" in err
    assert 'action verify({"email": "a@example.com"}) -> {"verified": true' in err
    assert "path: main" in err
    assert "set verified: false -> true" in err


def test_describe_turn_without_show_is_empty(shop: Agent) -> None:
    session = shop.session(model=QueueModel(say("Hi")))
    reply = session.send("hello")
    assert describe_turn(reply, {}, frozenset()) == []
    assert describe_turn(reply, session.variables, frozenset({"trace"})) == ["path: main"]


def test_summarize_steps(shop: Agent) -> None:
    session = shop.session(model=QueueModel(call("nothing"), say("Hi")))
    reply = session.send("hello")

    lines = summarize_steps(reply.trace)

    kinds = [line.split()[1] for line in lines]
    assert kinds == [
        "NODE_ENTER",
        "RESOLUTION_STEP",
        "LLM_STEP",
        "REFUSED_STEP",
        "RESOLUTION_STEP",
        "LLM_STEP",
        "RESPONSE_STEP",
    ]
    assert "tool calls: nothing" in lines[2]
    assert "unknown tool 'nothing'" in lines[3]
    assert summarize_steps({}) == ["(no steps)"]


# ---------------------------------------------------------------------- interactive


class Terminal:
    """Feeds lines to the chat as a user would, then Ctrl-D."""

    def __init__(self, *lines: str | type[BaseException]) -> None:
        self.lines = list(lines)
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        if not self.lines:
            raise EOFError
        line = self.lines.pop(0)
        if isinstance(line, type):
            raise line()
        return line


def test_interactive_session(shop: Agent, capsys: pytest.CaptureFixture[str]) -> None:
    model = QueueModel(call("remember", note="tea"), say("Noted."), say("Hi again."))
    terminal = Terminal(
        "/help",
        "remember tea",
        KeyboardInterrupt,
        "/vars",
        "/trace",
        "/frobnicate",
        "/reset",
        "/vars",
        "hello",
        "/quit",
        "never read",
    )

    code = run_chat(shop, model=model, interactive=True, read_line=terminal, show=["trace"])

    captured = capsys.readouterr()
    out = captured.out
    assert code == 0
    assert terminal.lines == ["never read"]
    assert all(p == "you> " for p in terminal.prompts)
    assert "Chatting with Shop (queue:test)" in out
    assert out.count(f"agent> {WELCOME}") == 2  # at the start and after /reset
    assert "/reset   start a new session" in out
    assert "agent> Noted.\n" in out and "agent> Hi again.\n" in out
    assert 'note = "tea"' in out and "note = null" in out  # before and after /reset
    assert "LLM_STEP" in out and "ACTION_STEP" in out  # /trace
    assert '  set note: null -> "tea"' in out  # --show trace goes to stdout in a terminal
    assert "new session" in out
    assert "unknown command /frobnicate" in captured.err


def test_interactive_eof_quits(shop: Agent, capsys: pytest.CaptureFixture[str]) -> None:
    code = run_chat(shop, model=QueueModel(), interactive=True, read_line=Terminal("/trace"))
    assert code == 0
    assert "no turn yet" in capsys.readouterr().out


def test_slash_text_with_spaces_is_a_message(
    shop: Agent, capsys: pytest.CaptureFixture[str]
) -> None:
    model = QueueModel(say("That is a path."))
    chat(shop, model, ["/etc/hosts is a file?"])
    assert model.requests[0].messages[-1].content == "/etc/hosts is a file?"
    assert capsys.readouterr().out == "That is a path.\n\n"


# ---------------------------------------------------------------------- recording


def test_record_writes_a_replayable_conversation(
    shop: Agent, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = tmp_path / "chat.yaml"
    model = QueueModel(
        call("verify", email="a@example.com"),
        say("Verified."),
        say("Bye."),
    )

    code, _ = chat(shop, model, ["I am a@example.com", "bye"], record=record, variables=["count=2"])

    assert code == 0
    data = yaml.safe_load(record.read_text(encoding="utf-8"))
    assert data == {
        "variables": {"count": 2},
        "actions": {
            "verify_customer": [{"outputs": {"verified": True, "secret_token": "tok-SECRET-42"}}]
        },
        "turns": [
            {
                "user": "I am a@example.com",
                "model": [
                    {"tool": "verify", "args": {"email": "a@example.com"}},
                    {"say": "Verified."},
                ],
            },
            {"user": "bye", "model": [{"say": "Bye."}]},
        ],
    }
    capsys.readouterr()
    replay = CliRunner().invoke(main, ["run", str(SHOP), "--conversation", str(record), "--json"])
    assert replay.exit_code == 0, replay.output
    played = json.loads(replay.stdout)
    assert [t["response"] for t in played["turns"]] == ["Verified.", "Bye."]
    assert played["variables"]["verified"] is True and played["variables"]["count"] == 2


def test_record_restarts_on_reset(shop: Agent, tmp_path: Path) -> None:
    record = tmp_path / "chat.yaml"
    model = QueueModel(say("One."), say("Two."))
    chat(shop, model, ["first", "/reset", "second"], record=record)

    data = yaml.safe_load(record.read_text(encoding="utf-8"))
    assert data["turns"] == [{"user": "second", "model": [{"say": "Two."}]}]


def test_record_to_an_unwritable_place_is_a_usage_error(
    shop: Agent, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = QueueModel(say("unused"))
    code, _ = chat(shop, model, ["hi"], record=tmp_path / "missing" / "chat.yaml")

    assert code == 2
    assert "cannot write the recording" in capsys.readouterr().err
    assert model.requests == []


def test_move_of() -> None:
    assert move_of(ModelResponse(text="hi")).to_json() == {"say": "hi"}
    assert move_of(ModelResponse()).to_json() == {"say": ""}
    one = ModelResponse(tool_calls=[ToolCall("1", "a", {"x": 1})])
    assert move_of(one).to_json() == {"tool": "a", "args": {"x": 1}}
    two = ModelResponse(tool_calls=[ToolCall("1", "a", {}), ToolCall("2", "b", {"y": [1]})])
    assert move_of(two).to_json() == {
        "tools": [{"tool": "a", "args": {}}, {"tool": "b", "args": {"y": [1]}}]
    }
    bad = ModelResponse(tool_calls=[ToolCall("1", "a", None, raw_arguments="{x")])
    assert move_of(bad).to_json() == {"tool": "a", "args": {RAW_ARGUMENTS_KEY: "{x"}}


def test_recording_model_delegates_and_records() -> None:
    import asyncio

    seen: list[ModelResponse] = []
    inner = QueueModel(say("a"), ModelError("down"))
    model = RecordingModel(inner, on_response=lambda _req, resp: seen.append(resp))
    request = ModelRequest(system="", instructions="", messages=[], tools=[])

    assert model.name == "queue:test"
    asyncio.run(model.complete(request))
    with pytest.raises(ModelError):
        asyncio.run(model.complete(request))
    assert [m.to_json() for m in model.moves] == [{"say": "a"}]
    assert [r.text for r in seen] == ["a"]
    model.begin_turn()
    assert model.moves == []


def test_action_stub() -> None:
    base = {"type": "ACTION_STEP", "action": "get", "target": "flow://Get"}
    assert action_stub({**base, "output": {"a": 1}, "error": None}) == {"outputs": {"a": 1}}
    assert action_stub({**base, "output": None, "error": "boom"}) == {"error": "boom"}
    assert action_stub({**base, "output": {"o": object()}, "error": None}) is not None
    llm_update = {"type": "ACTION_STEP", "action": "@utils.setVariables", "output": {}}
    assert action_stub(llm_update) is None
    assert action_stub({"type": "LLM_STEP"}) is None


def test_conversation_recorder_round_trips() -> None:
    recorder = ConversationRecorder({"count": 1})
    trace = {
        "planTrace": {
            "steps": [
                {"type": "ACTION_STEP", "action": "get", "target": "x://y", "output": {"v": 1}},
                {"type": "ACTION_STEP", "action": "get", "target": "x://y", "error": "no"},
            ]
        }
    }
    recorder.add_turn("hi", [move_of(ModelResponse(text="yo"))], trace)

    parsed = parse_conversation(recorder.dump())
    assert parsed.variables == {"count": 1}
    assert parsed.stubs == {"get": [{"outputs": {"v": 1}}, {"error": "no"}]}
    assert [(t.user, [m.to_json() for m in t.moves]) for t in parsed.turns] == [
        ("hi", [{"say": "yo"}])
    ]


def broken_stream(messages: list[Message], info: FunctionInfo) -> str:
    """Streams part of an answer, then fails (a connection lost mid-answer)."""
    info.stream("Your order is")
    raise ModelError("the stream was cut")


def test_failure_mid_stream_ends_the_line_then_reports(
    shop: Agent, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run_chat(
        shop, model=FunctionModel(broken_stream), interactive=False, lines=["where is it?"]
    )

    captured = capsys.readouterr()
    assert code == 1
    assert captured.out == "Your order is\nSorry, something went wrong.\n\n"
    assert "error: the model failed: the stream was cut" in captured.err


def test_terminal_reader_marks_escape_codes_for_readline(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentscript import chat as chat_module

    seen: list[str] = []
    monkeypatch.setattr("builtins.input", lambda prompt: seen.append(prompt) or "typed")
    read = chat_module._terminal_reader()

    assert read("\x1b[36myou> \x1b[0m") == "typed"
    assert seen == ["\x01\x1b[36m\x02you> \x01\x1b[0m\x02"]


# ---------------------------------------------------------------------- audit fixes


def test_parse_var_rejects_a_value_that_is_not_utf8() -> None:
    # A byte that is not UTF-8 on the command line arrives as a lone surrogate (surrogateescape).
    with pytest.raises(ChatUsageError, match="not valid UTF-8") as info:
        parse_var("note=a\udcffb")
    str(info.value).encode("utf-8")  # the message itself can be printed


def test_a_var_that_is_not_utf8_is_a_usage_error(
    shop: Agent, capsys: pytest.CaptureFixture[str]
) -> None:
    code, model = chat(shop, QueueModel(), ["hi"], variables=["customer=a\udcffb"])
    assert code == 2
    assert "not valid UTF-8" in capsys.readouterr().err
    assert model.requests == []


def test_record_refuses_an_existing_file(
    shop: Agent, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = tmp_path / "hand_written.yaml"
    record.write_text("turns:\n  - user: hi\n    expect: {response: Hello}\n", encoding="utf-8")
    before = record.read_bytes()
    model = QueueModel(say("unused"))

    code, _ = chat(shop, model, ["hi"], record=record)

    assert code == 2
    assert capsys.readouterr().err == (
        f"--record {record}: the file exists; pass --overwrite to replace it\n"
    )
    assert record.read_bytes() == before
    assert model.requests == []


def test_record_with_overwrite_replaces_an_existing_file(shop: Agent, tmp_path: Path) -> None:
    record = tmp_path / "chat.yaml"
    record.write_text("old\n", encoding="utf-8")

    code, _ = chat(shop, QueueModel(say("One.")), ["hi"], record=record, overwrite=True)

    assert code == 0
    assert yaml.safe_load(record.read_text(encoding="utf-8"))["turns"] == [
        {"user": "hi", "model": [{"say": "One."}]}
    ]


def test_cli_record_refuses_an_existing_file_unless_overwrite(
    lone_shop: Path, tmp_path: Path
) -> None:
    record = tmp_path / "chat.yaml"
    record.write_text("old\n", encoding="utf-8")
    base = ["chat", str(lone_shop), "--model", "openai:x", "--base-url", "http://127.0.0.1:9/v1"]

    refused = CliRunner().invoke(main, [*base, "--record", str(record)], input="")
    assert refused.exit_code == 2
    assert "pass --overwrite" in refused.stderr
    assert record.read_text(encoding="utf-8") == "old\n"

    replaced = CliRunner().invoke(main, [*base, "--record", str(record), "--overwrite"], input="")
    assert replaced.exit_code == 0, replaced.output
    assert yaml.safe_load(record.read_text(encoding="utf-8")) == {"turns": []}
    assert "--overwrite" in CliRunner().invoke(main, ["chat", "--help"]).stdout


def test_chat_takes_the_dialect_option(tmp_path: Path) -> None:
    # Valid in the open dialect; the agentforce org rules (the default) want a config block.
    agent = tmp_path / "open.agent"
    agent.write_text(
        "system:\n"
        '    instructions: "Be brief."\n'
        "    messages:\n"
        '        welcome: "Hi"\n'
        '        error: "Oops"\n'
        "start_agent main:\n"
        '    description: "Main"\n'
        "    reasoning:\n"
        '        instructions: "Help."\n',
        encoding="utf-8",
    )
    base = ["chat", str(agent), "--model", "openai:x", "--base-url", "http://127.0.0.1:9/v1"]

    default = CliRunner().invoke(main, base, input="")
    assert default.exit_code == 2
    assert "hint: --dialect agentscript" in default.stderr

    opened = CliRunner().invoke(main, [*base, "--dialect", "agentscript"], input="")
    assert opened.exit_code == 0, opened.output


def test_stub_file_variables_errors_name_the_stub_file(
    shop: Agent, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stubs = tmp_path / "stubs.yaml"
    stubs.write_text("variables: {nope: 1}\n", encoding="utf-8")

    code, _ = chat(shop, QueueModel(), ["hi"], stubs=stubs)

    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"--stubs {stubs}: variables: unknown variable(s) ['nope']")
    assert "--var" not in err


def test_var_errors_still_name_var_with_a_good_stub_file(
    shop: Agent, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stubs = tmp_path / "stubs.yaml"
    stubs.write_text("variables: {count: 1}\n", encoding="utf-8")

    code, _ = chat(shop, QueueModel(), ["hi"], stubs=stubs, variables=["nope=1"])

    assert code == 2
    assert capsys.readouterr().err.startswith("--var: unknown variable(s) ['nope']")


def test_ctrl_c_while_waiting_for_a_line_exits_130_and_keeps_the_recording(
    shop: Agent, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = tmp_path / "chat.yaml"

    def lines() -> Iterator[str]:
        yield "hi"
        raise KeyboardInterrupt

    try:
        code = run_chat(
            shop, model=QueueModel(say("One.")), interactive=False, lines=lines(), record=record
        )
    except KeyboardInterrupt:  # raised on, it would stop the whole test session
        pytest.fail("Ctrl-C escaped run_chat")

    captured = capsys.readouterr()
    assert code == 130
    assert captured.out == "One.\n\n"
    assert "Traceback" not in captured.err and "Aborted" not in captured.err
    assert yaml.safe_load(record.read_text(encoding="utf-8"))["turns"] == [
        {"user": "hi", "model": [{"say": "One."}]}
    ]


def test_cli_chat_ctrl_c_exits_130_not_aborted(
    lone_shop: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr("agentscript.cli.chat.load_agent_or_exit", interrupted)
    result = CliRunner().invoke(main, ["chat", str(lone_shop)], input="hi\n")
    assert result.exit_code == 130
    assert "Aborted!" not in result.output + result.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_chat_to_a_full_disk_is_one_line_not_a_traceback(lone_shop: Path) -> None:
    model = ["--model", "openai:x", "--base-url", "http://127.0.0.1:9/v1"]
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "agentscript.cli", "chat", str(lone_shop), *model],
            input="/vars\n",
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1
    assert done.stderr == "error: cannot write the output: No space left on device\n"


# ---------------------------------------------------------------------- text from outside


# Clears the screen, sets the window title, reverses what follows, returns to the line start;
# the tab, the newline and the zero-width joiner of the emoji stay.
HOSTILE = (
    "ok \x1b[2J\x1b]0;pwned\x07 \u202eboom\u2066 \rend\tof line\nnext \U0001f468\u200d\U0001f469"
)
SHOWN = (
    "ok \\x1b[2J\\x1b]0;pwned\\x07 \\u202eboom\\u2066 \\rend\tof line\nnext "
    "\U0001f468\u200d\U0001f469"
)


@pytest.mark.parametrize("stream", [True, False])
def test_model_text_is_printed_escaped_and_recorded_as_it_came(
    shop: Agent, tmp_path: Path, capsys: pytest.CaptureFixture[str], stream: bool
) -> None:
    record = tmp_path / "chat.yaml"
    preamble = ModelResponse(text=HOSTILE, tool_calls=[ToolCall("c1", "remember", {"note": "n"})])
    model = QueueModel(preamble, say(HOSTILE))

    code, _ = chat(shop, model, ["hi"], stream=stream, record=record)

    assert code == 0
    assert capsys.readouterr().out == f"{SHOWN}\n{SHOWN}\n\n"
    # Only the display is escaped: the recording keeps what the model said.
    turn = yaml.safe_load(record.read_text(encoding="utf-8"))["turns"][0]
    assert [move.get("say") for move in turn["model"]] == [HOSTILE, HOSTILE]


def test_errors_and_details_a_tool_or_a_model_wrote_are_printed_escaped(
    shop: Agent, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An MCP tool's or an API's error text reaches the terminal in --show details and in the
    # turn's error; a model provider's error in the turn's error.
    stubs = tmp_path / "stubs.yaml"
    failing = {"verify_customer": {"error": "bad \x1b]0;pwned\x07 token\u202e"}}
    stubs.write_text(json.dumps({"actions": failing}), encoding="utf-8")
    model = QueueModel(
        call("verify", email="a@example.com"),
        say("Could not verify."),
        ModelError("HTTP 500: \x1b[2J\x1b]0;pwned\x07 boom"),
    )

    code, _ = chat(shop, model, ["I am a@example.com", "again"], stubs=stubs, show=["trace"])

    captured = capsys.readouterr()
    assert code == 1
    printed = captured.out + captured.err
    assert not {"\x1b", "\x07", "\u202e"} & set(printed)
    assert "bad \\x1b]0;pwned\\x07 token\\u202e" in captured.err
    assert "error: the model failed: HTTP 500: \\x1b[2J\\x1b]0;pwned\\x07 boom" in captured.err


@pytest.mark.parametrize("method", ["write", "line", "reply", "detail", "notice", "error"])
def test_the_console_prints_every_text_escaped(
    method: str, capsys: pytest.CaptureFixture[str]
) -> None:
    print_text = getattr(Console(interactive=True), method)
    print_text("a\x1b]0;t\x07\u202eb\tc\nd\x9b2J")
    captured = capsys.readouterr()
    assert "a\\x1b]0;t\\x07\\u202eb\tc\nd\\x9b2J" in captured.out + captured.err
