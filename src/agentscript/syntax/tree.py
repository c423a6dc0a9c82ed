"""The syntax tree of an Agent Script file.

The tree is dialect-neutral, like the language: a file is a block of ``key: value`` entries whose
values are expressions, typed declarations, templates, nested blocks, sequences or procedures.
What a key *means* is decided later by the checker's schema (``agentscript.check``).

Every node carries a :class:`~agentscript.diagnostics.Span`. Comments and blank lines are kept
on the nodes so the formatter can reproduce them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from agentscript.diagnostics import Diagnostic, Span
from agentscript.expr.nodes import Expr


@dataclass(slots=True, eq=False)
class Node:
    span: Span
    # Comment lines directly above this node (text without the leading '#').
    comments: list[str] = field(default_factory=list, kw_only=True)
    # A comment at the end of this node's first line.
    trailing_comment: str | None = field(default=None, kw_only=True)
    # Blank lines between the previous sibling (or its comments) and this node.
    blank_lines_before: int = field(default=0, kw_only=True)


# ---------------------------------------------------------------- values (after `key:`)


@dataclass(slots=True, eq=False)
class TypeRef:
    """``string``, ``list[number]``."""

    name: str
    span: Span
    parameter: TypeRef | None = None

    def __str__(self) -> str:
        return f"{self.name}[{self.parameter}]" if self.parameter else self.name


@dataclass(slots=True, eq=False)
class ExprValue(Node):
    """``key: <expr>`` or ``key: <expr> to <expr>`` (the transition form of a tool binding)."""

    expr: Expr
    to: Expr | None = None


@dataclass(slots=True, eq=False)
class VarDecl(Node):
    """``name: [mutable|linked] type [= default]`` in variables and action inputs/outputs."""

    type: TypeRef
    modifier: str | None = None
    default: Expr | None = None


@dataclass(slots=True, eq=False)
class Interpolation:
    """``{!expr}`` inside a template."""

    expr: Expr
    span: Span
    source: str  # the text between '{!' and '}', for diagnostics and formatting


TemplatePart = str | Interpolation


@dataclass(slots=True, eq=False)
class Template(Node):
    """Template text: the ``|`` block value of a field, or a ``|`` line in a procedure.

    ``lines`` holds the raw source lines (after dedent) for the formatter; ``parts`` the parsed
    text with interpolations, lines joined by ``\\n``.
    """

    lines: list[str]
    parts: list[TemplatePart]

    @property
    def is_static(self) -> bool:
        return all(isinstance(p, str) for p in self.parts)


@dataclass(slots=True, eq=False)
class EmptyValue(Node):
    """The ``empty`` keyword: an intentionally empty block."""


Value = ExprValue | VarDecl | Template | EmptyValue


# ---------------------------------------------------------------- keys, entries, blocks


@dataclass(slots=True, eq=False)
class Key:
    """``subagent order_help`` has parts ["subagent", "order_help"]; quoted keys have one part."""

    parts: list[str]
    span: Span
    quoted: bool = False

    @property
    def kind(self) -> str:
        return self.parts[0]

    @property
    def name(self) -> str | None:
        """The instance name of a named block (``subagent x``), else None."""
        return self.parts[1] if len(self.parts) > 1 else None

    def __str__(self) -> str:
        return " ".join(self.parts)


@dataclass(slots=True, eq=False)
class Entry(Node):
    """``key: value`` with an optional indented block beneath it.

    ``arrow`` is True when the value was written ``->`` (an explicit procedure).
    """

    key: Key
    value: Value | None = None
    block: Block | None = None
    arrow: bool = False


@dataclass(slots=True, eq=False)
class SequenceItem(Node):
    """``- value`` with an optional indented block (``- name: x`` gives a block of one entry)."""

    value: Value | None = None
    block: Block | None = None


@dataclass(slots=True, eq=False)
class ErrorNode(Node):
    """A line the parser could not understand; its diagnostic is in the document."""

    text: str


# ---------------------------------------------------------------- statements (procedures)


@dataclass(slots=True, eq=False)
class TemplateStmt(Node):
    """``| text {!expr}`` appending to the instructions being built."""

    template: Template


@dataclass(slots=True, eq=False)
class SetStmt(Node):
    target: Expr
    value: Expr


@dataclass(slots=True, eq=False)
class WithBinding:
    param: str
    value: Expr
    span: Span


@dataclass(slots=True, eq=False)
class WithStmt(Node):
    """``with a=1`` or ``with a=1, b=...``."""

    bindings: list[WithBinding]


@dataclass(slots=True, eq=False)
class RunStmt(Node):
    """``run @actions.x`` with its indented ``with``/``set``/``if``/``run``/``transition`` body."""

    target: Expr
    body: Block | None = None


@dataclass(slots=True, eq=False)
class ElseIf:
    condition: Expr
    body: Block
    span: Span
    comments: list[str] = field(default_factory=list)
    trailing_comment: str | None = None


@dataclass(slots=True, eq=False)
class ElseClause:
    body: Block
    span: Span
    comments: list[str] = field(default_factory=list)
    trailing_comment: str | None = None


@dataclass(slots=True, eq=False)
class IfStmt(Node):
    condition: Expr
    body: Block
    else_ifs: list[ElseIf] = field(default_factory=list)
    else_clause: ElseClause | None = None


@dataclass(slots=True, eq=False)
class TransitionStmt(Node):
    """``transition to @subagent.x``; ``targets`` has one element when well-formed."""

    targets: list[Expr]


@dataclass(slots=True, eq=False)
class AvailableWhenStmt(Node):
    condition: Expr


@dataclass(slots=True, eq=False)
class CollectStmt(Node):
    """``collect @variables.x`` with an indented block (``message: "..."``)."""

    target: Expr
    body: Block | None = None


Statement = (
    TemplateStmt
    | SetStmt
    | WithStmt
    | RunStmt
    | IfStmt
    | TransitionStmt
    | AvailableWhenStmt
    | CollectStmt
)

Item = Entry | SequenceItem | Statement | ErrorNode


@dataclass(slots=True, eq=False)
class Block(Node):
    """An indented group of items. Entries, sequence items and statements may mix here; the
    checker's schema says which are allowed where."""

    items: list[Item]
    # Comments after the last item of the block (at the block's indentation).
    trailing_comments: list[str] = field(default_factory=list)

    def entries(self) -> Iterator[Entry]:
        for item in self.items:
            if isinstance(item, Entry):
                yield item

    def statements(self) -> Iterator[Statement]:
        for item in self.items:
            if not isinstance(item, Entry | SequenceItem | ErrorNode):
                yield item

    def get(self, key: str) -> Entry | None:
        """The first entry whose whole key is ``key`` (e.g. "description" or "subagent x")."""
        for entry in self.entries():
            if " ".join(entry.key.parts) == key:
                return entry
        return None

    def named(self, kind: str) -> Iterator[Entry]:
        """Entries of a named-block kind: ``named("subagent")`` yields every ``subagent x:``."""
        for entry in self.entries():
            if entry.key.kind == kind and len(entry.key.parts) == 2:
                yield entry


@dataclass(slots=True, eq=False)
class Document:
    body: Block
    diagnostics: list[Diagnostic]
    path: str | None = None
    # ``# @dialect: agentforce=2.2`` -> ("agentforce", "2.2")
    dialect: tuple[str, str | None] | None = None
    # Comment lines at the very end of the file.
    trailing_comments: list[str] = field(default_factory=list)

    @property
    def has_errors(self) -> bool:
        return any(d.is_error for d in self.diagnostics)


_NOT_SYNTAX = ("span", "comments", "trailing_comment", "trailing_comments")


def walk(value: Any) -> Iterator[Any]:
    """Every syntax node inside ``value`` (a node, a block, a list of them), depth first in
    source order: blocks, statements, their bodies and expressions. Spans and comments are
    not visited."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(reversed(node))
        elif dataclasses.is_dataclass(node) and not isinstance(node, type):
            yield node
            for f in dataclasses.fields(node):
                if f.name not in _NOT_SYNTAX:
                    stack.append(getattr(node, f.name))
