"""Re-parsing an edited text by reusing the unchanged top-level blocks of its previous parse.

An Agent Script file is a sequence of top-level blocks (``system:``, ``variables:``, each
``subagent x:`` ...). An editor changes one of them at a time, so after an edit most blocks
parse to exactly what they parsed to before, only some lines further down or up. This module
keeps, for each top-level item of a parse, which text its parse read and what it produced; the
next parse runs the ordinary :class:`~agentscript.syntax.parser.Parser` over the whole new
text, and where a top-level item starts on a line whose item read nothing that changed, it
takes the previous result (moved by the number of lines inserted or removed above it) instead
of parsing the lines again. The top-level loop itself (comments, blank lines, indentation, the
file's header and its tab check) always runs, so the document is the one a full parse builds.

What an item's parse may read: its own lines, then the blank and comment lines after them, up
to and including the next content line (the parser and the expression lexer look that far
ahead to see that the block ended, whether an ``else`` follows, whether a bracket goes on)
or the end of the file. An item is reused only when none of that text changed, when the
diagnostics before it did not reach its lines either time (the parser reports one error per
line, so an earlier error on its first line changes what it reports), and when every position
in it lies inside its own lines (so moving them moves all of them). In every other case the
item is parsed again: an edit that crosses blocks, changes their indentation or joins two of
them just parses the items it touches; nothing is ever guessed.

The result of :func:`reparse` is the result :func:`~agentscript.syntax.parse` gives for the
same text, diagnostics and positions included (``tests/syntax/test_incremental.py`` checks
this on random edits of the corpus). Nodes of unchanged items are shared between the previous
and the new document when they did not move; neither the parser nor the checker changes a
tree after building it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from agentscript.diagnostics import Diagnostic, Span
from agentscript.source import normalise_newlines
from agentscript.syntax.parser import Parser, _Line
from agentscript.syntax.tree import Document, Item

__all__ = ["ParseState", "full_parse", "reparse"]


@dataclass(frozen=True, slots=True)
class _TopItem:
    """What one top-level item of a parse read and produced."""

    start: int  # offset of its first line
    first: int  # index of its first line
    after: int  # index of the first line after the lines it consumed
    reads_until: int  # offset just past the last character its parse may read (len + 1: EOF)
    item: Item
    diagnostics: tuple[Diagnostic, ...]  # what it reported, in order
    portable: bool  # parsed in a clean context, every position inside its lines


@dataclass(frozen=True, slots=True)
class ParseState:
    """A parse of ``text`` and what :func:`reparse` needs to reuse it."""

    text: str  # normalised (LF newlines, no BOM)
    document: Document
    items: tuple[_TopItem, ...]
    reused: int = 0  # top-level items taken from the previous parse (for tests and benches)


def full_parse(text: str, path: str | None = None) -> ParseState:
    """Parse ``text`` from scratch, keeping what a later :func:`reparse` can reuse."""
    return _run(_RecordingParser(text, path, {}))


def reparse(previous: ParseState, text: str, path: str | None = None) -> ParseState:
    """Parse ``text``, the edited text of ``previous``, reusing its unchanged top-level items.

    ``path`` defaults to the previous document's. Never raises on any text (like ``parse``).
    """
    if path is None:
        path = previous.document.path
    new = normalise_newlines(text)
    old = previous.text
    if path != previous.document.path:
        return full_parse(new, path)
    prefix = _common_prefix(old, new)
    suffix = _common_suffix(old, new, min(len(old), len(new)) - prefix)
    old_end = len(old) - suffix  # old[prefix:old_end] became new[prefix:new_end]
    new_end = len(new) - suffix
    moved_chars = new_end - old_end
    moved_lines = new.count("\n", prefix, new_end) - old.count("\n", prefix, old_end)
    reusable: dict[int, tuple[_TopItem, int]] = {}
    for record in previous.items:
        if not record.portable:
            continue
        if record.reads_until <= prefix:
            reusable[record.start] = (record, 0)
        elif record.start >= old_end:
            # Its text is unchanged, only moved. (Looked up by the offset of a line start: if
            # the edit joined its first line to the line before, it is simply not found.)
            reusable[record.start + moved_chars] = (record, moved_lines)
    return _run(_RecordingParser(new, path, reusable))


def _run(parser: _RecordingParser) -> ParseState:
    try:
        document = parser.parse()
    except RecursionError:
        # As in ``parse``: only from an already deep stack. Nothing is kept for reuse.
        from agentscript.syntax.parser import parse

        return ParseState(parser.text, parse(parser.text, parser.path), ())
    return ParseState(parser.text, document, tuple(parser.finish()), parser.reused)


class _RecordingParser(Parser):
    """The ordinary parser, recording each top-level item and reusing the ones it may."""

    def __init__(
        self, text: str, path: str | None, reusable: dict[int, tuple[_TopItem, int]]
    ) -> None:
        super().__init__(text, path)
        self.reusable = reusable
        self.reused = 0
        self.records: list[_TopItem] = []

    def clean_at(self, line: _Line) -> bool:
        """Whether no earlier error reaches ``line`` (``finish_line`` reads the last one)."""
        last = self.diagnostics[-1] if self.diagnostics else None
        return last is None or not last.is_error or last.span.end_line < line.number

    def top_level_item(self, line: _Line) -> Item:
        first = self.i
        clean = self.clean_at(line)
        before = len(self.diagnostics)
        candidate = self.reusable.get(line.start) if clean else None
        reused = None
        if candidate is not None:
            record, moved = candidate
            reused = _moved(record.item, moved)
            if reused is not None:
                self.diagnostics.extend(_moved_diagnostic(d, moved) for d in record.diagnostics)
                self.i = first + record.after - record.first
                self.reused += 1
        item = reused if reused is not None else self.parse_item(line, 0)
        if self.i <= first:  # as the block loop does: always make progress
            self.i = first + 1
        # What the parse may have read: up to the next content line after the item's lines.
        lines = self.lines
        j = self.next_content(self.i)
        reads_until = lines[j].end + 1 if j < len(lines) else len(self.text) + 1
        portable = clean and (reused is not None or _inside(item, line.number, lines, j))
        self.records.append(
            _TopItem(
                line.start,
                first,
                self.i,
                reads_until,
                item,
                tuple(self.diagnostics[before:]),
                portable,
            )
        )
        return item

    def finish(self) -> list[_TopItem]:
        """The records of this parse's top-level items."""
        return self.records


