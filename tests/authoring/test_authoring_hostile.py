"""The authoring commands on hostile or large input: output bounded, agent text printed inert,
diagnostics quoting the right line, and a path that cannot be read being bad usage (exit 2)."""

from __future__ import annotations

import json
import xml.dom.minidom
from pathlib import Path

import pytest

from agentscript.authoring import prompts as prompts_module
from agentscript.diagnostics import Diagnostic, Severity, Span
from agentscript.render import render_diagnostic, source_lines

from .helpers import agent_text, invoke

# An OSC that sets the window title, a BEL, colour, erase-line, and an HTML tag for Mermaid.
HOSTILE = "\x1b]0;PWNED\x07\x1b[31mRED\x1b[0m\x1b[2K <img src=x onerror=alert(1)> #quot;"

GATED = agent_text(
    f"""\
    variables:
        is_verified: mutable boolean = False
        tag: mutable string = "a"

    start_agent main:
        description: "Main"
        reasoning:
            instructions: ->
                | Help the customer.
            actions:
                go: @utils.transition to @subagent.other
                    description: "Go"
                    available when @variables.is_verified == True and @variables.tag != "{HOSTILE}"

    subagent other:
        description: "Other"
        reasoning:
            instructions: ->
                | Done.
    """
)


def _mantle(root: Path, skills: int) -> Path:
    """A Mantle project of ``skills`` skills, each with one ``if:`` marker and a reference."""
    root.mkdir()
    (root / "agent.yml").write_text(
        "agent:\n  id: big\n  language: en\n  persona: |\n    Be brief.\n"
    )
    (root / "memory.yml").write_text("f0:\n  type: bool\n  mutable: true\n  initial_value: false\n")
    for i in range(skills):
        folder = root / "skills" / f"s{i}"
        folder.mkdir(parents=True)
        (folder / "skill.md").write_text(
            f"---\nname: S{i}\ndescription: skill number {i}\n---\n\n"
            f"Go to @skill.s{(i + 1) % skills}.\n\nif: session.project.f0\nOnly when f0.\n"
        )
    return root


def _hostile_agent(tmp_path: Path) -> Path:
    path = tmp_path / "gated.agent"
    path.write_text(GATED)
    return path


def _assert_inert(text: str, shown: str = "\\x1b]0;PWNED\\x07") -> None:
    assert "\x1b" not in text and "\x07" not in text
    assert shown in text  # shown, not dropped: a reviewer sees what is there


def test_mantle_prompts_output_is_linear_in_skills(tmp_path: Path) -> None:
    sizes = {}
    for count in (20, 80):
        project = _mantle(tmp_path / f"p{count}", count)
        for fmt in ("text", "json", "markdown"):
            result = invoke("prompts", project, "--format", fmt)
            assert result.exit_code == 0, result.output
            sizes[count, fmt] = len(result.stdout)
    for fmt in ("text", "json", "markdown"):
        # Four times the skills: about four times the output (quadratic made it sixteen).
        assert sizes[80, fmt] < 5 * sizes[20, fmt], (fmt, sizes)


def test_mantle_prompts_show_the_skill_catalogue_once(tmp_path: Path) -> None:
    project = _mantle(tmp_path / "p", 30)
    text = invoke("prompts", project).stdout
    assert text.count("- s17 (S17): skill number 17") == 1
    assert text.count("[the skill catalogue of 30 skills, listed once, not per case]") == 60
    nodes = json.loads(invoke("prompts", project, "--format", "json").stdout)
    lines = [node["catalogueLine"] for node in nodes]
    assert "- s17 (S17): skill number 17" in lines
    assert all("skill number" not in case["system"] for node in nodes for case in node["cases"])


def test_prompts_node_walks_only_that_skill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = _mantle(tmp_path / "p", 40)
    merged: list[int] = []
    real_merge = prompts_module._merge

    def counting_merge(cases: list[prompts_module.PromptCase]) -> list[prompts_module.PromptCase]:
        merged.append(len(cases))
        return real_merge(cases)

    monkeypatch.setattr(prompts_module, "_merge", counting_merge)
    result = invoke("prompts", project, "--node", "s7")
    assert result.exit_code == 0, result.output
    assert "== s7 ==" in result.stdout and "== s8 ==" not in result.stdout
    assert len(merged) == 1  # one skill walked, not forty walked and thirty-nine dropped


def test_prompts_node_walks_only_that_agent_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    merged: list[int] = []
    real_merge = prompts_module._merge
    monkeypatch.setattr(
        prompts_module, "_merge", lambda cases: merged.append(1) or real_merge(cases)
    )
    result = invoke("prompts", _hostile_agent(tmp_path), "--node", "other")
    assert result.exit_code == 0, result.output
    assert merged == [1]


