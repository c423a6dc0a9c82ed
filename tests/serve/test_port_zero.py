"""``serve --port 0``: the server listens on a port the system chooses, and its banner names
that port (the socket the banner's check bound is the one uvicorn listens on)."""

from __future__ import annotations

from pathlib import Path

import httpx2 as httpx
import pytest

from .harness import NOTES
from .process import ServerProcess


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_on_port_0_names_the_port_it_listens_on(tmp_path: Path, workers: str) -> None:
    store = f"sqlite:///{tmp_path / 's.db'}"
    args = [NOTES, "--model", "standin", "--store", store, "--workers", workers]
    server = ServerProcess(args, {}, tmp_path / "server.log", port=0)
    try:
        server.wait_ready()  # on the port the banner names
        assert server.port != 0
        assert httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200
    finally:
        server.stop()
