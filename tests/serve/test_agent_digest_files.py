"""With ``--workers N``, a worker started again after a crash refuses files that changed since
the server started; for an ``.agent`` agent these are more than the ``.agent`` file: the
``agentscript.toml`` that applies to it (its ``[actions.targets]``, models, limits), and the
modules in its folder that its ``python://`` targets name, as written or as mapped, and those
these import (tests/serve/test_digest_imports.py). A worker that loaded an edited backend or
mapping beside the others' old one served two versions of the agent from one server, and
nothing said so. Files beside the agent that it does not load (a data file, a store) are no
change (docs/serve.md, "Several workers")."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import httpx2 as httpx
import pytest

from agentscript.loader import load
from agentscript.models.config import CONFIG_ENV
from agentscript.server import logs, orphan
from agentscript.server.agents import AgentLoadError, load_agents, source_digest
from agentscript.server.command import ENV, ServeOptions, build_app, worker_app

from .harness import CARD_BANK, NOTES
from .process import ServerProcess
from .test_supervisor_agents_changed import worker_refuses_to_start
from .test_worker_restart import wait_until_each_answers, workers_of

EXAMPLE = Path(__file__).parents[2] / "examples" / "order_status"
CHANGED = "changed on disk since the server started"
HINT = "hint: --dialect agentscript checks without the Salesforce-org rules"
REFUSED = (
    "could not start: the files it loads changed on disk since the server started, or no "
    "longer load (its line above says which)"
)


@pytest.fixture(autouse=True)
def no_config_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The toml that applies is the one found from the agent's folder."""
    monkeypatch.delenv(CONFIG_ENV, raising=False)


@pytest.fixture
def quiet_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """worker_app without its process-wide logging set-up and its watch of the supervisor."""
    monkeypatch.setattr(logs, "configure", lambda **_: None)
    monkeypatch.setattr(orphan, "stop_when_orphaned", lambda parent: None)


def orders(tmp_path: Path) -> Path:
    """examples/order_status: flow:// targets that its agentscript.toml maps to
    ``python://orders_backend:...``; the agent file is returned."""
    folder = tmp_path / "agents" / "order_status"
    folder.mkdir(parents=True)
    for name in ("order_status.agent", "agentscript.toml", "orders_backend.py"):
        shutil.copy(EXAMPLE / name, folder / name)
    return folder / "order_status.agent"


def notes(tmp_path: Path) -> Path:
    """tests/serve/agents/notes: ``python://notes_backend:save_note`` written in the agent, no
    agentscript.toml in its folder or above it."""
    folder = tmp_path / "agents" / "notes"
    shutil.copytree(Path(NOTES).parent, folder)
    return folder / Path(NOTES).name


def card_bank(tmp_path: Path) -> Path:
    """examples/card_bank, a Mantle project: its folder is returned."""
    folder = tmp_path / "agents" / "card_bank"
    shutil.copytree(Path(CARD_BANK), folder)
    return folder


def with_package(tmp_path: Path) -> Path:
    """notes, its backend a package folder whose function is in a submodule."""
    agent = notes(tmp_path)
    package = agent.parent / "notes_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "store.py").write_text((agent.parent / "notes_backend.py").read_text())
    text = agent.read_text().replace("python://notes_backend:", "python://notes_pkg.store:")
    agent.write_text(text)
    return agent


def with_missing_module(tmp_path: Path) -> Path:
    """orders, check_if_late mapped to a module of the folder not written yet."""
    agent = orders(tmp_path)
    toml = agent.parent / "agentscript.toml"
    toml.write_text(
        toml.read_text().replace(
            "python://orders_backend:check_if_late", "python://late_orders:check_if_late"
        )
    )
    return agent


def with_sibling(tmp_path: Path) -> Path:
    """orders, its mapped backend importing a module beside it."""
    agent = orders(tmp_path)
    backend = agent.parent / "orders_backend.py"
    backend.write_text("from . import orders_db  # noqa: F401\n" + backend.read_text())
    (agent.parent / "orders_db.py").write_text("def fetch(order_ID):\n    return {}\n")
    return agent


def append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


# Each: the agent a server starts with, and what an operator then does to the files it loads.
EDITS: dict[str, tuple[Callable[[Path], Path], Callable[[Path], None]]] = {
    "the toml's mapping edited": (
        orders,
        lambda agent: (agent.parent / "agentscript.toml").write_text(
            (agent.parent / "agentscript.toml")
            .read_text()
            .replace("orders_backend:get_delivery_date", "orders_backend:get_delivery_date_v2")
        ),
    ),
    "a mapped backend module edited": (
        orders,
        lambda agent: append(agent.parent / "orders_backend.py", "\nVERSION = 2\n"),
    ),
    "a module the mapped backend imports edited": (
        with_sibling,
        lambda agent: append(agent.parent / "orders_db.py", "\nVERSION = 2\n"),
    ),
    "a mapped module that was missing written": (
        with_missing_module,
        lambda agent: (agent.parent / "late_orders.py").write_text(
            "def check_if_late(order_ID, delivery_date):\n    return {'is_late': False}\n"
        ),
    ),
    "a module the agent's python:// target names edited": (
        notes,
        lambda agent: append(agent.parent / "notes_backend.py", "\nVERSION = 2\n"),
    ),
    "a module of the package the target names edited": (
        with_package,
        lambda agent: append(agent.parent / "notes_pkg" / "store.py", "\nVERSION = 2\n"),
    ),
    "a toml added in the agent's folder": (
        notes,
        lambda agent: (agent.parent / "agentscript.toml").write_text(
            "[limits]\naction_timeout = 5.0\n"
        ),
    ),
    "a toml added in a parent folder": (
        notes,
        lambda agent: (agent.parents[1] / "agentscript.toml").write_text(
            "[limits]\naction_timeout = 5.0\n"
        ),
    ),
    "a toml added above a Mantle project": (
        card_bank,
        lambda project: (project.parent / "agentscript.toml").write_text(
            "[limits]\naction_timeout = 5.0\n"
        ),
    ),
}

