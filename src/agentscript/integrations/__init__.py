"""Integrations: MCP servers as action targets, LLM budgets, OpenTelemetry traces.

Every integration is configured in ``agentscript.toml`` (see :mod:`.config`) and reaches the
engine through the ordinary extension points: scheme handlers on the agent's ``ActionRunner``
and the budget meter consulted at the one shared LLM call. Optional dependencies are imported
where they are used and name their extra (``agentscript[mcp]``, ``agentscript[otel]``).
"""
