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


# ---------------------------------------------------------------- run and its output

ENGINE = Path(__file__).resolve().parents[1] / "engine"
ROOT = Path(__file__).resolve().parents[2]


def test_a_delegation_is_not_on_the_path_since_control_came_back() -> None:
    import sys

    sys.path.insert(0, str(ENGINE))
    from engine_helpers import play_file  # type: ignore[import-not-found]

    reply = play_file("tools", "tools_delegate").turns[0].reply
    assert reply.path == ["router", "shop"]
    assert reply.delegated == ["helper"]


def test_tab_indented_file_gets_the_caret_under_the_token(tmp_path: Path) -> None:
    path = tmp_path / "tab.agent"
    path.write_text('system:\n\tinstructions: "x"\n\tbogus: 1\n')
    result = invoke("validate", "--no-lints", path)
    lines = result.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if "bogus" in line and "error[" in line)
    shown, caret = lines[at + 1], lines[at + 2]
    assert shown == "        bogus: 1"  # the tab shown as four spaces, after the 4-space margin
    assert caret == "        ^^^^^"


def test_run_takes_a_dialect_and_says_which_one_refused_the_agent(tmp_path: Path) -> None:
    agent = tmp_path / "org.agent"
    # A nested `if` is an org rule: an error in agentforce, a warning in agentscript.
    agent.write_text(
        BASE + "variables:\n    n: mutable number = 0\n\n"
        'start_agent main:\n    description: "m"\n    reasoning:\n        instructions: ->\n'
        "            if @variables.n == 1:\n"
        "                if @variables.n == 2:\n"
        "                    | Hi\n"
        "            | Hello\n"
    )
    conversation = tmp_path / "c.yaml"
    conversation.write_text('turns:\n  - user: "hi"\n    model:\n      - say: "Hello!"\n')
    refused = invoke("run", agent, "--conversation", conversation)
    assert refused.exit_code == 2
    assert "cannot run an agent with errors (dialect:" in refused.stderr
    assert "--dialect agentscript" in refused.stderr
    ran = invoke("run", agent, "--conversation", conversation, "--dialect", "agentscript")
    assert ran.exit_code == 0, ran.output
    assert "Hello!" in ran.stdout


def test_run_json_reports_refused_tool_calls(tmp_path: Path) -> None:
    import json

    conversation = tmp_path / "c.yaml"
    conversation.write_text(
        "turns:\n"
        '  - user: "change my email"\n'
        "    model:\n"
        "      - tool: go_account\n"
        "      - tool: update_account\n"
        '        args: {field: "email", value: "x@y.z"}\n'
        '      - say: "Please verify first."\n'
    )
    agent = ROOT / "examples" / "security_gate" / "security_gate.agent"
    result = invoke("run", agent, "--conversation", conversation, "--json")
    turn = json.loads(result.stdout)["turns"][0]
    assert turn["refused"] == [
        {"name": "update_account", "reason": "tool 'update_account' is not available now"}
    ]
    text = invoke("run", agent, "--conversation", conversation)
    assert "refused:   update_account: tool 'update_account' is not available now" in text.stdout


def test_the_formatter_keeps_one_parentheses_rule() -> None:
    # The fewest parentheses precedence needs; an `and` inside an `or` always keeps them.
    from agentscript.syntax.formatter import format_text

    text = BASE + (
        "variables:\n    a: mutable number = 0\n    b: mutable number = 0\n"
        "    x: mutable number = 0\n    p: mutable boolean = False\n"
        "    q: mutable boolean = False\n\n"
        'start_agent main:\n    description: "m"\n    reasoning:\n        instructions: ->\n'
        "            if @variables.x <= (@variables.a + @variables.b):\n"
        "                | One\n"
        "            if (@variables.p and @variables.q) or (@variables.x > 1):\n"
        "                | Two\n"
    )
    formatted, problems = format_text(text, "t.agent")
    assert not [d for d in problems if d.is_error]
    assert "if @variables.x <= @variables.a + @variables.b:" in formatted
    assert "if (@variables.p and @variables.q) or @variables.x > 1:" in formatted
