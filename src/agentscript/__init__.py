"""agentscript."""
