"""The json reporter: the Salesforce-shaped result of :meth:`RunResult.to_json`."""

from __future__ import annotations

import json

from agentscript.testing.results import RunResult


def render_json(run: RunResult, verbose: bool = False) -> str:
    return json.dumps(run.to_json(), indent=2, default=repr, ensure_ascii=False) + "\n"
