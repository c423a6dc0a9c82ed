"""Graph renderers: Mermaid, Graphviz DOT, JSON and SVG, one function each, no external programs.

The SVG layout is a layered drawing computed here: nodes are placed in rows by their distance
(breadth-first) from the entry node, in the order they were declared, and edges are straight
lines with an arrowhead and their label at the midpoint. It is meant to be read in a browser or
a pull request, not to compete with Graphviz; ``dot`` output is there for that.

Labels come from the agent file (guards quote its string literals), so every renderer passes
them through ``terminal_safe`` (the output is printed, and SVG refuses C0 controls) and then
the escaping of its own syntax.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from html import escape

from agentscript.authoring.graph import EdgeKind, Graph, GraphEdge, NodeKind
from agentscript.render import terminal_safe

_MERMAID_SHAPES: dict[NodeKind, tuple[str, str]] = {
    NodeKind.START: ("([", "])"),
    NodeKind.SUBAGENT: ("[", "]"),
    NodeKind.CONNECTED: ("[[", "]]"),
    NodeKind.ESCALATION: ("{{", "}}"),
    NodeKind.END: ("((", "))"),
    NodeKind.SKILL: ("[", "]"),
    NodeKind.STEP: ("(", ")"),
}
_DASHED = {EdgeKind.DELEGATE, EdgeKind.CALL, EdgeKind.INVOKE}


def edge_label(edge: GraphEdge) -> str:
    """``go_to_orders [is_verified == True]``: what makes the move, then its guard."""
    label = edge.via if edge.kind != EdgeKind.DELEGATE else f"delegate: {edge.via}"
    return f"{label} [{edge.guard}]" if edge.guard else label


def _ident(node_id: str, ids: dict[str, str]) -> str:
    if node_id not in ids:
        ids[node_id] = f"n{len(ids)}"
    return ids[node_id]


def to_mermaid(graph: Graph) -> str:
    ids: dict[str, str] = {}
    lines = ["flowchart TD"]
    groups: dict[str | None, list[str]] = {}
    for node in graph.nodes:
        opening, closing = _MERMAID_SHAPES[node.kind]
        text = f'    {_ident(node.id, ids)}{opening}"{_mermaid_text(node.label)}"{closing}'
        groups.setdefault(node.group, []).append(text)
    lines.extend(groups.pop(None, []))
    for group, members in groups.items():
        lines.append(
            f'    subgraph {_ident("group:" + str(group), ids)}["{_mermaid_text(str(group))}"]'
        )
        lines.extend("    " + m for m in members)
        lines.append("    end")
    for edge in graph.edges:
        arrow = "-.->" if edge.kind in _DASHED else "-->"
        source, target = _ident(edge.source, ids), _ident(edge.target, ids)
        lines.append(f'    {source} {arrow}|"{_mermaid_text(edge_label(edge))}"| {target}')
    return "\n".join(lines) + "\n"


# What Mermaid reads specially inside a quoted label, as its `#name;` entity codes. Labels are
# rendered as HTML, so `<` and `>` are both escaped (an `<img onerror=...>` in a string literal
# would run), `&` too (a literal `&lt;` would be shown as `<`), and a backtick (a label that
# opens with one is read as Markdown), and `%` (Mermaid reads a `%%{init: ...}%%` directive
# anywhere in the text, a label's included: it would restyle or reconfigure the diagram).
# Newlines and other controls are made visible by ``terminal_safe`` first, so a label stays
# on its line.
_MERMAID_ENTITIES = {
    "#": "#35;",
    '"': "#quot;",
    "<": "#lt;",
    ">": "#gt;",
    "&": "#amp;",
    "`": "#96;",
    "%": "#37;",
}
_MERMAID_SPECIAL = re.compile("[" + re.escape("".join(_MERMAID_ENTITIES)) + "]")


def _mermaid_text(text: str) -> str:
    # One pass, so the `#` of an inserted entity is never escaped again and a literal `#quot;`
    # in a guard stays text (`#35;quot;`) instead of being read back as an entity.
    return _MERMAID_SPECIAL.sub(lambda m: _MERMAID_ENTITIES[m.group()], terminal_safe(text))


def to_dot(graph: Graph) -> str:
    shapes = {
        NodeKind.START: "oval",
        NodeKind.SUBAGENT: "box",
        NodeKind.CONNECTED: "box3d",
        NodeKind.ESCALATION: "hexagon",
        NodeKind.END: "doublecircle",
        NodeKind.SKILL: "box",
        NodeKind.STEP: "ellipse",
    }
    lines = [f"digraph {_dot_text(graph.agent)} {{", "    rankdir=TB;"]
    for node in graph.nodes:
        lines.append(
            f"    {_dot_text(node.id)} [label={_dot_text(node.label)}, shape={shapes[node.kind]}];"
        )
    for edge in graph.edges:
        style = ', style="dashed"' if edge.kind in _DASHED else ""
        lines.append(
            f"    {_dot_text(edge.source)} -> {_dot_text(edge.target)} "
            f"[label={_dot_text(edge_label(edge))}{style}];"
        )
    lines.append("}")
    return "\n".join(lines) + "\n"


def _dot_text(text: str) -> str:
    # Inside a quoted DOT string only `"` and the backslash are special (a doubled backslash
    # keeps `\n`, `\l`, `\N`... from acting), but Graphviz also decodes HTML entities in every
    # label, so `&` becomes `&amp;` and a literal `&lt;` is drawn as written. Newlines are made
    # visible by ``terminal_safe``, so no line continuation can form.
    text = terminal_safe(text).replace("&", "&amp;")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_json(graph: Graph) -> str:
    return json.dumps(graph.to_json(), indent=2) + "\n"


_BOX_W, _BOX_H, _GAP_X, _GAP_Y = 180, 44, 40, 90


def _layers(graph: Graph) -> list[list[str]]:
    order = [n.id for n in graph.nodes]
    entry = next((n.id for n in graph.nodes if n.kind in (NodeKind.START, NodeKind.SKILL)), None)
    depth: dict[str, int] = {}
    if entry is not None:
        depth[entry] = 0
        frontier = [entry]
        while frontier:
            nxt: list[str] = []
            for current in frontier:
                for edge in graph.edges:
                    if edge.source == current and edge.target not in depth:
                        depth[edge.target] = depth[current] + 1
                        nxt.append(edge.target)
            frontier = nxt
    unreached = max(depth.values(), default=-1) + 1
    rows: dict[int, list[str]] = {}
    for node_id in order:
        rows.setdefault(depth.get(node_id, unreached), []).append(node_id)
    return [rows[k] for k in sorted(rows)]


def _svg_text(text: str) -> str:
    return escape(terminal_safe(text))


def to_svg(graph: Graph) -> str:
    rows = _layers(graph)
    width = max((len(r) for r in rows), default=1) * (_BOX_W + _GAP_X) + _GAP_X
    height = len(rows) * (_BOX_H + _GAP_Y) + _GAP_Y
    where: dict[str, tuple[float, float]] = {}
    for r, row in enumerate(rows):
        offset = (width - len(row) * (_BOX_W + _GAP_X) + _GAP_X) / 2
        for c, node_id in enumerate(row):
            where[node_id] = (offset + c * (_BOX_W + _GAP_X), _GAP_Y / 2 + r * (_BOX_H + _GAP_Y))
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="sans-serif" font-size="12">',
        f"<title>{_svg_text(graph.agent)}</title>",
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" '
        'markerHeight="8" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z"/></marker></defs>',
    ]
    for edge in graph.edges:
        if edge.source not in where or edge.target not in where:
            continue
        (x1, y1), (x2, y2) = where[edge.source], where[edge.target]
        ax, ay = x1 + _BOX_W / 2, y1 + _BOX_H
        bx, by = x2 + _BOX_W / 2, y2
        if edge.source == edge.target or y2 <= y1:
            ay, by = y1 + _BOX_H / 2, y2 + _BOX_H / 2
            ax, bx = x1 + _BOX_W, x2 + _BOX_W
        dash = ' stroke-dasharray="5,4"' if edge.kind in _DASHED else ""
        out.append(
            f'<g class="edge {edge.kind}"><line x1="{ax:.0f}" y1="{ay:.0f}" x2="{bx:.0f}" '
            f'y2="{by:.0f}" stroke="#555"{dash} marker-end="url(#arrow)"/>'
            f'<text x="{(ax + bx) / 2 + 4:.0f}" y="{(ay + by) / 2:.0f}" fill="#333">'
            f"{_svg_text(edge_label(edge))}</text></g>"
        )
    fills = {NodeKind.START: "#dbeafe", NodeKind.ESCALATION: "#fee2e2", NodeKind.END: "#e5e7eb"}
    for node in graph.nodes:
        x, y = where[node.id]
        fill = fills.get(node.kind, "#f8fafc")
        rounded = 22 if node.kind in (NodeKind.START, NodeKind.END, NodeKind.STEP) else 4
        out.append(
            f'<g class="node {node.kind}" data-id="{_svg_text(node.id)}"><rect x="{x:.0f}" '
            f'y="{y:.0f}" width="{_BOX_W}" height="{_BOX_H}" rx="{rounded}" fill="{fill}" '
            f'stroke="#334155"/><text x="{x + _BOX_W / 2:.0f}" y="{y + _BOX_H / 2 + 4:.0f}" '
            f'text-anchor="middle">{_svg_text(node.label)}</text></g>'
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"


RENDERERS: dict[str, Callable[[Graph], str]] = {
    "mermaid": to_mermaid,
    "dot": to_dot,
    "json": to_json,
    "svg": to_svg,
}
