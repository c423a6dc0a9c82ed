"""The cost of the bounded HTTP head (``server/httptools_nodelay.py``) per request, against
uvicorn's own httptools protocol, measured in the same run and in process.

Each protocol is driven directly, on one event loop, by a transport that keeps what is
written: no socket, no kernel, no client, so the few microseconds the head bound adds (a
count per read and one timer per request) are not lost in a loopback round trip's noise. The
app answers at once (``GET /healthz``-sized), as a request reaches it in ``agentscript
serve``. Two request shapes: a bare one (curl's headers) and one with 2 kB of headers (a
browser's cookies and user agent). Requests come one after another on a kept-alive
connection, each written whole in one read, as from a client on a fast network; the rounds
alternate the two protocols so the machine's other load slows both alike. A third column runs
our protocol with the app behind the guard of a server without API keys (``server/local.py``:
the ``Host`` and ``Origin`` headers read per request).

Usage: ``python bench/http_protocol.py [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from typing import Any

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from agentscript.server.httptools_nodelay import NoDelayHttpToolsProtocol
from agentscript.server.local import LocalOnly
from common import machine, micro

BARE = (
    b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nUser-Agent: curl/8.5\r\nAccept: */*\r\n\r\n"
)
BROWSER = (
    b"GET /healthz HTTP/1.1\r\nHost: agents.example.com\r\n"
    b"User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
    b"Chrome/156.0 Safari/537.36\r\nAccept: application/json\r\nAccept-Language: en-GB,en\r\n"
    b"Cookie: " + b"; ".join(b"c%d=%s" % (n, b"v" * 60) for n in range(28)) + b"\r\n\r\n"
)


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]}
    )
    await send({"type": "http.response.body", "body": b"ok"})


class Transport(asyncio.Transport):
    """Keeps the count of what the protocol writes; a closed one says so."""

    def __init__(self) -> None:
        super().__init__()
        self.responses = 0
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if bytes(data).startswith(b"HTTP/1.1 "):
            self.responses += 1

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 8000)}.get(
            name, default
        )

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def per_request(
    kind: type[HttpToolsProtocol], request: bytes, number: int, application: Any = app
) -> float:
    """Seconds per request of ``number`` requests on one kept-alive connection."""
    config = Config(application, lifespan="off", access_log=False, log_level="warning")
    config.load()
    protocol = kind(config=config, server_state=ServerState(), app_state={})
    transport = Transport()
    protocol.connection_made(transport)
    start = time.perf_counter()
    for sent in range(1, number + 1):
        protocol.data_received(request)
        while transport.responses < sent:  # the app's task answers on the loop
            await asyncio.sleep(0)
    seconds = (time.perf_counter() - start) / number
    if transport.closed:
        raise RuntimeError(f"{kind.__name__} closed the connection")
    protocol.connection_lost(None)
    return seconds


async def measure(request: bytes, *, repeat: int, number: int) -> tuple[float, float, float]:
    """Best seconds per request: uvicorn's protocol, ours, ours with the app behind the guard
    of a server without API keys (``server/local.py``); rounds alternated."""
    # The guard answers a non-loopback Host itself: measured on the request sent to 127.0.0.1.
    local = request.replace(b"Host: agents.example.com", b"Host: 127.0.0.1:8000")
    runs = [
        (HttpToolsProtocol, request, app),
        (NoDelayHttpToolsProtocol, request, app),
        (NoDelayHttpToolsProtocol, local, LocalOnly(app)),
    ]
    best = [float("inf")] * len(runs)
    for _ in range(repeat):
        for index, (kind, sent, application) in enumerate(runs):
            best[index] = min(best[index], await per_request(kind, sent, number, application))
    return best[0], best[1], best[2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args(argv)
    repeat, number = (3, 2_000) if args.quick else (9, 20_000)
    logging.getLogger("uvicorn").setLevel(logging.WARNING)
    print(f"# bench/http_protocol.py ({machine()})")
    print(f"best of {repeat} rounds of {number} kept-alive requests, in process\n")
    print(
        "| request | head bytes | uvicorn httptools | bounded head (ours) | ratio | added "
        "| ours, keyless guard | guard added |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, request in (("bare", BARE), ("2 kB of headers", BROWSER)):
        reference, ours, guarded = asyncio.run(measure(request, repeat=repeat, number=number))
        print(
            f"| {name} | {len(request)} | {micro(reference)} | {micro(ours)} | "
            f"{ours / reference:.3f}x | {(ours - reference) * 1e6:+.2f} µs | "
            f"{micro(guarded)} | {(guarded - ours) * 1e6:+.2f} µs |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
