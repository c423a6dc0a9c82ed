"""Loading hostile Mantle projects: every bad input is a diagnostic at its own line, never a
traceback, a hang, a silent skip or a quadratic report (the mantle-load audit)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from mantle_helpers import make

import agentscript
from agentscript.diagnostics import AgentScriptError, Diagnostic, Severity, Span
from agentscript.limits import MAX_FILE_BYTES
from agentscript.mantle import load_project
from agentscript.mantle.memory import initial_memory
from agentscript.reading import compose_yaml
from agentscript.render import render_diagnostic, render_report

SKILL = "---\nname: Greet\ndescription: Say hello.\n{front}---\n{body}"
needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")


def skill(front: str = "", body: str = "Say hello.\n") -> str:
    return SKILL.format(front=front, body=body)


def load(tmp_path: Path, files: dict[str, str]) -> list[Diagnostic]:
    files = {"skills/greet/skill.md": skill(), **files}
    return load_project(make(tmp_path, files))[1]


def found(diagnostics: list[Diagnostic], code: str) -> list[Diagnostic]:
    return [d for d in diagnostics if d.code == code]


def no_internal_error(diagnostics: list[Diagnostic]) -> None:
    assert not found(diagnostics, "internal-error"), [d.format() for d in diagnostics]


# --- 1. values that cannot be constructed ---------------------------------------------------


@pytest.mark.parametrize(
    ("files", "file", "line", "column", "words"),
    [
        (
            {"skills/greet/skill.md": skill().replace("Greet", "!foo bar")},
            "skills/greet/skill.md",
            2,
            7,
            "tag '!foo'",
        ),
        (
            {"skills/greet/skill.md": skill("disabled: !!int x\n")},
            "skills/greet/skill.md",
            4,
            11,
            "int cannot be read",
        ),
        (
            {"skills/greet/skill.md": skill("requires: !foo session.project.x\n")},
            "skills/greet/skill.md",
            4,
            11,
            "tag '!foo'",
        ),
        (
            {
                "skills/greet/skill.md": skill().replace(
                    "Say hello.", "!!python/object:os.system x", 1
                )
            },
            "skills/greet/skill.md",
            3,
            14,
            "tag '!!python/object:os.system'",
        ),
        (
            {"memory.yml": "n: {type: int, initial_value: " + "9" * 5000 + "}\n"},
            "memory.yml",
            1,
            31,
            "more than 4300 digits",
        ),
        (
            {"integrations.yml": "mcp_servers:\n  - id: ok\n  - id: !foo x\n"},
            "integrations.yml",
            3,
            9,
            "tag '!foo'",
        ),
        (
            {"agent.yml": "agent:\n  persona: P\ntool_timeout: !!float x\n"},
            "agent.yml",
            3,
            15,
            "float cannot be read",
        ),
        (
            {
                "skills/greet/skill.md": skill(
                    body=":::ordered_block id=b\nsteps:\n  - id: a\n"
                    "    set_memory: !foo {x: 1}\n:::\n"
                )
            },
            "skills/greet/skill.md",
            8,
            17,
            "tag '!foo'",
        ),
    ],
)
def test_a_value_that_cannot_be_read_is_one_mantle_yaml_at_its_node(
    tmp_path: Path, files: dict[str, str], file: str, line: int, column: int, words: str
) -> None:
    diagnostics = load(tmp_path, files)
    no_internal_error(diagnostics)
    errors = found(diagnostics, "mantle-yaml")
    assert len(errors) == 1, [d.format() for d in diagnostics]
    assert errors[0].file == str(tmp_path / "project" / file)
    assert (errors[0].span.line, errors[0].span.column) == (line, column)
    assert words in errors[0].message
    # No second diagnostic about the same value ("must be true or false", "empty condition").
    assert not found(diagnostics, "mantle-type") and not found(diagnostics, "mantle-condition")
    assert not found(diagnostics, "mantle-agent") and not found(diagnostics, "mantle-step")


def test_agentscript_load_raises_the_diagnostic_not_the_yaml_error(tmp_path: Path) -> None:
    root = make(tmp_path, {"skills/greet/skill.md": skill("disabled: !foo x\n")})
    with pytest.raises(AgentScriptError) as raised:
        agentscript.load(root)
    assert [d.code for d in raised.value.diagnostics] == ["mantle-yaml"]


def test_a_timestamp_is_kept_as_the_text_written(tmp_path: Path) -> None:
    root = make(tmp_path, {"skills/greet/skill.md": skill().replace("Say hello.", "2001-13-45", 1)})
    project, diagnostics = load_project(root)
    assert project is not None and not diagnostics, [d.format() for d in diagnostics]
    assert project.skills["greet"].description == "2001-13-45"


# --- 2. long step chains --------------------------------------------------------------------


def test_a_block_of_thousands_of_chained_steps_is_checked_without_recursion(
    tmp_path: Path,
) -> None:
    count = 3000
    steps = "".join(
        f"  - id: s{i}\n    noop: true\n    next: s{(i + 1) % count}\n" for i in range(count)
    )
    body = f":::ordered_block id=b\nsteps:\n{steps}:::\n"
    diagnostics = load(tmp_path, {"skills/greet/skill.md": skill(body=body)})
    no_internal_error(diagnostics)
    cycles = found(diagnostics, "mantle-next-cycle")
    assert len(cycles) == 1
    # The message names a few steps and the count, not all 3,000.
    assert f"({count} steps)" in cycles[0].message and len(cycles[0].message) < 300


# --- 3. many placeholders, long lines -------------------------------------------------------


def test_an_unknown_placeholder_repeated_is_reported_once(tmp_path: Path) -> None:
    text = "{x}" * 5000 + "{y}{x}"
    diagnostics = load(tmp_path, {"responses.yml": f"responses:\n  utter_a:\n    - '{text}'\n"})
    warnings = found(diagnostics, "mantle-unknown-placeholder")
    assert sorted(d.message for d in warnings) == [
        "placeholder '{x}' names no declared memory entry",
        "placeholder '{y}' names no declared memory entry",
    ]


def test_a_long_source_line_is_shown_as_a_window_around_the_column() -> None:
    line = "a" * 5000 + "ERR" + "b" * 5000
    diag = Diagnostic("c", "m", Span(1, 5001, 1, 5004), Severity.ERROR, "f")
    _head, source, caret = render_diagnostic(diag, [line]).split("\n")
    assert len(source) < 220 and source.strip().startswith("...") and source.endswith("...")
    start = caret.index("^")
    assert caret[start:] == "^^^" and source[start : start + 3] == "ERR"


def test_a_long_line_with_the_column_at_its_start_or_end_is_cut_on_one_side() -> None:
    line = "x" * 1000
    head = render_diagnostic(Diagnostic("c", "m", Span(1, 1, 1, 2)), [line]).split("\n")
    assert head[1] == "    " + "x" * 200 + "..." and head[2] == "    ^"
    tail = render_diagnostic(Diagnostic("c", "m", Span(1, 1000, 1, 1001)), [line]).split("\n")
    assert tail[1] == "    ..." + "x" * 200 and tail[2] == "    " + " " * 202 + "^"


def test_a_short_line_is_shown_whole() -> None:
    line = "y" * 150
    text = render_diagnostic(Diagnostic("c", "m", Span(1, 140, 1, 142)), [line])
    assert text.split("\n")[1:] == ["    " + line, "    " + " " * 139 + "^^"]


# --- 4. files that are not regular files ----------------------------------------------------


@needs_fifo
@pytest.mark.parametrize(
    "name", ["agent.yml", "skills/greet/skill.md", "memory.yml", "responses.yml"]
)
def test_a_fifo_project_file_is_a_mantle_file_error(tmp_path: Path, name: str) -> None:
    root = make(tmp_path, {"skills/greet/skill.md": skill()})
    (root / name).unlink(missing_ok=True)
    os.mkfifo(root / name)
    _project, diagnostics = load_project(root)  # returns: the FIFO is never opened blocking
    errors = found(diagnostics, "mantle-file")
    assert [d.file for d in errors] == [str(root / name)], [d.format() for d in diagnostics]
    assert "not a regular file" in errors[0].message


def test_a_device_agent_file_is_refused(tmp_path: Path) -> None:
    if not os.path.exists("/dev/zero"):
        pytest.skip("needs /dev/zero")
    root = make(tmp_path, {"skills/greet/skill.md": skill()})
    (root / "agent.yml").unlink()
    (root / "agent.yml").symlink_to("/dev/zero")
    with pytest.raises(AgentScriptError) as raised:
        agentscript.load(root)
    assert [d.code for d in raised.value.diagnostics] == ["mantle-file"]


@pytest.mark.parametrize("name", ["memory.yml", "skills/greet/responses.yml", "skills/lost"])
def test_a_dangling_link_is_a_mantle_file_error(tmp_path: Path, name: str) -> None:
    root = make(tmp_path, {"skills/greet/skill.md": skill()})
    (root / name).symlink_to(root / "nowhere")
    diagnostics = load_project(root)[1]
    errors = found(diagnostics, "mantle-file")
    assert [d.file for d in errors] == [str(root / name)]
    assert "link to nothing" in errors[0].message


@needs_fifo
def test_a_fifo_reference_file_is_reported(tmp_path: Path) -> None:
    root = make(tmp_path, {"skills/greet/skill.md": skill(), "references/a.md": "# A\ntext\n"})
    os.mkfifo(root / "references" / "b.md")
    diagnostics = load_project(root)[1]
    errors = found(diagnostics, "mantle-references")
    assert [d.file for d in errors] == [str(root / "references" / "b.md")]
    assert "not a regular file" in errors[0].message


# --- 5. reference file size -----------------------------------------------------------------


def test_a_reference_file_over_the_file_limit_is_refused(tmp_path: Path) -> None:
    root = make(tmp_path, {"skills/greet/skill.md": skill(), "references/a.md": "# A\ntext\n"})
    with open(root / "references" / "big.md", "wb") as handle:
        handle.truncate(MAX_FILE_BYTES + 1)  # sparse: the size alone refuses it
    project, diagnostics = load_project(root)
    errors = found(diagnostics, "mantle-references")
    assert [d.file for d in errors] == [str(root / "references" / "big.md")]
    assert "larger than the limit" in errors[0].message
    assert project is not None and project.knowledge is not None
    assert project.knowledge.files == ["references/a.md"]


# --- 6. memory initial values ---------------------------------------------------------------


def test_an_initial_value_the_entry_refuses_is_a_mantle_type_error(tmp_path: Path) -> None:
    memory = (
        "e: {type: int, initial_value: abc}\n"
        "c: {type: categorical, enum_values: [a, b], initial_value: zzz}\n"
        "bin: {type: any, initial_value: !!binary aGVsbG8=}\n"
        "s: {type: any, initial_value: !!set {a, b}}\n"
        "ok: {type: categorical, enum_values: [Express, Standard], initial_value: express}\n"
    )
    root = make(tmp_path, {"skills/greet/skill.md": skill(), "memory.yml": memory})
    project, diagnostics = load_project(root)
    errors = found(diagnostics, "mantle-type")
    assert [d.span.line for d in errors] == [1, 2, 3, 4], [d.format() for d in diagnostics]
    assert "'zzz' is not one of a, b" in errors[1].message
    assert project is not None
    # As a memory write stores it: the declared spelling.
    assert initial_memory(project)["project.ok"] == "Express"


def test_a_date_initial_value_stays_text(tmp_path: Path) -> None:
    memory = "d: {type: text, initial_value: 2001-01-01}\nj: {type: json, initial_value: {at: 2001-01-01}}\n"
    root = make(tmp_path, {"skills/greet/skill.md": skill(), "memory.yml": memory})
    project, diagnostics = load_project(root)
    assert project is not None and not diagnostics, [d.format() for d in diagnostics]
    values = initial_memory(project)
    assert values["project.d"] == "2001-01-01" and values["project.j"] == {"at": "2001-01-01"}


# --- 7. line numbers after U+2028 and form feed ---------------------------------------------


def test_skill_lines_are_counted_as_the_renderer_counts_them(tmp_path: Path) -> None:
    text = (
        "---\nname: G\ndescription: d\n---\nHello\u2028world and\x0cform feed.\n\nif: (((\nshown\n"
    )
    diagnostics = load(tmp_path, {"skills/greet/skill.md": text})
    assert [d.span.line for d in diagnostics if d.is_error] == [7], [
        d.format() for d in diagnostics
    ]


# --- 8. one diagnostic per problem ----------------------------------------------------------


@pytest.mark.parametrize(
    ("front", "code", "count"),
    [
        ("name: Again\n", "mantle-duplicate-key", 1),
        ("? [a, b]\n: 1\n", "mantle-yaml", 1),
    ],
)
def test_a_frontmatter_problem_is_reported_once(
    tmp_path: Path, front: str, code: str, count: int
) -> None:
    diagnostics = load(tmp_path, {"skills/greet/skill.md": skill(front)})
    assert len(found(diagnostics, code)) == count, [d.format() for d in diagnostics]


def test_a_name_that_is_not_text_is_reported_once(tmp_path: Path) -> None:
    text = "---\nname: [a, b]\ndescription: {x: 1}\n---\nbody\n"
    diagnostics = load(tmp_path, {"skills/greet/skill.md": text})
    assert [d.message for d in found(diagnostics, "mantle-type")] == [
        "name must be a string",
        "description must be a string",
    ]


def test_a_memory_key_that_is_not_a_name_is_reported_once(tmp_path: Path) -> None:
    diagnostics = load(tmp_path, {"memory.yml": "a: {type: text}\n? [x]\n: {type: text}\n"})
    assert len(found(diagnostics, "mantle-yaml")) == 1


# --- 9. empty fences ------------------------------------------------------------------------


def test_an_empty_fence_is_a_mantle_block_error(tmp_path: Path) -> None:
    diagnostics = load(
        tmp_path, {"skills/greet/skill.md": skill(body=":::ordered_block id=b\n:::\n")}
    )
    errors = found(diagnostics, "mantle-block")
    assert len(errors) == 1 and errors[0].span.line == 5
    assert "non-empty 'steps:'" in errors[0].message


# --- 10. reports on big projects ------------------------------------------------------------


def test_a_report_reads_each_file_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import agentscript.render as render

    path = tmp_path / "memory.yml"
    path.write_text("".join(f"e{i}: 1\n" for i in range(50)))
    reads: list[str] = []
    real = render.source_lines

    def counting(file: str | Path) -> list[str] | None:
        reads.append(str(file))
        return real(file)

    monkeypatch.setattr(render, "source_lines", counting)
    diags = [Diagnostic("c", "m", Span(i + 1, 1, i + 1, 2), file=str(path)) for i in range(50)]
    out = render_report([(tmp_path, diags)])
    assert reads == [str(path)]
    assert out[49].split("\n")[1] == "    e49: 1"


def test_a_big_document_without_aliases_is_not_called_an_alias_bomb() -> None:
    text = "".join(f"k{i}: v\n" for i in range(200))
    with pytest.raises(yaml.YAMLError) as raised:
        compose_yaml(text, max_nodes=100)
    assert "more than 100 nodes" in str(raised.value)
    assert "alias" not in str(raised.value)
    bomb = "a: &x [1, 2, 3, 4, 5, 6, 7, 8, 9]\nb: [" + ", ".join(["*x"] * 20) + "]\n"
    with pytest.raises(yaml.YAMLError, match="alias bomb"):
        compose_yaml(bomb, max_nodes=100)


# --- 11. the last resort --------------------------------------------------------------------


def test_a_bug_while_loading_is_an_internal_error_diagnostic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import agentscript.mantle.load.loader as loader

    def broken(*_args: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(loader, "read_agent", broken)
    root = make(tmp_path, {"skills/greet/skill.md": skill()})
    project, diagnostics = load_project(root)
    assert project is None
    assert [d.code for d in diagnostics] == ["internal-error"]
    assert "RuntimeError: boom" in diagnostics[0].message and diagnostics[0].file == str(root)
    with pytest.raises(AgentScriptError) as raised:
        agentscript.load(root)
    assert [d.code for d in raised.value.diagnostics] == ["internal-error"]
