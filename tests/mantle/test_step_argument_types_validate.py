"""``mantle-step-argument``: an ``execute_tool`` step whose arguments can never be ones its
tool declares is an error at load (``agentscript validate``), not a step that stalls at run
time. The run checks a step's arguments as a model's call (``tool_handler.check_arguments``):
a ``text`` entry or the literal ``"2"`` for an ``int`` parameter is refused every time, and
the step waits for memory that can never make it an int, while validation said nothing.

What may fit is not reported: a ``float`` entry for an ``int`` (an integral float passes), an
untyped or ``Any`` parameter, a ``json``/``any`` entry, an expression, a stubbed tool.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from mantle_helpers import make

from agentscript.cli import main
from agentscript.diagnostics import Diagnostic, Severity
from agentscript.mantle import load_project

CODE = "mantle-step-argument"

MEMORY = """schema:
  public:
    words:
      type: text
      description: text
    count:
      type: int
      description: int
    amount:
      type: float
      description: float
    flag:
      type: bool
      description: bool
    items:
      type: list
      description: list
    blob:
      type: json
      description: json
    thing:
      type: any
      description: any
    colour:
      type: categorical
      enum_values: [red, blue]
    shade:
      type: categorical
      enum_values: [green]
"""

TOOLS = '''from typing import Any, Literal


def take_int(value: int) -> dict:
    """An int."""
    return {"ok": True}


def take_float(value: float) -> dict:
    """A float."""
    return {"ok": True}


def take_str(value: str) -> dict:
    """A string."""
    return {"ok": True}


def take_bool(value: bool) -> dict:
    """A bool."""
    return {"ok": True}


def take_list(value: list[str]) -> dict:
    """A list."""
    return {"ok": True}


def take_colour(value: Literal["red", "blue"]) -> dict:
    """A colour."""
    return {"ok": True}


def take_any(value: Any) -> dict:
    """Anything."""
    return {"ok": True}


def take_untyped(value) -> dict:
    """Anything."""
    return {"ok": True}


def take_optional(value: int | None = None) -> dict:
    """An optional int."""
    return {"ok": True}


def take_kwargs(**values: Any) -> dict:
    """Any keyword."""
    return {"ok": True}


def take_two(value: int, other: str) -> dict:
    """Two."""
    return {"ok": True}
'''


def project(tmp_path: Path, tool: str, parameters: str) -> Path:
    """A skill whose block runs ``tool`` with ``parameters`` (YAML lines under it)."""
    body = "".join(f"      {line}\n" for line in parameters.splitlines())
    block = f"    parameters:\n{body}" if parameters else ""
    return make(
        tmp_path,
        {
            "skills/s/skill.md": f"""---
name: S
description: A skill.
---
Run @block.main.

