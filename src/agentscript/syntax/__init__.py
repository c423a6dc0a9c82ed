"""agentscript.syntax."""
