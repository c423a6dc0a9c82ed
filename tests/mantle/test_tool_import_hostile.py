"""Hostile tool modules: a FIFO, a device or an oversized file is a diagnostic, not a hang or
a MemoryError; any BaseException at import is a diagnostic (a real Ctrl-C still stops);
what the module prints goes to stderr; bad decorator arguments, a broken signature and an
unusable tool name are diagnostics; a coding line is honoured when writes are checked."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from mantle_helpers import make

from agentscript.cli import main
from agentscript.diagnostics import Diagnostic
from agentscript.limits import MAX_FILE_BYTES
from agentscript.mantle import load_project
from agentscript.mantle.load.tool_code import load_tool_file, tool, tool_files

SKILL = "---\nname: Greet\ndescription: Say hello.\n---\nSay hello.\n"
MEMORY = "schema:\n  public:\n    greeted:\n      type: bool\n"


def _load(tmp_path: Path, source: str | bytes) -> tuple[list[str], list[Diagnostic]]:
    path = tmp_path / "tools.py"
    if isinstance(source, bytes):
        path.write_bytes(source)
    else:
        path.write_text(source)
    tools, diagnostics = load_tool_file(str(path), str(tmp_path), "greet")
    return [t.name for t in tools], diagnostics


def _codes(diagnostics: list[Diagnostic]) -> list[str]:
    return [d.code for d in diagnostics]


# --- item 1: only regular files, read within the budget ------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_tool_files_lists_every_name_but_a_directory(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "good.py").write_text("def f():\n    'doc'\n")
    os.symlink(tools / "good.py", tools / "linked.py")
    os.mkfifo(tools / "fifo.py")
    os.symlink("/dev/zero", tools / "zero.py")
    (tools / "folder.py").mkdir()
    os.symlink(tools / "loop.py", tools / "loop.py")
    os.mkfifo(tmp_path / "tools.py")
    # all but the folder: what is not a regular file is then refused by name (mantle-file)
    names = ["fifo.py", "good.py", "linked.py", "loop.py", "zero.py"]
    assert tool_files(str(tmp_path)) == [str(tmp_path / "tools.py")] + [
        str(tools / name) for name in names
    ]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_or_device_given_as_a_tool_file_is_a_diagnostic(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.py"
    os.mkfifo(fifo)
    for path in (str(fifo), "/dev/zero"):
        tools, diagnostics = load_tool_file(path, str(tmp_path), None)
        assert tools == []
        assert _codes(diagnostics) == ["mantle-file"]
        assert "not a regular file" in diagnostics[0].message


def test_a_tool_file_over_the_size_limit_is_a_diagnostic(tmp_path: Path) -> None:
    source = b"def f():\n    'doc'\n" + b"#" * MAX_FILE_BYTES + b"\n"
    names, diagnostics = _load(tmp_path, source)
    assert names == []
    assert _codes(diagnostics) == ["mantle-file"]
    assert "MAX_FILE_BYTES" in diagnostics[0].message


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_project_with_a_fifo_or_dangling_tool_file_says_so_and_does_not_hang(
    tmp_path: Path,
) -> None:
    root = make(tmp_path, {"skills/greet/skill.md": SKILL})
    (root / "skills" / "greet" / "tools").mkdir()
    os.mkfifo(root / "skills" / "greet" / "tools" / "a.py")
    os.symlink(root / "nowhere.py", root / "skills" / "greet" / "tools" / "b.py")
    os.mkfifo(root / "tools.py")
    _, diagnostics = load_project(root)
    errors = [d for d in diagnostics if d.is_error]
    assert {d.code for d in errors} == {"mantle-file"}
    messages = sorted(d.message for d in errors)
    assert len(messages) == 3
    assert sum("not a regular file" in m for m in messages) == 2
    assert sum("a link to nothing" in m for m in messages) == 1


def test_the_module_is_set_up_as_an_import_would(tmp_path: Path) -> None:
    (tmp_path / "helper_mod.py").write_text("VALUE = 7\n")
    source = (
        "import sys\n"
        "from dataclasses import dataclass\n"
        "from helper_mod import VALUE\n\n"
        "SEEN = sys.modules[__name__].__file__\n\n"
        "@dataclass\n"
        "class Box:\n    n: int\n\n"
        "def where(x: int) -> dict:\n"
        "    'Where the module was loaded from.'\n"
        "    return {'file': __file__, 'name': __name__, 'seen': SEEN, 'n': Box(VALUE).n}\n"
    )
    path = tmp_path / "tools.py"
    path.write_text(source)
    tools, diagnostics = load_tool_file(str(path), str(tmp_path), None)
    assert diagnostics == []
    [where] = tools
    assert where.function is not None
    got = where.function(1)
    assert got["file"] == got["seen"] == str(path)
    assert got["name"].startswith("_agentscript_mantle_tools_")
    assert got["name"] not in sys.modules and "helper_mod" not in sys.modules
    assert got["n"] == 7
    # The loader's own ``from __future__ import annotations`` is not inherited.
    assert where.function.__annotations__["x"] is int
    assert where.parameters_schema["properties"] == {"x": {"type": "integer"}}


# --- item 2: any BaseException at import ----------------------------------------------------


@pytest.mark.parametrize(
    ("source", "shown"),
    [
        ("raise GeneratorExit\n", "GeneratorExit"),
        ("class E(BaseException):\n    pass\n\nraise E('custom base')\n", "E: custom base"),
        ("raise KeyboardInterrupt\n", "KeyboardInterrupt"),
        ("raise SystemExit(3)\n", "SystemExit: 3"),
    ],
)
def test_a_base_exception_at_import_is_a_diagnostic(
    tmp_path: Path, source: str, shown: str
) -> None:
    names, diagnostics = _load(tmp_path, "def f():\n    'doc'\n\n" + source)
    assert names == []
    assert _codes(diagnostics) == ["mantle-tool-import"]
    assert diagnostics[0].message.endswith(shown)
    assert diagnostics[0].span.line == source.count("\n") + 3


def test_raising_keyboard_interrupt_off_the_main_thread_is_a_diagnostic(tmp_path: Path) -> None:
    found: list[list[Diagnostic]] = []
    thread = threading.Thread(
        target=lambda: found.append(_load(tmp_path, "raise KeyboardInterrupt\n")[1])
    )
    thread.start()
    thread.join()
    assert [_codes(d) for d in found] == [["mantle-tool-import"]]


def _raising_handler(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # as the engine's handler does when no turn runs


@pytest.fixture(params=[signal.default_int_handler, _raising_handler], ids=["default", "custom"])
def sigint_handler(request: pytest.FixtureRequest) -> Iterator[object]:
    before = signal.signal(signal.SIGINT, request.param)
    yield request.param
    signal.signal(signal.SIGINT, before)


@pytest.mark.skipif(not hasattr(signal, "raise_signal"), reason="needs signal.raise_signal")
def test_a_real_sigint_while_a_module_imports_still_stops(
    tmp_path: Path, sigint_handler: object
) -> None:
    with pytest.raises(KeyboardInterrupt):
        _load(tmp_path, "import signal\nsignal.raise_signal(signal.SIGINT)\n")
    assert signal.getsignal(signal.SIGINT) is sigint_handler


def test_raising_keyboard_interrupt_is_told_from_a_real_sigint(
    tmp_path: Path, sigint_handler: object
) -> None:
    names, diagnostics = _load(tmp_path, "raise KeyboardInterrupt\n")
    assert names == [] and _codes(diagnostics) == ["mantle-tool-import"]
    assert signal.getsignal(signal.SIGINT) is sigint_handler


# --- item 3: printing at import -------------------------------------------------------------

PRINTS = "print('HELLO FROM TOOLS')\n\ndef f():\n    'doc'\n"


def test_what_a_module_prints_at_import_goes_to_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    names, diagnostics = _load(tmp_path, PRINTS)
    assert names == ["f"] and diagnostics == []
    captured = capsys.readouterr()
    assert "HELLO FROM TOOLS" not in captured.out
    assert "HELLO FROM TOOLS" in captured.err


def test_validate_json_output_stays_json_when_tools_print(tmp_path: Path) -> None:
    root = make(tmp_path, {"skills/greet/skill.md": SKILL, "skills/greet/tools.py": PRINTS})
    result = CliRunner().invoke(main, ["validate", str(root), "--format", "json"])
    assert "HELLO FROM TOOLS" in result.stderr
    json.loads(result.stdout)


# --- item 4: decorator argument types -------------------------------------------------------


@pytest.mark.parametrize(
    "decorator",
    [
        "@tool(description='x', writes=['nope', 5])",
        "@tool(description='x', writes='greeted')",
        "@tool(description=5)",
    ],
)
def test_bad_decorator_arguments_are_an_import_diagnostic(tmp_path: Path, decorator: str) -> None:
    source = f"from agentscript.mantle import tool\n\n{decorator}\ndef h():\n    pass\n"
    names, diagnostics = _load(tmp_path, source)
    assert names == []
    assert _codes(diagnostics) == ["mantle-tool-import"]
    assert "TypeError" in diagnostics[0].message and diagnostics[0].span.line == 3


def test_the_documented_decorator_checks_writes_too(tmp_path: Path) -> None:
    source = (
        "from rasa.mantle.tools.decorator import tool\n\n"
        "@tool(description='x', writes=[5])\nasync def h(context=None):\n    pass\n"
    )
    _, diagnostics = _load(tmp_path, source)
    assert _codes(diagnostics) == ["mantle-tool-import"]


def test_good_decorator_arguments_still_mark() -> None:
    marked = tool("Say hi.", writes=("greeted",))(lambda: None)
    assert marked.__mantle_tool__ == {"description": "Say hi.", "writes": ["greeted"]}  # type: ignore[attr-defined]


def test_a_tampered_marker_is_ignored(tmp_path: Path) -> None:
    source = "def f():\n    'doc'\n\nf.__mantle_tool__ = 5\n"
    names, diagnostics = _load(tmp_path, source)
    assert names == ["f"] and diagnostics == []


# --- item 5: a broken signature -------------------------------------------------------------


def test_a_broken_signature_is_a_signature_diagnostic(tmp_path: Path) -> None:
    names, diagnostics = _load(tmp_path, "def f():\n    'doc'\n\nf.__signature__ = 5\n")
    assert names == ["f"]
    assert _codes(diagnostics) == ["mantle-tool-signature"]
    assert diagnostics[0].is_error and "signature of 'f'" in diagnostics[0].message


# --- item 6: the coding line ----------------------------------------------------------------


def test_writes_are_found_in_a_latin1_module(tmp_path: Path) -> None:
    root = make(
        tmp_path,
        {"skills/greet/skill.md": SKILL, "skills/greet/memory.yml": MEMORY},
    )
    (root / "skills" / "greet" / "tools.py").write_bytes(
        "# -*- coding: latin-1 -*-\n# café\n"
        "def f(context=None):\n"
        "    'doc'\n"
        "    context.memory.set('undeclared_entry', 1)\n".encode("latin-1")
    )
    _, diagnostics = load_project(root)
    writes = [d for d in diagnostics if d.code == "mantle-undeclared-memory-write"]
    assert len(writes) == 1 and "undeclared_entry" in writes[0].message
    assert writes[0].span.line == 5


# --- item 7: tool names ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["bad name with spaces/../", "", "x" * 65, "café", "a.b", "run_after_setting_a b"]
)
def test_a_tool_name_the_model_apis_refuse_is_an_error(tmp_path: Path, name: str) -> None:
    names, diagnostics = _load(tmp_path, f"def f():\n    'doc'\n\nf.__name__ = {name!r}\n")
    assert names == []
    assert _codes(diagnostics) == ["mantle-tool-name"]
    assert diagnostics[0].is_error


@pytest.mark.parametrize(
    "name", ["f", "look-up", "x" * 64, "_private_ok", "run_after_setting_" + "e" * 60]
)
def test_usable_tool_names_are_kept(tmp_path: Path, name: str) -> None:
    names, diagnostics = _load(tmp_path, f"def f():\n    'doc'\n\nf.__name__ = {name!r}\n")
    assert names == [name] and diagnostics == []


# --- item 8: messages -----------------------------------------------------------------------


def test_the_power_operator_is_named_as_written(tmp_path: Path) -> None:
    from agentscript.diagnostics import UNKNOWN_SPAN
    from agentscript.mantle.conditions import make_condition

    _, diagnostics = make_condition("session.a.n > 9**9**9**9", "f", UNKNOWN_SPAN)
    messages = [d.message for d in diagnostics if d.code == "mantle-condition-form"]
    assert messages and all("'**'" in m for m in messages), messages
    assert not any("Spread" in m for m in messages)
    _, diagnostics = make_condition("session.a.n > *session.a.m", "f", UNKNOWN_SPAN)
    assert [d.message for d in diagnostics if d.code == "mantle-condition-form"] == [
        "unpacking with '*' is not in the condition grammar (memory references, literals, "
        "comparisons, and/or/not)"
    ]


def test_run_on_a_mantle_project_does_not_speak_of_dialects(tmp_path: Path) -> None:
    root = make(tmp_path, {"skills/greet/skill.md": SKILL, "skills/greet/tools.py": "raise E\n"})
    conversation = tmp_path / "c.yaml"
    conversation.write_text("turns:\n  - user: hi\n    model:\n      - say: Hello.\n")
    for target in (root, root / "agent.yml"):
        result = CliRunner().invoke(main, ["run", str(target), "--conversation", str(conversation)])
        assert result.exit_code == 2
        assert "cannot run an agent with errors" in result.stderr
        assert "dialect" not in result.stderr


# --- a module that does not return from its import -----------------------------------------


def test_a_tool_module_still_running_is_named_on_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # The module waits until the notice has been said (a real hang would wait for ever); the
    # load used to say nothing at all while a module's code ran.
    from agentscript.mantle.load import tool_code

    said = threading.Event()
    say = tool_code._say_still_importing

    def say_and_mark(path: str, seconds: float) -> None:
        say(path, seconds)
        said.set()

    monkeypatch.setattr(tool_code, "SLOW_IMPORT_NOTICE_SECONDS", 0.01)
    monkeypatch.setattr(tool_code, "_say_still_importing", say_and_mark)
    monkeypatch.setattr("builtins._notice_said", said, raising=False)
    source = (
        "import builtins\n"
        "assert builtins._notice_said.wait(10)\n"
        "def greet() -> str:\n    'Say hello.'\n    return 'hi'\n"
    )
    names, diagnostics = _load(tmp_path, source)
    assert diagnostics == [] and names == ["greet"]
    err = capfd.readouterr().err
    assert f"{tmp_path / 'tools.py'}: its module code is still running after 0.01 s" in err
    assert "Ctrl-C stops" in err