:::ordered_block id=main
steps:
  - id: run
    execute_tool: {tool}
{block}:::
""",
            "skills/s/memory.yml": MEMORY,
            "skills/s/tools.py": TOOLS,
        },
    )


def diagnostics(root: Path, *, stub_missing_tools: bool = False) -> list[Diagnostic]:
    _, found = load_project(root, stub_missing_tools=stub_missing_tools)
    return found


def of_code(found: list[Diagnostic]) -> list[Diagnostic]:
    return [d for d in found if d.code == CODE]


NEVER_FITS = [
    ("take_int", "value: session.s.words", "session.s.words (a text entry)", "integer"),
    ("take_int", "value: session.s.flag", "session.s.flag (a bool entry)", "integer"),
    ("take_int", "value: session.s.items", "session.s.items (a list entry)", "integer"),
    ("take_int", "value: session.s.colour", "session.s.colour (a categorical entry)", "integer"),
    ("take_int", 'value: "2"', "'2'", "integer"),
    ("take_int", "value: 2.5", "2.5", "integer"),
    ("take_int", "value: 1.0e+308", "1e+308", "integer"),
    ("take_float", "value: session.s.words", "session.s.words (a text entry)", "number"),
    ("take_float", 'value: "2.5"', "'2.5'", "number"),
    ("take_str", "value: session.s.count", "session.s.count (a int entry)", "string"),
    ("take_str", "value: session.s.amount", "session.s.amount (a float entry)", "string"),
    ("take_str", "value: 2", "2", "string"),
    ("take_bool", "value: session.s.words", "session.s.words (a text entry)", "boolean"),
    ("take_list", "value: session.s.words", "session.s.words (a text entry)", "array"),
    ("take_colour", "value: session.s.count", "session.s.count (a int entry)", "one of"),
    ("take_colour", "value: session.s.shade", "session.s.shade (a categorical entry)", "one of"),
    ("take_colour", "value: green", "'green'", "one of"),
]


@pytest.mark.parametrize(("tool", "parameters", "passed", "declared"), NEVER_FITS)
def test_an_argument_that_never_fits_its_parameter_is_an_error(
    tmp_path: Path, tool: str, parameters: str, passed: str, declared: str
) -> None:
    root = project(tmp_path, tool, parameters)
    (found,) = of_code(diagnostics(root))
    assert found.severity is Severity.ERROR
    assert found.file is not None and found.file.endswith("skills/s/skill.md")
    # A memory reference's line; a literal's step (a step keeps no line for a literal).
    assert found.span.line == (12 if "session." in parameters else 9)
    assert f"step 'run' of skill 's' passes {passed}" in found.message
    assert f"to 'value' of '{tool}', declared {declared}" in found.message
    assert "the run refuses the call every time" in found.message


MAY_FIT = [
    ("take_int", "value: session.s.amount"),  # an integral float is the int
    ("take_int", "value: session.s.count"),
    ("take_int", "value: session.s.blob"),
    ("take_int", "value: session.s.thing"),
    ("take_int", "value: 2.0"),
    ("take_int", "value: 2"),
    ("take_float", "value: session.s.count"),
    ("take_str", "value: session.s.words"),
    ("take_str", "value: session.s.colour"),
    ("take_bool", "value: session.s.flag"),
    ("take_list", "value: session.s.items"),
    ("take_colour", "value: session.s.words"),  # text may be "red"
    ("take_colour", "value: session.s.colour"),
    ("take_colour", "value: red"),
    ("take_any", "value: session.s.words"),
    ("take_untyped", "value: session.s.words"),
    ("take_optional", "value: session.s.amount"),
    ("take_optional", ""),
    ("take_kwargs", "anything: session.s.words"),
    ("take_str", "value: not session.s.flag"),  # an expression: its type is not declared
]


@pytest.mark.parametrize(("tool", "parameters"), MAY_FIT)
def test_an_argument_that_may_fit_is_not_reported(
    tmp_path: Path, tool: str, parameters: str
) -> None:
    found = diagnostics(project(tmp_path, tool, parameters))
    assert of_code(found) == []
    assert [d for d in found if d.is_error] == []


def test_an_argument_the_tool_does_not_take_is_an_error(tmp_path: Path) -> None:
    root = project(tmp_path, "take_int", "value: 2\nvalu: 3")
    (found,) = of_code(diagnostics(root))
    assert found.message == (
        "step 'run' of skill 's' passes 'valu', which 'take_int' does not take (its "
        "parameters: value); the run refuses the call every time"
    )


def test_a_required_parameter_the_step_does_not_pass_is_an_error(tmp_path: Path) -> None:
    root = project(tmp_path, "take_two", "value: session.s.count")
    (found,) = of_code(diagnostics(root))
    assert found.message == (
        "step 'run' of skill 's' does not pass 'other', which 'take_two' requires; the run "
        "refuses the call every time"
    )
    assert found.span.line == 9  # the step


def test_a_stubbed_tool_takes_any_argument(tmp_path: Path) -> None:
    root = project(tmp_path, "missing_tool", "value: session.s.words")
    found = diagnostics(root, stub_missing_tools=True)
    assert [d.code for d in found] == ["mantle-tool-stubbed"]


def test_agentscript_validate_reports_a_text_entry_for_an_int(tmp_path: Path) -> None:
    """The review's case: ``quantity`` declared ``text`` and passed to ``quantity: int``."""
    root = project(tmp_path, "take_int", "value: session.s.words")
    result = CliRunner().invoke(main, ["validate", str(root)])
    assert result.exit_code == 1
    assert CODE in result.output and "session.s.words (a text entry)" in result.output
