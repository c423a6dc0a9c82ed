"""What ``GET /v1/sessions/{id}`` and ``GET /v1/sessions`` say of a session agrees with what its
next turn does and with docs/serve.md.

- ``compatible`` says whether this server can run the session's next turn: an agent changed in
  what a saved session depends on (a Mantle block's step, an Agent Script action's parameter or
  tool) answers ``false`` in the view and the list, and the next message ``409``; the list
  still reads no state.
- A Mantle session's view: ``skill_stack`` is ``[]`` from its creation (``null`` is Agent
  Script's); ``node`` is the active skill, ``null`` while none is (a resume offer waits), as
  in the turn's JSON; ``pending_confirmation`` has the documented keys only.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

from agentscript.server import agents

from .harness import CARD_BANK, NOTES, execute, new_session, run

# Moves of the stand-in model (one tool call a message): log in, start card_replace's block,
# interrupt it with check_balance, whose completion offers to resume card_replace.
TO_RESUME_OFFER = [
    '/activate_skill {"skill": "authenticate"}',
    '/verify_customer {"customer_number": "1001", "pin": "4321"}',
    "/complete_skill",
    '/activate_skill {"skill": "card_replace"}',
    '/set_fields {"reason": "lost"}',
    '/activate_skill {"skill": "card_replace", "block": "order_card"}',
    '/activate_skill {"skill": "check_balance"}',
    "/get_balance",
    "/complete_skill",
]
# From the resumed block to the order's confirmation.
TO_CONFIRMATION = ['/set_fields {"card_id": "C-11"}', '/set_fields {"shipping": "express"}']
PENDING_KEYS = {"skill", "tool", "arguments", "source", "block", "step"}


def card_bank_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "card_bank"
    shutil.copytree(CARD_BANK, copy, ignore=shutil.ignore_patterns("conversations"))
    return copy


def notes_copy(tmp_path: Path) -> Path:
    agent = tmp_path / "notes.agent"
    agent.write_text(Path(NOTES).read_text())
    backend = Path(NOTES).parent / "notes_backend.py"
    (tmp_path / backend.name).write_text(backend.read_text())
    return agent


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def rename_step(project: Path) -> None:
    """A block step renamed: skills, memory entries and their types unchanged."""
    edit(
        project / "skills" / "card_replace" / "skill.md", "id: pick_shipping", "id: choose_shipping"
    )


def rename_parameter(agent: Path) -> None:
    """The action's input renamed: variables and subagents unchanged."""
    edit(agent, "with text=...", "with body=...")
    edit(
        agent,
        "            inputs:\n                text: string",
        "            inputs:\n                body: string",
    )


def add_tool(agent: Path) -> None:
    """Another tool for the subagent: variables and subagents unchanged."""
    edit(
        agent,
        "                set @variables.count = @outputs.count\n",
        "                set @variables.count = @outputs.count\n"
        "            note_again: @actions.save_note\n"
        '                description: "Save a note again"\n'
        "                with text=...\n",
    )


async def message(client: httpx.AsyncClient, sid: str, text: str) -> dict[str, Any]:
    sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": text})
    assert sent.status_code == 200, sent.text
    data: dict[str, Any] = sent.json()
    return data


async def view(client: httpx.AsyncClient, sid: str) -> dict[str, Any]:
    got = await client.get(f"/v1/sessions/{sid}")
    assert got.status_code == 200, got.text
    data: dict[str, Any] = got.json()
    return data


def changed_agent_is_told_incompatible(
    store: str, path: Path, agent: str, change: Callable[[Path], None], states_read: list[Any]
) -> None:
    """A session created and run once; ``change`` applied to the agent's files; then a server
    of the changed agent says ``compatible: false`` in the view and the list, and the next
    message answers 409, while a new session is compatible and runs."""

    async def create(client: httpx.AsyncClient) -> str:
        sid = await new_session(client, agent)
        await message(client, sid, "hello")
        assert (await view(client, sid))["compatible"] is True
        return sid

    sid = run(store, create, paths=(str(path),))
    change(path)

    async def resume(client: httpx.AsyncClient) -> None:
        fresh = await new_session(client, agent)
        states_read.clear()
        listed = (await client.get("/v1/sessions")).json()["sessions"]
        assert states_read == ["{}", "{}"]  # the list read the summaries only
        assert {s["session_id"]: s["compatible"] for s in listed} == {sid: False, fresh: True}
        assert (await view(client, sid))["compatible"] is False
        assert (await view(client, fresh))["compatible"] is True
        refused = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "again"})
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"]["code"] == "session_incompatible"
        await message(client, fresh, "hello")
        assert (await view(client, fresh))["compatible"] is True

    run(store, resume, paths=(str(path),))


