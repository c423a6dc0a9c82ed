"""An ``agentscript.toml`` nested too deeply for the TOML parser (it recurses) is an invalid
file like any other, for every reader of it: never a RecursionError traceback."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from agentscript.cli import main
from agentscript.models.config import read_toml

ROOT = Path(__file__).parents[1]
DEEP = "x = " + "[" * 100_000 + "]" * 100_000 + "\n"


def test_read_toml_calls_a_too_deep_document_invalid_toml(tmp_path: Path) -> None:
    config = tmp_path / "agentscript.toml"
    config.write_text(DEEP)
    with pytest.raises(tomllib.TOMLDecodeError, match="nested too deeply"):
        read_toml(config)


@pytest.mark.parametrize("command", ["validate", "check-gates", "run"])
def test_commands_beside_a_too_deep_config_give_no_traceback(tmp_path: Path, command: str) -> None:
    folder = tmp_path / "gate"
    shutil.copytree(ROOT / "examples" / "security_gate", folder)
    (folder / "agentscript.toml").write_text(DEEP)
    agent = next(folder.glob("*.agent"))
    args = [command, str(agent)]
    if command == "run":
        args += ["--conversation", str(next(folder.glob("*.yaml")))]
    result = CliRunner().invoke(main, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output and "RecursionError" not in result.output
    assert "internal-error" not in result.output
