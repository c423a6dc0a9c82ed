"""The canonical formatter of Agent Script (``agentscript fmt``): syntax tree -> text.

Canonical layout:

- 4 spaces of indentation per nesting level; LF line ends; exactly one newline at end of file.
- ``key: value`` with one space after the colon; ``->`` is kept where the author wrote it.
- Expressions are printed by :mod:`agentscript.expr.printer` (``a == b``, double-quoted strings,
  minimal parentheses). ``set x = y`` has spaces around ``=``; ``with a=1`` and
  ``with a=1, b=2`` have none (the dominant style of the public corpus).
- Template text is kept exactly, line by line; only its indentation as a whole changes.
  A ``key: |`` value always starts on the next line, one level deeper than the key (the corpus
  style; ``key: | text`` parses to the same tree). A ``|`` statement keeps its first line after
  ``| `` and puts continuation lines two columns right of the ``|``, under the text.
- Comments stay where they were: above a node, at the end of a line, after the last item of a
  block, at the end of the file. Full-line comment text is not touched; an end-of-line comment
  is written `` # text`` (the parser keeps its text stripped).
- Blank lines: the author's grouping is kept, but a run of blank lines becomes at most one inside
  a block and at most two between top-level items. Blank lines at the start of a block are
  dropped, except that the comments heading the file (``# @dialect: ...``) stay one blank line
  apart from the first item when they were apart.
- ``\\`` line continuations are joined: the expression is printed on one line.
- Sequence items are written ``- value``. An item holding one simple entry is written
  ``- name: x``; an item holding more goes beneath a bare ``-``, one level deeper, so indentation
  stays four spaces and no entry's nesting depends on alignment with the dash.

``format_text`` never rewrites a file with parse errors, and refuses (returning the text
unchanged with an ``fmt-unsafe`` diagnostic) if the formatted text would not parse back to the
same tree (spans and layout aside) with the same comments.
"""

from __future__ import annotations

import re

from agentscript.diagnostics import UNKNOWN_SPAN, Diagnostic, error
from agentscript.expr.printer import print_expr
from agentscript.syntax.compare import comment_texts, tree_signature
from agentscript.syntax.tree import (
    AvailableWhenStmt,
    Block,
    CollectStmt,
    Document,
    EmptyValue,
    Entry,
    ErrorNode,
    ExprValue,
    IfStmt,
    Item,
    Key,
    RunStmt,
    SequenceItem,
    SetStmt,
    Template,
    TemplateStmt,
    TransitionStmt,
    Value,
    VarDecl,
    WithStmt,
)

__all__ = ["INDENT", "format_document", "format_text"]

INDENT = 4
MAX_BLANK_LINES_TOP = 2
MAX_BLANK_LINES_NESTED = 1
# A `with` parameter or key part the parser reads without quotes.
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*")


def format_text(text: str, path: str | None = None) -> tuple[str, list[Diagnostic]]:
    """Format ``text``; returns the new text and the parse diagnostics.

    A file with parse errors is returned unchanged, with its diagnostics. So is a file the
    formatter cannot safely rewrite (the result would parse to a different tree, or lose a
    comment); the diagnostic ``fmt-unsafe`` then says so, which is a formatter bug worth
    reporting.
    """
    from agentscript.syntax import parse  # the parser imports the tree; import late

    doc = parse(text, path=path)
    if doc.has_errors:
        return text, doc.diagnostics
    try:
        formatted = format_document(doc)
    except (TypeError, ValueError) as exc:
        return text, [*doc.diagnostics, _unsafe(f"cannot format this file: {exc}", path)]
    again = parse(formatted, path=path)
    if (
        again.has_errors
        or tree_signature(again) != tree_signature(doc)
        or comment_texts(again) != comment_texts(doc)
    ):
        return text, [
            *doc.diagnostics,
            _unsafe("formatting would change the meaning of this file; left unchanged", path),
        ]
    return formatted, doc.diagnostics


def _unsafe(message: str, path: str | None) -> Diagnostic:
    diagnostic = error("fmt-unsafe", message, UNKNOWN_SPAN)
    diagnostic.file = path
    return diagnostic


