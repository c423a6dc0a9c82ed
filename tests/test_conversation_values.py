"""The values a conversation file may hold (``agentscript run --conversation``): only a missing
key or null means "none", stub errors are texts, YAML ``!!binary`` values are refused; and
playing a long file keeps no model request per turn."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

import agentscript
from agentscript import playback
from agentscript.actions import StubBook
from agentscript.cli import main
from agentscript.conversation import ConversationError, parse_conversation
from agentscript.models.scripted import Move, ScriptedModel
from agentscript.playback import play

AGENT = """\
# @dialect: agentscript
system:
    instructions: "Be brief."
    messages:
        welcome: "Welcome!"
        error: "Something broke."

variables:
    customer: linked string
        description: "Customer id"
    status: mutable string

start_agent main:
    description: "Main"
    reasoning:
        instructions: ->
            | Help the customer.
        actions:
            lookup: @actions.lookup_order
                with order_number=...
                set @variables.status = @outputs.status
    actions:
        lookup_order:
            description: "Look up an order"
            target: "flow://Lookup"
            inputs:
                order_number: string
            outputs:
                status: string
"""

HELLO = "!!binary aGVsbG8="  # b"hello"


@pytest.fixture
def agent_file(tmp_path: Path) -> Path:
    path = tmp_path / "mini.agent"
    path.write_text(AGENT, encoding="utf-8")
    return path


def run(agent: Path, tmp_path: Path, text: str) -> Any:
    conversation = tmp_path / "conversation.yaml"
    conversation.write_text(text, encoding="utf-8")
    result = CliRunner().invoke(main, ["run", str(agent), "--conversation", str(conversation)])
    assert "Traceback" not in result.output + result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit)
    return result


# ---------------------------------------------------------------- memory of a long file


def test_playing_a_conversation_keeps_no_model_request(
    agent_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each request holds the history so far: kept for every turn, a file of N turns took
    memory in N² (20,000 turns: 3.3 GB)."""
    models: list[ScriptedModel] = []

    class Watched(ScriptedModel):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            models.append(self)

    monkeypatch.setattr(playback, "ScriptedModel", Watched)
    agent = agentscript.load(agent_file)
    turns = "".join("  - {user: hi, model: [{say: ok}]}\n" for _ in range(40))
    conversation = parse_conversation("variables: {customer: c}\nturns:\n" + turns)
    result = play(agent, conversation)
    assert [t.reply.text for t in result.turns] == ["ok"] * 40
    [model] = models
    assert model.requests == []


def test_the_scripted_model_keeps_its_requests_unless_told_not_to(agent_file: Path) -> None:
    agent = agentscript.load(agent_file)
    for keep, kept in ((True, 2), (False, 0)):
        model = ScriptedModel(keep_requests=keep)
        session = agent.session(model=model, variables={"customer": "c"})
        for _ in range(2):
            model.begin_turn([Move(text="ok")])
            assert session.send("hi").text == "ok"
        assert len(model.requests) == kept


