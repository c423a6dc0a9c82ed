"""`run` on Mantle projects whose Python tools are not shipped (the public conformance projects)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from agentscript.cli import main

BANKING = (
    Path(__file__).resolve().parents[1].parent
    / "shared/conformance/mantle/RasaHQ__rasa-community-resources__maestro-voice-banking-skills"
)


def _conversation(tmp_path: Path) -> Path:
    path = tmp_path / "hello.yaml"
    path.write_text("turns:\n  - user: hello\n    model:\n      - say: Hi there.\n")
    return path


def test_missing_tools_are_an_input_error_with_a_hint(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["run", str(BANKING), "--conversation", str(_conversation(tmp_path))]
    )
    assert result.exit_code == 2
    assert "mantle-unresolved-tool" in result.output
    assert "--stub-missing-tools" in result.output
    assert "Traceback" not in result.output


def test_stub_missing_tools_lets_the_project_run(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        [
            "run",
            str(BANKING),
            "--conversation",
            str(_conversation(tmp_path)),
            "--json",
            "--stub-missing-tools",
        ],
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    turn = payload["turns"][0]
    assert turn["error"] is None
    assert turn["response"].endswith("Hi there.")
