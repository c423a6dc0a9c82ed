"""Helpers for the integration tests: the demo MCP server's path and configs."""

from __future__ import annotations

import socket
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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
