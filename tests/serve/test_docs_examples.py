"""The examples of docs/serve.md run as printed against a real ``agentscript serve`` (the
order_status example, the stand-in model, API keys from a key file), so the document cannot
drift from the server: every ```python block runs in one namespace and every ``curl`` or
``SID=$(`` command of a ```sh block through bash, in document order. A block or command that
cannot run here is named in ``SKIPPED_BLOCKS`` or ``SKIPPED_COMMANDS`` with the reason: a new
example is run or skipped consciously (the test fails otherwise), and a skip that no longer
matches anything fails too. The embedding example ("From Python") runs in-process, mounted,
with only its agents path and store changed."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from shlex import quote
from typing import Any

import httpx2 as httpx
import pytest

from agentscript.server.standin import StandInServer

from .process import ServerProcess

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "serve.md"
AGENTS = ROOT / "examples" / "order_status"
KEY = "docs-examples-key-5f1c9a27e4b8"
DOC_URL = "http://127.0.0.1:8000"
DOC_AUTH = "Bearer KEY"

# Blocks that do not run here, matched on their first line, each with why.
SKIPPED_BLOCKS: dict[str, str] = {
    "pip install 'agentscript[serve]'": "installs the package",
    "agentscript serve PATH... [--host": "the synopsis, not a command",
    "createdb agentscript": "a PostgreSQL deployment on real hosts (db.internal, /etc, 4 workers)",
    "def charge(order_id": "a python:// action's body; its payment client does not exist here",
}
# Commands of a ```sh block that runs otherwise, matched on their first line: only `curl` and
# `SID=$(` commands run, any other needs its reason here.
SKIPPED_COMMANDS: dict[str, str] = {
    "agentscript serve ... --access-log": "starts another server (the test's server stands in)",
    "grep 9b1d0c4e5f6a47b8a1c2d3e4f5a6b7c8 server.log": "reads that other server's log",
}
# Languages that show output rather than an example to run.
SHOWN = {"text", "json"}
# The embedding example is run by its own test, in-process.
EMBEDDING = 'app.mount("/agents", agent_app)'
# What the embedding example may be changed in, and nothing else: (doc's text, its stand-in).
# Its model spec stays: `standin` is a `serve --model` value that `choose_model` refuses ("not
# a model spec"), so `openai-lean:gpt-4o-mini` talks to the stand-in model over loopback
# (OPENAI_BASE_URL, as docs/serve.md says), the line run exactly as printed.
EMBEDDING_SUBSTITUTIONS = (
    ('load_agents(["agents/"])', "load_agents([{agents!r}])"),
    (
        'store_from_url("postgresql://agentscript@db.internal/agentscript")',
        "store_from_url({store!r})",
    ),
)


@dataclass(frozen=True)
class Block:
    line: int  # of the opening fence, 1-based
    language: str
    code: str

    @property
    def first_line(self) -> str:
        return self.code.splitlines()[0] if self.code else ""


def doc_blocks() -> list[Block]:
    """The fenced blocks of docs/serve.md in order (a fence indented in a list item too)."""
    text = DOC.read_text()
    fences = re.finditer(r"^( *)```(\w*)\n(.*?)^\1```", text, re.S | re.M)
    return [
        Block(
            text.count("\n", 0, found.start()) + 1,
            found[2],
            "".join(line[len(found[1]) :] for line in found[3].splitlines(keepends=True)),
        )
        for found in fences
    ]


def shell_commands(code: str) -> list[str]:
    """The commands of a ```sh block, a line continued by ``\\`` or a trailing ``|`` joined
    with the next (comment lines and blank lines left out)."""
    commands: list[str] = []
    pending = ""
    for line in code.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line + "\n"
        if not line.rstrip().endswith(("\\", "|")):
            commands.append(pending.rstrip("\n"))
            pending = ""
    assert not pending, f"a command of docs/serve.md does not end: {pending!r}"
    return commands


def skip_reason(skipped: dict[str, str], first_line: str) -> str | None:
    return next((why for match, why in skipped.items() if match in first_line), None)


@dataclass(frozen=True)
class Example:
    where: str  # docs/serve.md:LINE of the block's fence
    kind: str  # python, sh (one command) or embedding
    code: str
    skipped: str | None  # why it does not run here

    @property
    def first_line(self) -> str:
        return self.code.splitlines()[0]

    @property
    def runs(self) -> bool:
        return self.skipped is None and (
            self.kind != "sh" or self.code.startswith(("curl ", "SID=$("))
        )


def examples() -> list[Example]:
    """The doc's examples in order: each python block, each command of a sh block."""
    found: list[Example] = []
    for block in doc_blocks():
        where, why = f"docs/serve.md:{block.line}", skip_reason(SKIPPED_BLOCKS, block.first_line)
        assert block.language in {"python", "sh", *SHOWN}, (
            f"{where}: a ```{block.language} block: label it sh, python, text or json, so "
            "this test knows whether to run it"
        )
        if block.language == "python":
            kind = "embedding" if EMBEDDING in block.code else "python"
            found.append(Example(where, kind, block.code, why))
        elif block.language == "sh" and why is not None:
            found.append(Example(where, "sh", block.code, why))
        elif block.language == "sh":
            found += [
                Example(
                    where, "sh", command, skip_reason(SKIPPED_COMMANDS, command.splitlines()[0])
                )
                for command in shell_commands(block.code)
            ]
    return found


