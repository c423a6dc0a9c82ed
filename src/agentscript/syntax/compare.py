"""Structural comparison of syntax trees, ignoring where things were written.

``tree_signature`` maps a :class:`~agentscript.syntax.tree.Document` (or any tree or expression
node) to nested tuples with spans left out, so two parses of differently laid-out text can be
compared with ``==``. Layout-only fields (comments, blank lines) are left out too unless asked
for: the formatter may move a comment between positions that mean the same thing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from agentscript.syntax.tree import Block, Document, ElseClause, ElseIf, Node

__all__ = ["LAYOUT_FIELDS", "comment_texts", "tree_signature"]

# Fields that record layout rather than meaning.
LAYOUT_FIELDS = frozenset(
    {"comments", "trailing_comment", "trailing_comments", "blank_lines_before"}
)
# Fields never compared: positions, and things derived from the file rather than its content.
_ALWAYS_SKIPPED = frozenset({"span", "diagnostics", "path"})


def tree_signature(node: object, *, layout: bool = False) -> object:
    """Nested tuples describing ``node`` without spans (and without layout unless ``layout``).

    Dataclass nodes become ``(class name, (field, value), ...)``; lists become tuples; scalars
    stay as they are. Floats and ints stay distinct because their types are part of the value.
    """
    skipped = _ALWAYS_SKIPPED if layout else _ALWAYS_SKIPPED | LAYOUT_FIELDS
    return _signature(node, skipped)


def _signature(value: object, skipped: frozenset[str]) -> object:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = tuple(
            (f.name, _signature(getattr(value, f.name), skipped))
            for f in dataclasses.fields(value)
            if f.name not in skipped
        )
        return (type(value).__name__, *fields)
    if isinstance(value, list | tuple):
        return tuple(_signature(v, skipped) for v in value)
    if isinstance(value, float | int) and not isinstance(value, bool):
        # 1 and 1.0 compare equal in Python; the type keeps them apart.
        return (type(value).__name__, value)
    return value


def comment_texts(doc: Document) -> list[str]:
    """Every comment text in ``doc`` (above nodes, end of line, block ends, file end), sorted."""
    texts = list(doc.trailing_comments)
    texts.extend(_walk_comments(doc.body))
    return sorted(texts)


def _walk_comments(value: object) -> Iterator[str]:
    if isinstance(value, Node | ElseIf | ElseClause):
        yield from value.comments
        if value.trailing_comment is not None:
            yield value.trailing_comment
    if isinstance(value, Block):
        yield from value.trailing_comments
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            if f.name not in LAYOUT_FIELDS and f.name != "span":
                yield from _walk_comments(getattr(value, f.name))
    elif isinstance(value, list):
        for item in value:
            yield from _walk_comments(item)
