"""``responses.yml``: named responses, each a list of variants."""

from __future__ import annotations

import re

import yaml

from agentscript.mantle.conditions import make_condition
from agentscript.mantle.load import yamlsrc as y
from agentscript.mantle.model import Button, Response, ResponseVariant

VARIANT_KEYS = frozenset({"text", "condition", "buttons", "metadata"})
PLACEHOLDER = re.compile(r"\{([A-Za-z_][\w.]*)\}")


def read_responses(text: str, owner: str | None, ctx: y.Ctx) -> dict[str, Response]:
    root = y.compose_mapping(
        text, ctx, "mantle-responses", "responses.yml must be a mapping with 'responses:'"
    )
    if root is None:
        return {}
    section: yaml.Node | None = None
    for key, key_node, node in y.items(root, ctx):
        if key == "responses":
            section = node
        else:
            ctx.add(
                "mantle-unknown-key", f"unknown key '{key}' in responses.yml", ctx.span(key_node)
            )
    if section is None or y.is_null(section):
        return {}
    if not y.is_map(section):
        ctx.add(
            "mantle-responses", "'responses:' must map names to variant lists", ctx.span(section)
        )
        return {}
    out: dict[str, Response] = {}
    for name, key_node, node in y.items(section, ctx):
        out[name] = _response(name, key_node, node, owner, ctx)
    return out


def _response(
    name: str, key_node: yaml.Node, node: yaml.Node, owner: str | None, ctx: y.Ctx
) -> Response:
    response = Response(name, ctx.file, ctx.span(key_node), owner)
    if not y.is_seq(node):
        ctx.add(
            "mantle-responses",
            f"response '{name}' must be a list of variants (write '- text: ...')",
            ctx.span(node),
        )
        return response
    assert isinstance(node, yaml.SequenceNode)
    for item in node.value:
        variant = _variant(name, item, ctx)
        if variant is not None:
            response.variants.append(variant)
    if not response.variants:
        ctx.add("mantle-responses", f"response '{name}' has no variants", response.span)
    conditioned = [v for v in response.variants if v.condition is not None]
    defaults = [v for v in response.variants if v.condition is None]
    if conditioned and len(defaults) != 1:
        ctx.add(
            "mantle-response-default",
            f"response '{name}' has conditioned variants and {len(defaults)} default variants; "
            "exactly one variant must have no 'condition'",
            response.span,
        )
    return response


def _variant(name: str, node: yaml.Node, ctx: y.Ctx) -> ResponseVariant | None:
    span = ctx.span(node)
    if y.is_scalar(node):
        text = y.string(node, ctx, "variant")
        return ResponseVariant(text, ctx.file, span, placeholders=_placeholders(text))
    if not y.is_map(node):
        ctx.add("mantle-responses", f"a variant of '{name}' must be text or a mapping", span)
        return None
    y.unknown_keys(node, set(VARIANT_KEYS), ctx, f"a variant of '{name}'")
    attrs = {k: v for k, _, v in y.items(node, ctx)}
    text = y.string(attrs.get("text"), ctx, "text")
    variant = ResponseVariant(text, ctx.file, span, placeholders=_placeholders(text))
    buttons = attrs.get("buttons")
    if buttons is not None:
        _buttons(name, buttons, variant, ctx)
    if (
        (text is None or not text.strip())
        and not variant.buttons
        and variant.buttons_source is None
    ):
        ctx.add("mantle-responses", f"a variant of '{name}' has empty text", span)
    cond_node = attrs.get("condition")
    if cond_node is not None and not y.is_null(cond_node):
        cond_text = y.string(cond_node, ctx, "condition") or ""
        variant.condition, problems = make_condition(cond_text, ctx.file, ctx.span(cond_node))
        ctx.diagnostics.extend(problems)
    meta = attrs.get("metadata")
    if meta is not None:
        raw = y.value(meta, ctx)
        if isinstance(raw, dict):
            variant.metadata = raw
        elif raw is not None:
            ctx.add("mantle-responses", "'metadata' must be a mapping", ctx.span(meta))
    return variant


def _buttons(name: str, node: yaml.Node, variant: ResponseVariant, ctx: y.Ctx) -> None:
    if y.is_map(node):
        attrs = {k: v for k, _, v in y.items(node, ctx)}
        y.unknown_keys(node, {"source"}, ctx, f"buttons of '{name}'")
        variant.buttons_source = y.string(attrs.get("source"), ctx, "source")
        return
    if not y.is_seq(node):
        ctx.add("mantle-responses", "'buttons' must be a list or {source: <tool>}", ctx.span(node))
        return
    assert isinstance(node, yaml.SequenceNode)
    for item in node.value:
        if not y.is_map(item):
            ctx.add("mantle-responses", "each button needs 'title' and 'payload'", ctx.span(item))
            continue
        y.unknown_keys(item, {"title", "payload"}, ctx, "a button")
        attrs = {k: v for k, _, v in y.items(item, ctx)}
        title = y.string(attrs.get("title"), ctx, "title")
        if not title:
            ctx.add("mantle-responses", "a button needs a 'title'", ctx.span(item))
            continue
        variant.buttons.append(
            Button(title, y.string(attrs.get("payload"), ctx, "payload"), ctx.span(item))
        )


def _placeholders(text: str | None) -> list[str]:
    return PLACEHOLDER.findall(text) if text else []
