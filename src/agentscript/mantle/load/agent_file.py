"""``agent.yml`` (identity under ``agent:``, tuning sections at the top level)."""

from __future__ import annotations

from typing import Any

from agentscript.diagnostics import UNKNOWN_SPAN, Severity
from agentscript.mantle.load import yamlsrc as y
from agentscript.mantle.model import AgentSettings

TOP_KEYS = frozenset(
    {
        "agent",
        "rules",
        "prompts",
        "references",
        "conversation",
        "tool_timeout",
        "session_config",
        "orchestrator",
    }
)
AGENT_KEYS = frozenset({"id", "language", "persona", "voice", "name", "description"})
# Maestro (rasa-pro 3.19) nested these under ``agent:``; we still read them there.
MAESTRO_NESTED = frozenset({"rules", "references"})
TUNING = TOP_KEYS - {"agent"} - MAESTRO_NESTED


def read_agent(text: str, ctx: y.Ctx) -> AgentSettings:
    settings = AgentSettings(file=ctx.file)
    root = y.compose(text, ctx)
    if root is None or not y.is_map(root):
        if root is not None:
            ctx.add("mantle-agent", "agent.yml must be a mapping", ctx.span(root))
        elif not ctx.diagnostics:
            ctx.add(
                "mantle-agent", "agent.yml is empty: it needs an 'agent:' section", UNKNOWN_SPAN
            )
        return settings
    top = {k: (kn, v) for k, kn, v in y.items(root, ctx)}
    y.unknown_keys(root, set(TOP_KEYS), ctx, "agent.yml", Severity.WARNING)
    if "agent" not in top or not y.is_map(top["agent"][1]):
        span = ctx.span(top["agent"][0]) if "agent" in top else ctx.span(root)
        ctx.add("mantle-agent", "agent.yml needs an 'agent:' mapping with a 'persona'", span)
        return settings
    agent_key, agent = top["agent"]
    settings.span = ctx.span(agent_key)
    fields = {k: (kn, v) for k, kn, v in y.items(agent, ctx)}
    for key, (key_node, _) in fields.items():
        if key in AGENT_KEYS or key in MAESTRO_NESTED:
            continue
        fix = "; move it to the top level" if key in TUNING else ""
        ctx.add(
            "mantle-unknown-key",
            f"unknown key '{key}' under 'agent:' (ignored){fix}",
            ctx.span(key_node),
            Severity.WARNING,
        )

    def text_of(key: str) -> str | None:
        return y.string(fields[key][1], ctx, key) if key in fields else None

    settings.id = text_of("id") or ""
    settings.language = text_of("language") or "en"
    settings.name = text_of("name")
    settings.description = text_of("description")
    settings.persona = text_of("persona") or ""
    if not settings.persona.strip():
        span = ctx.span(fields["persona"][0]) if "persona" in fields else settings.span
        ctx.add("mantle-agent", "'agent.persona' is required and must not be blank", span)
    if "voice" in fields:
        voice = y.value(fields["voice"][1], ctx)
        settings.voice = voice if isinstance(voice, dict) else None

    for key in MAESTRO_NESTED:
        if key in fields:
            settings.maestro_layout = True
    rules_node = top.get("rules", fields.get("rules", (None, None)))[1]
    settings.rules = [text for text, _ in y.string_list(rules_node, ctx, "rules")]
    settings.references = _mapping(
        top.get("references", fields.get("references")), ctx, "references"
    )
    settings.prompts = _mapping(top.get("prompts"), ctx, "prompts")
    settings.conversation = _mapping(top.get("conversation"), ctx, "conversation")
    settings.session_config = _mapping(top.get("session_config"), ctx, "session_config")
    if "tool_timeout" in top:
        ok, raw = y.try_value(top["tool_timeout"][1], ctx)
        if isinstance(raw, int | float) and not isinstance(raw, bool) and raw > 0:
            settings.tool_timeout = float(raw)
        elif ok:
            ctx.add(
                "mantle-agent",
                "'tool_timeout' must be a positive number of seconds",
                ctx.span(top["tool_timeout"][1]),
            )
    return settings


def _mapping(pair: tuple[Any, Any] | None, ctx: y.Ctx, what: str) -> dict[str, Any]:
    if pair is None:
        return {}
    node = pair[1]
    raw = y.value(node, ctx)
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        ctx.add("mantle-agent", f"'{what}' must be a mapping", ctx.span(node))
        return {}
    return raw
