"""Running `agentscript test` in-process for the tests."""

from __future__ import annotations

import json
from typing import Any

from click.testing import CliRunner

from agentscript.cli import main


def run_test(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["test", *args], env=env, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def run_json(*args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    code, out, err = run_test(*args, "--result-format", "json", env=env)
    assert out, err
    data: dict[str, Any] = json.loads(out)
    return code, data