def format_document(doc: Document) -> str:
    """The canonical text of ``doc``."""
    out = _Writer()
    if doc.dialect is not None and not _has_dialect_comment(doc):
        name, version = doc.dialect
        out.line(0, f"# @dialect: {name}={version}" if version else f"# @dialect: {name}")
        out.pending_blank = 1
    out.block(doc.body, 0, top=True)
    out.comments(0, doc.trailing_comments)
    while out.lines and out.lines[-1] == "":
        out.lines.pop()
    return "\n".join(out.lines) + "\n" if out.lines else ""


def _has_dialect_comment(doc: Document) -> bool:
    """Whether the ``# @dialect:`` header is among the comments (the parser keeps it there;
    a document built by hand may only have ``Document.dialect``)."""
    return any(c.strip().startswith("@dialect:") for c in comment_texts(doc))


class _Writer:
    """Accumulates output lines; ``pending_blank`` blank lines are written before the next one."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.pending_blank = 0

    def line(self, column: int, text: str) -> None:
        if self.lines:
            self.lines.extend([""] * self.pending_blank)
        self.pending_blank = 0
        self.lines.append(" " * column + text if text else "")

    def blank_lines(self, count: int, limit: int) -> None:
        self.pending_blank = max(self.pending_blank, min(count, limit))

    def comments(self, column: int, texts: list[str]) -> None:
        for text in texts:
            self.line(column, "#" + text)

    # ------------------------------------------------------------ blocks and items

    def block(self, block: Block, column: int, *, top: bool = False) -> None:
        limit = MAX_BLANK_LINES_TOP if top else MAX_BLANK_LINES_NESTED
        for index, item in enumerate(block.items):
            if index > 0:
                self.blank_lines(item.blank_lines_before, limit)
                self.item(item, column)
            elif top and item.comments and item.blank_lines_before:
                # The comments above the file's first item are a header (`# @dialect: ...`,
                # a licence): keep them apart from it.
                self.comments(column, item.comments)
                self.blank_lines(1, limit)
                self.item(item, column, with_comments=False)
            else:
                self.item(item, column)
        self.comments(column, block.trailing_comments)

    def item(self, item: Item, column: int, *, with_comments: bool = True) -> None:
        if with_comments:
            self.comments(column, item.comments)
        if isinstance(item, Entry):
            self.entry(item, column)
        elif isinstance(item, SequenceItem):
            self.sequence_item(item, column)
        elif isinstance(item, ErrorNode):
            self.line(column, item.text)
        else:
            self.statement(item, column)

    def entry(self, entry: Entry, column: int, *, prefix: str = "") -> None:
        """``key: value`` at ``column``; ``prefix`` is ``"- "`` for the first entry of a
        sequence item, which shifts everything beneath the key right by its width."""
        head = prefix + _key(entry.key) + ":"
        if entry.arrow:
            head += " ->"
        inner = column + len(prefix) + INDENT
        self.headed_value(head, entry.value, entry.trailing_comment, column, inner)
        if entry.block is not None:
            self.block(entry.block, inner)

    def headed_value(
        self, head: str, value: Value | None, trailing: str | None, column: int, inner: int
    ) -> None:
        """``head`` (``key:`` or ``-``) and the value on the same line; a template's lines go
        beneath it at column ``inner``."""
        if value is not None and value.trailing_comment is not None:
            if trailing is None:
                trailing = value.trailing_comment
            elif isinstance(value, EmptyValue):
                # `key: # about key` over `    empty # about empty`: two comments, two lines.
                self.line(column, head + _trailing(trailing))
                self.line(inner, "empty" + _trailing(value.trailing_comment))
                return
            else:
                self.comments(column, [" " + value.trailing_comment])
        if isinstance(value, Template):
            # Template text always starts on the line below `key: |` (the corpus style); the
            # parser reads `key: | text` to the same tree. A `#` after `|` is template text,
            # so a template value never has an end-of-line comment.
            self.line(column, head + " |")
            if value.lines != [""]:
                self.template_body(value.lines, inner)
            return
        if value is not None:
            head = f"{head} {_value(value)}"
        self.line(column, head + _trailing(trailing))

    def sequence_item(self, item: SequenceItem, column: int) -> None:
        block = item.block
        colinear = (
            item.value is None
            and item.trailing_comment is None
            and block is not None
            and _colinear_entry(block)
        )
        if colinear and block is not None and isinstance(block.items[0], Entry):
            self.entry(block.items[0], column, prefix="- ")
            return
        self.headed_value("-", item.value, item.trailing_comment, column, column + INDENT)
        if block is not None:
            self.block(block, column + INDENT)

    # ------------------------------------------------------------ statements

    def statement(self, stmt: Item, column: int) -> None:
        trailing = _trailing(stmt.trailing_comment)
        if isinstance(stmt, TemplateStmt):
            self.template_statement(stmt.template, column)
        elif isinstance(stmt, SetStmt):
            self.line(
                column, f"set {print_expr(stmt.target)} = {print_expr(stmt.value)}" + trailing
            )
        elif isinstance(stmt, WithStmt):
            bindings = ", ".join(f"{_param(b.param)}={print_expr(b.value)}" for b in stmt.bindings)
            self.line(column, f"with {bindings}" + trailing)
        elif isinstance(stmt, RunStmt):
            self.line(column, f"run {print_expr(stmt.target)}" + trailing)
            if stmt.body is not None:
                self.block(stmt.body, column + INDENT)
        elif isinstance(stmt, IfStmt):
            self.if_statement(stmt, column)
        elif isinstance(stmt, TransitionStmt):
            targets = ", ".join(print_expr(t) for t in stmt.targets)
            self.line(column, f"transition to {targets}" + trailing)
        elif isinstance(stmt, AvailableWhenStmt):
            self.line(column, f"available when {print_expr(stmt.condition)}" + trailing)
        elif isinstance(stmt, CollectStmt):
            self.line(column, f"collect {print_expr(stmt.target)}" + trailing)
            if stmt.body is not None:
                self.block(stmt.body, column + INDENT)
        else:
            raise TypeError(f"cannot format {type(stmt).__name__}")

    def if_statement(self, stmt: IfStmt, column: int) -> None:
        self.line(column, f"if {print_expr(stmt.condition)}:" + _trailing(stmt.trailing_comment))
        self.block(stmt.body, column + INDENT)
        for branch in stmt.else_ifs:
            self.comments(column, branch.comments)
            self.line(
                column,
                f"else if {print_expr(branch.condition)}:" + _trailing(branch.trailing_comment),
            )
            self.block(branch.body, column + INDENT)
        if stmt.else_clause is not None:
            clause = stmt.else_clause
            self.comments(column, clause.comments)
            self.line(column, "else:" + _trailing(clause.trailing_comment))
            self.block(clause.body, column + INDENT)

    def template_statement(self, template: Template, column: int) -> None:
        """``| text`` with continuation lines two columns right of the ``|``, so they line up
        with the text of the first line."""
        lines = template.lines
        if lines and lines[0] and not lines[0][0].isspace():
            self.line(column, "| " + lines[0])
            self.template_body(lines[1:], column + 2)
        else:
            # The first line's leading spaces would be dropped after `| `: start below it.
            self.line(column, "|")
            if lines != [""]:
                self.template_body(lines, column + 2)

    def template_body(self, lines: list[str], column: int) -> None:
        for text in lines:
            self.line(column, text)


# ---------------------------------------------------------------- small pieces


def _key(key: Key) -> str:
    # A quoted key ends at the next '"'; it has no escapes.
    return f'"{key.parts[0]}"' if key.quoted else " ".join(key.parts)


def _param(name: str) -> str:
    """A ``with`` parameter: bare when it is a plain name, else quoted (``"Input:Question"``)."""
    return name if _PLAIN_NAME.fullmatch(name) else f'"{name}"'


def _value(value: Value) -> str:
    if isinstance(value, ExprValue):
        text = print_expr(value.expr)
        return f"{text} to {print_expr(value.to)}" if value.to is not None else text
    if isinstance(value, VarDecl):
        text = f"{value.modifier} {value.type}" if value.modifier else str(value.type)
        return f"{text} = {print_expr(value.default)}" if value.default is not None else text
    if isinstance(value, EmptyValue):
        return "empty"
    raise TypeError(f"cannot format value {type(value).__name__}")


def _trailing(comment: str | None) -> str:
    # The parser strips end-of-line comment text; full-line comments keep theirs.
    if comment is None:
        return ""
    return f" # {comment}" if comment else " #"


def _colinear_entry(block: Block) -> bool:
    """Whether a sequence item's block is one simple entry, written ``- name: x``.

    A longer mapping goes beneath a bare ``-`` instead: four-space indentation holds, and the
    entries' alignment cannot change how they nest."""
    if len(block.items) != 1 or block.trailing_comments:
        return False
    first = block.items[0]
    return isinstance(first, Entry) and not first.comments and first.block is None
