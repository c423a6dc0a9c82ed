"""Malformed projects give clear diagnostics with file and line, never a traceback."""

from __future__ import annotations

import sys
from pathlib import Path

from agentscript.diagnostics import Diagnostic, Severity
from agentscript.mantle import load_project

AGENT = "agent:\n  persona: You help.\n"


def make(tmp_path: Path, skills: dict[str, dict[str, str]], **root: str) -> Path:
    (tmp_path / "agent.yml").write_text(root.pop("agent", AGENT))
    for name, text in root.items():
        (tmp_path / name.replace("__", "/")).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name.replace("__", "/")).write_text(text)
    for skill_id, files in skills.items():
        folder = tmp_path / "skills" / skill_id
        folder.mkdir(parents=True)
        for name, text in files.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text)
    return tmp_path


def skill_md(body: str = "Help.\n", front: str = "") -> str:
    return f"---\nname: S\ndescription: Does things.\n{front}---\n{body}"


def skill_diagnostics(
    tmp_path: Path, body: str, files: dict[str, str] | None = None
) -> list[Diagnostic]:
    """Diagnostics of a project whose one skill ``s`` has ``body`` (and ``files``)."""
    root = make(tmp_path, {"s": {"skill.md": skill_md(body), **(files or {})}})
    return load_project(root)[1]


def codes(diagnostics: list[Diagnostic]) -> list[str]:
    return [d.code for d in diagnostics]


def only(diagnostics: list[Diagnostic], code: str) -> Diagnostic:
    found = [d for d in diagnostics if d.code == code]
    assert len(found) == 1, [d.format() for d in diagnostics]
    return found[0]


def test_missing_frontmatter_delimiter(tmp_path: Path) -> None:
    root = make(tmp_path, {"s": {"skill.md": "name: S\ndescription: x\n\nHelp.\n"}})
    project, diagnostics = load_project(root)
    assert project is not None
    d = only(diagnostics, "mantle-frontmatter-delimiter")
    assert d.file == str(root / "skills/s/skill.md")
    assert (d.span.line, d.span.column) == (1, 1)
    assert "must start with a '---' line" in d.message


def test_unclosed_frontmatter(tmp_path: Path) -> None:
    root = make(tmp_path, {"s": {"skill.md": "---\nname: S\ndescription: x\n\nHelp.\n"}})
    _, diagnostics = load_project(root)
    assert "never closed" in only(diagnostics, "mantle-frontmatter-delimiter").message


def test_bad_yaml_in_frontmatter_points_at_the_line(tmp_path: Path) -> None:
    root = make(tmp_path, {"s": {"skill.md": "---\nname: S\ndescription: [unclosed\n---\nHelp.\n"}})
    _, diagnostics = load_project(root)
    d = only(diagnostics, "mantle-yaml")
    assert d.span.line in (3, 4)
    assert d.file is not None and d.file.endswith("skill.md")


def test_tab_in_block_yaml(tmp_path: Path) -> None:
    body = "Go @block.b\n\n:::ordered_block id=b\nsteps:\n\t- id: x\n:::\n"
    diagnostics = skill_diagnostics(tmp_path, body)
    d = only(diagnostics, "mantle-yaml")
    assert d.span.line == 9
    assert "tabs" in d.message


def test_unknown_step_kind(tmp_path: Path) -> None:
    body = ":::ordered_block id=b\nsteps:\n  - id: x\n    ask: utter_x\n:::\n"
    diagnostics = skill_diagnostics(tmp_path, body)
    d = only(diagnostics, "mantle-step-kind")
    assert d.span.line == 7
    assert "'x' has no known kind (found: ask)" in d.message


def test_unknown_step_key_with_hint(tmp_path: Path) -> None:
    body = ":::ordered_block id=b\nsteps:\n  - id: x\n    collect: a\n    utter: utter_a\n:::\n"
    memory = "schema:\n  public:\n    a:\n      type: text\n"
    diagnostics = skill_diagnostics(tmp_path, body, {"memory.yml": memory})
    d = only(diagnostics, "mantle-unknown-key")
    assert "utterance" in d.message and d.span.line == 9


def test_cyclic_next_without_a_waiting_step(tmp_path: Path) -> None:
    body = (
        ":::ordered_block id=b\nsteps:\n"
        "  - id: a\n    noop: true\n    next: c\n"
        "  - id: c\n    action: utter_x\n    next: a\n"
        ":::\n"
    )
    responses = "responses:\n  utter_x:\n    - text: hi\n"
    diagnostics = skill_diagnostics(tmp_path, body, {"responses.yml": responses})
    d = only(diagnostics, "mantle-next-cycle")
    assert "a -> c -> a" in d.message
    assert d.span.line == 7


def test_cycle_through_a_collect_step_is_fine(tmp_path: Path) -> None:
    body = (
        ":::ordered_block id=b\nsteps:\n"
        "  - id: ask\n    collect: a\n"
        "  - id: check\n    noop: true\n    next:\n"
        '      - if: session.s.a == ""\n        then: ask\n      - else: END\n'
        ":::\n"
    )
    memory = "schema:\n  public:\n    a:\n      type: text\n"
    diagnostics = skill_diagnostics(tmp_path, body, {"memory.yml": memory})
    assert diagnostics == []


