"""The stand-in OpenAI-compatible model server used by the demo, the benchmarks and tests."""

from __future__ import annotations

import json
import socket
import time

import httpx2 as httpx

from agentscript.server.standin import StandInServer


def test_standin_server_answers_calls_tools_and_keeps_the_connection() -> None:
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {}}}
    with StandInServer(delay=0.02) as server, httpx.Client(base_url=server.base_url) as client:
        started = time.perf_counter()
        said = client.post(
            "/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        )
        waited = time.perf_counter() - started
        called = client.post(
            "/chat/completions",
            json={"messages": [{"role": "user", "content": '/lookup {"id": 7}'}], "tools": [tool]},
        )
        missing = client.post("/embeddings", json={})
        assert server.requests == 2
    assert waited >= 0.02  # the fixed delay is honoured (a lower bound, not a timing target)
    assert said.json()["choices"][0]["message"]["content"] == "You said: hi"
    assert said.json()["model"] == "m"
    call = called.json()["choices"][0]["message"]["tool_calls"][0]["function"]
    assert (call["name"], json.loads(call["arguments"])) == ("lookup", {"id": 7})
    assert missing.status_code == 404


def test_standin_server_streams_and_survives_garbage() -> None:
    with StandInServer() as server:
        with socket.create_connection(("127.0.0.1", server.port)) as raw:
            raw.sendall(b"NONSENSE\r\n\r\n")
            assert raw.recv(100) == b""  # closed, nothing else
        body = {"stream": True, "messages": [{"role": "user", "content": "a longer sentence"}]}
        streamed = httpx.post(f"{server.base_url}/chat/completions", json=body)
    events = [line[6:] for line in streamed.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    text = "".join(
        c["choices"][0]["delta"].get("content") or ""
        for c in map(json.loads, events[:-1])
        if c["choices"]
    )
    assert text == "You said: a longer sentence"
