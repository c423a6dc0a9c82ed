"""``agentscript validate`` checks the ``agentscript.toml`` an agent uses, as ``agentscript.load``
does: the same diagnostics (code, file, position, message), once per toml file, for ``.agent``
files and Mantle project folders, in text and JSON, without connecting anywhere."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import agentscript
from agentscript.cli import main

REPO = Path(__file__).resolve().parents[1]
ORDER_STATUS = REPO / "examples" / "order_status"
CARD_BANK = REPO / "examples" / "card_bank"

# One malformed table each: what `agentscript run` refuses with exit 2.
MALFORMED = {
    "budgets": ('[budgets]\non_exceed = "explode"\n', "config-error", "on_exceed must be"),
    "mcp": ("[mcp.servers.weather]\nbogus = 1\n", "config-error", "unknown key(s) ['bogus']"),
    "limits": ("[limits]\nmax_llm_calls = -1\n", "invalid-limits", "max_llm_calls must be"),
    "prices": (
        '[models]\ndefault = "openai:gpt-4o-mini"\n[budgets]\nsession = { cost = 1.0 }\n',
        "config-error",
        "a cost cap is set but [prices] has no price for openai:gpt-4o-mini",
    ),
    "resilience": ("[resilience]\nfallback = 5\n", "config-error", "[resilience] fallback"),
    "toml": ("[limits\n", "config-error", "invalid TOML"),
}

CLEAN = """\
[limits]
max_llm_calls = 4

[budgets]
on_exceed = "escalate"
session = { cost = 1.0 }

[prices."openai:gpt-4o-mini"]
input = 0.15
output = 0.60

[models]
default = "openai:gpt-4o-mini"

