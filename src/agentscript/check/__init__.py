"""agentscript.check."""
