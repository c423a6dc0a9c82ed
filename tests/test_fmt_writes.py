"""``agentscript fmt`` writes a file through a temporary file and a rename: a write that fails
leaves the original whole, says so in one line, and leaves no temporary file; a symlink keeps
pointing at its file, and the file keeps its permission bits."""

from __future__ import annotations

import os
import resource
import stat
import subprocess
import sys
from pathlib import Path

UNFORMATTED = """\
system:
  instructions:   "Be brief."
  messages:
    welcome: "Hi."
    error:   "Sorry."
config:
  developer_name: "Shop"
start_agent main:
  description: "main"
  reasoning:
    instructions: ->
      | Help the customer.
"""


def _fmt(*paths: Path, file_limit: int | None = None) -> subprocess.CompletedProcess[str]:
    def limit() -> None:
        if file_limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, file_limit))

    return subprocess.run(
        [sys.executable, "-m", "agentscript.cli", "fmt", *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=limit,
    )


def test_a_write_that_fails_leaves_the_file_whole_and_says_so(tmp_path: Path) -> None:
    agent = tmp_path / "shop.agent"
    agent.write_text(UNFORMATTED + "# padding\n" * 40)
    before = agent.read_bytes()
    assert len(before) > 256
    run = _fmt(agent, file_limit=256)  # past 256 bytes, every write fails (EFBIG)
    assert run.returncode == 1
    assert "not written (File too large); it is unchanged" in run.stderr
    assert "Traceback" not in run.stderr
    assert agent.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shop.agent"]  # no temporary file


def test_a_symlinked_file_is_formatted_through_its_link_keeping_its_mode(tmp_path: Path) -> None:
    real = tmp_path / "real.agent"
    real.write_text(UNFORMATTED)
    real.chmod(0o640)
    link = tmp_path / "link.agent"
    link.symlink_to(real)
    run = _fmt(link)
    assert run.returncode == 0, run.stderr
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() != UNFORMATTED and 'instructions: "Be brief."' in real.read_text()
    assert stat.S_IMODE(real.stat().st_mode) == 0o640