def test_prompts_text_and_markdown_print_agent_controls_escaped(tmp_path: Path) -> None:
    for fmt in ("text", "markdown"):
        result = invoke("prompts", _hostile_agent(tmp_path), "--format", fmt)
        assert result.exit_code == 0, result.output
        _assert_inert(result.stdout)


def test_check_gates_prints_agent_controls_escaped(tmp_path: Path) -> None:
    result = invoke("check-gates", _hostile_agent(tmp_path))
    assert result.exit_code == 0, result.output
    _assert_inert(result.stdout)


@pytest.mark.parametrize("fmt", ["mermaid", "dot", "svg"])
def test_graph_prints_agent_controls_escaped(tmp_path: Path, fmt: str) -> None:
    result = invoke("graph", _hostile_agent(tmp_path), "--format", fmt)
    assert result.exit_code == 0, result.output
    # DOT doubles the backslash in its own quoting, so Graphviz draws `\x1b` as written.
    _assert_inert(result.stdout, "\\\\x1b]0;PWNED" if fmt == "dot" else "\\x1b]0;PWNED")


def test_graph_svg_is_well_formed_xml_with_controls_in_labels(tmp_path: Path) -> None:
    svg = invoke("graph", _hostile_agent(tmp_path), "--format", "svg").stdout
    document = xml.dom.minidom.parseString(svg)
    assert document.documentElement.tagName == "svg"


def test_graph_mermaid_labels_cannot_carry_html_or_entities(tmp_path: Path) -> None:
    mermaid = invoke("graph", _hostile_agent(tmp_path), "--format", "mermaid").stdout
    assert "<img" not in mermaid and "alert(1)>" not in mermaid
    assert "#lt;img src=x onerror=alert(1)#gt;" in mermaid
    # The literal `#quot;` of the string stays text: its `#` is escaped, not read as an entity.
    assert "#35;quot;" in mermaid


def test_diagnostic_source_line_is_printed_escaped(tmp_path: Path) -> None:
    path = tmp_path / "bad.agent"
    path.write_text(agent_text('start_agent main:\n    description: "M"  # \x1b]0;PWNED\x07\n'))
    path.write_text(path.read_text().replace('"M"  #', '"M"\n    bogus_field: 1  #'))
    result = invoke("validate", path)
    assert result.exit_code == 1
    assert "bogus_field: 1  # \\x1b]0;PWNED\\x07" in result.stdout
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout


def test_diagnostic_caret_stays_under_the_span_after_an_escaped_control() -> None:
    diag = Diagnostic("x", "m", Span(1, 3, 1, 6), Severity.ERROR)
    _head, source, caret = render_diagnostic(diag, ["a\x1bbad"]).split("\n")
    assert source == "    a\\x1bbad"
    assert caret == "    " + " " * len("a\\x1b") + "^^^"


@pytest.mark.parametrize("separator", ["\u2028", "\x0c", "\x85", "\x1c", "\u2029"])
def test_diagnostic_quotes_the_right_line_after_a_unicode_line_separator(
    tmp_path: Path, separator: str
) -> None:
    text = agent_text(
        f"""\
        # a comment with a{separator}separator the parser does not break lines at
        start_agent main:
            description: "Main"
            bogus_field: 1
        """
    )
    path = tmp_path / "lines.agent"
    path.write_text(text, encoding="utf-8")
    result = invoke("validate", path)
    assert result.exit_code == 1
    quoted = result.stdout.split("\n")[1]
    assert quoted.strip() == "bogus_field: 1"


def test_source_lines_split_only_where_the_parser_does(tmp_path: Path) -> None:
    path = tmp_path / "mixed.agent"
    path.write_bytes("one\u2028still one\x0c\x85\r\ntwo\rthree\nfour\n".encode())
    assert source_lines(path) == ["one\u2028still one\x0c\x85", "two", "three", "four"]


@pytest.mark.parametrize("command", ["prompts", "graph", "check-gates"])
def test_missing_file_is_bad_usage_exit_2(tmp_path: Path, command: str) -> None:
    missing = tmp_path / "missing.agent"
    result = invoke(command, missing)
    assert result.exit_code == 2, result.output
    assert "missing.agent" in result.stderr
    assert "Traceback" not in result.output


def test_missing_file_exit_code_matches_validate(tmp_path: Path) -> None:
    missing = tmp_path / "missing.agent"
    assert invoke("graph", missing).exit_code == invoke("validate", missing).exit_code == 2


def test_agent_with_errors_still_exits_1(tmp_path: Path) -> None:
    broken = tmp_path / "broken.agent"
    broken.write_text("system:\n    instructions: [\n")
    for command in ("prompts", "graph", "check-gates"):
        result = invoke(command, broken)
        assert result.exit_code == 1, (command, result.output)
        assert "fix the errors above first" in result.stderr
