"""Issue 9, finding 1: actions are isolated from the host and from each other.

Each test pins one rule: per-agent module namespaces, nothing on ``sys.path``, ``SystemExit``
and ``KeyboardInterrupt`` contained, printed output captured into the trace, the thread pool
reused (never a thread per call), and the process mode stopping a timed-out action for real.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from tests.fakes.agent_texts import act_action, agent_text

import agentscript
from agentscript.actions.settings import ActionSettings, Isolation
from agentscript.cli import main
from agentscript.diagnostics import AgentScriptError
from agentscript.engine.session import Reply
from agentscript.models.scripted import Move, ScriptedModel

CONVERSATION = """\
turns:
  - user: "go"
    model:
      - tool: act
      - say: "Done."
"""


def agent_in(folder: Path, target: str, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    path = folder / "a.agent"
    path.write_text(agent_text(actions=[act_action(f"python://{target}")]), encoding="utf-8")
    return path


def one_call(path: Path, settings: ActionSettings | None = None, timeout: float = 10.0) -> Reply:
    agent = agentscript.load(path)
    if settings is not None:
        agent.action_settings = settings
    session = agent.session(
        model=ScriptedModel([Move(calls=[("act", {})]), Move(text="Done.")]),
        limits=agentscript.Limits(action_timeout=timeout),
    )
    return session.send("go")


def action_step(reply: Reply) -> dict[str, Any]:
    steps: list[dict[str, Any]] = reply.trace["planTrace"]["steps"]
    return next(s for s in steps if s["type"] == "ACTION_STEP")


def test_two_agents_with_the_same_module_name_each_run_their_own(tmp_path: Path) -> None:
    first = agent_in(tmp_path / "one", "helpers:who", {"helpers.py": HELPER.format("one")})
    second = agent_in(tmp_path / "two", "helpers:who", {"helpers.py": HELPER.format("two")})
    assert action_step(one_call(first))["output"] == {"who": "one"}
    assert action_step(one_call(second))["output"] == {"who": "two"}
    assert action_step(one_call(first))["output"] == {"who": "one"}


HELPER = 'def who():\n    return {{"who": "{}"}}\n'


def test_an_agent_folder_never_goes_on_sys_path_nor_shadows_host_modules(tmp_path: Path) -> None:
    shadow = "def who():\n    return {'who': 'agent smtplib'}\n"
    path = agent_in(tmp_path / "shadow", "smtplib:who", {"smtplib.py": shadow})
    reply = one_call(path)
    assert action_step(reply)["output"] == {"who": "agent smtplib"}  # the agent's own module
    assert str(path.parent) not in sys.path
    assert str(path.parent.resolve()) not in sys.path
    import smtplib

    assert hasattr(smtplib, "SMTP")  # the host's module, not the agent's


def test_an_agent_module_imports_its_siblings_relatively(tmp_path: Path) -> None:
    files = {
        "helpers.py": "from . import names\n\ndef who():\n    return {'who': names.NAME}\n",
        "names.py": "NAME = 'sibling'\n",
    }
    path = agent_in(tmp_path / "rel", "helpers:who", files)
    assert action_step(one_call(path))["output"] == {"who": "sibling"}


@pytest.mark.parametrize("mode", [Isolation.THREAD, Isolation.INLINE, Isolation.PROCESS])
def test_sys_exit_in_an_action_is_an_action_error_not_the_end_of_the_host(
    tmp_path: Path, mode: Isolation
) -> None:
    code = "import sys\n\ndef who():\n    sys.exit(7)\n"
    path = agent_in(tmp_path / "exit", "quitter:who", {"quitter.py": code})
    agent = agentscript.load(path)
    agent.action_settings = ActionSettings(isolation=mode)
    session = agent.session(model=ScriptedModel([Move(calls=[("act", {})]), Move(text="Done.")]))
    reply = session.send("go")
    assert action_step(reply)["error"] == "action 'act' failed: SystemExit: 7"
    assert reply.error is None and reply.text == "Done."
    # The model's tool call got its result: the history has no dangling call.
    assert [m.role for m in session.state.history] == ["user", "assistant", "tool", "assistant"]


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_keyboard_interrupt_raised_by_an_action_is_an_action_error(
    tmp_path: Path, kind: str
) -> None:
    prefix = "async " if kind == "async" else ""
    code = f"{prefix}def who():\n    raise KeyboardInterrupt('stop')\n"
    path = agent_in(tmp_path / kind, "ki:who", {"ki.py": code})
    reply = one_call(path)
    assert action_step(reply)["error"] == "action 'act' failed: KeyboardInterrupt: stop"
    assert reply.text == "Done."


@pytest.mark.parametrize("mode", [Isolation.THREAD, Isolation.INLINE, Isolation.PROCESS])
def test_what_an_action_prints_goes_to_the_trace_not_to_stdout(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], mode: Isolation
) -> None:
    code = (
        "import sys\n\ndef who():\n    print('hello from the action')\n"
        "    print('warned', file=sys.stderr)\n    return {'who': 'x'}\n"
    )
    path = agent_in(tmp_path / "talk", "talker:who", {"talker.py": code})
    reply = one_call(path, ActionSettings(isolation=mode))
    step = action_step(reply)
    assert step["printed"] == {"stdout": "hello from the action\n", "stderr": "warned\n"}
    out, err = capfd.readouterr()
    assert "hello from the action" not in out and "warned" not in err
    assert sys.stdout is not None and type(sys.stdout).__name__ != "_Proxy"


def test_an_async_action_print_is_captured_too(tmp_path: Path) -> None:
    code = "async def who():\n    print('async hello')\n    return {'who': 'a'}\n"
    path = agent_in(tmp_path / "atalk", "atalker:who", {"atalker.py": code})
    assert action_step(one_call(path))["printed"] == {"stdout": "async hello\n"}


def test_run_json_stays_json_when_an_action_prints_or_exits(tmp_path: Path) -> None:
    code = "import sys\n\ndef who():\n    print('noise')\n    sys.exit(7)\n"
    path = agent_in(tmp_path / "cli", "noisy:who", {"noisy.py": code})
    conversation = tmp_path / "cli" / "c.yaml"
    conversation.write_text(CONVERSATION, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-c", "from agentscript.cli import main; main()", "run", str(path),
         "--conversation", str(conversation), "--json"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode != 7
    data = json.loads(done.stdout)  # the whole stdout is one JSON document
    assert data["turns"][0]["response"] == "Done."


def test_sync_actions_reuse_pool_threads_instead_of_one_thread_per_call(tmp_path: Path) -> None:
    seen: list[threading.Thread] = []  # kept alive, so no object is reused between calls

    def act() -> dict[str, str]:
        seen.append(threading.current_thread())
        return {"who": "t"}

    agent = agentscript.load(agent_in(tmp_path / "pool", "unused:who", {}))
    for _ in range(12):
        session = agent.session(
            model=ScriptedModel([Move(calls=[("act", {})]), Move(text="ok")]), actions={"act": act}
        )
        assert session.send("go").error is None
    assert len(seen) == 12
    assert len(set(seen)) <= 2
    assert all(t is not threading.main_thread() for t in seen)


def test_inline_mode_runs_sync_actions_on_the_loop_thread(tmp_path: Path) -> None:
    seen: list[threading.Thread] = []

    def act() -> dict[str, str]:
        seen.append(threading.current_thread())
        return {"who": "t"}

    agent = agentscript.load(agent_in(tmp_path / "inline", "unused:who", {}))
    agent.action_settings = ActionSettings(isolation=Isolation.INLINE)
    session = agent.session(
        model=ScriptedModel([Move(calls=[("act", {})]), Move(text="ok")]), actions={"act": act}
    )
    assert session.send("go").error is None
    assert seen == [threading.current_thread()]


def test_async_actions_run_on_the_loop_under_their_timeout(tmp_path: Path) -> None:
    seen: list[threading.Thread] = []

    async def act() -> dict[str, str]:
        import asyncio

        seen.append(threading.current_thread())
        await asyncio.sleep(30)
        return {"who": "late"}

    agent = agentscript.load(agent_in(tmp_path / "async", "unused:who", {}))
    session = agent.session(
        model=ScriptedModel([Move(calls=[("act", {})]), Move(text="ok")]),
        actions={"act": act},
        limits=agentscript.Limits(action_timeout=0.05),
    )
    reply = session.send("go")
    assert action_step(reply)["error"] == "action 'act' timed out after 0.05 s"
    assert seen == [threading.current_thread()]


def test_agentscript_toml_selects_the_isolation_per_action(tmp_path: Path) -> None:
    code = "import os\n\ndef who():\n    return {'who': str(os.getpid())}\n"
    path = agent_in(tmp_path / "cfg", "pid:who", {"pid.py": code})
    (path.parent / "agentscript.toml").write_text(
        '[actions]\nisolation = "thread"\n\n[actions.isolation_by_action]\nact = "process"\n',
        encoding="utf-8",
    )
    agent = agentscript.load(path)
    assert agent.action_settings.mode("act") is Isolation.PROCESS
    reply = one_call(path)
    assert action_step(reply)["output"]["who"] != str(os.getpid())


def test_process_mode_stops_a_timed_out_action_for_real(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid.txt"
    code = (
        "import os\n\ndef who():\n"
        f"    open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "    while True:\n        pass\n"
    )
    path = agent_in(tmp_path / "busy", "busy:who", {"busy.py": code})
    settings = ActionSettings(isolation=Isolation.PROCESS)
    # Warm a worker first (a cold one takes a moment to start), so the timeout below is spent
    # in the busy loop.
    warm = agent_in(tmp_path / "warm", "warm:who", {"warm.py": HELPER.format("warm")})
    assert action_step(one_call(warm, settings))["output"] == {"who": "warm"}
    agent = agentscript.load(path)
    agent.action_settings = settings
    session = agent.session(
        model=ScriptedModel([Move(calls=[("act", {})]), Move(text="Done.")]),
        limits=agentscript.Limits(action_timeout=3.0),
    )
    reply = session.send("go")
    assert action_step(reply)["error"] == "action 'act' timed out after 3 s"
    pid = int(pid_file.read_text())
    assert pid != os.getpid()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.05)
    assert not _alive(pid), "the worker that ran the timed-out action is still running"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def test_a_call_that_timed_out_waiting_for_a_busy_pool_never_starts_late(tmp_path: Path) -> None:
    release = threading.Event()
    phase = ["hang"]  # set before each turn; a call records the phase it starts in
    started: list[str] = []

    def act() -> dict[str, str]:
        started.append(phase[0])
        if phase[0] == "hang":
            release.wait(timeout=60)
        return {"who": phase[0]}

    agent = agentscript.load(agent_in(tmp_path / "busy_pool", "unused:who", {}))
    # A pool of one thread (its own size, so no other test shares it).
    agent.action_settings = ActionSettings(workers=1)
    model = ScriptedModel()
    session = agent.session(
        model=model, actions={"act": act}, limits=agentscript.Limits(action_timeout=0.2)
    )
    try:
        for name in ("hang", "queued"):
            phase[0] = name
            model.begin_turn([Move(calls=[("act", {})]), Move(text="ok")])
            reply = session.send(name)
            assert action_step(reply)["error"] == "action 'act' timed out after 0.2 s"
    finally:
        release.set()
    phase[0] = "after"
    session.runner.timeout = 30
    model.begin_turn([Move(calls=[("act", {})]), Move(text="ok")])
    assert action_step(session.send("after"))["output"] == {"who": "after"}
    # FIFO: "queued" was taken off the queue before "after" ran, and skipped, never started.
    assert started == ["hang", "after"]


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('isolation = "fork"', "isolation 'fork' is not one of 'thread', 'inline', 'process'"),
        ("workers = 0", "workers must be a positive integer"),
        ("timeout = 3", "unknown key(s) ['timeout'] in [actions]"),
    ],
)
def test_a_malformed_actions_table_is_an_error_naming_the_file_and_the_key(
    tmp_path: Path, table: str, message: str
) -> None:
    """At load (so `validate` reports it and `serve` refuses to start), not at the first
    session: a server then answered every new session `422 invalid_variable`."""
    path = agent_in(tmp_path / "bad_cfg", "unused:who", {})
    config = path.parent / "agentscript.toml"
    config.write_text(f"[actions]\n{table}\n", encoding="utf-8")
    with pytest.raises(AgentScriptError) as caught:
        agentscript.load(path)
    [diag] = caught.value.diagnostics
    assert diag.code == "config-error" and diag.file == str(config)
    assert message in diag.message
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 1 and message in result.output


def test_the_actions_table_is_read_at_load_and_kept(tmp_path: Path) -> None:
    """A file edited after the agent loaded (a server running) changes nothing: the settings
    were read and checked at load; sessions used to read them at the first one, and failed."""
    path = agent_in(tmp_path / "kept_cfg", "unused:who", {})
    config = path.parent / "agentscript.toml"
    config.write_text('[actions]\nisolation = "inline"\n', encoding="utf-8")
    agent = agentscript.load(path)
    config.write_text('[actions]\nisolation = "fork"\n', encoding="utf-8")
    agent.session(model=ScriptedModel())  # no error: the table as it was at load
    assert agent.action_settings.isolation == Isolation.INLINE


def test_process_mode_never_starts_a_call_whose_caller_gave_up_waiting_for_a_worker(
    tmp_path: Path,
) -> None:
    import asyncio

    from agentscript.actions.process import shared_processes

    marker = tmp_path / "late.txt"
    busy = agent_in(
        tmp_path / "p_busy", "spin:who", {"spin.py": "def who():\n    while True:\n        pass\n"}
    )
    late = agent_in(
        tmp_path / "p_late",
        "late:who",
        {"late.py": f"def who():\n    open({str(marker)!r}, 'w').write('ran')\n    return {{'who': 'late'}}\n"},
    )  # fmt: skip
    settings = ActionSettings(isolation=Isolation.PROCESS, workers=1)  # its own one-worker pool
    # Warm the single worker, so the busy call below starts at once.
    warm = agent_in(tmp_path / "p_warm", "warm:who", {"warm.py": HELPER.format("warm")})
    assert action_step(one_call(warm, settings))["output"] == {"who": "warm"}

    def session_for(path: Path, timeout: float) -> Any:
        agent = agentscript.load(path)
        agent.action_settings = settings
        return agent.session(
            model=ScriptedModel([Move(calls=[("act", {})]), Move(text="Done.")]),
            limits=agentscript.Limits(action_timeout=timeout),
        )

    async def both() -> list[Reply]:
        first = asyncio.ensure_future(session_for(busy, 3.0).send_async("go"))
        await asyncio.sleep(0.5)  # the busy call holds the only worker
        second = await session_for(late, 0.5).send_async("go")
        return [await first, second]

    replies = asyncio.run(both())
    assert action_step(replies[0])["error"] == "action 'act' timed out after 3 s"
    assert action_step(replies[1])["error"] == "action 'act' timed out after 0.5 s"
    pool = shared_processes(1)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not pool._idle:  # the waiting job got a worker, or not
        time.sleep(0.05)
    assert pool._idle, "the pool's worker was never given back"
    assert not marker.exists(), "a call whose caller had timed out ran later"
