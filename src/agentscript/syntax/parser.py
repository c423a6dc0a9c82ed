"""Indentation-aware parser of Agent Script text into a :class:`~agentscript.syntax.tree.Document`.

The parser works line by line: a block is the run of lines indented deeper than its owner.
Each line is an entry (``key: value``), a sequence item (``- x``), a statement (``if``, ``run``,
``set``, ``with``, ``transition``, ``available when``, ``collect``, ``|``) or a comment.
Expressions inside lines are parsed by :class:`agentscript.expr.parser.ExprParser`.

It never raises on bad input: every problem becomes a diagnostic at its line, and parsing
continues with the next line, so one file reports all of its errors.
"""

from __future__ import annotations

import re

from agentscript.diagnostics import Diagnostic, Span, error, warning
from agentscript.expr.lexer import TAB_WIDTH
from agentscript.expr.nodes import ErrorExpr, Expr
from agentscript.expr.parser import ExprParser, quick_parse
from agentscript.limits import MAX_BLOCK_DEPTH as LIMIT_BLOCK_DEPTH
from agentscript.source import Source, normalise_newlines
from agentscript.syntax.tree import (
    AvailableWhenStmt,
    Block,
    CollectStmt,
    Document,
    ElseClause,
    ElseIf,
    EmptyValue,
    Entry,
    ErrorNode,
    ExprValue,
    IfStmt,
    Interpolation,
    Item,
    Key,
    RunStmt,
    SequenceItem,
    SetStmt,
    Template,
    TemplatePart,
    TemplateStmt,
    TransitionStmt,
    TypeRef,
    Value,
    VarDecl,
    WithBinding,
    WithStmt,
)

# Nesting limits keep the recursive parser well inside Python's default recursion limit
# (about 6 frames per block level, 11 per bracket level; see expr.parser.MAX_DEPTH).
MAX_BLOCK_DEPTH = LIMIT_BLOCK_DEPTH

_STATEMENT_WORD = re.compile(
    r"(?:if|else|elif|elseif|run|set|with|transition|available|collect)(?![A-Za-z0-9_])"
)
_KEY_PART = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*")
_DECL = re.compile(
    r"(?:(?P<mod>[A-Za-z_]\w*)[ \t]+)?(?P<type>[A-Za-z_]\w*)"
    r"(?:[ \t]*\[[ \t]*(?P<param>[A-Za-z_]\w*)[ \t]*\])?[ \t]*(?P<rest>=(?!=)|#|$)",
    re.MULTILINE,
)
_NOT_TYPES = frozenset(
    {"True", "False", "None", "and", "or", "not", "is", "in", "if", "else", "empty"}
)
_DIALECT = re.compile(r"#\s*@dialect:\s*([A-Za-z_][\w-]*)\s*(?:=\s*([0-9]+(?:\.[0-9]+)?))?")
_WORD = re.compile(r"[A-Za-z_]\w*")
_QUICK_START = frozenset('"@-0123456789')
_ENTRY_HEAD = re.compile(
    r"(?P<key>[A-Za-z_][A-Za-z0-9_\-]*(?:[ \t]+[A-Za-z_][A-Za-z0-9_\-]*)*)[ \t]*:[ \t]*"
)
_SIMPLE_INTERPOLATION = re.compile(
    r"[ \t]*(@[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)[ \t]*\}"
)
_SET_TARGET = re.compile(
    r"[ \t]*(?P<target>@[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)[ \t]*=(?!=)[ \t]*"
)
_INDENT = re.compile(r"[ \t]*")
_SPACES = _INDENT
# Words of a key, up to the ':' (or '#', or whatever else ends it).
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*(?:[ \t]+[A-Za-z_][A-Za-z0-9_\-]*)*")


class _Line:
    __slots__ = ("content", "end", "indent", "kind", "number", "start", "tabs")

    def __init__(self, number: int, start: int, end: int, text: str) -> None:
        self.number = number
        self.start = start
        self.end = end
        m = _INDENT.match(text, start, end)
        assert m is not None  # the pattern matches the empty string
        pos = m.end()
        self.tabs = "\t" in m.group()
        if self.tabs:
            width = 0
            for ch in m.group():
                width += TAB_WIDTH - width % TAB_WIDTH if ch == "\t" else 1
            self.indent = width
        else:
            self.indent = pos - start
        self.content = pos
        if pos == end:
            self.kind = "blank"
        elif text[pos] == "#":
            self.kind = "comment"
        else:
            self.kind = "content"

    def with_indent(self, indent: int) -> _Line:
        """This line as if indented ``indent`` columns (for an entry after a '- ')."""
        copy = _Line.__new__(_Line)
        for name in _Line.__slots__:
            setattr(copy, name, getattr(self, name))
        copy.indent = indent
        return copy


