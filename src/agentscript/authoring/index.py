"""Where each name of an ``.agent`` file is defined and used: what an editor needs.

Built from the text and the checker's outline of the same text. References are found in the
text itself (``@variables.x``, ``@actions.x``, ``@subagent.x`` ...), so a half-typed file that
does not check still gets references, completion and rename; definitions come from the outline
(variables, subagents, actions and reasoning actions), which the checker builds even when the
file has errors. One reference has no ``@``: the slot ``x`` of ``with x=...`` under a
``@utils.setVariables`` reasoning action names the variable ``x``; those come from the outline.

Positions are 0-based (line, character), as the Language Server Protocol counts them, with a tab
counted as one character like the protocol does.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from agentscript.authoring.lsp_positions import split_lines
from agentscript.check import check
from agentscript.check.outline import AgentOutline
from agentscript.diagnostics import Diagnostic
from agentscript.syntax import Document, parse
from agentscript.syntax.incremental import ParseState, full_parse, reparse
from agentscript.syntax.tree import WithStmt

_REFERENCE = re.compile(
    r"@(variables|actions|subagent|topic|start_agent|connected_subagent|outputs|utils)\.(\w+)"
)
NAMESPACES = (
    "variables",
    "actions",
    "subagent",
    "topic",
    "start_agent",
    "connected_subagent",
    "outputs",
    "utils",
    "system_variables",
    "knowledge",
)
UTILS = ("transition", "escalate", "setVariables", "end_session")


class SymbolKind(StrEnum):
    VARIABLE = "variable"
    NODE = "node"  # start_agent, subagent, topic, connected subagent
    ACTION = "action"  # an action definition
    TOOL = "tool"  # a reasoning action (binding)


@dataclass(frozen=True, slots=True)
class Range:
    line: int
    start: int
    end: int

    def contains(self, line: int, character: int) -> bool:
        return self.line == line and self.start <= character <= self.end


@dataclass(slots=True)
class Symbol:
    kind: SymbolKind
    name: str
    definition: Range
    detail: str = ""
    owner: str | None = None  # the node of an action or tool
    references: list[Range] = field(default_factory=list)


@dataclass(slots=True)
class DocumentIndex:
    text: str
    outline: AgentOutline
    diagnostics: list[Diagnostic]
    symbols: list[Symbol]

    def at(self, line: int, character: int) -> Symbol | None:
        """The symbol whose definition or a reference covers the position."""
        for symbol in self.symbols:
            if symbol.definition.contains(line, character):
                return symbol
            if any(r.contains(line, character) for r in symbol.references):
                return symbol
        return None

    def named(self, kind: SymbolKind, name: str) -> list[Symbol]:
        return [s for s in self.symbols if s.kind == kind and s.name == name]


_NODE_NAMESPACES = {"subagent", "topic", "start_agent", "connected_subagent"}


def build_index(
    text: str, path: str = "document.agent", *, document: Document | None = None
) -> DocumentIndex:
    """Parse, check and index ``text``. Never raises on any text.

    ``document`` is the parse of ``text`` when the caller has it already (the language
    server's incremental parse, :class:`LiveDocument`).
    """
    doc = parse(text, path) if document is None else document
    result = check(doc)
    outline = result.outline
    # Numbered as the parser numbers the outline's spans: ``str.splitlines`` also breaks at
    # \f, \u2028 and the like, and a definition after one would land on the wrong line.
    lines = split_lines(text)
    symbols: list[Symbol] = []

    def name_range(line: int, column: int, name: str) -> Range:
        source = lines[line - 1] if 0 < line <= len(lines) else ""
        at = source.find(name, max(column - 1, 0))
        if at < 0:
            at = max(column - 1, 0)
        return Range(line - 1, at, at + len(name))

    for name, info in outline.variables.items():
        detail = f"{info.modifier + ' ' if info.modifier else ''}{info.type}"
        if info.description:
            detail += f" — {info.description}"
        symbols.append(
            Symbol(
                SymbolKind.VARIABLE,
                name,
                name_range(info.span.line, info.span.column, name),
                detail,
            )
        )
    for node in outline.subagents.values():
        detail = f"{node.kind} {node.name}" + (f" — {node.description}" if node.description else "")
        symbols.append(
            Symbol(
                SymbolKind.NODE,
                node.name,
                name_range(node.span.line, node.span.column + len(node.kind), node.name),
                detail,
            )
        )
        for action in node.actions.values():
            inputs = ", ".join(f"{p.name}: {p.type}" for p in action.inputs.values())
            outputs = ", ".join(f"{p.name}: {p.type}" for p in action.outputs.values())
            detail = f"{action.name}({inputs}) -> ({outputs}) [{action.target or 'no target'}]"
            if action.description:
                detail += f" — {action.description}"
            symbols.append(
                Symbol(
                    SymbolKind.ACTION,
                    action.name,
                    name_range(action.span.line, action.span.column, action.name),
                    detail,
                    node.name,
                )
            )
        for binding in node.tools.values():
            guard = " (gated)" if binding.available_when else ""
            detail = f"reasoning action {binding.name} -> {binding.target or '?'}{guard}"
            symbols.append(
                Symbol(
                    SymbolKind.TOOL,
                    binding.name,
                    name_range(binding.span.line, binding.span.column, binding.name),
                    detail,
                    node.name,
                )
            )
    for connected in outline.connected_subagents.values():
        symbols.append(
            Symbol(
                SymbolKind.NODE,
                connected.name,
                name_range(connected.span.line, connected.span.column, connected.name),
                f"connected_subagent {connected.name}",
            )
        )
    _link_references(lines, symbols)
    _link_set_variables_slots(outline, symbols, name_range)
    return DocumentIndex(text, outline, [*doc.diagnostics, *result.diagnostics], symbols)


class LiveDocument:
    """A document open in an editor: each :meth:`update` re-parses only the top-level blocks
    the edit touched (``syntax.incremental``) and checks and indexes the result."""

    def __init__(self, path: str = "document.agent") -> None:
        self.path = path
        self.state: ParseState | None = None

    def update(self, text: str) -> DocumentIndex:
        """The index of ``text``, the document's new content. Never raises on any text."""
        if self.state is None:
            state = full_parse(text, self.path)
        else:
            state = reparse(self.state, text, self.path)
        self.state = state
        return build_index(text, self.path, document=state.document)


def document_diagnostics(index: DocumentIndex) -> list[Diagnostic]:
    """What an editor shows for a document: the parser's and checker's diagnostics, and the
    lints when there is no error (as ``validate`` does)."""
    found = list(index.diagnostics)
    if not any(d.is_error for d in found):
        from agentscript.authoring.lints import lint_agent

        found += lint_agent(index.outline, index.text)
    return found


def _node_at(symbols: list[Symbol], line: int) -> str | None:
    """The node whose block contains a line: the last node defined at or before it."""
    owner = None
    for symbol in symbols:
        if (
            symbol.kind == SymbolKind.NODE
            and symbol.definition.line <= line
            and (owner is None or symbol.definition.line >= owner.definition.line)
        ):
            owner = symbol
    return owner.name if owner else None


def _link_references(lines: list[str], symbols: list[Symbol]) -> None:
    # Every lookup below is a dictionary read: a 100 KB file has thousands of references.
    by_kind: dict[tuple[SymbolKind, str], list[Symbol]] = {}
    actions: dict[str, list[Symbol]] = {}
    for symbol in symbols:
        by_kind.setdefault((symbol.kind, symbol.name), []).append(symbol)
        if symbol.kind in (SymbolKind.ACTION, SymbolKind.TOOL):
            actions.setdefault(symbol.name, []).append(symbol)
    # The node owning a line is the last one defined at or before it (as _node_at says);
    # sorted by (line, position in the list) the rightmost one at or before the line wins.
    nodes = sorted(
        (s.definition.line, order, s.name)
        for order, s in enumerate(symbols)
        if s.kind == SymbolKind.NODE
    )
    node_lines = [line for line, _order, _name in nodes]
    for number, line in enumerate(lines):
        if "@" not in line:
            continue
        code = line.split("#", 1)[0] if '"' not in line else line
        for match in _REFERENCE.finditer(code):
            namespace, name = match.group(1), match.group(2)
            where = Range(number, match.start(2), match.end(2))
            if namespace == "variables":
                targets = by_kind.get((SymbolKind.VARIABLE, name), [])
            elif namespace in _NODE_NAMESPACES:
                targets = by_kind.get((SymbolKind.NODE, name), [])
            elif namespace == "actions":
                at = bisect_right(node_lines, number)
                node = nodes[at - 1][2] if at else None
                candidates = actions.get(name, [])
                local = [s for s in candidates if s.owner == node]
                targets = (local or candidates)[:1]
            else:
                targets = []
            for target in targets:
                target.references.append(where)


def _link_set_variables_slots(
    outline: AgentOutline, symbols: list[Symbol], name_range: Callable[[int, int, str], Range]
) -> None:
    """Each ``with x=...`` slot of a ``@utils.setVariables`` tool is a reference to the
    variable ``x``: renaming the variable without it left ``with x`` naming nothing, an error
    (set-variables-unknown-variable) in 170 of 4,579 renames over the conformance corpus.
    The slots read are the ones the checker reads (``with`` at the top of the tool's block)."""
    variables = {s.name: s for s in symbols if s.kind == SymbolKind.VARIABLE}
    touched: dict[str, Symbol] = {}
    for node in outline.subagents.values():
        for tool in node.tools.values():
            if tool.kind != "set_variables" or tool.body is None:
                continue
            for item in tool.body.items:
                if not isinstance(item, WithStmt):
                    continue
                for binding in item.bindings:
                    target = variables.get(binding.param)
                    if target is None:
                        continue
                    span = binding.span
                    target.references.append(name_range(span.line, span.column, binding.param))
                    touched[target.name] = target
    for symbol in touched.values():  # in document order, as the text's references are
        symbol.references.sort(key=lambda r: (r.line, r.start))


def completions(index: DocumentIndex, line: int, character: int) -> list[tuple[str, str]]:
    """(label, detail) pairs for the text before the cursor: namespaces after ``@``, members
    after ``@namespace.``."""
    lines = split_lines(index.text)
    before = lines[line][:character] if line < len(lines) else ""
    member = re.search(r"@(\w+)\.(\w*)$", before)
    if member is not None:
        namespace = member.group(1)
        if namespace == "variables":
            return [(s.name, s.detail) for s in index.symbols if s.kind == SymbolKind.VARIABLE]
        if namespace in _NODE_NAMESPACES:
            kinds = {"subagent": "subagent", "topic": "topic", "start_agent": "start_agent"}
            return [
                (s.name, s.detail)
                for s in index.symbols
                if s.kind == SymbolKind.NODE
                and (namespace not in kinds or s.detail.startswith(kinds[namespace]))
            ]
        if namespace == "actions":
            node = _node_at(index.symbols, line)
            found = [
                (s.name, s.detail)
                for s in index.symbols
                if s.kind in (SymbolKind.ACTION, SymbolKind.TOOL) and s.owner == node
            ]
            return found or [
                (s.name, s.detail) for s in index.symbols if s.kind == SymbolKind.ACTION
            ]
        if namespace == "utils":
            return [(u, "@utils." + u) for u in UTILS]
        return []
    if re.search(r"@\w*$", before):
        return [(n, f"@{n}.") for n in NAMESPACES]
    return []
