"""With ``--workers N``, a worker whose start hangs (an import that blocks, a store that never
answers) is killed once it has not started within the supervisor's ``start_timeout`` (here
``--worker-start-timeout``, here 3 s) and another is started: the server
does not run a worker short without a word (test_pings.py pins the bound and the count of
failed starts that stops the server)."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import httpx2 as httpx

from .process import ServerProcess
from .test_worker_restart import workers_of

CARD_BANK = Path(__file__).parents[2] / "examples" / "card_bank"
# --worker-start-timeout: long enough for a worker's start on a busy machine, short for a test.
START = 8.0

# Imported by every worker as it loads the agent, and by the command before any worker starts:
# it blocks only while the test's file exists, so the server and its first workers start.
HANG_ON_IMPORT = """
import os as _os
import time as _time

while _os.path.exists(_os.environ["START_HANG_FILE"]):
    _time.sleep(0.05)
open(_os.environ["START_HANG_FILE"] + "." + str(_os.getpid()), "w").close()  # imported
"""


def _wait_for(pattern: str, log: Path, seconds: float) -> re.Match[str] | None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = re.search(pattern, log.read_text())
        if found:
            return found
        time.sleep(0.1)
    return None


def test_a_worker_whose_start_hangs_is_killed_and_replaced(tmp_path: Path) -> None:
    project = tmp_path / "card_bank"
    shutil.copytree(CARD_BANK, project)
    tools = project / "skills" / "check_balance" / "tools.py"
    head, marker, rest = tools.read_text().partition("from __future__ import annotations\n")
    tools.write_text(head + marker + HANG_ON_IMPORT + rest)
    hang = tmp_path / "hang"
    log = tmp_path / "server.log"
    args = [str(project), "--model", "standin", "--store", f"sqlite:///{tmp_path / 's.db'}"]
    args += ["--workers", "2", "--worker-timeout", "1", "--worker-start-timeout", str(START)]
    server = ServerProcess(args, {"START_HANG_FILE": str(hang)}, log)
    try:
        server.wait_ready()
        first = workers_of(server.proc.pid)
        # Both have imported the agent's tools (one being ready is not both): only the
        # replacement started below meets the hang.
        deadline = time.monotonic() + 30
        while not all(Path(f"{hang}.{pid}").exists() for pid in first):
            assert time.monotonic() < deadline, "the first workers never imported the tools"
            time.sleep(0.05)
        hang.touch()
        subprocess.run(["kill", f"-{signal.SIGKILL.value}", str(first[0])], check=True)
        # Its replacement hangs in the import: killed, with one line, and another started.
        killed = _wait_for(
            rf"worker process \[(\d+)\] did not start within {START:g} s: killed; "
            "starting another",
            log,
            START + 30,
        )
        assert killed, log.read_text()
        hung = int(killed[1])
        assert hung not in first
        hang.unlink()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            now = workers_of(server.proc.pid)
            if len(now) == 2 and hung not in now and first[0] not in now:
                break
            time.sleep(0.1)
        assert len(now) == 2 and hung not in now and first[1] in now
        server.wait_ready()
        for _ in range(6):  # each connection may go to either worker: both serve
            assert httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200
        assert server.proc.poll() is None  # one hung start is no reason to stop the server
    finally:
        server.stop()
    text = log.read_text()
    assert f"worker process [{hung}] died" not in text  # one line for it, said above
    assert "Traceback" not in text
