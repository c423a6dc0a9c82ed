"""YAML with source positions: compose to nodes, read values, report errors with lines.

YAML embedded in a markdown file (frontmatter, block fences) is parsed on its own, so every
helper takes a ``line_offset`` that maps node lines back to the enclosing file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from agentscript.diagnostics import Diagnostic, Severity, Span
from agentscript.reading import JsonConstructor, compose_yaml


@dataclass(slots=True)
class Ctx:
    """Where the YAML being read lives, and the diagnostics collected so far."""

    file: str
    line_offset: int = 0
    diagnostics: list[Diagnostic] = field(default_factory=list)
    # What was reported through `add`: a node read twice (by `unknown_keys` and then by the
    # reader, or a required key checked and then read) is reported once.
    reported: set[tuple[str, str, Span, Severity]] = field(default_factory=set, repr=False)

    def span(self, node: yaml.Node) -> Span:
        start, end = node.start_mark, node.end_mark
        # Block scalars end on the following line at column 0; clamp to the start line then.
        end_line, end_col = end.line, end.column
        if end_line > start.line and end_col == 0:
            end_line -= 1
            end_col = start.column + 1
        return Span(
            start.line + 1 + self.line_offset,
            start.column + 1,
            end_line + 1 + self.line_offset,
            max(end_col + 1, 1),
        )

    def add(self, code: str, message: str, span: Span, severity: Severity = Severity.ERROR) -> None:
        key = (code, message, span, severity)
        if key in self.reported:
            return
        self.reported.add(key)
        self.diagnostics.append(Diagnostic(code, message, span, severity, self.file))


def compose(text: str, ctx: Ctx) -> yaml.Node | None:
    """Parse ``text`` into a node tree; a syntax error becomes ``mantle-yaml`` on its line."""
    try:
        # Duplicate keys are reported by `items`, with their own code.
        return compose_yaml(text, duplicate_keys=False)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = (mark.line + 1 if mark else 1) + ctx.line_offset
        column = mark.column + 1 if mark else 1
        problem = exc.problem or exc.context or "invalid YAML"
        hint = " (indent with spaces, not tabs)" if "\\t" in problem or "\t" in problem else ""
        ctx.add("mantle-yaml", f"invalid YAML: {problem}{hint}", Span.point(line, column))
    except yaml.YAMLError as exc:
        ctx.add("mantle-yaml", f"invalid YAML: {exc}", Span.point(1 + ctx.line_offset, 1))
    return None


class _Unreadable(Exception):
    """A node whose value cannot be constructed, and why."""

    def __init__(self, node: yaml.Node, problem: str) -> None:
        super().__init__(problem)
        self.node = node
        self.problem = problem


class _Constructor(JsonConstructor):
    """Safe types, timestamps as text; a value that cannot be built names its own node."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except _Unreadable:
            raise
        except yaml.constructor.ConstructorError as exc:
            raise _Unreadable(node, exc.problem or "invalid value") from None
        except (ValueError, TypeError, OverflowError, RecursionError) as exc:
            raise _Unreadable(node, str(exc) or type(exc).__name__) from None


def try_value(node: yaml.Node, ctx: Ctx) -> tuple[bool, Any]:
    """``(True, value)`` for a node with a plain value, else ``(False, None)`` after a
    ``mantle-yaml`` diagnostic at the node that cannot be read (an unknown tag such as
    ``!foo``, ``!!int x``, a date that does not exist, a number too long to convert)."""
    try:
        return True, _Constructor().construct_document(node)
    except _Unreadable as exc:
        ctx.add("mantle-yaml", _unreadable_message(exc.node, exc.problem), ctx.span(exc.node))
    except yaml.constructor.ConstructorError as exc:  # e.g. an unhashable key, a bad merge
        mark = exc.problem_mark or node.start_mark
        span = Span.point(mark.line + 1 + ctx.line_offset, mark.column + 1)
        ctx.add("mantle-yaml", _unreadable_message(node, exc.problem or "invalid value"), span)
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        ctx.add("mantle-yaml", _unreadable_message(node, str(exc)), ctx.span(node))
    return False, None


_STANDARD_TAG = "tag:yaml.org,2002:"


def _unreadable_message(node: yaml.Node, problem: str) -> str:
    tag = node.tag
    if problem.startswith("could not determine a constructor"):
        shown = "!!" + tag[len(_STANDARD_TAG) :] if tag.startswith(_STANDARD_TAG) else tag
        return (
            f"unsupported YAML tag '{shown}': write plain text, numbers, true/false, "
            "lists and mappings"
        )
    kind = tag[len(_STANDARD_TAG) :] if tag.startswith(_STANDARD_TAG) else tag
    if "limit" in problem and "digits" in problem:  # Python's int/str conversion limit
        problem = "a number with more than 4300 digits"
    return f"unsupported YAML value: this {kind} cannot be read ({problem})"


