"""Reporters: each turns a :class:`agentscript.testing.results.RunResult` into text.

They only read results (never run anything): ``human`` (terminal), ``json`` (Salesforce-shaped
result), ``junit`` (one ``<testcase>`` per expectation), ``tap`` (TAP version 14).
"""

from __future__ import annotations

from collections.abc import Callable

from agentscript.testing.reporters.human import render_human
from agentscript.testing.reporters.json_report import render_json
from agentscript.testing.reporters.junit import render_junit
from agentscript.testing.reporters.tap import render_tap
from agentscript.testing.results import RunResult

Reporter = Callable[[RunResult, bool], str]
REPORTERS: dict[str, Reporter] = {
    "human": render_human,
    "json": render_json,
    "junit": render_junit,
    "tap": render_tap,
}
SUFFIXES = {"human": "txt", "json": "json", "junit": "xml", "tap": "tap"}
