"""agentscript.engine."""
