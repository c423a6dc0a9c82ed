"""Diagnostics a Salesforce developer trusts (issue 15, item 6): each finding pinned."""

from __future__ import annotations

from pathlib import Path

from agentscript.check import check
from agentscript.syntax import parse

from .helpers import invoke

BASE = """\
system:
    instructions: "x"
    messages:
        welcome: "hi"
        error: "e"

config:
    developer_name: "D"

"""


def diagnostics(text: str) -> list[tuple[str, str, int, int, int]]:
    doc = parse(text, "t.agent")
    found = [*doc.diagnostics, *check(doc).diagnostics]
    return [(d.code, d.message, d.span.line, d.span.column, d.span.end_column) for d in found]


def test_unknown_top_level_block_suggests_the_named_form() -> None:
    (found,) = [
        d for d in diagnostics(BASE + 'connections:\n    x: "y"\n') if d[0] == "unknown-block"
    ]
    assert found[1] == "Unknown top-level block 'connections'. Did you mean `connection <name>:`?"


def test_unknown_field_keeps_its_plain_suggestion() -> None:
    text = BASE.replace("developer_name", "developer_nam")
    (found,) = [d for d in diagnostics(text) if d[0] == "unknown-field"]
    assert "Did you mean 'developer_name'?" in found[1]


def test_wrongly_cased_namespace_is_named_and_underlined_alone() -> None:
    text = BASE + (
        "variables:\n    sid: linked string\n        source: @messagingSession.Id\n"
        '        description: "s"\n'
    )
    (found,) = [d for d in diagnostics(text) if d[0] == "constraint-allowed-namespaces"]
    assert found[1].endswith("Did you mean '@MessagingSession'?")
    line = text.splitlines()[found[2] - 1]
    assert line[found[3] - 1 : found[4] - 1] == "@messagingSession"


def test_nested_if_caret_stops_before_a_trailing_comment() -> None:
    text = BASE + (
        "variables:\n    n: mutable number = 0\n\n"
        'start_agent main:\n    description: "m"\n    reasoning:\n        instructions: ->\n'
        "            if @variables.n == 1:\n"
        "                if @variables.n == 2:  # a note\n"
        "                    | Hi\n"
    )
    (found,) = [d for d in diagnostics(text) if d[0] == "unsupported-nested-if"]
    line = text.splitlines()[found[2] - 1]
    assert line[found[3] - 1 : found[4] - 1] == "if @variables.n == 2"


def test_quoted_interpolation_in_an_action_input_gets_an_info() -> None:
    text = BASE + (
        "variables:\n    n: mutable number = 0\n\n"
        'start_agent main:\n    description: "m"\n    reasoning:\n        instructions: ->\n'
        "            run @actions.log\n"
        '                with note="Turn: {!@variables.n}"\n'
        "            | Hi {!@variables.n}\n"
        "    actions:\n        log:\n"
        '            description: "Log"\n            target: "flow://Log"\n'
        "            inputs:\n                note: string\n"
    )
    (found,) = [d for d in diagnostics(text) if d[0] == "literal-interpolation-in-input"]
    assert "receives the text 'Turn: {!@variables.n}' as written" in found[1]


def test_unknown_block_message_reaches_validate(tmp_path: Path) -> None:
    path = tmp_path / "a.agent"
    path.write_text(BASE + 'connections:\n    x: "y"\n')
    result = invoke("validate", "--no-lints", path)
    assert result.exit_code == 1
    assert "Did you mean `connection <name>:`?" in result.stdout
