"""Every log record of a server process goes through the configured format, a library's
(psycopg, asyncio, httpx) as well as ours and uvicorn's: before, a library's warning (psycopg's
``query cancellation interrupted (CancelledError): closing connection`` at a SIGTERM during a
purge) went to Python's last-resort handler, a bare line in the middle of JSON lines."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx2 as httpx
import pytest

from .harness import NOTES
from .process import serving

PSYCOPG_LINE = "query cancellation interrupted (CancelledError): closing connection"
TEXT_PREFIX = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} "

# Records of every kind of logger, once the server's logging is configured.
LOGGING = f"""
import logging, sys, warnings
from agentscript.server import logs

logs.configure(access_log=sys.argv[1] == "access", log_format=sys.argv[2])
logging.getLogger("psycopg").warning("{PSYCOPG_LINE}")
logging.getLogger("psycopg").info("a library's chatter")
logging.getLogger("httpx").debug("a library's debugging")
logging.getLogger("asyncio").error("Task exception was never retrieved")
logging.getLogger("agentscript.server").error("ours")
logging.getLogger("agentscript.access").info("a request")
logging.getLogger("uvicorn.error").warning("Invalid HTTP request received.")
warnings.warn("a library's deprecation", DeprecationWarning, stacklevel=1)
"""


def logged(access: str, log_format: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-W", "always", "-c", LOGGING, access, log_format],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout == ""
    return done.stderr.splitlines()


@pytest.mark.parametrize("access", ["access", "no-access"])
def test_json_format_writes_a_librarys_warning_as_one_json_object(access: str) -> None:
    lines = [json.loads(line) for line in logged(access, "json")]
    seen = [(line["logger"], line["level"], line["message"]) for line in lines]
    wanted = [
        ("psycopg", "WARNING", PSYCOPG_LINE),
        ("asyncio", "ERROR", "Task exception was never retrieved"),
        ("agentscript.server", "ERROR", "ours"),
        *([("agentscript.access", "INFO", "a request")] if access == "access" else []),
        ("uvicorn.error", "WARNING", "Invalid HTTP request received."),
    ]
    # Each once (no logger has a handler of its own besides the root's), INFO and DEBUG of a
    # library left out.
    assert seen[: len(wanted)] == wanted
    [warned] = lines[len(wanted) :]
    assert warned["logger"] == "py.warnings" and "a library's deprecation" in warned["message"]
    assert all(line["request_id"] == "-" and line["time"].endswith("+00:00") for line in lines)


def test_text_format_gives_a_librarys_warning_the_time_level_and_request_id() -> None:
    lines = logged("no-access", "text")
    assert re.fullmatch(TEXT_PREFIX + r"WARNING psycopg -: " + re.escape(PSYCOPG_LINE), lines[0])
    assert re.fullmatch(
        TEXT_PREFIX + r"ERROR asyncio -: Task exception was never retrieved", lines[1]
    )
    assert "chatter" not in "\n".join(lines) and "debugging" not in "\n".join(lines)


BACKEND = f'''
import logging


def save_note(text: str, idempotency_key: str | None = None) -> dict[str, object]:
    logging.getLogger("psycopg").warning("{PSYCOPG_LINE}")
    logging.getLogger("psycopg").info("a library's chatter")
    return {{"saved": text, "count": 1}}
'''


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_a_served_librarys_warning_has_the_servers_format_and_request_id(
    tmp_path: Path, log_format: str
) -> None:
    agent = tmp_path / "notes.agent"
    agent.write_text(Path(NOTES).read_text())
    (tmp_path / "notes_backend.py").write_text(BACKEND)
    log = tmp_path / "server.log"
    args = [str(agent), "--model", "standin", "--store", f"sqlite:///{tmp_path / 's.db'}"]
    args += ["--log-format", log_format]
    with serving(args, {}, log) as server:
        created = httpx.post(f"{server.url}/v1/agents/Notes/sessions", json={})
        sid = created.json()["session_id"]
        sent = httpx.post(
            f"{server.url}/v1/sessions/{sid}/messages",
            json={"text": '/note {"text": "hello"}'},
            headers={"X-Request-ID": "lib-7"},
        )
        assert sent.status_code == 200 and sent.json()["actions"] == ["note"], sent.text
    text = log.read_text()
    assert "chatter" not in text
    if log_format == "json":
        lines = [json.loads(line) for line in text.splitlines()]
        [warned] = [line for line in lines if line["logger"] == "psycopg"]
        assert warned["message"] == PSYCOPG_LINE
        assert warned["level"] == "WARNING" and warned["request_id"] == "lib-7"
    else:
        [warned] = [line for line in text.splitlines() if PSYCOPG_LINE in line]
        assert re.fullmatch(
            TEXT_PREFIX + "WARNING psycopg lib-7: " + re.escape(PSYCOPG_LINE), warned
        )
