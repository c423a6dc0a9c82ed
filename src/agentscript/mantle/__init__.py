"""agentscript.mantle."""
