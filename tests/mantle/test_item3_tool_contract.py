"""Issue 13 item 3: the documented tool contract loads and runs unchanged (our own
implementation under the documented module names, only while tools load); ``tools/*.py``
shadows ``tools.py``; ``tool_timeout`` defaults to 10 s."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from mantle_helpers import clean, load, run_text, said, steps

from agentscript.mantle import load_project
from agentscript.mantle.run.tool_execution import DEFAULT_TOOL_TIMEOUT, tool_timeout

# Written exactly as the Mantle tools reference shows it.
DOCUMENTED_TOOLS = '''\
from rasa.mantle.tools.decorator import ToolContext, tool
from rasa.mantle.tools.result import ToolResult


@tool(description="Look up the customer's account balance")
async def check_balance(account_id: str, context: ToolContext = None) -> ToolResult:
    """Look up the balance.

    Args:
        account_id: The account to look up.
    """
    context.memory.set("current_balance", 12.0)
    await context.send("One moment, checking.")
    return ToolResult(llm_response={"balance": 12.0})


@tool(description="Always fails")
async def broken(context: ToolContext = None) -> ToolResult:
    return ToolResult(llm_response={"tried": True}, error="backend down")
'''

FILES = {
    "agent.yml": "agent:\n  id: doc\n  persona: You help.\n",
    "skills/balance/skill.md": "---\nname: Balance\ndescription: Tell the balance.\n---\n"
    "Call check_balance.\n",
    "skills/balance/memory.yml": "schema:\n  public:\n    current_balance:\n      type: float\n",
}


def make(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in {**FILES, **files}.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


CALL = """
turns:
  - user: "balance of A1"
    model:
      - tool: activate_skill
        args: {skill: balance}
      - tool: check_balance
        args: {account_id: A1}
      - say: "12.00"
"""


def test_documented_tools_file_runs_unchanged(tmp_path: Path) -> None:
    project = make(tmp_path, {"skills/balance/tools.py": DOCUMENTED_TOOLS})
    playback = clean(run_text(load(project), CALL))
    action = next(s for s in steps(playback, 1, "ACTION_STEP") if s["name"] == "check_balance")
    assert action["output"] == {"balance": 12.0} and action["error"] is None
    assert playback.variables["balance.current_balance"] == 12.0
    assert said(playback, 1, "tool") == ["One moment, checking."]
    llm = steps(playback, 1, "LLM_STEP")[1]["input"]["tools"]
    schema = next(t for t in llm if t["name"] == "check_balance")
    assert schema["description"] == "Look up the customer's account balance"
    assert "context" not in str(schema["parameters"])


def test_documented_names_exist_only_while_tools_load(tmp_path: Path) -> None:
    project = make(tmp_path, {"skills/balance/tools.py": DOCUMENTED_TOOLS})
    _, diagnostics = load_project(project)
    assert not [d for d in diagnostics if d.is_error]
    assert not [name for name in sys.modules if name == "rasa" or name.startswith("rasa.")]


def test_tool_result_error_is_a_failure_for_the_model(tmp_path: Path) -> None:
    project = make(tmp_path, {"skills/balance/tools.py": DOCUMENTED_TOOLS})
    playback = clean(
        run_text(
            load(project),
            CALL.replace("tool: check_balance\n        args: {account_id: A1}", "tool: broken"),
        )
    )
    action = next(s for s in steps(playback, 1, "ACTION_STEP") if s["name"] == "broken")
    assert action["output"] == {"tried": True, "error": "backend down"}


def test_bare_tool_decorator_is_a_clear_load_error(tmp_path: Path) -> None:
    bare = DOCUMENTED_TOOLS.replace(
        '@tool(description="Look up the customer\'s account balance")', "@tool"
    )
    project = make(tmp_path, {"skills/balance/tools.py": bare})
    _, diagnostics = load_project(project)
    errors = [d for d in diagnostics if d.is_error]
    assert [d.code for d in errors] == ["mantle-tool-import"]
    assert "@tool needs a description keyword" in errors[0].message


def test_tools_package_shadows_tools_py_and_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    old = 'def check_balance(account_id: str) -> dict:\n    """Old."""\n    return {"old": 1}\n'
    project = make(
        tmp_path,
        {"skills/balance/tools.py": old, "skills/balance/tools/balance.py": DOCUMENTED_TOOLS},
    )
    with caplog.at_level("INFO"):
        _, diagnostics = load_project(project)
    shadowed = [d for d in diagnostics if d.code == "mantle-tool-shadowed"]
    assert len(shadowed) == 1 and not shadowed[0].is_error
    assert "shadows" in caplog.text
    playback = clean(run_text(load(project), CALL))
    action = next(s for s in steps(playback, 1, "ACTION_STEP") if s["name"] == "check_balance")
    assert action["output"] == {"balance": 12.0}


def test_tool_timeout_defaults_to_ten_seconds(tmp_path: Path) -> None:
    project, _ = load_project(make(tmp_path, {"skills/balance/tools.py": DOCUMENTED_TOOLS}))
    assert project is not None
    assert tool_timeout(project) == DEFAULT_TOOL_TIMEOUT == 10.0
    project.agent.tool_timeout = 3.0
    assert tool_timeout(project) == 3.0
