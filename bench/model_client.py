"""CPU per Chat Completions call of each way to reach an OpenAI-compatible server.

Against the stand-in server (``agentscript.server.standin``, its own process, no delay), with
the request bodies of a seed-002 turn, in one process and one run: the SDK's
``chat.completions.create``, the SDK's ``client.post`` (what ``openai:`` does), plain
``httpx2``, the lean client (``openai-lean:``) and a bare HTTP/1.1 POST on asyncio streams (the
floor). Each is measured with 1 and with ``--concurrency`` calls in flight.

Then streamed answers (``--pieces``, 100 by default): a small server of its own process answers
each call with that many Chat Completions chunks of text, each its own HTTP chunk written
``--gap`` seconds after the last (so that they arrive apart, as a real model's tokens do), and
the table gives the CPU per answer of ``Model.complete`` with a stream sink, for the lean
client and for the official SDK (``openai:``), against the floor of reading the same stream
with bare asyncio streams (chunks parsed, each event's JSON decoded).

Usage: ``python bench/model_client.py [--calls 400] [--concurrency 32] [--pieces 100]
[--gap 0.0003]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from common import exchange, machine

Call = Callable[[dict[str, Any]], Awaitable[None]]


# The four request bodies of two seed-002 turns (examples/order_status), as the engine sends
# them: tools, tool calls and results in the history.
def _tool(name: str, description: str) -> dict[str, Any]:
    parameters = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


TRANSFERRED = '{"status": "transferring to Order_Management"}'


def _transfer(call_id: str) -> list[dict[str, Any]]:
    """The router's go_to_orders call and its answer."""
    request = {"name": "go_to_orders", "arguments": "{}"}
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": request}],
        },
        {"role": "tool", "tool_call_id": call_id, "content": TRANSFERRED},
    ]


def _body(system: str, messages: list[dict[str, Any]], *, tools: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "gpt-standin",
        "messages": [{"role": "system", "content": system}, *messages],
    }
    if tools:
        body["tools"] = [
            _tool("go_to_orders", "Order questions"),
            _tool("go_to_escalation", "The customer asks for a human"),
        ]
    return body


BRIEF = "You are a helpful order support agent. Be brief.\n\n"
ROUTER = BRIEF + "Route the customer's request. Use go_to_orders for anything about an order."
ORDERS = (
    BRIEF + "Tell the user that the expected delivery date for order number 1234 is February "
    "10, 2026.\nApologize to the customer for the delay in receiving their order."
)
USER = {"role": "user", "content": "/go_to_orders"}
TURN_1 = [USER, *_transfer("call_1")]
TURN_2 = [*TURN_1, {"role": "assistant", "content": f"done: {TRANSFERRED}"}, USER]
BODIES: list[dict[str, Any]] = [
    _body(ROUTER, [USER], tools=True),
    _body(ORDERS, TURN_1, tools=False),
    _body(ROUTER, TURN_2, tools=True),
    _body(ORDERS, [*TURN_2, *_transfer("call_1_1")], tools=False),
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def clients(base: str, port: int) -> dict[str, Call]:
    import httpx2
    import openai
    from openai.types.chat import ChatCompletion

    from agentscript.models.openai_lean import LeanClient

    sdk = openai.AsyncOpenAI(api_key="x", base_url=base, max_retries=0)
    plain = httpx2.AsyncClient(base_url=base, headers={"authorization": "Bearer x"})
    lean = LeanClient(base, "x", 60.0)
    idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def sdk_create(body: dict[str, Any]) -> None:
        await sdk.chat.completions.create(**body)

    async def sdk_post(body: dict[str, Any]) -> None:
        await sdk.post("/chat/completions", body=body, cast_to=ChatCompletion)

    async def httpx_post(body: dict[str, Any]) -> None:
        response = await plain.post(
            "/chat/completions",
            content=json.dumps(body).encode(),
            headers={"content-type": "application/json"},
        )
        json.loads(response.content)

    async def lean_post(body: dict[str, Any]) -> None:
        response = await lean.post("/chat/completions", body, stream=False)
        json.loads(await response.body())
        lean.release(response)

    async def bare(body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        reader, writer = idle.pop() if idle else await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(data) + data
        )
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        json.loads(await reader.readexactly(length))
        idle.append((reader, writer))

    return {
        "SDK chat.completions.create": sdk_create,
        "SDK client.post (openai:)": sdk_post,
        "httpx2 post": httpx_post,
        "lean client (openai-lean:)": lean_post,
        "bare asyncio streams": bare,
    }


# The streaming server: each POST answered with PIECES chunks of text, one HTTP chunk each,
# GAP seconds apart, then the finish chunk and [DONE]. Run as its own process (python -c).
PIECE_SERVER = """
import asyncio, json, socket, sys

PORT, PIECES, GAP = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])


def chunk(delta, finish=None):
    return {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def framed(event):
    data = b"data: " + json.dumps(event).encode() + b"\\n\\n"
    return b"%x\\r\\n%s\\r\\n" % (len(data), data)


async def serve(reader, writer):
    writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        while True:
            head = await reader.readuntil(b"\\r\\n\\r\\n")
            length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\\r\\n")
                          if line.lower().startswith(b"content-length:"))
            await reader.readexactly(length)
            writer.write(b"HTTP/1.1 200 OK\\r\\nContent-Type: text/event-stream\\r\\n"
                         b"Transfer-Encoding: chunked\\r\\n\\r\\n"
                         + framed(chunk({"role": "assistant", "content": ""})))
            for i in range(PIECES):
                await asyncio.sleep(GAP)
                writer.write(framed(chunk({"content": f"word{i} "})))
            usage = {**chunk({}, "stop"), "usage": {"prompt_tokens": 1, "completion_tokens": 1,
                                                     "total_tokens": 2}}
            writer.write(framed(usage) + b"%x\\r\\n%s\\r\\n0\\r\\n\\r\\n"
                         % (len(b"data: [DONE]\\n\\n"), b"data: [DONE]\\n\\n"))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


async def main():
    server = await asyncio.start_server(serve, "127.0.0.1", PORT)
    async with server:
        await server.serve_forever()

asyncio.run(main())
"""


def stream_calls(base: str, port: int) -> dict[str, Call]:
    """``Model.complete`` with a stream sink, through each client; and the floor."""
    from agentscript.models.base import Message, ModelRequest
    from agentscript.models.config import model_from_spec

    request = ModelRequest(
        system="You help.", instructions="", messages=[Message("user", "hi")], tools=[]
    )
    models = {
        "lean client (openai-lean:), Model.complete": model_from_spec(
            "openai-lean:m", base_url=base, api_key="x"
        ),
        "SDK (openai:), Model.complete": model_from_spec("openai:m", base_url=base, api_key="x"),
    }
    calls: dict[str, Call] = {}
    for name, model in models.items():

        async def complete(_body: dict[str, Any], model: Any = model) -> None:
            shown: list[str] = []
            answer = await model.complete(request, stream=shown.append)
            assert answer.text == "".join(shown) and shown

        calls[name] = complete
    idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    body = json.dumps({"model": "m", "stream": True, "messages": []}).encode()

    post = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    )

    def decode(chunk: bytes) -> None:
        event = chunk[6:-2]  # between "data: " and the blank line
        if event != b"[DONE]":
            json.loads(event)

    async def bare(_body: dict[str, Any]) -> None:
        reader, writer = idle.pop() if idle else await asyncio.open_connection("127.0.0.1", port)
        await exchange(reader, writer, post, on_chunk=decode)
        idle.append((reader, writer))

    calls["bare asyncio streams (floor)"] = bare
    return calls


