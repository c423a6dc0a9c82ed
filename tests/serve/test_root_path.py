"""``serve --root-path``: behind a proxy that serves the server under a prefix and strips it,
the URLs the server hands out (``trace_url``) carry the prefix, so a client that follows them
through the proxy reaches the trace. The access log names the public path, with the prefix, as
the proxy's own log does."""

from __future__ import annotations

from pathlib import Path

import httpx2 as httpx

from .harness import NOTES
from .process import ServerProcess


def test_trace_url_carries_the_root_path_a_proxy_strips(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 's.db'}"
    args = [NOTES, "--model", "standin", "--store", store, "--root-path", "/agents", "--access-log"]
    log = tmp_path / "log"
    server = ServerProcess(args, {"NOTES_LOG": str(tmp_path / "calls.jsonl")}, log)
    try:
        server.wait_ready()
        # What the proxy forwards: the path with its prefix stripped.
        created = httpx.post(f"{server.url}/v1/agents/Notes/sessions", json={})
        assert created.status_code == 201
        session = created.json()["session_id"]
        turn = httpx.post(f"{server.url}/v1/sessions/{session}/messages", json={"text": "hi"})
        assert turn.status_code == 200
        trace_url = turn.json()["trace_url"]
        assert trace_url == f"/agents/v1/sessions/{session}/turns/1/trace"
        # The client follows it through the proxy, which strips /agents again.
        trace = httpx.get(server.url + trace_url.removeprefix("/agents"))
        assert trace.status_code == 200 and trace.json()["format"].startswith("agentscript-trace")
    finally:
        server.stop()
    text = log.read_text()
    assert " POST /agents/v1/agents/Notes/sessions 201 " in text
    assert f" GET /agents/v1/sessions/{session}/turns/1/trace 200 " in text
