"""YAML with source positions: compose to nodes, read values, report errors with lines.

YAML embedded in a markdown file (frontmatter, block fences) is parsed on its own, so every
helper takes a ``line_offset`` that maps node lines back to the enclosing file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.constructor import SafeConstructor

from agentscript.diagnostics import Diagnostic, Severity, Span
from agentscript.reading import compose_yaml


@dataclass(slots=True)
class Ctx:
    """Where the YAML being read lives, and the diagnostics collected so far."""

    file: str
    line_offset: int = 0
    diagnostics: list[Diagnostic] = field(default_factory=list)

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


def value(node: yaml.Node) -> Any:
    """The plain Python value of a node (safe types only)."""
    return SafeConstructor().construct_document(node)


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
        return str(value(node)) if node.tag != "tag:yaml.org,2002:str" else str(node.value)
    ctx.add("mantle-type", f"{what} must be a string", ctx.span(node))
    return None


def boolean(node: yaml.Node | None, ctx: Ctx, what: str, default: bool = False) -> bool:
    if node is None or is_null(node):
        return default
    result = value(node) if isinstance(node, yaml.ScalarNode) else None
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