def start(command: list[str], port: int) -> subprocess.Popen[bytes]:
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return server
        except OSError:
            time.sleep(0.02)
    server.terminate()
    raise RuntimeError(f"nothing listens on port {port}")


async def cpu_per_call(call: Call, calls: int, concurrency: int) -> float:
    async def worker(offset: int, n: int) -> None:
        for i in range(n):
            await call(BODIES[(i + offset) % len(BODIES)])

    await asyncio.gather(*(worker(k, 5) for k in range(concurrency)))  # warm
    each = max(1, calls // concurrency)
    start = time.process_time()
    await asyncio.gather(*(worker(k, each) for k in range(concurrency)))
    return (time.process_time() - start) / (each * concurrency) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--pieces", type=int, default=100, help="chunks of a streamed answer")
    parser.add_argument("--gap", type=float, default=0.0003, help="seconds between chunks")
    args = parser.parse_args()
    port, stream_port = free_port(), free_port()
    servers = [
        start([sys.executable, "-m", "agentscript.server.standin", "--port", str(port)], port)
    ]
    try:
        command = [sys.executable, "-c", PIECE_SERVER, str(stream_port), str(args.pieces)]
        servers.append(start([*command, str(args.gap)], stream_port))

        async def run() -> None:
            print(f"# bench/model_client.py — {machine()}")
            print(f"| path | CPU ms/call, 1 in flight | {args.concurrency} in flight |")
            print("|---|---:|---:|")
            for name, call in clients(f"http://127.0.0.1:{port}/v1", port).items():
                one = await cpu_per_call(call, args.calls, 1)
                many = await cpu_per_call(call, args.calls * 2, args.concurrency)
                print(f"| {name} | {one:.3f} | {many:.3f} |", flush=True)
            print()
            print(
                f"Streamed answers: {args.pieces} chunks of text each, {args.gap * 1000:g} ms "
                "apart (CPU per answer; the floor reads the same stream with bare streams)"
            )
            print()
            print(f"| path | CPU ms/answer, 1 in flight | {args.concurrency} in flight |")
            print("|---|---:|---:|")
            calls = max(40, args.calls // 4)
            streamed = stream_calls(f"http://127.0.0.1:{stream_port}/v1", stream_port)
            for name, call in streamed.items():
                one = await cpu_per_call(call, calls, 1)
                many = await cpu_per_call(call, calls * 2, args.concurrency)
                print(f"| {name} | {one:.3f} | {many:.3f} |", flush=True)

        asyncio.run(run())
    finally:
        for server in servers:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