def test_every_example_is_run_or_skipped_by_name() -> None:
    found = examples()
    unaccounted = [f"{e.where}: {e.first_line}" for e in found if not e.runs and not e.skipped]
    assert not unaccounted, "commands neither run nor in SKIPPED_COMMANDS:\n" + "\n".join(
        unaccounted
    )
    blocks = [block.first_line for block in doc_blocks()]
    commands = [  # the commands of the sh blocks that run
        e.first_line
        for e in found
        if e.kind == "sh" and skip_reason(SKIPPED_BLOCKS, e.first_line) is None
    ]
    stale = [match for match in SKIPPED_BLOCKS if not any(match in line for line in blocks)]
    stale += [match for match in SKIPPED_COMMANDS if not any(match in line for line in commands)]
    assert not stale, f"skips that match no example of docs/serve.md (stale): {stale}"
    assert [e.kind for e in found].count("embedding") == 1


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("docs_examples")
    keys = folder / "keys"
    keys.write_text(f"# the docs examples' key\n{KEY}\n")
    args = [str(AGENTS), "--model", "standin", "--store", f"sqlite:///{folder}/sessions.db"]
    process = ServerProcess(args, {"AGENTSCRIPT_API_KEYS": str(keys)}, folder / "server.log")
    try:
        process.wait_ready()
        yield process
    finally:
        process.stop()


# Every curl of a command reports its status on stderr, its output left as the doc's pipes
# read it (the doc's commands use no -w of their own, which would override this one).
CURL_STATUS = "curl() { command curl -w '%{stderr}HTTP_STATUS %{http_code}\\n' \"$@\"; }\n"


def run_shell(command: str, env: dict[str, str], sid_file: Path) -> None:
    """Runs one command of the doc through bash: it must exit 0 and every curl in it get an
    answer below 400 (none of the doc's commands expects an error)."""
    keep_sid = f'printf %s "$SID" > {quote(str(sid_file))}'
    script = f"set -o pipefail\n{CURL_STATUS}{command}\n{keep_sid}\n"
    done = subprocess.run(
        ["bash", "-c", script],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    shown = f"{command}\nexit {done.returncode}\nstdout: {done.stdout}\nstderr: {done.stderr}"
    assert done.returncode == 0, shown
    statuses = [int(code) for code in re.findall(r"^HTTP_STATUS (\d+)$", done.stderr, re.M)]
    assert statuses and all(200 <= status < 400 for status in statuses), shown


def python_code(code: str, url: str) -> str:
    return code.replace(DOC_URL, url).replace(DOC_AUTH, f"Bearer {KEY}")


def test_the_docs_examples_run_against_a_real_server(server: ServerProcess, tmp_path: Path) -> None:
    python = [e.code for e in examples() if e.kind == "python" and e.runs]
    assert DOC_URL in python[0] and DOC_AUTH in python[0], "the doc's client moved: replace anew"
    namespace: dict[str, Any] = {"__name__": "docs_serve_examples"}
    env = {"URL": server.url, "AUTH": f"Authorization: Bearer {KEY}", "SID": ""}
    sid_file = tmp_path / "sid"
    try:
        for example in examples():
            if not example.runs or example.kind == "embedding":
                continue
            if example.kind == "python":
                code = python_code(example.code, server.url)
                exec(compile(code, example.where, "exec"), namespace)
                continue
            assert env["SID"] or "$SID" not in example.code, f"no $SID yet: {example.code}"
            run_shell(example.code, env, sid_file)
            if example.code.startswith("SID=$("):
                env["SID"] = sid_file.read_text()
                assert re.fullmatch(r"[\w-]+", env["SID"]), env["SID"]
    finally:
        if "api" in namespace:
            namespace["api"].close()
    assert env["SID"]
    # What the python examples computed, where the stand-in model makes it certain.
    assert "Order_Status" in namespace["names"]
    assert namespace["turn"]["turn"] == 1
    assert namespace["ready"] is True
    assert "/v1/sessions/{session_id}/messages" in namespace["paths"]


def embedding_code(store: str) -> str:
    """The doc's embedding example with only its agents path and store replaced; a difference
    says which of them the doc no longer spells as expected."""
    (example,) = [e for e in examples() if e.kind == "embedding"]
    code = example.code
    for doc_text, ours in EMBEDDING_SUBSTITUTIONS:
        assert code.count(doc_text) == 1, (
            f"{example.where}: the embedding example no longer has {doc_text!r} "
            "exactly once, which this test replaces to run it here"
        )
        code = code.replace(doc_text, ours.format(agents=str(AGENTS), store=store))
    return code


def test_the_embedding_example_runs_mounted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    keys = tmp_path / "keys"
    keys.write_text(f"{KEY}\n")
    monkeypatch.setenv("AGENTSCRIPT_API_KEYS", str(keys))  # the example's ApiKeys.from_env()
    model = StandInServer().start()
    request.addfinalizer(model.stop)
    monkeypatch.setenv("OPENAI_BASE_URL", model.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "not-needed-by-the-stand-in")
    namespace: dict[str, Any] = {"__name__": "docs_serve_embedding"}
    code = embedding_code(f"sqlite:///{tmp_path}/sessions.db")
    exec(compile(code, "docs/serve.md, the embedding example", "exec"), namespace)
    app = namespace["app"]

    async def drive() -> None:
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app),
                base_url="http://app",
                headers={"Authorization": f"Bearer {KEY}"},
            ) as client,
        ):
            created = await client.post(
                "/agents/v1/agents/Order_Status/sessions",
                json={"variables": {"order_ID": "1234"}},
            )
            assert created.status_code == 201, created.text
            sid = created.json()["session_id"]
            sent = await client.post(
                f"/agents/v1/sessions/{sid}/messages", json={"text": "Where is my order?"}
            )
            assert sent.status_code == 200, sent.text
            assert sent.json()["trace_url"].startswith("/agents/"), sent.json()["trace_url"]
            assert sent.json()["response"].startswith("You said: "), sent.json()  # no real model

    asyncio.run(drive())