[mcp.servers.weather]
command = "python"
args = ["weather_server.py"]
"""


def invoke(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(autouse=True)
def _no_config_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTSCRIPT_CONFIG", raising=False)


@pytest.fixture
def order_status(tmp_path: Path) -> Path:
    folder = tmp_path / "order_status"
    shutil.copytree(ORDER_STATUS, folder)
    (folder / "agentscript.toml").unlink(missing_ok=True)
    return folder


def load_errors(agent: Path, **options: bool) -> list[dict[str, object]]:
    with pytest.raises(agentscript.AgentScriptError) as info:
        agentscript.load(agent, **options)
    return [d.to_json() for d in info.value.diagnostics]


@pytest.mark.parametrize("table", sorted(MALFORMED))
def test_validate_reports_what_load_reports_for_a_malformed_table(
    order_status: Path, table: str
) -> None:
    text, code, fragment = MALFORMED[table]
    toml = order_status / "agentscript.toml"
    toml.write_text(text)
    # --no-lints: the lints add assert-invalid for a toml they cannot read (invalid TOML).
    result = invoke("validate", "--no-lints", "--format", "json", order_status)
    assert result.exit_code == 1, result.output
    found = json.loads(result.stdout)
    assert found == load_errors(order_status / "order_status.agent")
    (diag,) = found
    assert (diag["code"], diag["file"], diag["line"], diag["column"]) == (code, str(toml), 1, 1)
    assert fragment in diag["message"]


@pytest.mark.parametrize("table", ["budgets", "mcp", "limits"])
def test_validate_text_shows_a_config_error_as_run_does_and_counts_it(
    order_status: Path, table: str
) -> None:
    text, code, fragment = MALFORMED[table]
    toml = order_status / "agentscript.toml"
    toml.write_text(text)
    result = invoke("validate", order_status)
    assert result.exit_code == 1
    (line,) = result.stdout.splitlines()  # the head line alone: no toml line shown
    assert line.startswith(f"{toml}:1:1: error[{code}]: ") and fragment in line
    assert "1 file(s) checked: 1 error(s), 0 warning(s)" in result.stderr


def test_validate_passes_a_clean_toml(order_status: Path) -> None:
    (order_status / "agentscript.toml").write_text(CLEAN)
    result = invoke("validate", order_status)
    assert result.exit_code == 0, result.output
    assert "1 file(s) checked: 0 error(s), 0 warning(s)" in result.stderr
    assert json.loads(invoke("validate", "--format", "json", order_status).stdout) == []


def test_validate_reports_a_limits_and_an_integration_table_together(order_status: Path) -> None:
    # load stops at the first; validate reports every table it can read.
    (order_status / "agentscript.toml").write_text(MALFORMED["limits"][0] + MALFORMED["budgets"][0])
    result = invoke("validate", "--format", "json", order_status)
    assert [d["code"] for d in json.loads(result.stdout)] == ["invalid-limits", "config-error"]


def test_validate_reports_a_shared_toml_once(order_status: Path) -> None:
    shutil.copy(order_status / "order_status.agent", order_status / "second.agent")
    (order_status / "agentscript.toml").write_text(MALFORMED["mcp"][0])
    result = invoke("validate", order_status)
    assert result.exit_code == 1
    assert result.stdout.count("error[config-error]") == 1
    assert "2 file(s) checked: 1 error(s), 0 warning(s)" in result.stderr


def test_validate_reports_the_toml_of_a_mantle_project(tmp_path: Path) -> None:
    project = tmp_path / "card_bank"
    shutil.copytree(CARD_BANK, project)
    toml = project / "agentscript.toml"
    toml.write_text(MALFORMED["budgets"][0])
    result = invoke("validate", "--format", "json", project)
    assert result.exit_code == 1, result.output
    found = json.loads(result.stdout)
    assert found == load_errors(project, stub_missing_tools=True)
    assert [(d["code"], d["file"]) for d in found] == [("config-error", str(toml))]


def test_validate_uses_the_toml_agentscript_config_names(
    order_status: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chosen = tmp_path / "chosen.toml"
    chosen.write_text(MALFORMED["limits"][0])
    monkeypatch.setenv("AGENTSCRIPT_CONFIG", str(chosen))
    result = invoke("validate", "--format", "json", order_status)
    assert [(d["code"], d["file"]) for d in json.loads(result.stdout)] == [
        ("invalid-limits", str(chosen))
    ]


def test_validate_reads_a_local_openapi_document_but_fetches_none(order_status: Path) -> None:
    toml = order_status / "agentscript.toml"
    (order_status / "api.yaml").write_text("openapi: 3.0.0\npaths: []\n")
    toml.write_text('[openapi.shop]\nspec = "api.yaml"\nbase_url = "https://shop.example"\n')
    local = json.loads(invoke("validate", "--format", "json", order_status).stdout)
    assert [d["code"] for d in local] == ["config-error"]
    assert "`paths` must be a mapping" in local[0]["message"]
    # Port 9 (discard) answers nothing: fetching it would be a `cannot fetch` config-error.
    toml.write_text('[openapi.shop]\nspec = "http://127.0.0.1:9/openapi.json"\n')
    result = invoke("validate", order_status)
    assert result.exit_code == 0, result.output


MCP_AGENT = """\
# @dialect: agentscript
system:
    instructions: "Be brief."
    messages:
        welcome: "Hi"
        error: "Sorry"

start_agent main:
    description: "Main"
    reasoning:
        instructions: ->
            | Tell the weather.
        actions:
            forecast: @actions.forecast
    actions:
        forecast:
            description: "The forecast"
            target: "mcp://weather/forecast"
            inputs:
                city: string
"""


def test_validate_connect_does_not_repeat_a_config_error(tmp_path: Path) -> None:
    agent = tmp_path / "weather.agent"
    agent.write_text(MCP_AGENT)
    (tmp_path / "agentscript.toml").write_text(MALFORMED["mcp"][0])
    result = invoke("validate", "--connect", "--no-lints", agent)
    assert result.exit_code == 1, result.output
    assert result.stdout.count("error[config-error]") == 1
    assert f"{tmp_path / 'agentscript.toml'}:1:1: error[config-error]" in result.stdout
