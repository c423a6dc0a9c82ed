"""uvicorn runs the app ``agentscript serve`` built, with nothing of the command around it:
a store that cannot be opened at start-up is handled by the app's start-up itself
(``on_store_failure``), so no request passes through a layer kept for the start alone. The
start-up's failure is still one line and status 2 with one worker
(test_store_unreachable_at_start.py: with PostgreSQL, and exit 75 for a worker)."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI

from agentscript.server import command, orphan, runner
from agentscript.server.command import ENV, ServeOptions, serve_command, worker_app

from .harness import NOTES


def test_one_server_runs_the_app_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[Any] = []

    def run(app: Any, **settings: Any) -> int:
        ran.append(app)
        return 0

    monkeypatch.setattr(runner, "run", run)
    out: list[str] = []
    options = ServeOptions(paths=[NOTES], model="standin", store="memory://", port=0)
    assert serve_command(options, out.append) == 0
    assert len(ran) == 1 and isinstance(ran[0], FastAPI), ran


def test_a_worker_runs_the_app_itself(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    options = ServeOptions(
        paths=[NOTES], model="standin", store=f"sqlite:///{tmp_path / 's.db'}", workers=2
    )
    monkeypatch.setitem(os.environ, ENV, json.dumps(asdict(options)))
    monkeypatch.setattr(orphan, "stop_when_orphaned", lambda parent: None)
    assert isinstance(worker_app(), FastAPI)


def test_one_server_whose_store_fails_at_start_says_one_line_and_exits_2(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The store passed the check before listening, then could not be opened by the app's
    start-up (here a SQLite file under a file, as a database lost in between)."""
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    monkeypatch.setattr(command, "check_store", lambda options: None)
    out: list[str] = []
    store = f"sqlite:///{blocker}/sessions.db"
    options = ServeOptions(paths=[NOTES], model="standin", store=store, port=0)
    with caplog.at_level(logging.INFO):
        assert serve_command(options, out.append) == 2
    said = [line for line in out if "cannot open the SQLite store" in line]
    assert len(said) == 1 and said[0].startswith("agentscript serve: "), out
    assert "listening on" in out[0]  # the banner: the check had passed, uvicorn ran the app
    assert "Traceback" not in caplog.text and "Application startup failed" not in caplog.text
    assert "cannot open" not in caplog.text  # said once, by the command
