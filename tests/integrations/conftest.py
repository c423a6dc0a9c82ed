"""Shared fixtures: the demo MCP server over streamable HTTP on loopback."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from tests.integrations.helpers import DEMO_SERVER, free_port


@pytest.fixture(scope="module")
def http_server() -> Iterator[str]:
    """The demo server over streamable HTTP; its URL. Stopped when the module's tests end."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(DEMO_SERVER), "http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(200):  # bounded: 20 s
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if process.poll() is not None:
                pytest.fail("the demo MCP server exited at start")
            time.sleep(0.1)
        else:
            pytest.fail("the demo MCP server did not listen within 20 s")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=10)
