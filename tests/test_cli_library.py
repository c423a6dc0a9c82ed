"""The library functions behind the CLI: path discovery, checking a path, rendering
diagnostics, formatting a file, and the shared exit codes and --show choices."""

from __future__ import annotations

from pathlib import Path

import click

from agentscript.cli import COMMANDS, main
from agentscript.commands import SHOW_CHOICES, ExitCode, Show
from agentscript.diagnostics import Span, error
from agentscript.discover import agent_files, any_unreadable
from agentscript.formatting import format_path
from agentscript.render import (
    render_diagnostic,
    render_load_errors,
    render_report,
    source_lines,
)
from agentscript.validation import internal_error, validate_path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def test_every_command_is_registered_once_from_the_table() -> None:
    assert sorted(main.commands) == sorted(c.name for c in COMMANDS if c.name)
    assert len({c.name for c in COMMANDS}) == len(COMMANDS)


def test_show_choices_of_chat_come_from_the_one_enum() -> None:
    chat = main.commands["chat"]
    (show,) = [p for p in chat.params if p.name == "show"]
    assert isinstance(show.type, click.Choice)
    assert tuple(show.type.choices) == SHOW_CHOICES == tuple(s.value for s in Show)
    assert [int(c) for c in ExitCode] == [0, 1, 2, 130]


def test_a_folder_means_its_agent_files_and_its_mantle_projects(tmp_path: Path) -> None:
    found = list(agent_files([EXAMPLES]))
    assert EXAMPLES / "card_bank" in found
    assert EXAMPLES / "order_status" / "order_status.agent" in found
    assert all(p.suffix == ".agent" or p.is_dir() for p in found)
    # A file is itself, even when missing (its reader reports it).
    missing = tmp_path / "nope.agent"
    assert list(agent_files([missing])) == [missing]
    assert list(agent_files([EXAMPLES / "card_bank"])) == [EXAMPLES / "card_bank"]


def test_validate_path_reports_a_missing_file_as_unreadable(tmp_path: Path) -> None:
    diagnostics = validate_path(tmp_path / "nope.agent")
    assert [d.code for d in diagnostics] == ["file-not-found"]
    assert any_unreadable(diagnostics)
    assert not any_unreadable(validate_path(EXAMPLES / "order_status" / "order_status.agent"))


def test_internal_error_names_the_file_and_the_exception() -> None:
    diag = internal_error("x.agent", KeyError("k"))
    assert diag.code == "internal-error" and diag.file == "x.agent" and "KeyError" in diag.message


def test_render_puts_a_caret_under_the_span() -> None:
    diag = error("demo", "bad name", Span(2, 5, 2, 8))
    diag.file = "a.agent"
    text = render_diagnostic(diag, ["first", "abc name here"])
    head, source, caret = text.split("\n")
    assert head == diag.format()
    assert source == "    abc name here"
    assert caret == "        ^^^"
    # No source line (or outside the file): the head alone.
    assert render_diagnostic(diag, None) == diag.format()
    assert render_diagnostic(diag, ["only one line"]) == diag.format()


def test_source_lines_are_none_for_binary_or_unreadable_files(tmp_path: Path) -> None:
    binary = tmp_path / "b.agent"
    binary.write_bytes(b"config:\x00\x01")
    assert source_lines(binary) is None
    assert source_lines(tmp_path / "missing") is None


def test_render_report_reads_each_file_for_its_diagnostics(tmp_path: Path) -> None:
    agent = tmp_path / "a.agent"
    agent.write_text("config:\n    developer_name: 3\n", encoding="utf-8")
    diagnostics = validate_path(agent)
    rendered = render_report([(agent, diagnostics)])
    assert len(rendered) == len(diagnostics) and rendered
    assert all(text.startswith(str(agent)) for text in rendered)


def test_load_errors_show_the_agent_line_but_not_under_a_config_error(tmp_path: Path) -> None:
    agent = tmp_path / "a.agent"
    agent.write_text("config:\n    developer_name: 3\n", encoding="utf-8")
    toml = tmp_path / "agentscript.toml"
    toml.write_text("[budgets]\nturn = 3\n", encoding="utf-8")
    in_agent = error("demo", "bad value", Span(2, 21, 2, 22))
    in_agent.file = str(agent)
    for code in ("config-error", "invalid-limits"):  # about a table, not a line of the agent
        config = error(code, f"{toml}: [budgets] turn must be a table", Span(1, 1, 1, 1))
        config.file = str(toml)
        shown_agent, shown_config = render_load_errors([in_agent, config], agent)
        assert shown_agent.splitlines()[1] == "    " + "    developer_name: 3"
        assert shown_config == config.format()


def test_mcp_serve_and_otel_are_offered_through_the_table() -> None:
    assert "mcp-serve" in main.commands
    for name in ("run", "chat"):
        (otel,) = [p for p in main.commands[name].params if p.name == "otel"]
        assert isinstance(otel.type, click.Choice)
        assert tuple(otel.type.choices) == ("console", "otlp")
    assert any(p.name == "connect" for p in main.commands["validate"].params)


def test_format_path_formats_without_writing(tmp_path: Path) -> None:
    agent = tmp_path / "a.agent"
    agent.write_text('config:\r\n  developer_name:   "demo"\r\n', encoding="utf-8", newline="")
    result = format_path(agent)
    assert result.problems == [] and result.changed
    assert "(formatted)" in result.diff()
    assert agent.read_bytes() == b'config:\r\n  developer_name:   "demo"\r\n'  # untouched
    result.write()
    assert b"\r\n" in agent.read_bytes()  # CRLF kept
    assert not format_path(agent).changed


def test_format_path_reports_instead_of_raising(tmp_path: Path) -> None:
    assert any_unreadable(format_path(tmp_path / "nope.agent").problems)
    broken = tmp_path / "broken.agent"
    broken.write_text("config:\n  developer_name: [\n", encoding="utf-8")
    result = format_path(broken)
    assert result.formatted is None and result.problems and not result.changed