# Files written beside the agent that it does not load: no change.
UNRELATED: dict[str, Callable[[Path], None]] = {
    "a data file": lambda agent: (agent.parent / "orders.csv").write_text("id,date\n1,Feb 10\n"),
    "a store": lambda agent: (agent.parent / "sessions.db").write_bytes(b"SQLite format 3\0"),
    "a log": lambda agent: (agent.parent / "calls.log").write_text("written by a tool\n"),
    "bytecode of the backend": lambda agent: (
        agent.parent / "__pycache__" / "orders_backend.cpython-311.pyc"
    ).write_bytes(b"\0"),
}


def _options(agent: Path, tmp_path: Path) -> ServeOptions:
    return ServeOptions(
        paths=[str(agent)], model="standin", store=f"sqlite:///{tmp_path / 's.db'}", workers=2
    )


def _started(agent: Path, tmp_path: Path) -> str:
    """The options a worker gets: the digests the server took as it started."""
    app, _lines = build_app(_options(agent, tmp_path))
    options = _options(agent, tmp_path)
    options.sources = app.state.sources
    return json.dumps(asdict(options))


def digest(path: Path) -> str:
    """The digest of the agent as a restarted worker finds it: loaded anew from ``path``."""
    return source_digest(load(path))


@pytest.mark.parametrize("edit", EDITS)
def test_an_edit_of_a_file_the_agent_loads_changes_its_digest(edit: str, tmp_path: Path) -> None:
    make, change = EDITS[edit]
    agent = make(tmp_path)
    before = digest(agent)
    assert digest(agent) == before  # the same files, the same digest
    change(agent)
    assert digest(agent) != before


@pytest.mark.parametrize("edit", EDITS)
def test_a_worker_started_after_the_edit_refuses_the_files(
    edit: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    quiet_worker: None,
) -> None:
    make, change = EDITS[edit]
    agent = make(tmp_path)
    options = _started(agent, tmp_path)
    change(agent)
    logged = worker_refuses_to_start(monkeypatch, caplog, options)
    assert f"a worker could not start: {load(agent).name} {CHANGED}" in logged


@pytest.mark.parametrize("unrelated", UNRELATED)
def test_a_file_beside_the_agent_that_it_does_not_load_is_no_change(
    unrelated: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, quiet_worker: None
) -> None:
    agent = orders(tmp_path)
    (agent.parent / "__pycache__").mkdir()
    before = digest(agent)
    options = _started(agent, tmp_path)
    UNRELATED[unrelated](agent)
    assert digest(agent) == before
    monkeypatch.setitem(os.environ, ENV, options)
    assert worker_app() is not None  # it serves


def test_a_server_whose_mapping_changed_serves_on_when_a_worker_dies(tmp_path: Path) -> None:
    """A real server of two workers: the toml's mapping edited, one worker killed. The worker
    started in its place refuses the files, and the other serves on."""
    agent = orders(tmp_path)
    log = tmp_path / "server.log"
    args = [str(agent), "--model", "standin", "--store", f"sqlite:///{tmp_path / 's.db'}"]
    server = ServerProcess([*args, "--workers", "2"], {}, log)
    try:
        server.wait_ready()
        workers = workers_of(server.proc.pid)
        assert len(workers) == 2
        wait_until_each_answers(server.port, workers)  # else one may load the edited files
        EDITS["the toml's mapping edited"][1](agent)
        subprocess.run(["kill", f"-{signal.SIGKILL.value}", str(workers[0])], check=True)
        deadline = time.monotonic() + 20
        while REFUSED not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert server.proc.poll() is None
        for _ in range(6):  # each connection may go to either place: all go to the live one
            assert httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200
    finally:
        server.stop()
    text = log.read_text()
    assert f"a worker could not start: Order_Status {CHANGED}" in text
    assert REFUSED in text
    assert "Traceback" not in text


def test_an_agentscript_toml_that_does_not_load_gives_no_dialect_hint(tmp_path: Path) -> None:
    agent = orders(tmp_path)
    toml = agent.parent / "agentscript.toml"
    toml.write_text(
        toml.read_text().replace("python://orders_backend:get_delivery_date", "flow://oops")
    )
    with pytest.raises(AgentLoadError) as refused:
        load_agents([str(agent)])
    assert "error[config-error]" in str(refused.value)
    assert HINT not in str(refused.value)  # another dialect reads the same toml


def test_an_error_of_the_salesforce_org_rules_keeps_the_dialect_hint(tmp_path: Path) -> None:
    agent = notes(tmp_path)
    agent.write_text(agent.read_text().replace("    customer: mutable", "    _customer: mutable"))
    with pytest.raises(AgentLoadError) as refused:
        load_agents([str(agent)])
    assert "error[invalid-variable-name]" in str(refused.value)
    assert str(refused.value).endswith(HINT)
    load_agents([str(agent)], "agentscript")  # as the hint says