def test_a_mantle_step_renamed_is_incompatible_in_the_view_the_list_and_the_turn(
    api_store: str, tmp_path: Path, states_read: list[Any]
) -> None:
    project = card_bank_copy(tmp_path)
    changed_agent_is_told_incompatible(api_store, project, "card-bank", rename_step, states_read)


@pytest.mark.parametrize("change", [rename_parameter, add_tool], ids=["parameter", "tool"])
def test_an_agent_script_action_changed_is_incompatible_in_the_view_the_list_and_the_turn(
    api_store: str, tmp_path: Path, states_read: list[Any], change: Callable[[Path], None]
) -> None:
    agent = notes_copy(tmp_path)
    changed_agent_is_told_incompatible(api_store, agent, "Notes", change, states_read)


def test_a_session_of_the_former_version_runs_and_its_view_judges_its_state(
    api_store: str, tmp_path: Path
) -> None:
    """A row an earlier agentscript wrote carries the version it computed (variables and
    skills only): the session still runs where the agent is unchanged, and where a step
    changed its view says what the next turn does (409)."""
    project = card_bank_copy(tmp_path)
    former = agents.former_version(agents.describe(agents.load_agents([str(project)])[0]))

    async def create(client: httpx.AsyncClient) -> list[str]:
        return [await new_session(client, "card-bank") for _ in range(2)]

    kept, changed = run(api_store, create, paths=(str(project),))
    for sid in (kept, changed):
        execute(
            api_store,
            "UPDATE agentscript_sessions SET agent_version = ? WHERE session_id = ?",
            former,
            sid,
        )

    async def unchanged(client: httpx.AsyncClient) -> None:
        assert (await view(client, kept))["compatible"] is True
        listed = (await client.get("/v1/sessions")).json()["sessions"]
        assert {s["session_id"]: s["compatible"] for s in listed} == {kept: True, changed: True}
        await message(client, kept, "hello")

    run(api_store, unchanged, paths=(str(project),))
    rename_step(project)

    async def after_the_change(client: httpx.AsyncClient) -> None:
        assert (await view(client, changed))["compatible"] is False
        refused = await client.post(f"/v1/sessions/{changed}/messages", json={"text": "hi"})
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"]["code"] == "session_incompatible"

    run(api_store, after_the_change, paths=(str(project),))


def test_a_mantle_session_has_an_empty_skill_stack_from_its_creation(api_store: str) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        mantle = await view(client, await new_session(client, "card-bank"))
        assert (mantle["node"], mantle["skill_stack"]) == (None, [])
        agent_script = await view(client, await new_session(client))
        assert agent_script["skill_stack"] is None

    run(api_store, scenario, paths=(CARD_BANK, NOTES))


def test_a_mantle_view_says_what_the_turn_says_of_the_active_skill_and_the_held_call(
    api_store: str,
) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        sid = await new_session(client, "card-bank")
        for text in TO_RESUME_OFFER:
            turn = await message(client, sid, text)
        assert "Would you like to continue with Card Replace?" in turn["response"]
        # card_replace waits, paused, for the user's yes: no skill is active.
        offer = await view(client, sid)
        assert (turn["node"], offer["node"]) == (None, None)
        assert offer["skill_stack"] == ["card_replace"]
        listed = (await client.get(f"/v1/sessions/{sid}/turns")).json()["turns"]
        assert listed[-1]["node"] is None
        trace = (await client.get(turn["trace_url"])).json()
        assert trace["planTrace"]["steps"][-1]["node"] == "router"

        turn = await message(client, sid, "yes")
        resumed = await view(client, sid)
        assert (turn["node"], resumed["node"]) == ("card_replace", "card_replace")

        for text in TO_CONFIRMATION:
            turn = await message(client, sid, text)
        assert turn["confirmation"]
        held = (await view(client, sid))["pending_confirmation"]
        assert set(held) == PENDING_KEYS
        assert (held["skill"], held["block"], held["step"]) == (
            "card_replace",
            "order_card",
            "place_order",
        )

    run(api_store, scenario, paths=(CARD_BANK,))