def test_invalid_next_target_duplicate_and_unreachable_steps(tmp_path: Path) -> None:
    body = (
        ":::ordered_block id=b\nsteps:\n"
        "  - id: a\n    noop: true\n    next: nowhere\n"
        "  - id: a\n    noop: true\n"
        "  - id: lost\n    noop: true\n"
        ":::\n"
    )
    diagnostics = skill_diagnostics(tmp_path, body)
    assert only(diagnostics, "mantle-next-target").span.line == 9
    assert only(diagnostics, "mantle-duplicate-step").span.line == 10
    unreachable = [d for d in diagnostics if d.code == "mantle-unreachable-step"]
    assert {d.message.split("'")[1] for d in unreachable} == {"lost"}
    assert all(d.severity is Severity.WARNING for d in unreachable)


def test_tool_module_that_raises_on_import(tmp_path: Path) -> None:
    tools = "def fine():\n    '''Ok.'''\n\nraise RuntimeError('boom')\n"
    root = make(tmp_path, {"s": {"skill.md": skill_md(), "tools.py": tools}})
    before = set(sys.modules)
    project, diagnostics = load_project(root)
    assert project is not None
    d = only(diagnostics, "mantle-tool-import")
    assert d.file == str(root / "skills/s/tools.py")
    assert d.span.line == 4
    assert "RuntimeError: boom" in d.message
    assert not [m for m in set(sys.modules) - before if "mantle_tools" in m]


def test_tool_module_with_syntax_error(tmp_path: Path) -> None:
    root = make(tmp_path, {"s": {"skill.md": skill_md(), "tools.py": "def broken(:\n"}})
    _, diagnostics = load_project(root)
    assert only(diagnostics, "mantle-tool-import").span.line == 1


def test_undeclared_memory_in_conditions_and_tokens(tmp_path: Path) -> None:
    body = "if: session.s.missing == 1\nText.\n\nHello @memory.project.nope and @memory.s.\n"
    root = make(tmp_path, {"s": {"skill.md": skill_md(body, "requires: authenticated\n")}})
    _, diagnostics = load_project(root)
    undeclared = [d for d in diagnostics if d.code == "mantle-undeclared-memory"]
    assert {d.span.line for d in undeclared} == {6, 9}
    assert "'s.missing' is not declared" in undeclared[0].message
    assert "bare" not in only(diagnostics, "mantle-condition-name").message
    assert only(diagnostics, "mantle-condition-name").span.line == 4
    assert "incomplete token" in only(diagnostics, "mantle-token").message


def test_private_entry_of_another_skill_is_not_readable(tmp_path: Path) -> None:
    memory = "schema:\n  private:\n    secret:\n      type: text\n"
    root = make(
        tmp_path,
        {
            "a": {"skill.md": skill_md(), "memory.yml": memory},
            "b": {"skill.md": skill_md(front="requires: session.a.secret\n")},
        },
    )
    _, diagnostics = load_project(root)
    assert "private" in only(diagnostics, "mantle-undeclared-memory").message


def test_undeclared_tool_write(tmp_path: Path) -> None:
    tools = (
        "def save(context=None):\n    '''Save.'''\n"
        "    context.memory.set('known', 1)\n    context.memory.set('unknown', 2)\n"
        "    context.memory.set('project.known', 3)\n"
    )
    memory = "schema:\n  public:\n    known:\n      type: int\n"
    root = make(tmp_path, {"s": {"skill.md": skill_md(), "tools.py": tools, "memory.yml": memory}})
    _, diagnostics = load_project(root)
    writes = [d for d in diagnostics if d.code == "mantle-undeclared-memory-write"]
    assert [d.span.line for d in writes] == [4, 5]
    assert "'unknown'" in writes[0].message
    assert "qualified" in writes[1].message


def test_unknown_response_skill_block_and_tool(tmp_path: Path) -> None:
    front = (
        "tool_constraints:\n  - ghost:\n      on_success: utter_missing\n"
        "utter:\n  - utter_other:\n      on: activate\n"
    )
    body = "See @skill.nobody and @block.none.\n"
    root = make(tmp_path, {"s": {"skill.md": skill_md(body, front)}})
    _, diagnostics = load_project(root)
    assert sorted(codes(diagnostics)) == sorted(
        [
            "mantle-unknown-response",
            "mantle-unknown-response",
            "mantle-unknown-skill",
            "mantle-unknown-block",
            "mantle-unresolved-tool",
        ]
    )
    assert only(diagnostics, "mantle-unknown-skill").span.line == 11
    assert only(diagnostics, "mantle-unresolved-tool").span.line == 5


