"""What the server logs: an unreachable store always, one line per request with --access-log,
and never a key, a message or a query string."""

from __future__ import annotations

import json
import logging
import os
import re
import socket
from pathlib import Path

import httpx2 as httpx
import pytest

from agentscript.server.config import ServerConfig

from .harness import NOTES, new_session, run
from .process import serving

KEY = "sk-live-do-not-log-0123456789"
SECRET_TEXT = "my card is 4111 1111 1111 1111"


def _access_lines(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if "agentscript.access" in line]


def test_access_log_has_one_line_per_request_and_no_key_text_or_query(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    args = [NOTES, "--model", "standin", "--store", f"sqlite:///{tmp_path}/s.db", "--access-log"]
    auth = {"Authorization": f"Bearer {KEY}"}
    with serving(args, {"AGENTSCRIPT_API_KEYS": KEY}, log) as server:
        created = httpx.post(f"{server.url}/v1/agents/Notes/sessions", json={}, headers=auth)
        sid = created.json()["session_id"]
        sent = httpx.post(
            f"{server.url}/v1/sessions/{sid}/messages", json={"text": SECRET_TEXT}, headers=auth
        )
        assert sent.status_code == 200
        listed = httpx.get(
            f"{server.url}/v1/sessions?agent=Notes&cursor=secret-cursor", headers=auth
        )
        assert listed.status_code == 200
        assert httpx.get(f"{server.url}/v1/sessions/{sid}").status_code == 401  # no key
    lines = _access_lines(log)
    wanted = [
        "127.0.0.1 POST /v1/agents/Notes/sessions 201 ",
        f"127.0.0.1 POST /v1/sessions/{sid}/messages 200 ",
        "127.0.0.1 GET /v1/sessions 200 ",
        f"127.0.0.1 GET /v1/sessions/{sid} 401 ",
    ]
    for want in wanted:
        assert [line for line in lines if want in line and line.endswith("ms")], (want, lines)
    text = log.read_text()
    assert (
        KEY not in text
        and SECRET_TEXT not in text
        and "4111 1111" not in text
        and "secret-cursor" not in text
    )


def test_without_access_log_a_server_logs_no_request(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    args = [NOTES, "--model", "standin", "--store", f"sqlite:///{tmp_path}/s.db"]
    with serving(args, {}, log) as server:
        sid = httpx.post(f"{server.url}/v1/agents/Notes/sessions", json={}).json()["session_id"]
        sent = httpx.post(f"{server.url}/v1/sessions/{sid}/messages", json={"text": "hi"})
        assert sent.status_code == 200
    assert _access_lines(log) == []


def test_access_log_path_is_logged_as_sent_so_it_cannot_forge_a_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        response = await client.get("/v1/sessions/x%0a2026-12-02%20INFO%20forged")
        assert response.status_code in (404, 422)

    with caplog.at_level(logging.INFO, logger="agentscript.access"):
        run(f"sqlite:///{tmp_path}/s.db", scenario, config=ServerConfig(access_log=True))
    [record] = [r for r in caplog.records if r.name == "agentscript.access"]
    line = record.getMessage()
    assert "\n" not in line and "/v1/sessions/x%0a2026-12-02%20INFO%20forged" in line


def test_an_unreachable_store_is_logged_naming_the_store(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "sessions.db"

    async def scenario(client: httpx.AsyncClient) -> None:
        sid = await new_session(client)
        os.rename(path, tmp_path / "elsewhere.db")
        sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "lost?"})
        assert sent.status_code == 503

    with caplog.at_level(logging.ERROR, logger="agentscript.server"):
        run(f"sqlite:///{path}", scenario)
    [record] = [r for r in caplog.records if r.name == "agentscript.server"]
    assert (
        record.getMessage().startswith("store unavailable: ") and str(path) in record.getMessage()
    )


def test_json_log_format_writes_every_stderr_line_as_one_json_object(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    db = tmp_path / "s.db"
    args = [NOTES, "--model", "standin", "--store", f"sqlite:///{db}", "--access-log"]
    args += ["--log-format", "json"]
    auth = {"Authorization": f"Bearer {KEY}"}
    with serving(args, {"AGENTSCRIPT_API_KEYS": KEY}, log) as server:
        created = httpx.post(f"{server.url}/v1/agents/Notes/sessions", json={}, headers=auth)
        sid = created.json()["session_id"]
        sent = httpx.post(
            f"{server.url}/v1/sessions/{sid}/messages",
            json={"text": SECRET_TEXT},
            headers={**auth, "X-Request-ID": "json-42"},
        )
        assert sent.status_code == 200
        os.rename(db, tmp_path / "elsewhere.db")
        lost = httpx.post(
            f"{server.url}/v1/sessions/{sid}/messages", json={"text": "x"}, headers=auth
        )
        assert lost.status_code == 503
        # Not HTTP at all: uvicorn's own warning, which must come as JSON too.
        host, port = server.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as raw:
            raw.sendall(b"NOT HTTP\x00\r\n\r\n")
            raw.recv(1000)
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    assert [line for line in lines if line["logger"].startswith("uvicorn")]
    assert lines[0]["logger"] == "agentscript.serve"
    assert lines[0]["message"].startswith("agentscript serve: listening on http://127.0.0.1:")
    [access] = [line for line in lines if line.get("request_id") == "json-42"]
    assert access["logger"] == "agentscript.access" and access["level"] == "INFO"
    assert access["method"] == "POST" and access["status"] == 200
    assert access["path"] == f"/v1/sessions/{sid}/messages" and access["client"] == "127.0.0.1"
    assert isinstance(access["duration_ms"], float) and access["time"].endswith("+00:00")
    [failure] = [line for line in lines if line["level"] == "ERROR"]
    assert failure["message"].startswith("store unavailable: ")
    assert failure["request_id"] == lost.headers["x-request-id"]
    text = log.read_text()
    assert KEY not in text and SECRET_TEXT not in text and "4111 1111" not in text


def test_access_log_says_when_the_client_left_before_its_answer_was_written(
    tmp_path: Path,
) -> None:
    import time

    from .test_shutdown import NOTE, BlockedTurn

    turn = BlockedTurn(f"sqlite:///{tmp_path}/s.db", tmp_path, "--access-log")
    try:
        body = json.dumps(NOTE).encode()
        path = turn.messages.removeprefix(turn.server.url)
        with socket.create_connection(("127.0.0.1", turn.server.port)) as sock:
            turn.block.touch()
            sock.sendall(
                f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            turn.wait_for_action()
        turn.block.unlink()  # the turn ends and commits with nobody to read its answer
        view = f"{turn.server.url}/v1/sessions/{turn.session}"
        deadline = time.monotonic() + 15
        while httpx.get(view).json()["turns"] != 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert httpx.get(view).json()["turns"] == 1
        # The access line follows the commit: waited for, as closing the server kills it.
        log, deadline = tmp_path / "server.log", time.monotonic() + 10
        while time.monotonic() < deadline and not [
            line for line in _access_lines(log) if f"POST {path} " in line
        ]:
            time.sleep(0.05)
    finally:
        turn.close()
    lines = _access_lines(tmp_path / "server.log")
    [left] = [line for line in lines if f"POST {path} " in line]
    assert left.endswith("ms (client gone)") and f"POST {path} 200 " in left
    assert not [line for line in lines if "(client gone)" in line and line is not left]
    assert [line for line in lines if "GET /v1/sessions/" in line and line.endswith("ms")]


def test_text_log_format_gives_uvicorns_own_lines_the_time_logger_and_request_id(
    tmp_path: Path,
) -> None:
    log = tmp_path / "server.log"
    args = [NOTES, "--model", "standin", "--store", f"sqlite:///{tmp_path / 's.db'}"]
    with serving(args, {}, log) as server:
        host, port = server.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as raw:
            raw.sendall(b"NOT HTTP\x00\r\n\r\n")
            raw.recv(1000)
    lines = [line for line in log.read_text().splitlines() if "Invalid HTTP request" in line]
    assert lines, log.read_text()
    # "2026-12-05 01:02:03,456 WARNING uvicorn.error -: Invalid HTTP request received.", not
    # uvicorn's bare "WARNING:  Invalid HTTP request received."
    assert all(re.match(r"\d{4}-\d\d-\d\d \S+ WARNING uvicorn\.error -: ", line) for line in lines)
