"""The ``agentscript`` command: validate, fmt and run, as a user sees them.

Commands run in-process through click's runner (fast); one test runs the installed entry
point in a subprocess. No output may ever contain a Python traceback.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from agentscript.cli import main

REPO = Path(__file__).resolve().parents[1]
ORDER_AGENT = REPO / "examples" / "order_status" / "order_status.agent"
ORDER_CONVERSATION = REPO / "examples" / "order_status" / "late_order.yaml"

# A small agent in the open dialect: a linked variable, an LLM-called action with a callback,
# and an end_session tool.
MINI_AGENT = """\
# @dialect: agentscript
system:
    instructions: "Be brief."
    messages:
        welcome: "Welcome!"
        error: "Something broke."

variables:
    customer: linked string
        description: "Customer id"
    count: mutable number = 0
    status: mutable string

start_agent main:
    description: "Main"
    reasoning:
        instructions: ->
            set @variables.count = @variables.count + 1
            | Help the customer {!@variables.customer}.
        actions:
            lookup: @actions.lookup_order
                with order_number=...
                set @variables.status = @outputs.status
            bye: @utils.end_session
                description: "End"
    actions:
        lookup_order:
            description: "Look up an order"
            target: "flow://Lookup"
            inputs:
                order_number: string
            outputs:
                status: string
"""

MINI_CONVERSATION = """\
variables: {customer: "C-1"}
actions:
  lookup_order: {outputs: {status: shipped}}
turns:
  - user: "where is 42?"
    model:
      - tool: lookup
        args: {order_number: "42"}
      - say: "It shipped."
  - user: "thanks, bye"
    model:
      - tool: bye
