"""The json reporter: the Salesforce-shaped result of :meth:`RunResult.to_json`."""

from __future__ import annotations

import json
import math
from typing import Any

from agentscript.jsontext import escape_lone_surrogates
from agentscript.testing.results import RunResult


def _finite(value: Any) -> Any:
    """``value`` with NaN and the infinities as text: JSON has no such numbers, and a report
    with a bare ``NaN`` is refused by strict parsers."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def render_json(run: RunResult, verbose: bool = False) -> str:
    # allow_nan=False: should a non-finite number slip past _finite, fail loudly rather than
    # write a report that is not JSON.
    data = _finite(run.to_json())
    text = json.dumps(data, indent=2, default=repr, ensure_ascii=False, allow_nan=False)
    # A lone surrogate (in a model's answer, which the report quotes) would crash the print.
    return escape_lone_surrogates(text) + "\n"
