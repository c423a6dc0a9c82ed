"""Which agents a list of paths names (``discover.agent_files``), as every command reads it."""

from __future__ import annotations

import shutil
from pathlib import Path

from click.testing import CliRunner

from agentscript.cli import main
from agentscript.discover import agent_files

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_an_agent_reached_by_its_folder_and_its_own_path_comes_once(tmp_path: Path) -> None:
    folder = tmp_path / "agents"
    shutil.copytree(EXAMPLES / "order_status", folder)
    agent = folder / "order_status.agent"
    found = list(agent_files([folder, agent, tmp_path / "agents" / "." / "order_status.agent"]))
    assert found.count(agent) == 1
    assert [p for p in found if p.suffix == ".agent"] == sorted(folder.rglob("*.agent"))


def test_validate_counts_an_agent_named_twice_once(tmp_path: Path) -> None:
    folder = tmp_path / "agents"
    shutil.copytree(EXAMPLES / "order_status", folder)
    once = CliRunner().invoke(main, ["validate", str(folder)])
    twice = CliRunner().invoke(main, ["validate", str(folder), str(folder / "order_status.agent")])
    assert twice.exit_code == once.exit_code == 0
    assert twice.output.splitlines()[-1] == once.output.splitlines()[-1]
    assert "1 file(s) checked" in once.output
