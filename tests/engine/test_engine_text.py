"""Quoted strings used as text (welcome, system and reasoning instructions) fill in `{!expr}`."""

from __future__ import annotations

from pathlib import Path

import agentscript
from agentscript.models.scripted import Move, ScriptedModel

AGENT = """\
system:
    instructions: "Help {!@variables.user_name}."
    messages:
        welcome: "Hello {!@variables.user_name}! You have {!@variables.n + 1} items."
        error: "Sorry {!@variables.user_name}."
config:
    developer_name: "w"
variables:
    user_name: mutable string = "Ada"
    n: mutable number = 2
start_agent main:
    description: "main"
    reasoning:
        instructions: "Greet {!@variables.user_name}, literal {!not closed"
"""


def test_quoted_text_interpolates_like_a_template(tmp_path: Path) -> None:
    path = tmp_path / "w.agent"
    path.write_text(AGENT)
    agent = agentscript.load(path, dialect="agentscript")
    model = ScriptedModel([Move(text="hi")])
    session = agent.session(model=model, variables={"user_name": "Grace"})
    assert session.welcome == "Hello Grace! You have 3 items."
    session.send("hello")
    request = model.requests[0]
    assert request.system == "Help Grace."
    # A malformed `{!` is kept as written rather than dropped.
    assert request.instructions == "Greet Grace, literal {!not closed"


def test_checker_resolves_references_inside_quoted_text(tmp_path: Path) -> None:
    path = tmp_path / "w.agent"
    path.write_text(
        AGENT.replace("Sorry {!@variables.user_name}", "Sorry {!@variables.missing_thing}")
    )
    doc = agentscript.parse(path.read_text(), str(path))
    from agentscript.check import check

    errors = [d for d in check(doc, dialect="agentscript").diagnostics if d.is_error]
    assert [(d.code, d.span.line) for d in errors] == [("undefined-reference", 5)]
    assert "missing_thing" in errors[0].message