"""

# Missing ':' after a field key: exactly one error, a parser error on line 15, column 17.
BROKEN_AGENT = MINI_AGENT.replace('    description: "Main"', '    description "Main"')
BROKEN_LINE = 15
DIAGNOSTIC_LINE = re.compile(r"^(?P<file>.+):(\d+):(\d+): (error|warning|info)\[[a-z0-9-]+\]: .+$")
JSON_FIELDS = ["file", "line", "column", "end_line", "end_column", "severity", "code", "message"]
TURN_FIELDS = {
    "user",
    "response",
    "node",
    "actions",
    "variables",
    "trace_file",
    "unused_moves",
    "escalated",
    "ended",
    "error",
}
# Additive fields (DESIGN.md: stable interfaces change only additively).
TURN_EXTRA_FIELDS = {
    "path",
    "displayable",
    "failed_expectations",
    "refused",
    "delegated",
    "usage",
}


def invoke(*args: str | Path) -> Result:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert "Traceback" not in result.output
    assert "Traceback" not in result.stderr
    # Only a deliberate exit, never an escaped exception.
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def write(path: Path, text: str | bytes) -> Path:
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def mini(tmp_path: Path) -> tuple[Path, Path]:
    return (
        write(tmp_path / "mini.agent", MINI_AGENT),
        write(tmp_path / "mini.yaml", MINI_CONVERSATION),
    )


def run_json(agent: Path, conversation: Path, *extra: str | Path) -> tuple[int, dict[str, Any]]:
    result = invoke("run", agent, "--conversation", conversation, "--json", *extra)
    data: dict[str, Any] = json.loads(result.stdout)
    return result.exit_code, data


# ====================================================================== validate


def test_validate_clean_file_exits_zero(mini: tuple[Path, Path]) -> None:
    result = invoke("validate", "--no-lints", mini[0])
    assert result.exit_code == 0
    assert result.stdout == ""
    assert "1 file(s) checked: 0 error(s), 0 warning(s)" in result.stderr


def test_validate_text_format_with_caret(tmp_path: Path) -> None:
    path = write(tmp_path / "broken.agent", BROKEN_AGENT)
    result = invoke("validate", path)
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    heads = [i for i, line in enumerate(lines) if DIAGNOSTIC_LINE.match(line)]
    assert heads, result.stdout
    first = lines[heads[0]]
    assert first.startswith(f"{path}:{BROKEN_LINE}:17: error[missing-colon]")
    assert "error[" in first
    # The source line, then a caret under the reported column.
    assert len(heads) == 1
    assert lines[heads[0] + 1] == "    " + BROKEN_AGENT.splitlines()[BROKEN_LINE - 1]
    caret = lines[heads[0] + 2]
    assert caret == " " * (4 + 16) + "^" * len('"Main"')
    assert "error(s)" in result.stderr


def test_validate_json_fields(tmp_path: Path) -> None:
    path = write(tmp_path / "broken.agent", BROKEN_AGENT)
    result = invoke("validate", "--format", "json", path)
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert isinstance(data, list) and data
    for diag in data:
        assert list(diag) == JSON_FIELDS
        assert diag["file"] == str(path)
        assert diag["severity"] in {"error", "warning", "info"}
        assert all(isinstance(diag[k], int) for k in JSON_FIELDS[1:5])
    assert [(d["line"], d["column"], d["severity"]) for d in data] == [(BROKEN_LINE, 17, "error")]


def test_validate_json_of_a_clean_file_is_an_empty_list(mini: tuple[Path, Path]) -> None:
    result = invoke("validate", "--no-lints", "--format", "json", mini[0])
    assert (result.exit_code, json.loads(result.stdout)) == (0, [])


def test_validate_folder_finds_agent_files_recursively(tmp_path: Path) -> None:
    write(tmp_path / "a.agent", MINI_AGENT)
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub" / "b.agent", BROKEN_AGENT)
    write(tmp_path / "sub" / "notes.txt", "not an agent")
    result = invoke("validate", "--no-lints", "--format", "json", tmp_path)
    assert result.exit_code == 1
    files = {d["file"] for d in json.loads(result.stdout)}
    assert files == {str(tmp_path / "sub" / "b.agent")}
    text = invoke("validate", "--no-lints", tmp_path)
    assert "2 file(s) checked" in text.stderr


def test_validate_folder_without_agents_is_bad_usage(tmp_path: Path) -> None:
    result = invoke("validate", tmp_path)
    assert result.exit_code == 2
    assert "no .agent files" in result.stderr


def test_validate_without_paths_is_bad_usage() -> None:
    assert invoke("validate").exit_code == 2


def test_validate_dialect_option(tmp_path: Path) -> None:
    # Valid in the open dialect; the agentforce org rules want a config block.
    text = MINI_AGENT.replace("# @dialect: agentscript\n", "")
    path = write(tmp_path / "open.agent", text)
    assert invoke("validate", "--dialect", "agentscript", path).exit_code == 0
    result = invoke("validate", "--format", "json", "--dialect", "agentforce", path)
    assert result.exit_code == 1
    assert any(d["code"].startswith("config-") for d in json.loads(result.stdout))
    assert invoke("validate", "--dialect", "klingon", path).exit_code == 2


def test_validate_binary_file(tmp_path: Path) -> None:
    path = write(tmp_path / "bin.agent", b"\x7fELF\x00\x01\x02\x03")
    result = invoke("validate", path)
    assert result.exit_code == 1
    assert f"{path}:1:1: error[binary-file]" in result.stdout
    assert "\x00" not in result.stdout  # the binary content is not echoed as a source line


def test_validate_non_utf8_file(tmp_path: Path) -> None:
    path = write(tmp_path / "latin.agent", b'config:\n    agent_name: "caf\xe9"\n')
    result = invoke("validate", "--format", "json", path)
    assert result.exit_code == 1
    [diag] = json.loads(result.stdout)
    assert (diag["code"], diag["line"]) == ("invalid-encoding", 2)
    assert "UTF-8" in diag["message"]


def test_validate_bom_and_crlf_files_like_plain_ones(tmp_path: Path) -> None:
    plain = write(tmp_path / "plain.agent", BROKEN_AGENT)
    bom = write(tmp_path / "bom.agent", b"\xef\xbb\xbf" + BROKEN_AGENT.encode())
    crlf = write(tmp_path / "crlf.agent", BROKEN_AGENT.replace("\n", "\r\n").encode())

    def positions(path: Path) -> list[tuple[int, int, int, int, str]]:
        data = json.loads(invoke("validate", "--format", "json", path).stdout)
        return [(d["line"], d["column"], d["end_line"], d["end_column"], d["code"]) for d in data]

    assert positions(bom) == positions(plain)
    assert positions(crlf) == positions(plain)
    assert invoke("validate", write(tmp_path / "ok.agent", "\ufeff" + MINI_AGENT)).exit_code == 0
    crlf_ok = write(tmp_path / "ok_crlf.agent", MINI_AGENT.replace("\n", "\r\n").encode())
    assert invoke("validate", crlf_ok).exit_code == 0
    # The caret line shows the source without a stray '\r'.
    text = invoke("validate", crlf).stdout
    assert "\r" not in text


def test_validate_unreadable_file(tmp_path: Path) -> None:
    path = write(tmp_path / "secret.agent", MINI_AGENT)
    path.chmod(0)
    try:
        if os.access(path, os.R_OK):
            pytest.skip("running with privileges that read any file (root)")
        result = invoke("validate", "--format", "json", path)
        [diag] = json.loads(result.stdout)
        assert diag["code"] == "unreadable-file"
        assert result.exit_code == 2
    finally:
        path.chmod(0o644)


def test_validate_empty_file(tmp_path: Path) -> None:
    path = write(tmp_path / "empty.agent", "")
    result = invoke("validate", "--format", "json", path)
    assert result.exit_code == 1  # an agent needs a start_agent
    assert any(d["code"] == "singular-collection" for d in json.loads(result.stdout))
    # An empty file is fine as far as the parser goes: no internal error.
    assert all(d["code"] != "internal-error" for d in json.loads(result.stdout))


def test_validate_missing_path_is_bad_input(tmp_path: Path) -> None:
    missing = tmp_path / "nope.agent"
    result = invoke("validate", missing)
    assert result.exit_code == 2
    assert f"{missing}:1:1: error[file-not-found]" in result.stdout
    # The other files are still checked and reported.
    ok = write(tmp_path / "ok.agent", MINI_AGENT)
    both = invoke("validate", "--no-lints", "--format", "json", ok, missing)
    assert both.exit_code == 2
    assert [d["code"] for d in json.loads(both.stdout)] == ["file-not-found"]


def test_validate_exit_codes_with_only_warnings(tmp_path: Path) -> None:
    # `topic` is the deprecated spelling of `subagent`: a warning, not an error.
    topic = '\ntopic other:\n    description: "Other"\n    reasoning:\n        instructions: "Hi"\n'
    path = write(tmp_path / "warn.agent", MINI_AGENT + topic)
    result = invoke("validate", "--format", "json", path)
    severities = {d["severity"] for d in json.loads(result.stdout)}
    assert severities == {"warning"}
    assert result.exit_code == 0


# ====================================================================== fmt


def test_fmt_check_reports_files_needing_change(tmp_path: Path) -> None:
    messy = write(tmp_path / "messy.agent", 'config:\n  agent_name: "x"\n')
    result = invoke("fmt", "--check", messy)
    assert result.exit_code == 1
    assert f"would reformat {messy}" in result.stdout
    assert messy.read_text() == 'config:\n  agent_name: "x"\n'  # --check never writes


def test_fmt_diff_prints_a_unified_diff(tmp_path: Path) -> None:
    messy = write(tmp_path / "messy.agent", 'config:\n  agent_name: "x"\n')
    result = invoke("fmt", "--diff", messy)
    assert result.exit_code == 1
    assert f"--- {messy} (original)" in result.stdout
    assert f"+++ {messy} (formatted)" in result.stdout
    assert '-  agent_name: "x"' in result.stdout
    assert '+    agent_name: "x"' in result.stdout
    assert messy.read_text() == 'config:\n  agent_name: "x"\n'


def test_fmt_writes_and_is_idempotent(tmp_path: Path) -> None:
    messy = write(tmp_path / "messy.agent", 'config:\n  agent_name: "x"\n')
    result = invoke("fmt", messy)
    assert result.exit_code == 0
    assert f"reformatted {messy}" in result.stdout
    formatted = messy.read_text()
    assert formatted == 'config:\n    agent_name: "x"\n'
    again = invoke("fmt", messy)
    assert (again.exit_code, again.stdout) == (0, "")
    assert messy.read_text() == formatted
    assert invoke("fmt", "--check", messy).exit_code == 0


def test_fmt_formatted_file_still_validates(tmp_path: Path) -> None:
    path = write(tmp_path / "order.agent", ORDER_AGENT.read_text())
    assert invoke("fmt", path).exit_code == 0
    assert invoke("validate", path).exit_code == 0
    assert invoke("fmt", "--check", path).exit_code == 0


def test_fmt_keeps_crlf_line_endings(tmp_path: Path) -> None:
    canonical = write(tmp_path / "canonical.agent", b'config:\r\n    agent_name: "x"\r\n')
    assert invoke("fmt", "--check", canonical).exit_code == 0
    messy = write(tmp_path / "messy.agent", b'config:\r\n  agent_name: "x"\r\n')
    diff = invoke("fmt", "--diff", messy).stdout
    assert "\r" not in diff
    removed = [line for line in diff.splitlines() if line.startswith("-")][1:]
    assert removed == ['-  agent_name: "x"']  # only the real change, not every line
    assert invoke("fmt", messy).exit_code == 0
    assert messy.read_bytes() == b'config:\r\n    agent_name: "x"\r\n'


def test_fmt_refuses_files_with_errors(tmp_path: Path) -> None:
    broken = write(tmp_path / "broken.agent", BROKEN_AGENT)
    result = invoke("fmt", broken)
    assert result.exit_code == 2
    assert "not formatted (fix the errors first)" in result.stderr
    assert f"{broken}:{BROKEN_LINE}:17:" in result.stderr
    assert broken.read_text() == BROKEN_AGENT


def test_fmt_mixed_batch_formats_the_good_file(tmp_path: Path) -> None:
    broken = write(tmp_path / "a_broken.agent", BROKEN_AGENT)
    messy = write(tmp_path / "b_messy.agent", 'config:\n  agent_name: "x"\n')
    result = invoke("fmt", tmp_path)
    assert result.exit_code == 1  # something failed, something changed
    assert messy.read_text() == 'config:\n    agent_name: "x"\n'
    assert broken.read_text() == BROKEN_AGENT


@pytest.mark.parametrize(
    ("name", "content", "code"),
    [
        ("bin.agent", b"\x00\x01binary", "binary-file"),
        ("latin.agent", b'config:\n    agent_name: "caf\xe9"\n', "invalid-encoding"),
    ],
)
def test_fmt_unreadable_content(tmp_path: Path, name: str, content: bytes, code: str) -> None:
    path = write(tmp_path / name, content)
    result = invoke("fmt", path)
    assert result.exit_code == 2
    assert f"error[{code}]" in result.stderr
    assert path.read_bytes() == content


@pytest.mark.parametrize("command", ["fmt", "prompts", "graph", "check-gates", "validate"])
def test_a_missing_file_is_file_not_found_in_every_command(tmp_path: Path, command: str) -> None:
    # fmt, prompts, graph and check-gates said `unreadable-file`, validate `file-not-found`.
    result = invoke(command, tmp_path / "nope.agent")
    assert result.exit_code == 2
    assert "error[file-not-found]: no such file" in result.stdout + result.stderr


def test_fmt_empty_file_is_left_alone(tmp_path: Path) -> None:
    path = write(tmp_path / "empty.agent", "")
    assert invoke("fmt", "--check", path).exit_code == 0
    assert path.read_text() == ""


# ====================================================================== run


def test_run_prints_the_transcript() -> None:
    result = invoke("run", ORDER_AGENT, "--conversation", ORDER_CONVERSATION)
    assert result.exit_code == 0
    out = result.stdout
    assert out.startswith("agent: Hi! I can help with your orders.\n")
    assert "user:  Where is my order?" in out
    assert "path:      router -> Order_Management" in out
    assert "actions:   go_to_orders, get_delivery_date, check_if_late" in out
    assert 'set        updated_delivery_date: null -> "February 10, 2026"' in out
    assert "set        is_late: false -> true" in out
    assert (
        "agent: Your order 1234 is expected on February 10, 2026. I'm sorry for the delay." in out
    )
    assert "error:" not in out


def test_run_json_shape_is_the_pinned_one(mini: tuple[Path, Path]) -> None:
    code, data = run_json(*mini)
    assert code == 0
    assert set(data) == {"session_id", "welcome", "turns", "variables"}
    assert isinstance(data["session_id"], str) and data["session_id"]
    assert data["welcome"] == "Welcome!"
    assert data["variables"] == {"customer": "C-1", "count": 3, "status": "shipped"}
    first, second = data["turns"]
    for turn in data["turns"]:
        assert TURN_FIELDS <= set(turn) <= TURN_FIELDS | TURN_EXTRA_FIELDS
    assert first == {
        **{k: first[k] for k in TURN_EXTRA_FIELDS if k in first},
        "user": "where is 42?",
        "response": "It shipped.",
        "node": "main",
        "actions": ["lookup"],
        # The instructions resolve before each of the two LLM calls (S3): count 0 -> 2.
        "variables": {"customer": "C-1", "count": 2, "status": "shipped"},
        "trace_file": None,
        "unused_moves": [],
        "escalated": False,
        "ended": False,
        "error": None,
    }
    assert second["actions"] == ["bye"]
    assert (second["ended"], second["error"], second["response"]) == (True, None, "")


def test_run_reports_unused_moves(tmp_path: Path, mini: tuple[Path, Path]) -> None:
    conversation = write(
        tmp_path / "extra.yaml",
        'variables: {customer: "C"}\nturns:\n  - user: hi\n    model: [{say: one}, {say: two}]\n',
    )
    code, data = run_json(mini[0], conversation)
    assert code == 0
    assert data["turns"][0]["unused_moves"] == [{"say": "two"}]


def test_run_trace_dir_writes_one_file_per_turn(tmp_path: Path, mini: tuple[Path, Path]) -> None:
    traces = tmp_path / "traces"
    code, data = run_json(*mini, "--trace-dir", traces)
    assert code == 0
    session = data["session_id"]
    folder = traces / "mini" / "sessions" / session / "traces"
    files = sorted(folder.iterdir())
    assert [f.name for f in files] == [f"{session}-1.json", f"{session}-2.json"]
    assert [t["trace_file"] for t in data["turns"]] == [str(f) for f in files]
    for index, (file, turn) in enumerate(zip(files, data["turns"], strict=True), start=1):
        trace = json.loads(file.read_text())
        assert {
            "format",
            "agent",
            "sessionId",
            "planId",
            "turn",
            "userInput",
            "response",
            "planTrace",
        } <= set(trace)
        assert trace["format"] == "agentscript-trace/1"
        assert (trace["agent"], trace["sessionId"], trace["turn"]) == ("mini", session, index)
        assert trace["planId"] == file.stem
        assert (trace["userInput"], trace["response"]) == (turn["user"], turn["response"])
        check_steps(trace["planTrace"]["steps"])


REQUIRED_STEP_FIELDS: dict[str, set[str]] = {
    "NODE_ENTER": {"node", "reason"},
    "HOOK_STEP": {"node", "hook", "preVars", "postVars"},
    "RESOLUTION_STEP": {
        "node",
        "iteration",
        "instructions",
        "tools",
        "hiddenTools",
        "preVars",
        "postVars",
    },
    "LLM_STEP": {"node", "iteration", "input", "output"},
    "ACTION_STEP": {"name", "action", "source", "input", "output", "error", "preVars", "postVars"},
    "TRANSITION_STEP": {"from", "to", "via"},
    "REFUSED_STEP": {"name", "reason"},
    "RESPONSE_STEP": {"text"},
    "ERROR_STEP": {"message"},
}


def check_steps(steps: list[dict[str, Any]]) -> None:
    assert steps and steps[0]["type"] == "NODE_ENTER"
    for step in steps:
        required = REQUIRED_STEP_FIELDS.get(step["type"], set())
        assert required <= set(step), (step["type"], required - set(step))
        if step["type"] == "LLM_STEP":
            assert {"system", "instructions", "messages", "tools"} <= set(step["input"])
        if step["type"] == "ACTION_STEP":
            assert step["source"] in {"llm", "deterministic"}


def test_run_trace_of_the_seed_example_answers_the_jq_recipes(tmp_path: Path) -> None:
    """The recipes of the seed docs: steps by type, LLM inputs, action pre/post variables."""
    result = invoke(
        "run",
        ORDER_AGENT,
        "--conversation",
        ORDER_CONVERSATION,
        "--trace-dir",
        tmp_path,
        "--json",
    )
    [turn] = json.loads(result.stdout)["turns"]
    trace = json.loads(Path(turn["trace_file"]).read_text())
    assert Path(turn["trace_file"]).is_relative_to(tmp_path / "Order_Status" / "sessions")
    steps = trace["planTrace"]["steps"]
    check_steps(steps)
    actions = [s for s in steps if s["type"] == "ACTION_STEP"]
    assert [(a["name"], a["source"]) for a in actions] == [
        ("get_delivery_date", "deterministic"),
        ("check_if_late", "deterministic"),
    ]
    assert actions[0]["preVars"]["updated_delivery_date"] is None
    assert actions[0]["postVars"]["updated_delivery_date"] == "February 10, 2026"
    transitions = [(s["from"], s["to"]) for s in steps if s["type"] == "TRANSITION_STEP"]
    assert transitions == [("router", "Order_Management")]
    llm = [s for s in steps if s["type"] == "LLM_STEP"]
    assert "Apologize to the customer" in llm[-1]["input"]["instructions"]


def test_run_exits_1_when_the_script_lacks_a_move(tmp_path: Path, mini: tuple[Path, Path]) -> None:
    conversation = write(
        tmp_path / "short.yaml",
        'variables: {customer: "C"}\n'
        "actions: {lookup_order: {outputs: {status: late}}}\n"
        "turns:\n"
        "  - user: hi\n"
        '    model: [{tool: lookup, args: {order_number: "1"}}]\n',
    )
    code, data = run_json(mini[0], conversation)
    assert code == 1
    error = data["turns"][0]["error"]
    assert "no model move left" in error
    assert data["turns"][0]["response"] == "Something broke."
    transcript = invoke("run", mini[0], "--conversation", conversation)
    assert transcript.exit_code == 1
    assert "error: the conversation script has no model move left" in transcript.stdout


def test_run_exits_1_for_a_turn_after_end_session(tmp_path: Path, mini: tuple[Path, Path]) -> None:
    conversation = write(
        tmp_path / "after.yaml",
        MINI_CONVERSATION + '  - user: "hello again"\n    model: [{say: x}]\n',
    )
    code, data = run_json(mini[0], conversation)
    assert code == 1
    last = data["turns"][-1]
    assert "session has ended" in last["error"]
    assert last["actions"] == []
    assert last["ended"] is True
    transcript = invoke("run", mini[0], "--conversation", conversation)
    assert transcript.exit_code == 1
    assert "[session ended]" in transcript.stdout


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("turns: [\n", "invalid YAML"),
        ("- just a list\n", "must be a mapping"),
        ("turns:\n  - model: [{say: x}]\n", "each turn needs 'user"),
        ("turns:\n  - user: hi\n    model: [{bogus: 1}]\n", "expected 'say', 'tool' or 'tools'"),
        ("surprise: 1\n", "unknown key"),
        ("actions: {lookup_order: {outputs: 3}}\n", "outputs"),
        # Values PyYAML builds with a bare ValueError: a traceback before.
        ("turns:\n  - user: " + "9" * 5000 + "\n", ":2:11: invalid YAML: a number of 5000"),
        ("turns:\n  - user: !!int x\n", "invalid YAML: the int 'x' cannot be read"),
    ],
)
def test_run_exits_2_for_a_malformed_conversation(
    tmp_path: Path, mini: tuple[Path, Path], content: str, message: str
) -> None:
    conversation = write(tmp_path / "bad.yaml", content)
    result = invoke("run", mini[0], "--conversation", conversation)
    assert result.exit_code == 2
    assert message in result.stderr
    assert str(conversation) in result.stderr
    assert result.stdout == ""


def test_run_exits_2_for_an_unknown_variable(tmp_path: Path, mini: tuple[Path, Path]) -> None:
    conversation = write(tmp_path / "vars.yaml", "variables: {nope: 1}\nturns: []\n")
    result = invoke("run", mini[0], "--conversation", conversation)
    assert result.exit_code == 2
    assert "unknown variable(s) ['nope']" in result.stderr


def test_run_exits_2_for_an_ill_typed_variable(tmp_path: Path, mini: tuple[Path, Path]) -> None:
    conversation = write(tmp_path / "vars.yaml", 'variables: {count: "many"}\nturns: []\n')
    result = invoke("run", mini[0], "--conversation", conversation)
    assert result.exit_code == 2
    assert "@variables.count" in result.stderr


def test_run_exits_2_for_an_agent_with_errors(tmp_path: Path, mini: tuple[Path, Path]) -> None:
    broken = write(tmp_path / "broken.agent", BROKEN_AGENT)
    result = invoke("run", broken, "--conversation", mini[1])
    assert result.exit_code == 2
    assert f"{broken}:{BROKEN_LINE}:17:" in result.stderr
    assert "cannot run an agent with errors" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("which", ["agent", "conversation"])
def test_run_exits_2_for_a_missing_file(
    tmp_path: Path, mini: tuple[Path, Path], which: str
) -> None:
    missing = tmp_path / "missing"
    agent, conversation = (missing, mini[1]) if which == "agent" else (mini[0], missing)
    result = invoke("run", agent, "--conversation", conversation)
    assert result.exit_code == 2
    assert str(missing) in result.stderr


def test_run_needs_a_conversation(mini: tuple[Path, Path]) -> None:
    assert invoke("run", mini[0]).exit_code == 2


def test_installed_command_never_prints_a_traceback(tmp_path: Path) -> None:
    """The real entry point, in a subprocess, on a file that cannot be read as text."""
    binary = write(tmp_path / "bin.agent", b"\x00\xff\xfe")
    command = [sys.executable, "-m", "agentscript.cli"]
    for args in (
        ["validate", str(binary)],
        ["fmt", str(binary)],
        ["run", str(binary), "--conversation", str(binary)],
    ):
        done = subprocess.run([*command, *args], capture_output=True, text=True, timeout=60)
        assert done.returncode in (1, 2), (args, done.stderr)
        assert "Traceback" not in done.stdout + done.stderr


def test_run_json_shape_for_a_mantle_project(tmp_path: Path) -> None:
    """AGENT may be a Mantle project folder: same JSON shape, same trace file layout."""
    project = REPO / "examples" / "card_bank"
    conversation = project / "conversations" / "rule2_skill_invocation.yml"
    if not conversation.exists():
        pytest.skip("card_bank example conversations not present")
    code, data = run_json(project, conversation, "--trace-dir", tmp_path)
    assert code == 0
    assert set(data) == {"session_id", "welcome", "turns", "variables"}
    for turn in data["turns"]:
        assert TURN_FIELDS <= set(turn) <= TURN_FIELDS | TURN_EXTRA_FIELDS
        assert turn["error"] is None
        trace = json.loads(Path(turn["trace_file"]).read_text())
        assert trace["format"] == "agentscript-trace/1"
        assert Path(turn["trace_file"]).parent.parent.name == data["session_id"]


# ====================================================================== exit codes and messages


def test_fmt_exits_2_when_a_file_cannot_be_read_even_if_another_would_change(
    tmp_path: Path,
) -> None:
    messy = write(tmp_path / "messy.agent", 'config:\n  agent_name: "x"\n')
    missing = tmp_path / "missing.agent"
    result = invoke("fmt", "--check", messy, missing)
    assert result.exit_code == 2
    assert f"would reformat {messy}" in result.stdout
    assert "error[file-not-found]" in result.stderr


def test_run_ctrl_c_exits_130_without_aborted(
    mini: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr("agentscript.playback.play", interrupted)
    result = invoke("run", mini[0], "--conversation", mini[1])
    assert result.exit_code == 130
    assert "Aborted!" not in result.output + result.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_run_json_to_a_full_disk_is_one_line_not_a_traceback(mini: tuple[Path, Path]) -> None:
    command = [sys.executable, "-m", "agentscript.cli", "run", str(mini[0])]
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [*command, "--conversation", str(mini[1]), "--json"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1
    assert done.stderr == "error: cannot write the output: No space left on device\n"


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("fmt", ["json", "text"])
def test_validate_to_a_full_disk_is_one_line_not_a_traceback(
    mini: tuple[Path, Path], fmt: str
) -> None:
    command = [sys.executable, "-m", "agentscript.cli", "validate", str(mini[0]), "--format", fmt]
    with open("/dev/full", "w") as full:
        done = subprocess.run(command, stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.endswith("error: cannot write the output: No space left on device\n")
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("name", "content"),
    [("missing.agent", None), ("bin.agent", b"\x00\x01"), ("latin.agent", b'x: "caf\xe9"\n')],
)
def test_run_gives_no_dialect_hint_for_a_file_it_cannot_read(
    tmp_path: Path, mini: tuple[Path, Path], name: str, content: bytes | None
) -> None:
    agent = tmp_path / name
    if content is not None:
        write(agent, content)
    result = invoke("run", agent, "--conversation", mini[1])
    assert result.exit_code == 2
    assert "cannot run an agent with errors" in result.stderr
    assert "hint:" not in result.stderr


def test_run_still_hints_the_dialect_for_errors_in_the_agent(tmp_path: Path) -> None:
    agent = write(tmp_path / "open.agent", MINI_AGENT.replace("# @dialect: agentscript\n", ""))
    conversation = write(tmp_path / "c.yaml", MINI_CONVERSATION)
    result = invoke("run", agent, "--conversation", conversation)
    assert result.exit_code == 2
    assert "hint: --dialect agentscript" in result.stderr


@pytest.mark.parametrize("body", ["", "turns: []\n", "turns:\n"])
def test_run_warns_when_a_conversation_has_no_turns(
    tmp_path: Path, mini: tuple[Path, Path], body: str
) -> None:
    conversation = write(tmp_path / "none.yaml", body)
    result = invoke("run", mini[0], "--conversation", conversation)
    assert result.exit_code == 0
    assert f"warning: {conversation}: no turns to play" in result.stderr
    played = invoke("run", mini[0], "--conversation", mini[1])
    assert "no turns to play" not in played.stderr


def test_writing_stdout_reports_only_the_outputs_own_errors() -> None:
    import errno

    from agentscript.cli.common import writing_stdout

    # chat's whole session runs in the block: another OSError is not "cannot write the output"
    with pytest.raises(PermissionError), writing_stdout():
        raise PermissionError(errno.EACCES, "not ours to report")
