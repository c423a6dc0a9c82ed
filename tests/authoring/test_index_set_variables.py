"""The index counts the ``with x=...`` slots of a ``@utils.setVariables`` tool as references to
the variable ``x``: rename, find references and hover must reach them. Renaming a variable
used to leave the slot behind, and the renamed file failed to check
(set-variables-unknown-variable): 170 of 4,579 renames over the conformance corpus."""

from __future__ import annotations

from agentscript.authoring.index import Range, Symbol, SymbolKind, build_index
from agentscript.authoring.lsp_positions import split_lines
from agentscript.check import check
from agentscript.syntax import parse

from .helpers import agent_text

AGENT = agent_text(
    """\
    config:
        developer_name: "Slots"

    variables:
        name: mutable string = ""
            description: "the user's name"
        city: mutable string = ""
            description: "the user's city"

    start_agent main:
        description: "Main"
        reasoning:
            instructions: ->
                | Greet {!@variables.name} from {!@variables.city}.
            actions:
                remember: @utils.setVariables
                    description: "Remember what the user said"
                    with name=..., city=...
                quoted: @utils.setVariables
                    description: "The same, the key quoted"
                    with "name"=...
    """
)


def variable(text: str, name: str) -> Symbol:
    (symbol,) = build_index(text).named(SymbolKind.VARIABLE, name)
    return symbol


def text_at(text: str, where: Range) -> str:
    return split_lines(text)[where.line][where.start : where.end]


def renamed(text: str, symbol: Symbol, new: str) -> str:
    """``text`` after the edits an LSP rename of ``symbol`` makes (its definition and every
    reference)."""
    lines = split_lines(text)
    places = sorted([symbol.definition, *symbol.references], key=lambda r: (r.line, r.start))
    for where in reversed(places):
        line = lines[where.line]
        lines[where.line] = line[: where.start] + new + line[where.end :]
    return "\n".join(lines)


def errors(text: str) -> list[str]:
    doc = parse(text, "test.agent")
    return [d.code for d in [*doc.diagnostics, *check(doc).diagnostics] if d.is_error]


def test_set_variables_slots_are_references_of_their_variables() -> None:
    name = variable(AGENT, "name")
    slots = [r for r in name.references if "with" in split_lines(AGENT)[r.line]]
    assert len(slots) == 2  # `with name=...` and `with "name"=...`
    assert [text_at(AGENT, r) for r in name.references] == ["name"] * 3
    city = variable(AGENT, "city")
    assert [text_at(AGENT, r) for r in city.references] == ["city"] * 2
    # In document order, as find-references lists them.
    assert name.references == sorted(name.references, key=lambda r: (r.line, r.start))


def test_hover_on_a_set_variables_slot_finds_the_variable() -> None:
    index = build_index(AGENT)
    lines = split_lines(AGENT)
    line = next(i for i, text in enumerate(lines) if "with name=" in text)
    column = lines[line].index("name=") + 1
    found = index.at(line, column)
    assert found is not None and (found.kind, found.name) == (SymbolKind.VARIABLE, "name")


def test_renaming_a_variable_renames_its_set_variables_slots_and_the_file_still_checks() -> None:
    assert errors(AGENT) == []
    after = renamed(AGENT, variable(AGENT, "name"), "full_name")
    assert "with full_name=..., city=..." in after
    assert 'with "full_name"=...' in after
    assert errors(after) == []


def test_a_slot_naming_no_variable_is_no_reference() -> None:
    text = AGENT.replace("with name=..., city=...", "with nme=..., city=...")
    assert errors(text) == ["set-variables-unknown-variable"]
    name = variable(text, "name")
    assert [text_at(text, r) for r in name.references] == ["name", "name"]  # prose, quoted
