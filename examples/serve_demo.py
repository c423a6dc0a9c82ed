"""`make demo-serve`: start `agentscript serve`, create a session, send messages, stop it.

The model is the stand-in OpenAI-compatible server (`agentscript.server.standin`) on loopback,
so no key or network is needed; the server talks to it with the real OpenAI client. Everything
runs on 127.0.0.1 and stops by itself.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import httpx2 as httpx

from agentscript.server import sse
from agentscript.server.standin import StandInServer

ROOT = Path(__file__).resolve().parent
AGENTSCRIPT = str(Path(sys.executable).parent / "agentscript")


def echo_until_listening(server: subprocess.Popen[str], seconds: float = 30.0) -> str | None:
    """The URL the server's banner says it listens on (it binds the port the system chooses:
    ``--port 0``, so no other program can take it first), or None if it exits or says nothing
    within ``seconds``. All it writes is echoed, now and after, as it would show."""
    found: queue.Queue[str | None] = queue.Queue()

    def echo() -> None:
        assert server.stderr is not None
        for line in server.stderr:  # where serve writes its banner and its log
            print(line, end="", file=sys.stderr, flush=True)
            listening = re.search(r"listening on (http://\S+)", line)
            if listening:
                found.put(listening[1])
        found.put(None)

    threading.Thread(target=echo, daemon=True).start()
    try:
        return found.get(timeout=seconds)
    except queue.Empty:
        return None


def show(method: str, path: str, body: object | None, response: httpx.Response) -> None:
    data = f" -d '{json.dumps(body)}'" if body is not None else ""
    print(f"$ curl -X {method} $URL{path}{data}")
    print(f"  -> {response.status_code} {response.text[:400]}")


def main() -> int:
    with StandInServer() as model, tempfile.TemporaryDirectory() as tmp:
        server = subprocess.Popen(
            [
                AGENTSCRIPT,
                "serve",
                str(ROOT / "order_status"),
                "--port",
                "0",
                "--store",
                f"sqlite:///{tmp}/sessions.db",
                "--model",
                "openai:standin",
                "--base-url",
                model.base_url,
            ],
            start_new_session=True,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            url = echo_until_listening(server)
            # Ready once the store is open and the agents loaded (the banner comes before).
            if url is None or httpx.get(f"{url}/readyz", timeout=30).status_code != 200:
                print("the server did not start", file=sys.stderr)
                return 1
            print(f"URL={url}")
            body: dict[str, object] = {"variables": {"order_ID": "1234"}}
            created = httpx.post(f"{url}/v1/agents/Order_Status/sessions", json=body)
            show("POST", "/v1/agents/Order_Status/sessions", body, created)
            sid = created.json()["session_id"]
            message = {"text": "Where is my order?"}
            sent = httpx.post(f"{url}/v1/sessions/{sid}/messages", json=message)
            show("POST", f"/v1/sessions/{sid}/messages", message, sent)
            streamed = httpx.post(
                f"{url}/v1/sessions/{sid}/messages",
                json={"text": "Thanks"},
                headers={"Accept": "text/event-stream"},
            )
            kinds = [name for name, _ in sse.parse(streamed.text)]
            print(f"$ curl -N -H 'Accept: text/event-stream' ... -> events: {' '.join(kinds)}")
            # The stand-in calls a tool named after "/": the router's transition, then the
            # Order_Management subagent runs its two flow:// actions, which agentscript.toml's
            # [actions.targets] maps to orders_backend.py beside the agent.
            routed = httpx.post(
                f"{url}/v1/sessions/{sid}/messages", json={"text": "/go_to_orders"}
            ).json()
            print(
                f'$ curl ... -d \'{{"text": "/go_to_orders"}}\' -> node {routed["node"]}, '
                f"actions {routed['actions']}, error {routed['error']}"
            )
            turns = httpx.get(f"{url}/v1/sessions/{sid}/turns")
            show("GET", f"/v1/sessions/{sid}/turns", None, turns)
            ran = routed["error"] is None and "check_if_late" in routed["actions"]
            return 0 if sent.status_code == 200 and kinds[-1:] == ["turn"] and ran else 1
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=15)


if __name__ == "__main__":
    sys.exit(main())
