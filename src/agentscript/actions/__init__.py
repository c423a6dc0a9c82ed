"""agentscript.actions."""
