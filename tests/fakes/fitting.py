"""The agent, model and limit of the state-fitting tests (``engine/fitting.py`` directly, and
through the server): pages of any length fetched, or kept in two variables, under a lowered
``MAX_SESSION_CHARS`` (``restore`` reads it when called, so the states stay small); and the
parts the audits' variants of the agent are built of (more variables, an action held for a
yes)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
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


# The audit's turn made 72 calls at once.
CONFIG = "[limits]\nmax_tool_calls_per_step = 72\n"

KEPT_TEXT = Field('mutable string = ""', "Kept text")
FETCH_TOOL = Tool("fetch", lines=['description: "Fetch a page"', "with size=..."])
FETCH = Action(
    "fetch",
    "Fetch a page",
    "python://fits_pages:fetch",
    inputs={"size": Field("number", "Its length")},
    outputs={"text": "string"},
)
# An action held for the user's yes, for the tests of a confirmation a fitted turn answered.
WIPE_TOOL = Tool("wipe", lines=['description: "Wipe everything"'])
WIPE = Action(
    "wipe",
    "Wipe everything",
    "python://fits_pages:wipe",
    outputs={"ok": "boolean"},
    require_user_confirmation=True,
)


def keep_tool(variable: str) -> Tool:
    """The tool ``keep_<variable>``: fetch a page and keep it in ``variable``."""
    return Tool(
        f"keep_{variable}",
        "@actions.fetch",
        [
            f'description: "Fetch a page and keep it in {variable}"',
            "with size=...",
            f"set @variables.{variable} = @outputs.text",
        ],
    )


def fits_agent(
    variables: Mapping[str, Field], tools: Sequence[Tool], actions: Sequence[Action]
) -> str:
    """The text of the agent ``Fits`` with these variables, tools and actions (whose targets
    are in ``fits_pages.py``)."""
    return agent_text(
        dialect=None,
        system=System(instructions="Use the tools.", welcome="Hi.", error="ERR"),
        developer_name="Fits",
        variables=variables,
        instructions="Fetch pages.",
        tools=tools,
        actions=actions,
    )


AGENT = fits_agent(
    variables=dict.fromkeys("ab", KEPT_TEXT),
    tools=[FETCH_TOOL, *map(keep_tool, "ab")],
    actions=[FETCH],
)
PAGES = """
def fetch(size: float) -> dict[str, object]:
    return {"text": "x" * int(size)}
"""


def write_agent(
    folder: Path, agent: str = AGENT, pages: str = PAGES, config: str | None = None
) -> Path:
    """``fits.agent`` (the text ``agent``) and its ``fits_pages.py`` (``pages``) written in
    ``folder``, with ``config`` as the ``agentscript.toml`` beside them if given; the agent's
    path."""
    if config is not None:
        (folder / "agentscript.toml").write_text(config)
    (folder / "fits_pages.py").write_text(pages)
    path = folder / "fits.agent"
    path.write_text(agent)
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
