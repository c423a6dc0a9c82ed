"""Tool discovery: decorator vs plain functions, schemas, hooks, import isolation."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Literal

from agentscript.diagnostics import Span
from agentscript.mantle.load.tool_code import json_type, load_tool_file, make_stub, tool


def test_json_type_covers_common_hints() -> None:
    assert json_type(str) == {"type": "string"}
    assert json_type(int | None) == {"type": "integer"}
    assert json_type(list[float]) == {"type": "array", "items": {"type": "number"}}
    assert json_type(Literal["a", "b"]) == {"enum": ["a", "b"]}
    assert json_type(dict[str, int]) == {"type": "object"}
    assert json_type(object) == {}


def test_decorator_marks_description_and_writes() -> None:
    @tool("Say hi.", writes=["greeted"])
    def hi() -> None:
        return None

    assert hi.__mantle_tool__ == {"description": "Say hi.", "writes": ["greeted"]}  # type: ignore[attr-defined]


def test_decorated_module_keeps_helpers_out(tmp_path: Path) -> None:
    (tmp_path / "helper_lib.py").write_text("VALUE = 3\n")
    source = (
        "from agentscript.mantle import tool\n"
        "from helper_lib import VALUE\n\n"
        "def helper():\n    return VALUE\n\n"
        "@tool(description='Async tool.')\n"
        "async def fetch(n: int, context=None) -> dict:\n    return {'n': n + helper()}\n\n"
        "def run_after_setting_reason(context=None):\n    return None\n"
    )
    path = tmp_path / "tools.py"
    path.write_text(source)
    before = set(sys.modules)
    tools, diagnostics = load_tool_file(str(path), str(tmp_path), "s")
    assert diagnostics == []
    by_name = {t.name: t for t in tools}
    assert set(by_name) == {"fetch", "run_after_setting_reason"}
    fetch = by_name["fetch"]
    assert fetch.is_async and fetch.takes_context and fetch.owner == "s"
    assert fetch.parameters_schema == {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
    }
    assert fetch.span.line == 7
    assert by_name["run_after_setting_reason"].hook_for == "reason"
    assert "helper_lib" not in set(sys.modules) - before


def test_stub_is_recorded_and_callable() -> None:
    stub = make_stub("ghost", "s", "skill.md", Span(3, 1, 3, 5))
    assert stub.is_stub and stub.function is not None
    assert stub.function(x=1) == {"ok": True, "stub": "ghost", "arguments": {"x": 1}}
