"""agentscript.expr."""
