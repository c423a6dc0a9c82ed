"""The shipped examples are canonically formatted, so `agentscript fmt --check examples/` passes."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from agentscript.cli import main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_examples_are_formatted() -> None:
    result = CliRunner().invoke(main, ["fmt", "--check", str(EXAMPLES)])
    assert result.exit_code == 0, result.output