# ---------------------------------------------------------------- moving reused items

_FIELDS: dict[type, tuple[str, ...]] = {}
_SCALARS = (str, int, float, bool, type(None))
# How a field is moved: kept as it is (text, flags, lists of text), a span, or a subtree.
_KEEP, _SPAN, _TREE = 0, 1, 2
_KEPT_ANNOTATIONS = frozenset(
    {"str", "str | None", "bool", "int", "object", "list[str]", "tuple[str, str | None] | None"}
)
_PLANS: dict[type, tuple[tuple[str, int], ...]] = {}


class _Unmovable(Exception):
    """Something in a tree this module does not know how to copy (nothing is expected)."""


def _fields(cls: type) -> tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def _plan(cls: type) -> tuple[tuple[str, int], ...]:
    plan = _PLANS.get(cls)
    if plan is None:
        if not dataclasses.is_dataclass(cls):
            raise _Unmovable(cls)
        steps = []
        for f in dataclasses.fields(cls):
            if f.name == "span":
                steps.append((f.name, _SPAN))
            else:
                steps.append((f.name, _KEEP if str(f.type) in _KEPT_ANNOTATIONS else _TREE))
        plan = _PLANS[cls] = tuple(steps)
    return plan


def _moved(item: Item, lines: int) -> Item | None:
    """A copy of ``item`` with every position ``lines`` lines further down (a top-level copy
    only when ``lines`` is 0: the block loop sets its comments and blank lines)."""
    if lines == 0:
        copy = object.__new__(type(item))
        for name in _fields(type(item)):
            setattr(copy, name, getattr(item, name))
        return copy
    try:
        moved: Item = _move(item, lines)
    except _Unmovable:
        return None
    return moved


def _move(value: Any, lines: int) -> Any:
    """A copy of the subtree ``value`` (a node, a list of them, text) ``lines`` lines down."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is list:
        return [v if type(v) is str else _move(v, lines) for v in value]
    if kind is Span:
        return _span(Span, (value[0] + lines, value[1], value[2] + lines, value[3]))
    plan = _PLANS.get(kind) or _plan(kind)
    copy = _new(kind)
    for name, how in plan:
        field = getattr(value, name)
        if how == _SPAN:
            field = _span(Span, (field[0] + lines, field[1], field[2] + lines, field[3]))
        elif how == _TREE and field is not None:
            field = _move(field, lines)
        setattr(copy, name, field)
    return copy


# Building a span or a node without running its constructor (the copy sets every field).
_span = tuple.__new__
_new = object.__new__


def _moved_diagnostic(diag: Diagnostic, lines: int) -> Diagnostic:
    span = diag.span
    if lines:
        span = Span(span[0] + lines, span[1], span[2] + lines, span[3])
    return Diagnostic(diag.code, diag.message, span, diag.severity, diag.file, list(diag.notes))


def _inside(item: Item, first_line: int, lines: list[_Line], next_content: int) -> bool:
    """Whether every span in ``item`` lies on the lines from ``first_line`` (1-based) to the
    line its parse may read last."""
    last_line = lines[next_content].number if next_content < len(lines) else len(lines) + 1
    stack: list[Any] = [item]
    pop, push, extend = stack.pop, stack.append, stack.extend
    try:
        while stack:
            value = pop()
            kind = type(value)
            if kind is list:
                extend(value)
                continue
            if kind in _SCALARS:
                continue
            for name, how in _PLANS.get(kind) or _plan(kind):
                if how == _SPAN:
                    span = getattr(value, name)
                    if span[0] < first_line or span[2] > last_line:
                        return False
                elif how == _TREE:
                    push(getattr(value, name))
    except _Unmovable:
        return False
    return True


# ---------------------------------------------------------------- text comparison


def _common_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix (binary search over C-level slice compares)."""
    low, high = 0, min(len(a), len(b))
    if a[:high] == b[:high]:
        return high
    while low < high:  # a[:low] == b[:low] and a[:high] != b[:high]
        middle = (low + high + 1) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def _common_suffix(a: str, b: str, limit: int) -> int:
    """Length of the longest common suffix, at most ``limit``."""
    low, high = 0, limit
    if high and a[len(a) - high :] == b[len(b) - high :]:
        return high
    while low < high:
        middle = (low + high + 1) // 2
        if a[len(a) - middle : len(a) - low] == b[len(b) - middle : len(b) - low]:
            low = middle
        else:
            high = middle - 1
    return low
