"""schemathesis against a real server's /openapi.json: >= 500 generated requests, no 5xx,
no traceback (counted by the server's own /metrics)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import httpx2 as httpx

from .harness import NOTES
from .process import serving

SCHEMATHESIS = str(Path(sys.executable).parent / "schemathesis")


def test_schemathesis_fuzzing_finds_no_server_error(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/sessions.db"
    log = tmp_path / "server.log"
    args = [NOTES, "--model", "standin", "--store", store, "--rate-limit", "0"]
    with serving(args, {}, log) as server:
        run = subprocess.run(
            [
                SCHEMATHESIS,
                "run",
                f"{server.url}/openapi.json",
                "--checks",
                "not_a_server_error",
                "--max-examples",
                "60",
                "--seed",
                "11",
                # One worker: CPython 3.11.7's ast.parse is not thread-safe ("AST constructor
                # recursion depth mismatch"), and hypothesis parses filter lambdas with it while
                # schemathesis' coverage phase builds strategies on two threads.
                "--workers",
                "1",
                "--phases",
                "examples,coverage,fuzzing",
                "--no-color",
                "--request-timeout",
                "30",
                "--suppress-health-check",
                "all",
            ],
            capture_output=True,
            text=True,
            timeout=500,
            cwd=tmp_path,
        )
        metrics = httpx.get(f"{server.url}/metrics").text
    counts: Counter[int] = Counter()
    for status, n in re.findall(
        r'agentscript_http_requests_total\{method="[A-Z]+",status="(\d+)"\} (\d+)', metrics
    ):
        counts[int(status)] += int(n)
    assert sum(counts.values()) >= 500, (counts, run.stdout[-3000:])
    assert not [s for s in counts if s >= 500], counts
    assert run.returncode == 0, run.stdout[-3000:]
    assert "Traceback" not in log.read_text()
