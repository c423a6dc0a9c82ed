"""Helpers for the integration tests: the demo MCP server's path and configs, and a port
that refuses connections."""

from __future__ import annotations

import re
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
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


@contextmanager
def refused_port() -> Iterator[int]:
    """A loopback port that refuses connections while the block runs: bound here and not
    listening, so the kernel refuses every connection, and no other process can bind it
    (a port probed and let go could be taken, and answer, before the test connects)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


# What uvicorn logs once it listens, naming the port it bound (the one the system chose for
# port 0): the demo server runs on uvicorn (mcp's streamable-http transport).
UVICORN_LISTENING = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+) ")


def uvicorn_port(log: Path) -> int:
    """The port uvicorn says in ``log`` it listens on (0 until it says so)."""
    found = UVICORN_LISTENING.search(log.read_text(errors="replace")) if log.exists() else None
    return int(found[1]) if found else 0
