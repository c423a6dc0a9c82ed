"""Shared fixtures: the demo MCP server over streamable HTTP on loopback."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from tests.integrations.helpers import DEMO_SERVER, uvicorn_port


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The demo server over streamable HTTP; its URL. Stopped when the module's tests end.
    It binds port 0 and its log names the port the system chose: a port probed here, let go
    and bound again by the server could be taken by another process in between."""
    log = tmp_path_factory.mktemp("mcp_demo") / "server.log"
    with log.open("wb") as written:
        process = subprocess.Popen(
            [sys.executable, str(DEMO_SERVER), "http", "0"],
            stdout=subprocess.DEVNULL,
            stderr=written,
        )
    try:
        for _ in range(200):  # bounded: 20 s
            port = uvicorn_port(log)
            if port:
                with socket.socket() as sock:
                    if sock.connect_ex(("127.0.0.1", port)) == 0:
                        break
            if process.poll() is not None:
                pytest.fail(f"the demo MCP server exited at start: {log.read_text()}")
            time.sleep(0.1)
        else:
            pytest.fail(f"the demo MCP server did not listen within 20 s: {log.read_text()}")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=10)
