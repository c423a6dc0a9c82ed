"""Real ``agentscript serve`` processes for the crash and concurrency tests (loopback only)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2 as httpx

AGENTSCRIPT = str(Path(sys.executable).parent / "agentscript")
# ``agentscript`` as if httptools were not installed: ``serve`` then parses HTTP with h11, its
# fallback (a worker process would import it again, so one worker only).
WITHOUT_HTTPTOOLS = [
    sys.executable,
    "-c",
    "import sys; sys.modules['httptools'] = None; from agentscript.cli import main; main()",
]


def listening_socket() -> socket.socket:
    """A loopback socket on a port the system chose, already listening, for a server run in
    this process (``uvicorn.Server.run(sockets=[...])``): a port only probed, let go and
    bound again by the server could be taken by another process in between."""
    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
    except OSError:
        sock.close()
        raise
    return sock


class ServerProcess:
    def __init__(
        self,
        args: list[str],
        env: dict[str, str],
        log: Path,
        *,
        port: int = 0,
        command: list[str] | None = None,
    ) -> None:
        """``port=0`` (the default): the server binds a port the system chooses, which
        :meth:`wait_ready` reads from its banner, so no other process can take it between a
        probe and the server's bind; ``port`` is only known once :meth:`wait_ready` returned.
        ``command``: what runs ``agentscript`` (``WITHOUT_HTTPTOOLS``, say)."""
        self.port = port
        self._log_path = log
        self._log = log.open("ab")
        self._log_start = log.stat().st_size  # a log written before: its banner is not ours
        self.proc = subprocess.Popen(
            [*(command or [AGENTSCRIPT]), "serve", *args, "--port", str(self.port)],
            env={**os.environ, **env},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, seconds: float = 30.0) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"agentscript serve exited with {self.proc.returncode}")
            if not self.port:
                self.port = self._banner_port()
                time.sleep(0.05)
                continue
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError("agentscript serve did not become ready")

    def _banner_port(self) -> int:
        """The port the banner says the server listens on (0 until it is printed)."""
        with self._log_path.open("rb") as written:
            written.seek(self._log_start)
            text = written.read().decode(errors="replace")
        found = re.search(r"listening on http://[^ ]+:(\d+) ", text)
        if found and found[1] == "0":
            raise RuntimeError("the banner names port 0, not the port the server listens on")
        return int(found[1]) if found else 0

    def kill(self) -> None:
        """SIGKILL the server and every worker it started."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._log.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self._log.close()


@contextmanager
def serving(args: list[str], env: dict[str, str], log: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(args, env, log)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()
