"""``--mutate`` runs each mutant in a temporary copy of the agent's folder: the copies read the
``agentscript.toml`` that applies to the original (none when none does), and no score is given
when the suite does not pass on an unmutated copy."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from conftest import ROOT
from helpers import run_test

from agentscript.limits import configured_limits
from agentscript.models.config import CONFIG_ENV
from agentscript.testing import mutation

WEATHER = ROOT / "examples" / "weather_mcp"


def test_mutants_use_the_config_of_a_parent_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The weather agent calls an MCP server that its agentscript.toml, one folder up, declares.
    # Copies that lost the file failed every case for that reason: "2 killed ... 100.0%".
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    shutil.copy(WEATHER / "agentscript.toml", tmp_path)
    shutil.copy(WEATHER / "weather_server.py", tmp_path)
    agents = tmp_path / "agents"
    agents.mkdir()
    for name in ("weather.agent", "paris.yaml"):
        shutil.copy(WEATHER / name, agents)
    code, out, err = run_test(
        str(agents / "paris.yaml"), "--agent", str(agents / "weather.agent"), "--mutate"
    )
    assert code == 0, err
    assert "2 mutants, 1 killed, 1 survived, 0 invalid; mutation score 50.0%" in out
    assert "SURVIVED weather.agent:20 invert_if" in out


def test_mutants_read_the_original_config_and_no_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    project = tmp_path / "project"
    (project / "agents").mkdir(parents=True)
    agent = project / "agents" / "weather.agent"
    shutil.copy(WEATHER / "weather.agent", agent)
    # A file above the scratch folder that does not apply to the original must not apply to
    # the copies either.
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "agentscript.toml").write_text("[limits]\nmax_transitions = 3\n", "utf-8")
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    seen: list[int] = []

    async def suite_fails(copy: Path) -> bool:
        seen.append(configured_limits(copy)[0].max_transitions)
        return False

    mutants = mutation.script_mutants(agent)[:1]
    asyncio.run(mutation.run_mutants(agent, mutants, suite_fails))
    assert seen == [10, 10]  # the unmutated copy, then the mutant: the defaults, as in place
    (project / "agentscript.toml").write_text("[limits]\nmax_transitions = 7\n", "utf-8")
    seen.clear()
    asyncio.run(mutation.run_mutants(agent, mutants, suite_fails))
    assert seen == [7, 7]
    assert CONFIG_ENV not in os.environ  # put back as it was


def test_no_score_when_the_suite_fails_on_an_unmutated_copy(tmp_path: Path) -> None:
    agent = tmp_path / "weather.agent"
    shutil.copy(WEATHER / "weather.agent", agent)
    mutants = mutation.script_mutants(agent)
    calls: list[Path] = []

    async def always_fails(copy: Path) -> bool:
        calls.append(copy)
        return True

    with pytest.raises(mutation.UnmutatedCopyFails, match="unmutated copy"):
        asyncio.run(mutation.run_mutants(agent, mutants, always_fails))
    assert len(calls) == 1  # the unmutated copy only
    assert {m.status for m in mutants} == {"pending"}

    async def does_not_load(copy: Path) -> bool:
        raise mutation.invalid()

    with pytest.raises(mutation.UnmutatedCopyFails, match="the copy does not load"):
        asyncio.run(mutation.run_mutants(agent, mutants, does_not_load))


def test_mutate_refuses_to_score_when_the_agent_needs_a_file_outside_its_folder(
    tmp_path: Path,
) -> None:
    # A Python action reading a file one folder up: it works in place, and fails in every
    # copy, so each mutant would have counted as killed.
    (tmp_path / "forecast.txt").write_text("sunny", encoding="utf-8")
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "forecasts.py").write_text(
        "from pathlib import Path\n\n"
        "def get_forecast(city):\n"
        "    text = (Path(__file__).parent.parent / 'forecast.txt').read_text()\n"
        "    return {'city': city, 'forecast': text}\n",
        encoding="utf-8",
    )
    text = (WEATHER / "weather.agent").read_text(encoding="utf-8")
    (agents / "weather.agent").write_text(
        text.replace("mcp://weather/get_forecast", "python://forecasts:get_forecast"),
        encoding="utf-8",
    )
    spec = (WEATHER / "paris.yaml").read_text(encoding="utf-8")
    (agents / "paris.yaml").write_text(spec.replace("sunny, 21 °C", "sunny"), encoding="utf-8")
    code, out, err = run_test(
        str(agents / "paris.yaml"), "--agent", str(agents / "weather.agent"), "--mutate"
    )
    assert code == 1
    assert "PASS" in out and "mutation score" not in out + err
    assert "weather.agent not run: the suite does not pass on an unmutated copy" in err
