"""Helpers for the integration tests: the demo MCP server's path and configs, and the port
its uvicorn says it bound."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from agentscript.integrations.config import McpServerConfig

DEMO_SERVER = Path(__file__).with_name("mcp_demo_server.py")


def stdio_config(name: str = "demo", **options: object) -> McpServerConfig:
    return McpServerConfig(
        name=name,
        command=sys.executable,
        args=(str(DEMO_SERVER), "stdio"),
        **options,  # type: ignore[arg-type]
    )


# What uvicorn logs once it listens, naming the port it bound (the one the system chose for
# port 0): the demo server runs on uvicorn (mcp's streamable-http transport).
UVICORN_LISTENING = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+) ")


def uvicorn_port(log: Path) -> int:
    """The port uvicorn says in ``log`` it listens on (0 until it says so)."""
    found = UVICORN_LISTENING.search(log.read_text(errors="replace")) if log.exists() else None
    return int(found[1]) if found else 0
