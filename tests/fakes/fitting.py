"""The agent, model and limit of the state-fitting tests (``engine/fitting.py`` directly, and
through the server): pages of any length fetched, or kept in two variables, under a lowered
``MAX_SESSION_CHARS`` (``restore`` reads it when called, so the states stay small)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentscript.engine import restore
from agentscript.models.base import Message, ModelResponse, ToolCall
from agentscript.models.function import FunctionInfo

from .agent_texts import Action, Field, System, Tool, agent_text

CAP = 300_000  # MAX_SESSION_CHARS in these tests
REASON = f"the saved session would be larger than MAX_SESSION_CHARS ({CAP} characters)"
DROPPED_RESULT = json.dumps({"error": f"result dropped: {REASON}"})


def _keep(variable: str) -> Tool:
    return Tool(
        f"keep_{variable}",
        "@actions.fetch",
        [
            f'description: "Fetch a page and keep it in {variable}"',
            "with size=...",
            f"set @variables.{variable} = @outputs.text",
        ],
    )


AGENT = agent_text(
    dialect=None,
    system=System(instructions="Use the tools.", welcome="Hi.", error="ERR"),
    developer_name="Fits",
    variables={name: Field('mutable string = ""', "Kept text") for name in "ab"},
    instructions="Fetch pages.",
    tools=[
        Tool("fetch", lines=['description: "Fetch a page"', "with size=..."]),
        *map(_keep, "ab"),
    ],
    actions=[
        Action(
            "fetch",
            "Fetch a page",
            "python://fits_pages:fetch",
            inputs={"size": Field("number", "Its length")},
            outputs={"text": "string"},
        )
    ],
)
PAGES = """
def fetch(size: float) -> dict[str, object]:
    return {"text": "x" * int(size)}
"""


def write_agent(folder: Path) -> Path:
    """``fits.agent`` and its ``fits_pages.py`` written in ``folder``; the agent's path."""
    (folder / "fits_pages.py").write_text(PAGES)
    path = folder / "fits.agent"
    path.write_text(AGENT)
    return path


def answer(messages: list[Message], info: FunctionInfo) -> Any:
    """``fetch SIZE...`` calls fetch once per size, ``keep SIZE`` keeps a page in a and in b,
    ``talk SIZE`` says SIZE characters before each of two calls and in its reply; after the
    results, ``done``. Call ids are made of the history's length: two servers have two models."""
    user = max(i for i, m in enumerate(messages) if m.role == "user")
    words = messages[user].content.split()
    calls = [m for m in messages[user:] if m.role == "assistant" and m.tool_calls]
    at = f"c{len(messages)}"
    if words[0] == "talk":
        size = int(words[1])
        if len(calls) < 2:
            call = ToolCall(f"{at}_0", "fetch", {"size": 10})
            return ModelResponse(text=str(len(calls)) * size, tool_calls=[call])
        return "r" * size
    if calls:
        return "done"
    if words[0] == "fetch":
        return [ToolCall(f"{at}_{i}", "fetch", {"size": int(s)}) for i, s in enumerate(words[1:])]
    if words[0] == "keep":
        return [ToolCall(f"{at}_{n}", f"keep_{n}", {"size": int(words[1])}) for n in "ab"]
    return "ok"


@pytest.fixture
def small_cap(monkeypatch: pytest.MonkeyPatch) -> int:
    """``MAX_SESSION_CHARS`` lowered to :data:`CAP` for the test (a module that uses it
    names it at its top: pytest finds a fixture by its name in the test's module)."""
    monkeypatch.setattr(restore, "MAX_SESSION_CHARS", CAP)
    return CAP