def test_complete_when_bare_string_gets_the_fix(tmp_path: Path) -> None:
    memory = "schema:\n  public:\n    done:\n      type: bool\n"
    front = "complete_when: session.s.done\n"
    root = make(tmp_path, {"s": {"skill.md": skill_md(front=front), "memory.yml": memory}})
    project, diagnostics = load_project(root)
    d = only(diagnostics, "mantle-complete-when-string")
    assert d.severity is Severity.WARNING
    assert 'complete_when: {condition: "session.s.done"}' in d.message
    assert project is not None
    complete = project.skills["s"].complete_when
    assert complete is not None and complete.condition is not None
    assert complete.condition.text == "session.s.done"


def test_unknown_keys_in_frontmatter_and_memory(tmp_path: Path) -> None:
    memory = "schema:\n  public:\n    x:\n      type: text\n      colour: red\n"
    root = make(tmp_path, {"s": {"skill.md": skill_md(front="requirs: x\n"), "memory.yml": memory}})
    _, diagnostics = load_project(root)
    found = {
        (d.file.rsplit("/", 1)[-1] if d.file else "", d.span.line, d.severity) for d in diagnostics
    }
    assert found == {("skill.md", 4, Severity.WARNING), ("memory.yml", 5, Severity.ERROR)}


def test_tool_collisions(tmp_path: Path) -> None:
    tools_a = "def dup():\n    '''A.'''\n\ndef s():\n    '''Named like the skill.'''\n"
    root = make(
        tmp_path,
        {
            "s": {
                "skill.md": skill_md(),
                "tools/a.py": tools_a,
                "tools/more.py": "def dup():\n    '''B.'''\n",
            }
        },
    )
    _, diagnostics = load_project(root)
    collisions = [d for d in diagnostics if d.code == "mantle-tool-collision"]
    assert len(collisions) == 2
    assert any("defined twice" in d.message for d in collisions)
    assert any("same name as a skill" in d.message for d in collisions)


def test_mcp_imports_offered_under_one_name_collide(tmp_path: Path) -> None:
    # ``mcp/S:T`` is offered as ``T``: two imports of one plain name left the model one tool
    # (the other silently dropped), and a local tool of that name hid the import.
    front = (
        "import_tools:\n  - mcp/a:get_forecast\n  - mcp/b:get_forecast\n"
        "  - mcp/b:lookup\n  - lookup\n  - mcp/a:local_one\n  - mcp/a:set_fields\n"
    )
    root = make(
        tmp_path,
        {
            "s": {
                "skill.md": skill_md(front=front),
                "tools.py": "def local_one():\n    '''Local.'''\n",
            }
        },
        **{"tools__lookup.py": "def lookup():\n    '''Shared.'''\n"},
    )
    _, diagnostics = load_project(root)
    found = {
        (d.span.line, d.severity)
        for d in diagnostics
        if d.code == "mantle-tool-collision" and d.file == str(root / "skills/s/skill.md")
    }
    assert found == {
        (6, Severity.ERROR),  # mcp/b:get_forecast after mcp/a:get_forecast
        (8, Severity.ERROR),  # lookup after mcp/b:lookup
        (9, Severity.WARNING),  # the local local_one wins
        (10, Severity.ERROR),  # a built-in engine tool's name
    }, [d.format() for d in diagnostics]


def test_mcp_import_of_a_tool_name_the_model_apis_refuse(tmp_path: Path) -> None:
    # The import is offered under the server's name for the tool: the same rule as local tools.
    front = 'import_tools:\n  - "mcp/a:bad name"\n  - mcp/a:good-name_1\n'
    root = make(tmp_path, {"s": {"skill.md": skill_md(front=front)}})
    _, diagnostics = load_project(root)
    d = only(diagnostics, "mantle-tool-name")
    assert (d.span.line, d.severity) == (5, Severity.ERROR)
    assert "'bad name'" in d.message and "1 to 64" in d.message


def test_response_rules(tmp_path: Path) -> None:
    responses = (
        "responses:\n  utter_a:\n    - text: x\n      condition: session.project.flag\n"
        "  utter_b:\n    - text: ''\n  utter_c:\n    - text: y\n      channel: voice\n"
    )
    memory = "flag:\n  type: bool\n"
    root = make(
        tmp_path,
        {"s": {"skill.md": skill_md()}},
        **{"responses.yml": responses, "memory.yml": memory},
    )
    _, diagnostics = load_project(root)
    assert sorted(codes(diagnostics)) == [
        "mantle-response-default",
        "mantle-responses",
        "mantle-unknown-key",
    ]


def test_missing_agent_persona_and_not_a_project(tmp_path: Path) -> None:
    root = make(tmp_path, {"s": {"skill.md": skill_md()}}, agent="agent:\n  id: x\n")
    _, diagnostics = load_project(root)
    assert "persona" in only(diagnostics, "mantle-agent").message
    project, diagnostics = load_project(tmp_path / "skills")
    assert project is None and codes(diagnostics) == ["mantle-project"]


def test_if_marker_mistakes(tmp_path: Path) -> None:
    body = "if: >\nFolded.\n\nelse:\nOther.\n"
    diagnostics = skill_diagnostics(tmp_path, body)
    markers = [d for d in diagnostics if d.code == "mantle-if-marker"]
    assert [d.span.line for d in markers] == [5, 8]