def value(node: yaml.Node, ctx: Ctx) -> Any:
    """The plain Python value of a node (safe types, timestamps as text); None after a
    diagnostic when it cannot be read (see :func:`try_value`)."""
    return try_value(node, ctx)[1]


def compose_mapping(text: str, ctx: Ctx, code: str, message: str) -> yaml.MappingNode | None:
    """A file whose top level must be a mapping: None when empty, or (reported with ``code``
    and ``message``) when it is something else."""
    root = compose(text, ctx)
    if is_null(root):
        return None
    assert root is not None
    if not isinstance(root, yaml.MappingNode):
        ctx.add(code, message, ctx.span(root))
        return None
    return root


def is_map(node: yaml.Node | None) -> bool:
    return isinstance(node, yaml.MappingNode)


def is_seq(node: yaml.Node | None) -> bool:
    return isinstance(node, yaml.SequenceNode)


def is_scalar(node: yaml.Node | None) -> bool:
    return isinstance(node, yaml.ScalarNode)


def is_null(node: yaml.Node | None) -> bool:
    return node is None or (
        isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"
    )


def items(node: yaml.Node, ctx: Ctx) -> list[tuple[str, yaml.Node, yaml.Node]]:
    """``(key, key_node, value_node)`` of a mapping; non-string keys are reported and skipped."""
    out: list[tuple[str, yaml.Node, yaml.Node]] = []
    seen: set[str] = set()
    assert isinstance(node, yaml.MappingNode)
    for key_node, value_node in node.value:
        if not isinstance(key_node, yaml.ScalarNode):
            ctx.add("mantle-yaml", "mapping keys must be plain names", ctx.span(key_node))
            continue
        key = str(key_node.value)
        if key in seen:
            ctx.add("mantle-duplicate-key", f"duplicate key '{key}'", ctx.span(key_node))
        seen.add(key)
        out.append((key, key_node, value_node))
    return out


def string(node: yaml.Node | None, ctx: Ctx, what: str) -> str | None:
    """A scalar as text (numbers and booleans are converted), else a diagnostic and None."""
    if node is None or is_null(node):
        return None
    if isinstance(node, yaml.ScalarNode):
        if node.tag == "tag:yaml.org,2002:str":
            return str(node.value)
        ok, raw = try_value(node, ctx)
        if not ok:
            return None
        try:
            return str(raw)
        except ValueError:  # an int too long to print (Python's digit limit)
            ctx.add("mantle-type", f"{what} is a number too long to use", ctx.span(node))
            return None
    ctx.add("mantle-type", f"{what} must be a string", ctx.span(node))
    return None


def boolean(node: yaml.Node | None, ctx: Ctx, what: str, default: bool = False) -> bool:
    if node is None or is_null(node):
        return default
    ok, result = try_value(node, ctx) if isinstance(node, yaml.ScalarNode) else (True, None)
    if not ok:
        return default
    if isinstance(result, bool):
        return result
    ctx.add("mantle-type", f"{what} must be true or false", ctx.span(node))
    return default


def string_list(node: yaml.Node | None, ctx: Ctx, what: str) -> list[tuple[str, Span]]:
    if node is None or is_null(node):
        return []
    if not isinstance(node, yaml.SequenceNode):
        ctx.add("mantle-type", f"{what} must be a list of strings", ctx.span(node))
        return []
    out: list[tuple[str, Span]] = []
    for item in node.value:
        text = string(item, ctx, f"each item of {what}")
        if text is not None:
            out.append((text, ctx.span(item)))
    return out


def unknown_keys(
    node: yaml.Node,
    allowed: set[str],
    ctx: Ctx,
    where: str,
    severity: Severity = Severity.ERROR,
    hints: dict[str, str] | None = None,
) -> None:
    """Report keys of ``node`` that are not in ``allowed``."""
    for key, key_node, _ in items(node, ctx):
        if key in allowed:
            continue
        hint = (hints or {}).get(key)
        known = ", ".join(sorted(allowed))
        message = f"unknown key '{key}' in {where}" + (
            f"; {hint}" if hint else f" (known: {known})"
        )
        ctx.add("mantle-unknown-key", message, ctx.span(key_node), severity)
