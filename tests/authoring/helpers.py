"""Shared helpers for the authoring tests: check an agent text, run a command."""

from __future__ import annotations

import textwrap
from pathlib import Path

from click.testing import CliRunner, Result

from agentscript.check import check
from agentscript.check.outline import AgentOutline
from agentscript.cli import main
from agentscript.syntax import parse

HEADER = """\
# @dialect: agentscript
system:
    instructions: "Be brief."
    messages:
        welcome: "Hi"
        error: "Sorry"
"""


def agent_text(body: str) -> str:
    return HEADER + "\n" + textwrap.dedent(body)


def outline_of(text: str) -> AgentOutline:
    doc = parse(text, "test.agent")
    result = check(doc)
    errors = [d for d in [*doc.diagnostics, *result.diagnostics] if d.is_error]
    assert not errors, [d.format() for d in errors]
    return result.outline


def invoke(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


def _outdent(text: str, width: int) -> str:
    pad = " " * width
    return "\n".join(line[width:] if line.startswith(pad) else line for line in text.split("\n"))


def swap(text: str, old: str, new: str) -> str:
    """``text.replace(old, new)`` for snippets written at the indentation of the test source
    (``agent_text`` dedents the agent's body); the snippet must be there."""
    for width in (0, 4, 8, 12):
        if _outdent(old, width) in text:
            return text.replace(_outdent(old, width), _outdent(new, width))
    raise AssertionError(f"not in the agent text: {old!r}")