class Parser:
    """One parse of one text; use :func:`parse`."""

    def __init__(self, text: str, path: str | None = None) -> None:
        self.text = normalise_newlines(text)
        self.source = Source(self.text, path)
        self.path = path
        self.diagnostics: list[Diagnostic] = []
        starts = self.source.line_starts
        n = len(starts)
        self.lines = [
            _Line(i + 1, starts[i], (starts[i + 1] - 1) if i + 1 < n else len(self.text), self.text)
            for i in range(n)
        ]
        if self.lines and self.lines[-1].start == len(self.text):
            self.lines.pop()  # the empty line after a final newline
        self.i = 0

    # ------------------------------------------------------------------ utilities

    def report(self, code: str, message: str, span: Span, *, severity: str = "error") -> None:
        diag = warning(code, message, span) if severity == "warning" else error(code, message, span)
        diag.file = self.path
        self.diagnostics.append(diag)

    def comment_text(self, line: _Line) -> str:
        """The text of a comment line after its '#' (kept as written but for trailing blanks)."""
        return self.text[line.content + 1 : line.end].rstrip()

    def line_span(self, line: _Line) -> Span:
        return self.source.span(line.content, line.end)

    def span(self, start: int, end: int) -> Span:
        return self.source.span(start, end)

    def line_index_of(self, offset: int) -> int:
        return self.source.line_col(offset)[0] - 1

    def expr_at(self, start: int) -> tuple[Expr, ExprParser]:
        """Parse an expression at ``start``; its diagnostics are collected by finish_line."""
        parser = ExprParser(self.source, start)
        return parser.parse(), parser

    def finish_line(
        self, parser: ExprParser | None, offset: int, line: _Line, what: str
    ) -> str | None:
        """Check that nothing but a comment follows ``offset``; return the comment text.

        Moves ``self.i`` past the (possibly continued) line.
        """
        pos = offset
        text = self.text
        if parser is None:  # ``offset`` is on ``line``
            if self.i < line.number:
                self.i = line.number
            end = line.end
        else:
            pos = parser.next_offset
            for diag in parser.diagnostics:
                diag.file = self.path
            self.diagnostics.extend(parser.diagnostics)
            self.i = max(self.i, self.line_index_of(pos) + 1)
            end = text.find("\n", pos)
            end = len(text) if end == -1 else end
        while pos < end and text[pos] in " \t":
            pos += 1
        if pos >= end:
            return None
        if text[pos] == "#":
            return text[pos + 1 : end].strip()
        # One error per line: whatever follows an earlier error on it is a cascade.
        last = self.diagnostics[-1] if self.diagnostics else None
        if last is None or not last.is_error or last.span.end_line < line.number:
            self.report(
                "syntax-error",
                f"unexpected '{text[pos:end].strip()[:40]}' after {what}",
                self.span(pos, end),
            )
        return None

    def next_content(self, start: int) -> int:
        """Index of the next non-blank, non-comment line at or after ``start`` (or len)."""
        lines = self.lines
        i = start
        while i < len(lines) and lines[i].kind != "content":
            i += 1
        return i

    def child_block(self, owner: _Line, depth: int) -> Block | None:
        """The block of lines deeper than ``owner``, if the next content line is deeper."""
        j = self.next_content(self.i)
        if j >= len(self.lines) or self.lines[j].indent <= owner.indent:
            return None
        return self.parse_block(owner.indent, depth + 1)

    # ------------------------------------------------------------------ document

    def parse(self) -> Document:
        """The whole text as a document, with the dialect header and every diagnostic."""
        dialect = None
        for line in self.lines[:10]:
            if line.kind == "comment":
                m = _DIALECT.match(self.text, line.content, line.end)
                if m:
                    dialect = (m.group(1).lower(), m.group(2))
                    break
        if any(line.tabs for line in self.lines) and any(
            line.kind == "content" and not line.tabs and line.indent > 0 for line in self.lines
        ):
            first = next(line for line in self.lines if line.tabs)
            self.report(
                "mixed-indentation",
                "this file indents with both tabs and spaces; use spaces only (a tab counts as 4)",
                self.line_span(first),
                severity="warning",
            )
        body = self.parse_block(-1, 0)
        trailing = body.trailing_comments
        body.trailing_comments = []
        return Document(body, self.diagnostics, self.path, dialect, trailing)

    # ------------------------------------------------------------------ blocks

    def parse_block(
        self, parent_indent: int, depth: int, expected_indent: int | None = None
    ) -> Block:
        lines = self.lines
        items: list[Item] = []
        comments: list[str] = []
        blanks = 0
        block_indent = expected_indent
        first_span: Span | None = None
        if depth > MAX_BLOCK_DEPTH:
            return self.skip_too_deep(parent_indent)
        # Where the current run of blank lines started: a block that ends gives its trailing
        # blank lines back, so the enclosing block records them before its next item.
        blank_start = self.i
        inside_until = -1  # comment lines before this index are known to stay in the block
        count = len(lines)
        while self.i < count:
            line = lines[self.i]
            if line.kind == "blank":
                if not blanks:
                    blank_start = self.i
                blanks += 1
                self.i += 1
                continue
            if line.indent <= parent_indent and (line.kind == "content" or self.i >= inside_until):
                # A comment left of the block stays in it if the block goes on after it.
                j = self.next_content(self.i)
                if line.kind == "comment" and j < count and lines[j].indent > parent_indent:
                    inside_until = j
                else:
                    if blanks:
                        self.i = blank_start
                    break
            if line.kind == "comment":
                comments.append(self.comment_text(line))
                self.i += 1
                continue
            if block_indent is None:
                block_indent = line.indent
            elif line.indent != block_indent:
                if line.indent > block_indent:
                    message = "unexpected indentation: this line is indented deeper than the lines above it"
                else:
                    message = "inconsistent indentation: this line lines up with no enclosing block"
                self.report("indentation-error", message, self.line_span(line))
            start_i = self.i
            item = self.parse_item(line, depth) if depth else self.top_level_item(line)
            if self.i <= start_i:  # always make progress, whatever went wrong
                self.i = start_i + 1
            item.comments = comments
            item.blank_lines_before = blanks if items or comments else 0
            comments = []
            blanks = 0
            if first_span is None:
                first_span = item.span
            items.append(item)
        self.check_mixed_block(items)
        span = first_span.to(items[-1].span) if first_span is not None else Span(1, 1, 1, 1)
        return Block(span, items, trailing_comments=comments)

    def top_level_item(self, line: _Line) -> Item:
        """One item of the file's top-level block (``syntax.incremental`` reuses unchanged
        ones from a previous parse here)."""
        return self.parse_item(line, 0)

    def check_mixed_block(self, items: list[Item]) -> None:
        """A block is either a mapping or a sequence; report the first item of the other kind."""
        kinds = [
            isinstance(item, SequenceItem)
            for item in items
            if isinstance(item, Entry | SequenceItem)
        ]
        if not kinds or all(kinds) or not any(kinds):
            return
        first_is_sequence = kinds[0]
        for item in items:
            if (
                isinstance(item, Entry | SequenceItem)
                and isinstance(item, SequenceItem) != first_is_sequence
            ):
                what = (
                    "a '- ' item in a block of 'key:' entries"
                    if not first_is_sequence
                    else "a 'key:' entry in a block of '- ' items"
                )
                self.report(
                    "invalid-sequence-element",
                    f"{what}: a block is either a mapping or a sequence",
                    item.span,
                )
                return

    def skip_too_deep(self, parent_indent: int) -> Block:
        line = self.lines[self.i]
        self.report(
            "nesting-too-deep",
            f"blocks are nested more than {MAX_BLOCK_DEPTH} levels deep; this content is ignored",
            self.line_span(line),
        )
        while self.i < len(self.lines):
            current = self.lines[self.i]
            if current.kind != "blank" and current.indent <= parent_indent:
                break
            self.i += 1
        return Block(self.line_span(line), [])

    # ------------------------------------------------------------------ items

    def parse_item(self, line: _Line, depth: int) -> Item:
        text = self.text
        pos = line.content
        ch = text[pos]
        if ch == "|":
            return self.template_stmt(line, pos)
        if ch == "-" and not text.startswith("->", pos):
            return self.sequence_item(line, pos, depth)
        m = _STATEMENT_WORD.match(text, pos, line.end)
        if m:
            word = m.group()
            after = m.end()
            nxt = text[after] if after < line.end else "\n"
            if (
                nxt in " \t\n"
                or (nxt == ":" and word in ("if", "else"))
                or (nxt == "(" and word == "if")
            ):
                return self.statement(line, word, after, depth)
        return self.entry(line, pos, depth)

    def entry(self, line: _Line, pos: int, depth: int, *, value_block: bool = True) -> Item:
        """``key: value`` and its block; ``value_block=False`` leaves the lines below a
        colinear value to the caller (the first entry of a sequence item)."""
        text = self.text
        m = _ENTRY_HEAD.match(text, pos, line.end)
        if m is not None:
            # The usual `name:` / `kind name:` head, in one match.
            key = Key(m.group("key").split(), self.line_part(line, pos, m.end("key")))
            self.check_key_words(key)
            entry = Entry(key.span, key)
            self.entry_value(entry, line, m.end(), depth, value_block)
            return entry
        parsed = self.key(line, pos)
        if parsed is None:
            self.report("syntax-error", "expected a 'key:' entry here", self.line_span(line))
            self.i += 1
            self.child_block(line, depth)  # parsed only to report the errors inside it
            return ErrorNode(self.line_span(line), text[line.content : line.end])
        key, key_end = parsed
        pos = self.skip_spaces(key_end)
        if pos < line.end and text[pos] == ":":
            pos = self.skip_spaces(pos + 1)
            self.check_key_words(key)
        else:
            self.report(
                "missing-colon" if not key.quoted else "syntax-error",
                f"expected ':' after '{key}'",
                self.span(pos, max(pos + 1, line.end)) if pos < line.end else key.span,
            )
        entry = Entry(key.span, key)
        self.entry_value(entry, line, pos, depth, value_block)
        return entry

    def check_key_words(self, key: Key) -> None:
        """A key is a name or a ``kind name`` pair of identifiers (quoted keys are free text)."""
        parts = key.parts
        if key.quoted or (len(parts) == 1 and "-" not in parts[0]):
            return
        if len(parts) > 2:
            self.report(
                "syntax-error",
                f"'{key}' is not a key: a key is one name or two ('kind name'); "
                "quote it to use other text",
                key.span,
            )
            return
        bad = next((part for part in parts if "-" in part), None)
        if bad is not None:
            self.report(
                "invalid-name",
                f"'{bad}' is not a valid name: use letters, digits and '_'",
                key.span,
            )

    def key(self, line: _Line, pos: int) -> tuple[Key, int] | None:
        """The key at ``pos`` and the offset just after it."""
        text = self.text
        if text[pos] == '"':
            end = text.find('"', pos + 1, line.end)
            if end == -1:
                return None
            return Key([text[pos + 1 : end]], self.line_part(line, pos, end + 1), True), end + 1
        m = _KEY.match(text, pos, line.end)
        if m is None:
            return None
        end = m.end()
        return Key(m.group().split(), self.line_part(line, pos, end)), end

    def line_part(self, line: _Line, start: int, end: int) -> Span:
        """The span of ``text[start:end]``, both on ``line`` (no line search needed)."""
        return Span(line.number, start - line.start + 1, line.number, end - line.start + 1)

    def skip_spaces(self, pos: int) -> int:
        m = _SPACES.match(self.text, pos)
        return pos if m is None else m.end()

    def entry_value(
        self, entry: Entry, line: _Line, pos: int, depth: int, value_block: bool = True
    ) -> None:
        """Parse what follows ``key:`` (starting at ``pos``) and the indented block beneath."""
        text = self.text
        end = line.end
        if pos >= end or text[pos] == "#":
            entry.trailing_comment = self.finish_line(None, pos, line, "the key")
            entry.value = self.empty_block(line)
            if entry.value is None:
                entry.block = self.child_block(line, depth)
        elif text.startswith("->", pos):
            entry.arrow = True
            entry.trailing_comment = self.finish_line(None, pos + 2, line, "'->'")
            entry.block = self.child_block(line, depth)
            if entry.block is None:
                self.report(
                    "missing-block",
                    "expected an indented procedure after '->'",
                    self.span(pos, pos + 2),
                )
                entry.block = Block(self.span(pos, pos + 2), [])
        elif text[pos] == "|":
            entry.value = self.template(line, pos)
        elif self.is_empty_word(pos, end):
            entry.value = EmptyValue(self.span(pos, pos + 5))
            entry.trailing_comment = self.finish_line(None, pos + 5, line, "'empty'")
        else:
            entry.value = self.colinear_value(line, pos)
            entry.trailing_comment = entry.value.trailing_comment
            entry.value.trailing_comment = None
            if value_block:
                entry.block = self.child_block(line, depth)
        if entry.value is not None:
            entry.span = entry.key.span.to(entry.value.span)
        if entry.block is not None and entry.block.items:
            entry.span = entry.span.to(entry.block.span)

    def is_empty_word(self, pos: int, end: int) -> bool:
        """Whether ``text[pos:end]`` is the keyword ``empty``, optionally with a comment."""
        text = self.text
        if not text.startswith("empty", pos):
            return False
        rest = self.skip_spaces(pos + 5)
        return rest >= end or (text[rest] == "#" and rest > pos + 5)

    def empty_block(self, owner: _Line) -> EmptyValue | None:
        """``key:`` followed by a block holding only ``empty`` means the same as ``key: empty``."""
        lines = self.lines
        j = self.next_content(self.i)
        if j >= len(lines) or lines[j].indent <= owner.indent:
            return None
        line = lines[j]
        if not self.is_empty_word(line.content, line.end):
            return None
        after = self.next_content(j + 1)
        if after < len(lines) and lines[after].indent > owner.indent:
            return None
        self.i = j
        value = EmptyValue(self.span(line.content, line.content + 5))
        value.trailing_comment = self.finish_line(None, line.content + 5, line, "'empty'")
        return value

    def colinear_value(self, line: _Line, pos: int) -> Value:
        text = self.text
        if text[pos] in _QUICK_START:  # not a word, so not a declaration
            quick = quick_parse(self.source, pos, line.end)
            if quick is not None:
                expr, end = quick
                comment = self.finish_line(None, end, line, "the value")
                return ExprValue(expr.span, expr, trailing_comment=comment)
        m = _DECL.match(text, pos, line.end)
        if m and m.group("type") not in _NOT_TYPES and (m.group("mod") or "") not in _NOT_TYPES:
            return self.declaration(line, pos, m)
        m2 = _WORD.match(text, pos, line.end)
        if m2 and m2.group() in ("mutable", "linked"):
            # A modifier always starts a declaration, even a malformed one.
            return self.declaration(line, pos, None)
        expr, parser = self.expr_at(pos)
        to: Expr | None = None
        t = parser.tok
        if t.kind == "IDENT" and t.text == "to":
            parser.advance()
            to = parser.parse()
        comment = self.finish_line(parser, pos, line, "the value")
        span = expr.span.to(to.span) if to is not None else expr.span
        return ExprValue(span, expr, to, trailing_comment=comment)

    def declaration(self, line: _Line, pos: int, m: re.Match[str] | None) -> VarDecl:
        text = self.text
        if m is None:
            # `mutable string "x"` and other shapes the pattern rejects.
            words = list(_WORD.finditer(text, pos, line.end))
            modifier = words[0].group()
            type_match = words[1] if len(words) > 1 else None
            type_ref = TypeRef(
                type_match.group() if type_match else "",
                self.span(type_match.start(), type_match.end())
                if type_match
                else self.span(pos, line.end),
            )
            after = type_match.end() if type_match else words[0].end()
            rest = self.skip_spaces(after)
            if type_match is None:
                self.report(
                    "missing-type", f"expected a type after '{modifier}'", self.span(pos, line.end)
                )
            elif rest < line.end:
                self.report(
                    "syntax-error",
                    "expected '=' before the default value",
                    self.span(rest, line.end),
                )
            self.i = line.number
            return VarDecl(self.span(pos, line.end), type_ref, modifier=modifier)
        modifier = m.group("mod")
        type_name = m.group("type")
        type_span = self.span(m.start("type"), m.end("type"))
        param = m.group("param")
        type_ref = TypeRef(type_name, type_span)
        if param:
            type_ref.parameter = TypeRef(param, self.span(m.start("param"), m.end("param")))
            type_ref.span = self.span(m.start("type"), m.end("param") + 1)
        decl = VarDecl(
            self.span(pos, m.end("param") + 1 if param else m.end("type")),
            type_ref,
            modifier=modifier,
        )
        if m.group("rest") == "=":
            start = self.skip_spaces(m.end("rest"))
            quick = quick_parse(self.source, start, line.end)
            if quick is not None:
                default, end = quick
                decl.trailing_comment = self.finish_line(None, end, line, "the default value")
            else:
                default, parser = self.expr_at(start)
                decl.trailing_comment = self.finish_line(parser, pos, line, "the default value")
            decl.default = default
            decl.span = decl.span.to(default.span)
        else:
            decl.trailing_comment = self.finish_line(None, m.start("rest"), line, "the type")
        return decl

    def sequence_item(self, line: _Line, pos: int, depth: int) -> SequenceItem:
        text = self.text
        after = pos + 1
        if after < line.end and text[after] not in " \t":
            self.report(
                "syntax-error",
                "put a space after '-' in a sequence item",
                self.span(pos, after + 1),
            )
        content = self.skip_spaces(after)
        item = SequenceItem(self.span(pos, max(content, after)))
        if content >= line.end or text[content] == "#":
            item.trailing_comment = self.finish_line(None, content, line, "'-'")
            item.block = self.child_block(line, depth)
            return item
        if text[content] == "|":
            item.value = self.template(line, content)
            item.span = item.span.to(item.value.span)
            return item
        # `- key: value` starts a mapping whose entries line up with `key`.
        key_match = _KEY_PART.match(text, content, line.end)
        quoted_key = text[content] == '"' and not _escaped_close(text, content, line.end)
        if key_match or quoted_key:
            probe = self.key(line, content)
            if probe is not None:
                colon = self.skip_spaces(probe[1])
                if colon < line.end and text[colon] == ":":
                    column = content - line.start
                    # The first entry's own block is what lies deeper than its key, not
                    # deeper than the dash; a colinear value has no block of its own there:
                    # the deeper lines are the item's next entries, however indented.
                    key_line = line.with_indent(column)
                    first = self.entry(key_line, content, depth + 1, value_block=False)
                    has_value = isinstance(first, Entry) and first.value is not None
                    rest = self.parse_block(
                        line.indent, depth + 1, expected_indent=None if has_value else column
                    )
                    item.block = Block(
                        first.span, [first, *rest.items], trailing_comments=rest.trailing_comments
                    )
                    if rest.items:
                        item.block.span = first.span.to(rest.span)
                    item.span = item.span.to(item.block.span)
                    return item
        item.value = self.colinear_value(line, content)
        item.trailing_comment = item.value.trailing_comment
        item.value.trailing_comment = None
        item.span = item.span.to(item.value.span)
        item.block = self.child_block(line, depth)
        return item

    # ------------------------------------------------------------------ templates

    def template_stmt(self, line: _Line, pos: int) -> TemplateStmt:
        template = self.template(line, pos)
        return TemplateStmt(template.span, template)

    def template(self, line: _Line, bar: int) -> Template:
        """A ``|`` template starting at ``bar``: the rest of the line plus the lines deeper
        than ``line``."""
        text = self.text
        lines = self.lines
        first_start = bar + 1
        while first_start < line.end and text[first_start] in " \t":
            first_start += 1
        first_text = text[first_start : line.end].rstrip()
        # Continuation: every following line deeper than the owner (blank lines in between
        # belong to the template only if deeper content follows them).
        j = line.number  # the index of the line after ``line``
        continuation: list[_Line] = []
        k = j
        while k < len(lines):
            candidate = lines[k]
            if candidate.kind == "blank":
                k += 1
                continue
            if candidate.indent <= line.indent:
                break
            continuation.extend(lines[j : k + 1])
            k += 1
            j = k
        self.i = line.number + len(continuation)
        base_candidates = [c.indent for c in continuation if c.kind != "blank"]
        if first_text:
            base_candidates.append(first_start - line.start)
        base = min(base_candidates) if base_candidates else 0
        raw_lines: list[tuple[int, str]] = []  # (offset of kept text, text)
        if first_text or not continuation:
            raw_lines.append((first_start, first_text))
        for c in continuation:
            if c.kind == "blank":
                raw_lines.append((c.end, ""))
                continue
            if c.tabs:
                start = c.start
                removed = 0
                while start < c.end and removed < base and text[start] in " \t":
                    removed += TAB_WIDTH - removed % TAB_WIDTH if text[start] == "\t" else 1
                    start += 1
            else:
                start = c.start + min(base, c.indent)
            raw_lines.append((start, text[start : c.end].rstrip()))
        while len(raw_lines) > 1 and raw_lines[-1][1] == "":
            raw_lines.pop()
        pieces: list[TemplatePart] = []
        for index, (offset, content) in enumerate(raw_lines):
            if index:
                pieces.append("\n")
            if "{!" in content:
                self.interpolate(pieces, offset, content)
            elif content:
                pieces.append(content)
        parts = self.merge_text(pieces)
        end_offset = raw_lines[-1][0] + len(raw_lines[-1][1]) if raw_lines else line.end
        span = self.span(bar, max(end_offset, bar + 1))
        return Template(span, [content for _, content in raw_lines], parts)

    @staticmethod
    def merge_text(pieces: list[TemplatePart]) -> list[TemplatePart]:
        """Join runs of text pieces (one join per run keeps long templates linear)."""
        parts: list[TemplatePart] = []
        run: list[str] = []
        for piece in pieces:
            if isinstance(piece, str):
                run.append(piece)
                continue
            if run:
                parts.append("".join(run))
                run = []
            parts.append(piece)
        if run:
            parts.append("".join(run))
        return parts

    def interpolate(self, parts: list[TemplatePart], offset: int, content: str) -> None:
        """Append the text and ``{!...}`` interpolations of one template line to ``parts``."""
        pos = 0
        while True:
            found = content.find("{!", pos)
            if found == -1:
                if pos < len(content):
                    parts.append(content[pos:])
                return
            if found > pos:
                parts.append(content[pos:found])
            start = offset + found + 2
            limit = offset + len(content)
            m = _SIMPLE_INTERPOLATION.match(self.text, start, limit)
            if m is not None:  # `{!@a.b}`: no need to tokenise
                quick = quick_parse(self.source, m.start(1), m.end(1))
                if quick is not None:
                    close = m.end() - 1
                    parts.append(
                        Interpolation(quick[0], self.span(offset + found, close + 1), m[1])
                    )
                    pos = close + 1 - offset
                    continue
            parser = ExprParser(self.source, start, limit)
            expr = parser.parse()
            if parser.is_op("}") and not parser.diagnostics:
                close = parser.tok.start
                source_text = self.text[start:close]
                parts.append(
                    Interpolation(expr, self.span(offset + found, close + 1), source_text.strip())
                )
                pos = close + 1 - offset
                continue
            close_in_line = content.find("}", found)
            self.report(
                "malformed-interpolation",
                "malformed '{!...}': expected one expression followed by '}'"
                if close_in_line != -1
                else "unterminated '{!': add the closing '}'",
                self.span(
                    offset + found, (offset + close_in_line + 1) if close_in_line != -1 else limit
                ),
            )
            # Keep the text as written so nothing is lost.
            stop = close_in_line + 1 if close_in_line != -1 else len(content)
            parts.append(content[found:stop])
            pos = stop

    # ------------------------------------------------------------------ statements

    def statement(self, line: _Line, word: str, after: int, depth: int) -> Item:
        if word == "if":
            return self.if_stmt(line, after, depth)
        if word in ("else", "elif", "elseif"):
            self.report(
                "syntax-error",
                f"'{word}' without a matching 'if' at the same indentation",
                self.line_span(line),
            )
            self.i += 1
            self.child_block(line, depth)
            return ErrorNode(self.line_span(line), self.text[line.content : line.end])
        if word == "run":
            quick = quick_parse(self.source, self.skip_spaces(after), line.end)
            if quick is not None:
                target, end = quick
                comment = self.finish_line(None, end, line, "the action")
            else:
                target, parser = self.expr_at(after)
                comment = self.finish_line(parser, after, line, "the action")
            run = RunStmt(self.span(line.content, line.content + 3).to(target.span), target)
            run.trailing_comment = comment
            run.body = self.child_block(line, depth)
            return run
        if word == "set":
            return self.set_stmt(line, after)
        if word == "with":
            return self.with_stmt(line, after)
        if word == "transition":
            return self.transition_stmt(line, after)
        if word == "available":
            return self.available_stmt(line, after)
        # collect
        target, parser = self.expr_at(after)
        collect = CollectStmt(self.span(line.content, line.end), target)
        collect.trailing_comment = self.finish_line(parser, after, line, "the variable")
        collect.body = self.child_block(line, depth)
        return collect

    def condition_and_colon(self, line: _Line, start: int, keyword: str) -> tuple[Expr, str | None]:
        condition, parser = self.expr_at(start)
        if parser.is_op(":"):
            parser.advance()
        elif not parser.diagnostics:
            t = parser.tok
            self.report(
                "missing-colon",
                f"expected ':' at the end of the '{keyword}' condition",
                self.span(t.start, max(t.end, t.start + 1)),
            )
        return condition, self.finish_line(parser, start, line, f"the '{keyword}' condition")

    def body(self, line: _Line, depth: int, keyword: str) -> Block:
        block = self.child_block(line, depth)
        if block is None or not block.items:
            self.report(
                "missing-block",
                f"expected an indented block after '{keyword}'",
                self.line_span(line),
            )
            return Block(self.line_span(line), [])
        return block

    def if_stmt(self, line: _Line, after: int, depth: int) -> IfStmt:
        condition, comment = self.condition_and_colon(line, after, "if")
        body = self.body(line, depth, "if")
        stmt = IfStmt(self.line_span(line).to(body.span), condition, body, trailing_comment=comment)
        # else if / else at the same indentation continue this statement.
        while True:
            comments: list[str] = []
            j = self.i
            while j < len(self.lines) and self.lines[j].kind != "content":
                if self.lines[j].kind == "comment":
                    comments.append(self.comment_text(self.lines[j]))
                j += 1
            if j >= len(self.lines) or self.lines[j].indent != line.indent:
                return stmt
            nxt = self.lines[j]
            m = _WORD.match(self.text, nxt.content, nxt.end)
            word = m.group() if m else ""
            if word not in ("else", "elif", "elseif"):
                return stmt
            self.i = j
            assert m is not None
            pos = self.skip_spaces(m.end())
            is_else_if = word in ("elif", "elseif")
            if word != "else":
                self.report(
                    "syntax-error",
                    f"'{word}' is not Agent Script: write 'else if'",
                    self.span(nxt.content, m.end()),
                )
            elif self.text.startswith("if", pos) and (
                pos + 2 >= nxt.end or self.text[pos + 2] in " \t("
            ):
                is_else_if = True
                pos += 2
            if is_else_if:
                cond, comment = self.condition_and_colon(nxt, pos, "else if")
                clause_body = self.body(nxt, depth, "else if")
                stmt.else_ifs.append(
                    ElseIf(cond, clause_body, self.line_span(nxt), comments, comment)
                )
            else:
                if pos < nxt.end and self.text[pos] == ":":
                    pos += 1
                else:
                    self.report("missing-colon", "expected ':' after 'else'", self.line_span(nxt))
                comment = self.finish_line(None, pos, nxt, "'else:'")
                clause_body = self.body(nxt, depth, "else")
                stmt.else_clause = ElseClause(clause_body, self.line_span(nxt), comments, comment)
                stmt.span = stmt.span.to(clause_body.span)
                return stmt
            stmt.span = stmt.span.to(clause_body.span)

    def set_stmt(self, line: _Line, after: int) -> Item:
        # The common `set @a.b = <simple value>` without tokenising.
        m = _SET_TARGET.match(self.text, after, line.end)
        if m is not None:
            quick_target = quick_parse(self.source, m.start("target"), m.end("target"))
            quick_value = quick_parse(self.source, m.end(), line.end)
            if quick_target is not None and quick_value is not None:
                stmt = SetStmt(self.line_span(line), quick_target[0], quick_value[0])
                stmt.trailing_comment = self.finish_line(None, quick_value[1], line, "the value")
                return stmt
        target, parser = self.expr_at(after)
        value: Expr
        if parser.is_op("="):
            parser.advance()
            value = parser.parse()
        else:
            if not parser.diagnostics:
                t = parser.tok
                self.report(
                    "syntax-error",
                    "expected '=' after the target of 'set'",
                    self.span(t.start, max(t.end, t.start + 1)),
                )
            value = ErrorExpr(target.span)
        stmt = SetStmt(self.line_span(line), target, value)
        stmt.trailing_comment = self.finish_line(parser, after, line, "the value")
        return stmt

    def with_stmt(self, line: _Line, after: int) -> Item:
        text = self.text
        bindings: list[WithBinding] = []
        pos = self.skip_spaces(after)
        parser: ExprParser | None = None
        while True:
            parsed = self.key(line, pos) if pos < line.end else None
            if parsed is None or len(parsed[0].parts) != 1:
                self.report(
                    "syntax-error",
                    "expected 'with name=value'",
                    self.span(pos, max(line.end, pos + 1)),
                )
                break
            key, key_end = parsed
            pos = self.skip_spaces(key_end)
            if pos >= line.end or text[pos] != "=" or text.startswith("==", pos):
                self.report(
                    "syntax-error",
                    f"expected '=' after '{key}'",
                    self.span(pos, max(pos + 1, line.end)),
                )
                break
            self.check_key_words(key)
            quick = quick_parse(self.source, self.skip_spaces(pos + 1), line.end)
            if quick is not None:  # a simple value ending the line: no more bindings
                bindings.append(WithBinding(key.parts[0], quick[0], key.span.to(quick[0].span)))
                stmt = WithStmt(self.line_span(line), bindings)
                stmt.trailing_comment = self.finish_line(None, quick[1], line, "the value")
                return stmt
            value, parser = self.expr_at(pos + 1)
            bindings.append(WithBinding(key.parts[0], value, key.span.to(value.span)))
            if parser.is_op(","):
                pos = self.skip_spaces(parser.advance().end)
                continue
            break
        stmt = WithStmt(self.line_span(line), bindings)
        stmt.trailing_comment = self.finish_line(
            parser, line.end if parser is None else after, line, "the value"
        )
        return stmt

    def transition_stmt(self, line: _Line, after: int) -> Item:
        parser = ExprParser(self.source, after)
        targets: list[Expr] = []
        if parser.tok.kind == "IDENT" and parser.tok.text == "to":
            while parser.tok.kind == "IDENT" and parser.tok.text == "to":
                parser.advance()
                targets.append(parser.parse())
                while parser.is_op(","):
                    parser.advance()
                    targets.append(parser.parse())
        elif parser.at_end():
            self.report(
                "transition-missing-target",
                "'transition' needs a target: write 'transition to @subagent.name'",
                self.line_span(line),
            )
        else:
            t = parser.tok
            self.report(
                "syntax-error", "expected 'to' after 'transition'", self.span(t.start, t.end)
            )
            targets.append(parser.parse())
        stmt = TransitionStmt(self.line_span(line), targets)
        stmt.trailing_comment = self.finish_line(parser, after, line, "the target")
        return stmt

    def available_stmt(self, line: _Line, after: int) -> Item:
        parser = ExprParser(self.source, after)
        if parser.tok.kind == "IDENT" and parser.tok.text == "when":
            parser.advance()
        else:
            t = parser.tok
            self.report(
                "syntax-error",
                "expected 'when' after 'available'",
                self.span(t.start, max(t.end, t.start + 1)),
            )
        condition = parser.parse()
        stmt = AvailableWhenStmt(self.line_span(line), condition)
        stmt.trailing_comment = self.finish_line(parser, after, line, "the condition")
        return stmt


def parse(text: str, path: str | None = None) -> Document:
    """Parse Agent Script text. Never raises; problems are in ``Document.diagnostics``."""
    try:
        return Parser(text, path).parse()
    except RecursionError:
        # Only when called from an already deep stack: the nesting limits prevent it otherwise.
        diag = error("nesting-too-deep", "the file is nested too deeply to parse", Span(1, 1, 1, 2))
        diag.file = path
        return Document(Block(Span(1, 1, 1, 1), []), [diag], path)


def _escaped_close(text: str, start: int, end: int) -> bool:
    """Whether the first quote after the one at ``start`` is escaped (an odd run of
    backslashes before it): then ``- "\\":"`` is a string item, not the quoted key ``\\``
    followed by ``:``."""
    close = text.find('"', start + 1, end)
    if close == -1:
        return False
    backslashes = 0
    while text[close - 1 - backslashes] == "\\":
        backslashes += 1
    return backslashes % 2 == 1
