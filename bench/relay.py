"""The least a server can do for a turn of the bench's shape: read a request, make two calls
to the model server one after the other, answer. No parsing beyond HTTP framing, no JSON, no
store, no trace: what any Python server on this machine pays one turn at a time before its
own work (the event loop's wake-ups when the request and each model answer arrive, and the
loopback transfers). ``bench/serve.py`` measures it beside the servers it compares.

Usage: ``python bench/relay.py PORT MODEL_URL`` (MODEL_URL as ``--base-url``:
``http://127.0.0.1:PORT/v1``).
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys

from common import exchange

ANSWER = b'{"response":"relayed"}'


def model_request(host: str, path: str) -> bytes:
    """One chat completion request like the turn's first call (the stand-in calls the
    offered tool the user's ``/go_to_orders`` names)."""
    body = json.dumps(
        {
            "model": "gpt-standin",
            "messages": [{"role": "user", "content": "/go_to_orders"}],
            "tools": [{"type": "function", "function": {"name": "go_to_orders"}}],
        }
    ).encode()
    return (
        f"POST {path}/chat/completions HTTP/1.1\r\nHost: {host}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


async def serve(port: int, model_url: str) -> None:
    address, _, path = model_url.removeprefix("http://").partition("/")
    host, _, model_port = address.partition(":")
    request = model_request(address, "/" + path.rstrip("/"))
    model = await asyncio.open_connection(host, int(model_port))
    model[1].get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    lock = asyncio.Lock()  # one kept-alive connection to the model, as one turn at a time needs

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                await reader.readexactly(length)
                async with lock:
                    for _ in range(2):
                        await exchange(*model, request)
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(ANSWER), ANSWER)
                )
        except (ConnectionError, asyncio.IncompleteReadError):
            writer.close()

    server = await asyncio.start_server(client, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main() -> None:
    port, model_url = int(sys.argv[1]), sys.argv[2]
    try:
        import uvloop  # as the servers measured beside it run, when it is installed
    except ImportError:
        asyncio.run(serve(port, model_url))
    else:
        uvloop.run(serve(port, model_url))


if __name__ == "__main__":
    main()
