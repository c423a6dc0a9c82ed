"""Issue 9 item 4: every outside file and YAML document is read within budgets; deep or long
expressions are diagnostics; growing values are stopped by a cap."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hostile_helpers import AGENTS, Driven, load_agent

from agentscript.cli import main
from agentscript.conversation import ConversationError, load_conversation, parse_conversation
from agentscript.mantle import load_project
from agentscript.models import config as model_config
from agentscript.models.base import ModelError
from agentscript.reading import FileInputError, read_file_bytes

# "Billion laughs": nine aliases per level, nine levels: 9^9 nodes once expanded.
ALIAS_BOMB = "\n".join(
    ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
)


def cli(*args: str | Path) -> tuple[int, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.output


def test_alias_bomb_in_a_conversation_file_is_refused_with_its_line() -> None:
    with pytest.raises(ConversationError) as caught:
        parse_conversation(ALIAS_BOMB + "\nturns: []\n", Path("bomb.yaml"))
    message = str(caught.value)
    assert message.startswith("bomb.yaml:") and "alias bomb is refused" in message
    assert "MAX_YAML_NODES" in message


def test_recursive_alias_is_refused() -> None:
    with pytest.raises(ConversationError, match="refers to the node that contains it"):
        parse_conversation("turns: &t [*t]\n")


def test_duplicate_key_in_a_conversation_file_is_an_error_with_file_and_line() -> None:
    text = "turns:\n  - user: first\nturns:\n  - user: second\n"
    with pytest.raises(ConversationError) as caught:
        parse_conversation(text, Path("dup.yaml"))
    assert str(caught.value).startswith("dup.yaml:3:1: invalid YAML: duplicate key 'turns'")


def test_duplicate_key_nested_in_a_stub_is_an_error() -> None:
    text = "actions:\n  a:\n    outputs: {x: 1, x: 2}\nturns: []\n"
    with pytest.raises(ConversationError, match=r":3:\d+: invalid YAML: duplicate key 'x'"):
        parse_conversation(text)


def test_alias_bomb_in_a_mantle_file_is_a_diagnostic(tmp_path: Path) -> None:
    (tmp_path / "agent.yml").write_text("agent:\n  persona: You help.\n")
    (tmp_path / "memory.yml").write_text(ALIAS_BOMB + "\n")
    (tmp_path / "skills" / "s").mkdir(parents=True)
    (tmp_path / "skills" / "s" / "skill.md").write_text(
        "---\nname: S\ndescription: x\n---\nHelp.\n"
    )
    _, diagnostics = load_project(tmp_path)
    found = [d for d in diagnostics if d.code == "mantle-yaml"]
    assert found and "alias bomb is refused" in found[0].message
    assert found[0].file == str(tmp_path / "memory.yml")


def long_condition_agent(tmp_path: Path, terms: int) -> Path:
    chain = " + ".join(["1"] * terms)
    text = (AGENTS / "outputs.agent").read_text()
    text = text.replace(
        '                description: "Overflow"\n',
        f'                description: "Overflow"\n                available when {chain} > 1\n',
    )
    path = tmp_path / "long.agent"
    path.write_text(text)
    return path


def test_thousand_term_expression_is_a_diagnostic_not_a_recursion_error(tmp_path: Path) -> None:
    code, output = cli("validate", long_condition_agent(tmp_path, 1_000))
    assert code == 1
    assert "error[syntax-error]: expression has more than 200 operators" in output
    assert "internal-error" not in output and "RecursionError" not in output


def test_long_but_reasonable_expression_still_validates(tmp_path: Path) -> None:
    code, output = cli("validate", long_condition_agent(tmp_path, 150))
    assert code == 0, output


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_reading_a_device_as_an_agent_is_a_clear_error() -> None:
    code, output = cli("validate", "/dev/zero")
    assert code == 2  # unreadable, as for any file that cannot be read
    assert "not a regular file; only regular files are read" in output


@pytest.mark.skipif(sys.platform == "win32", reason="FIFOs are POSIX")
def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.agent"
    os.mkfifo(fifo)
    code, output = cli("validate", fifo)
    assert code == 2 and "not a regular file" in output
    with pytest.raises(ConversationError, match="not a regular file"):
        load_conversation(fifo)
    code, output = cli("run", AGENTS / "outputs.agent", "--conversation", fifo)
    assert code == 2 and "not a regular file" in output


def test_files_over_the_size_cap_are_refused(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * 100)
    with pytest.raises(FileInputError, match="larger than the limit of 10 bytes"):
        read_file_bytes(big, max_bytes=10)
    assert read_file_bytes(big, max_bytes=100) == b"#" * 100


def test_oversized_agentscript_toml_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "agentscript.toml"
    config.write_text("[models]\n" + "# padding\n" * 100)
    monkeypatch.setattr(model_config, "MAX_CONFIG_BYTES", 64)
    with pytest.raises(ModelError, match="larger than the limit of 64 bytes"):
        model_config.load_config(config)


def test_doubling_a_string_every_turn_stops_at_the_default_variable_cap() -> None:
    driven = Driven(load_agent("outputs"))
    errors = []
    for _ in range(8):  # four doublings a turn: 2 * 16^8 characters without a cap
        reply = driven.send("go", {"tool": "grow"}, {"say": "x"})
        errors.append(reply.error)
    assert any(e and "Limits.max_variable_chars" in e for e in errors)
    assert len(driven.session.variables["s"]) <= 200_000


def test_yaml_dates_in_a_conversation_file_stay_text() -> None:
    """JSON has no dates: a stub output written `2026-02-10` reaches the action check as
    the string written, not as a datetime.date the output check would refuse."""
    conversation = parse_conversation(
        "actions:\n  a:\n    outputs: {when: 2026-02-10, at: 2026-02-10T10:00:00Z}\nturns: []\n"
    )
    assert conversation.stubs["a"]["outputs"] == {
        "when": "2026-02-10",
        "at": "2026-02-10T10:00:00Z",
    }
