"""A loopback port for tests that need one nobody answers on."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def refused_port() -> Iterator[int]:
    """A loopback port that refuses connections while the block runs: bound here and not
    listening, so the kernel refuses every connection, and no other process can bind it
    (a port probed and let go could be taken, and answer, before the test connects)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])