# ---------------------------------------------------------------- wrong-typed empty values


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("turns: 0\n", "'turns' must be a list of turns, got 0"),
        ("turns: false\n", "'turns' must be a list of turns, got false"),
        ('turns: ""\n', "'turns' must be a list of turns, got the text \"\""),
        ("variables: 0\n", "'variables' must be a mapping of names to values, got 0"),
        ("variables: []\n", "'variables' must be a mapping of names to values, got a list"),
        ('actions: ""\n', "'actions' must be a mapping of action names to stubs"),
        ("actions: false\n", "'actions' must be a mapping of action names to stubs, got false"),
        ("turns:\n  - user: hi\n    model: 0\n", "turn 1: 'model' must be a list of moves, got 0"),
        ('turns:\n  - user: hi\n    model: ""\n', "turn 1: 'model' must be a list of moves"),
        ("turns:\n  - user: hi\n    model: [{tool: lookup, args: 0}]\n", "'args' must be a"),
        ("turns:\n  - user: hi\n    model: [{tool: lookup, args: []}]\n", "'args' must be a"),
    ],
    ids=lambda v: v.split("\n")[-2].strip() if isinstance(v, str) and "\n" in v.strip() else None,
)
def test_a_falsy_value_of_the_wrong_type_is_no_empty_value(
    agent_file: Path, tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(ConversationError, match=r"^conv\.yaml: ") as caught:
        parse_conversation(text, Path("conv.yaml"))
    assert message in str(caught.value)
    result = run(agent_file, tmp_path, text)
    assert result.exit_code == 2
    assert message in result.stderr
    assert result.stdout == ""


def test_a_missing_key_or_null_is_the_empty_default(agent_file: Path, tmp_path: Path) -> None:
    for text in ("", "turns: ~\nvariables: ~\nactions: ~\n", "turns: []\n"):
        assert parse_conversation(text).turns == []
    text = (
        "variables: {customer: c}\n"
        "turns:\n"
        "  - {user: hi, model: ~}\n"
        "  - {user: hi, model: [{tool: lookup, args: ~}, {say: ok}]}\n"
    )
    conversation = parse_conversation(text)
    assert conversation.turns[0].moves == []
    assert conversation.turns[1].moves[0].calls == [("lookup", {})]


# ---------------------------------------------------------------- stub errors


@pytest.mark.parametrize(
    ("stub", "got"),
    [
        ("{error: [1, {a: b}]}", "got a list"),
        ("{error: {a: b}}", "got a mapping"),
        ("{error: null}", "got null"),
        ("{error: }", "got null"),
        ("{error: true}", "got true/false"),
        (f"{{error: {HELLO}}}", "got a binary (!!binary) value"),
    ],
)
def test_a_stub_error_must_be_a_text(agent_file: Path, tmp_path: Path, stub: str, got: str) -> None:
    text = f"actions: {{lookup_order: {stub}}}\nturns: []\n"
    result = run(agent_file, tmp_path, text)
    assert result.exit_code == 2
    assert "actions: lookup_order: stub 'error' must be the failure's text" in result.stderr
    assert got in result.stderr
    listed = f"actions: {{lookup_order: [{{outputs: {{}}}}, {stub}]}}\nturns: []\n"
    with pytest.raises(ConversationError, match=r"actions: lookup_order\[1\]: stub 'error'"):
        parse_conversation(listed)


def test_a_stub_error_text_fails_the_call_with_that_text() -> None:
    book = StubBook.from_data({"a": {"error": "out of stock"}, "b": [{"error": 404}]})
    assert book.take("a").error == "out of stock"
    assert book.take("b").error == "404"
    with pytest.raises(
        ValueError, match=r"^a: stub 'error' must be the failure's text, got a list"
    ):
        StubBook.from_data({"a": {"error": [1, {"a": "b"}]}})


# ---------------------------------------------------------------- !!binary values


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (f"turns:\n  - user: {HELLO}\n", "turn 1: 'user' must be text, not a binary"),
        (
            f"turns:\n  - user: hi\n    model: [{{say: {HELLO}}}]\n",
            "turn 1, move 1: 'say' must be text, not a binary",
        ),
        (
            f"turns:\n  - user: hi\n    model: [{{tool: lookup, args: {{order_number: {HELLO}}}}}]\n",
            "turn 1, move 1: args.order_number: a binary (!!binary) value is not allowed",
        ),
        (
            f"turns:\n  - user: hi\n    model: [{{tools: [{{tool: a}}, {{tool: b, args: {{x: [1, {HELLO}]}}}}]}}]\n",
            "turn 1, move 1: tools[1].args.x[1]: a binary",
        ),
        (
            f"turns:\n  - user: hi\n    expect: {{response: {HELLO}}}\n",
            "turn 1: expect.response: a binary",
        ),
        (
            f"actions: {{lookup_order: [{{outputs: {{status: {HELLO}}}}}]}}\n",
            "actions: lookup_order[0].outputs.status: a binary",
        ),
        (f"variables: {{customer: {HELLO}}}\n", "variables: customer: a binary"),
    ],
    ids=["user", "say", "args", "tools-args", "expect", "outputs", "variables"],
)
def test_a_binary_value_is_refused_where_it_is(
    agent_file: Path, tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(ConversationError) as caught:
        parse_conversation(text, Path("conv.yaml"))
    assert str(caught.value).startswith(f"conv.yaml: {message}")
    result = run(agent_file, tmp_path, text)
    assert result.exit_code == 2
    assert message in result.stderr
    assert "b'hello'" not in result.stderr + result.stdout


def test_a_recorded_action_that_failed_without_a_message_replays_as_a_failure() -> None:
    from agentscript.models.recording import action_stub

    step = {"type": "ACTION_STEP", "action": "lookup_order", "target": "flow://X", "error": ""}
    stub = action_stub(step)
    # a stub's error must be text (an empty one is refused), so chat --record writes one
    assert stub == {"error": "the action failed"}
    assert StubBook.from_data({"lookup_order": stub}).has("lookup_order")


@pytest.mark.parametrize("text", ['""', '"  "'])
def test_an_empty_stub_error_is_a_failure_without_a_message(text: str) -> None:
    """What chat --record wrote for an action that failed without a message, before it wrote
    "the action failed": such a recording still replays."""
    book = StubBook.from_data({"lookup_order": yaml.safe_load(f"{{error: {text}}}")})
    assert book.has("lookup_order")
    parse_conversation(f"actions: {{lookup_order: {{error: {text}}}}}\nturns: []\n")
