"""What a turn whose state cannot be kept commits, and says (an audit of ``commit_fit.fit_commit``).

A turn whose state is over ``MAX_SESSION_CHARS`` even shrunk fails, and the session keeps its
state from before it, with what the turn counted. The audit found:

- the state from before the turn still held the call the turn had confirmed and run: the
  next "yes" ran it again (Agent Script's ``pending_confirmation``, Mantle's held call);
- that state plus the turn's counters was committed unmeasured: at the limit it was over,
  and every worker answered ``500 session_damaged``;
- streamed, the turn's tokens were what it said before it failed, not its error;
- the memory store kept the state as a dict, which a restore measures by an estimate (a
  float counts 24 characters): a fitted state was refused on the next restore.

The limit is lowered (``restore`` reads it when called); two servers on one store are two
workers.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from tests.fakes import fitting
from tests.fakes.agent_texts import Action, Field, Tool
from tests.fakes.fitting import CONFIG, write_agent

from agentscript import jsontext
from agentscript.engine import restore
from agentscript.models.base import Message, ToolCall
from agentscript.models.function import FunctionInfo, FunctionModel
from agentscript.server import sse
from agentscript.server.config import ServerConfig
from agentscript.store import SessionRecord, TurnOutcome, TurnRecord, store_from_url

from .harness import api, new_session, say, stored_state

NOT_KEPT = "was not kept"

AGENT = fitting.fits_agent(
    variables={
        **dict.fromkeys("ab", fitting.KEPT_TEXT),
        "fl": Field("mutable list[number] = []", "Kept numbers"),
    },
    tools=[
        fitting.FETCH_TOOL,
        *map(fitting.keep_tool, "ab"),
        Tool(
            "keep_fl",
            "@actions.numbers",
            ['description: "Keep numbers"', "with n=...", "set @variables.fl = @outputs.values"],
        ),
        fitting.WIPE_TOOL,
    ],
    actions=[
        fitting.FETCH,
        Action(
            "numbers",
            "Numbers",
            "python://fits_pages:numbers",
            inputs={"n": Field("number", "How many")},
            outputs={"values": "list[number]"},
        ),
        fitting.WIPE,
    ],
)

# ``wipe`` notes each run in wipes.log, beside it.
PAGES = """
from pathlib import Path


def fetch(size: float) -> dict[str, object]:
    return {"text": "x" * int(size)}


def numbers(n: float) -> dict[str, object]:
    return {"values": [0.5] * int(n)}


def wipe() -> dict[str, object]:
    with (Path(__file__).parent / "wipes.log").open("a") as log:
        log.write("wipe\\n")
    return {"ok": True}
"""

# A Mantle skill whose gated tool, once run, fills memory past any fit.
MANTLE_FILES = {
    "agent.yml": "agent:\n  id: pay-bot\n  persona: You send money.\n",
    "skills/pay/skill.md": """---
name: Pay
description: Send money.
tool_constraints:
  - send_money:
      requires_confirmation:
        enabled: true
---
Ask how much, then call send_money.
""",
    "skills/pay/memory.yml": """schema:
  public:
    note_a:
      type: text
      description: A note.
    note_b:
      type: text
      description: Another note.
""",
    "skills/pay/tools.py": '''from pathlib import Path
from typing import Any


def send_money(amount: int, context: Any = None) -> dict[str, Any]:
    """Send money, and keep two long notes.

    Args:
        amount: how much
    """
    with (Path(__file__).parent / "sent.log").open("a") as log:
        log.write(f"{amount}\\n")
    context.memory.set("note_a", "a" * 160000)
    context.memory.set("note_b", "b" * 160000)
    return {"ok": True}
''',
}


def keep(at: str, size: int) -> list[ToolCall]:
    return [ToolCall(f"{at}_{n}", f"keep_{n}", {"size": size}) for n in "ab"]


def answer(messages: list[Message], info: FunctionInfo) -> Any:
    """By the user's last message: ``wipe`` calls wipe (held for a yes); a "yes" that ran it
    then keeps two pages of 160,000 characters (no fit takes them); ``keep SIZE``,
    ``fetch SIZE...``, ``numbers N`` call those tools; after the results, ``done``; else ``ok``.
    Call ids are made of the history's length: two servers have two models."""
    user = max(i for i, m in enumerate(messages) if m.role == "user")
    words = messages[user].content.split() or [""]
    calls = [c.name for m in messages[user:] if m.role == "assistant" for c in m.tool_calls]
    at = f"c{len(messages)}"
    if words[0] == "yes" and calls == ["wipe"]:
        return keep(at, 160_000)
    if calls:
        return "done"
    if words[0] == "wipe":
        return [ToolCall(f"{at}_w", "wipe", {})]
    if words[0] == "keep":
        return keep(at, int(words[1]))
    if words[0] == "fetch":
        return [ToolCall(f"{at}_{i}", "fetch", {"size": int(s)}) for i, s in enumerate(words[1:])]
    if words[0] == "numbers":
        return [ToolCall(f"{at}_n", "keep_fl", {"n": int(words[1])})]
    return "ok"


def mantle_answer(messages: list[Message], info: FunctionInfo) -> Any:
    """``pay``: start the skill, call send_money (held: the model asks), then ask; else ``ok``
    (a "yes" is the engine's to resolve)."""
    user = max(i for i, m in enumerate(messages) if m.role == "user")
    after = messages[user + 1 :]
    if messages[user].content != "pay" or (after and after[-1].role == "assistant"):
        return "ok"
    if "send_money" not in info.tool_names:
        return ToolCall(f"m{len(messages)}_a", "activate_skill", {"skill": "pay"})
    if any(c.name == "send_money" for m in after for c in m.tool_calls):
        return "Send 5?"
    return ToolCall(f"m{len(messages)}_s", "send_money", {"amount": 5})


small_cap = fitting.small_cap  # the fixture


@pytest.fixture
def agent_path(tmp_path: Path) -> Path:
    folder = tmp_path / "fits"
    folder.mkdir()
    return write_agent(folder, AGENT, PAGES, CONFIG)


@pytest.fixture
def mantle_path(tmp_path: Path) -> Path:
    root = tmp_path / "pay"
    for name, text in MANTLE_FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@asynccontextmanager
async def server(
    store_url: str, path: Path, model: Callable[..., Any] = answer, live: int = 1000
) -> AsyncIterator[httpx.AsyncClient]:
    config = ServerConfig(rate_limit=0, live_sessions=live)
    async with api(
        store_url, paths=(str(path),), config=config, model=lambda: FunctionModel(model)
    ) as client:
        yield client


@dataclass(frozen=True)
class Workers:
    first: httpx.AsyncClient
    second: httpx.AsyncClient
    agent: str


def on_two_workers(
    store_url: str,
    path: Path,
    body: Callable[[Workers], Awaitable[None]],
    model: Callable[..., Any] = answer,
) -> None:
    async def main() -> None:
        async with AsyncExitStack() as stack:
            first = await stack.enter_async_context(server(store_url, path, model))
            second = await stack.enter_async_context(server(store_url, path, model))
            agents = (await first.get("/v1/agents")).json()["agents"]
            await body(Workers(first, second, agents[0]["name"]))

    asyncio.run(main())


async def view(client: httpx.AsyncClient, sid: str) -> dict[str, Any]:
    response = await client.get(f"/v1/sessions/{sid}")
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found


async def events(client: httpx.AsyncClient, sid: str, turn: int) -> list[str]:
    response = await client.get(f"/v1/sessions/{sid}/turns/{turn}/trace")
    assert response.status_code == 200, response.text
    steps = response.json()["planTrace"]["steps"]
    return [s["event"] for s in steps if s["type"] == "EVENT_STEP"]


def runs(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


# --- a confirmation the failed turn answered stays answered ---------------------------------


def test_a_call_confirmed_in_a_turn_that_was_not_kept_is_not_run_again_by_the_next_yes(
    api_store: str, agent_path: Path, small_cap: int
) -> None:
    wipes = agent_path.parent / "wipes.log"

    async def main(w: Workers) -> None:
        sid = await new_session(w.first, w.agent)
        assert (await say(w.first, sid, "wipe"))["confirmation"] is not None
        # The yes runs wipe; the turn then keeps more than any fit takes, and fails.
        result = await say(w.first, sid, "yes")
        assert NOT_KEPT in result["error"] and result["confirmation"] is None
        assert runs(wipes) == 1
        assert "confirmation_resolved" in await events(w.first, sid, 2)
        # The session agrees with the answer: nothing waits for a yes.
        assert (await view(w.second, sid))["pending_confirmation"] is None
        assert json.loads(stored_state(api_store, sid))["pending_confirmation"] is None
        again = await say(w.second, sid, "yes")
        assert again["actions"] == [] and again["error"] is None
        assert runs(wipes) == 1

    on_two_workers(api_store, agent_path, main)


def test_a_mantle_call_confirmed_in_a_turn_that_was_not_kept_is_not_run_again(
    api_store: str, mantle_path: Path, small_cap: int
) -> None:
    sent = mantle_path / "skills" / "pay" / "sent.log"

    async def main(w: Workers) -> None:
        sid = await new_session(w.first, w.agent)
        await say(w.first, sid, "pay")
        held = json.loads(stored_state(api_store, sid))["extra"]["mantle"]["pending"]
        assert held is not None and held["tool"] == "send_money"
        # The yes runs send_money, whose notes no fit takes: the turn fails.
        result = await say(w.first, sid, "yes")
        assert NOT_KEPT in result["error"] and result["confirmation"] is None
        assert runs(sent) == 1
        mantle = json.loads(stored_state(api_store, sid))["extra"]["mantle"]
        assert mantle["pending"] is None
        assert [f["skill"] for f in mantle["stack"]] == ["pay"]  # the rest as before the turn
        again = await say(w.second, sid, "yes")
        assert again["error"] is None and "send_money" not in again["actions"]
        assert runs(sent) == 1

    on_two_workers(api_store, mantle_path, main, mantle_answer)


# --- the state committed for it is one every worker restores --------------------------------


def test_a_failed_turn_whose_counters_take_the_state_from_before_it_over_the_limit_fits_it(
    api_store: str, agent_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main(w: Workers) -> None:
        sid = await new_session(w.first, w.agent)
        for _ in range(9):
            await say(w.first, sid, "hello")
        before = stored_state(api_store, sid)
        # The state from before the turn is at the limit: its turn 9 becomes 10 (and its
        # usage grows), one character more at least.
        monkeypatch.setattr(restore, "MAX_SESSION_CHARS", len(before))
        result = await say(w.first, sid, "keep 160000")
        assert NOT_KEPT in result["error"] and result["turn"] == 10
        text = stored_state(api_store, sid)
        assert len(text) <= len(before)
        state = json.loads(text)
        assert state["turn"] == 10 and state["variables"] == json.loads(before)["variables"]
        # Its own earlier exchanges made room for the counters; the trace says so.
        assert await events(w.first, sid, 10) == ["state_fitted"]
        assert (await say(w.second, sid, "hello"))["turn"] == 11

    on_two_workers(api_store, agent_path, main)


def test_a_failed_turn_whose_state_before_it_cannot_take_its_counters_keeps_it_as_stored(
    api_store: str, agent_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main(w: Workers) -> None:
        # A new session with nothing in its history to shrink, at the limit.
        sid = await new_session(w.first, w.agent, a="x" * 200_000)
        before = stored_state(api_store, sid)
        monkeypatch.setattr(restore, "MAX_SESSION_CHARS", len(before))
        result = await say(w.first, sid, "keep 160000")
        assert NOT_KEPT in result["error"] and result["turn"] == 1
        assert stored_state(api_store, sid) == before
        assert await events(w.first, sid, 1) == []
        assert (await say(w.second, sid, "hello"))["turn"] == 2

    on_two_workers(api_store, agent_path, main)


# --- streamed, the error is said -----------------------------------------------------------


def test_a_streamed_turn_that_was_not_kept_streams_its_error_after_what_it_said(
    agent_path: Path, small_cap: int
) -> None:
    async def main() -> None:
        async with server("memory://", agent_path) as client:
            sid = await new_session(client, "Fits")
            response = await client.post(
                f"/v1/sessions/{sid}/messages",
                json={"text": "keep 160000"},
                headers={"Accept": "text/event-stream"},
            )
            found = sse.parse(response.text)
            name, turn = found[-1]
            assert name == "turn" and NOT_KEPT in turn["error"]
            tokens = [data["text"] for name, data in found if name == "token"]
            # As a failed turn's own message is said: after the separator, as a token.
            assert tokens[-2:] == ["\n\n", turn["response"]]
            assert "".join(tokens) == f"done\n\n{turn['response']}"

    asyncio.run(main())


# --- the memory store keeps the text it was given ------------------------------------------


def test_a_fitted_state_restores_from_the_memory_store(agent_path: Path, small_cap: int) -> None:
    """8,000 numbers take 32,000 characters in the text and 192,000 in the estimate a
    restore makes of a dict: the fitted state fits as text, the store now keeps that text."""

    async def main() -> None:
        async with server("memory://", agent_path, live=0) as client:
            sid = await new_session(client, "Fits")
            await say(client, sid, "numbers 8000")
            result = await say(client, sid, "fetch " + " ".join(["10000"] * 40))
            assert result["error"] is None
            assert await events(client, sid, 2) == ["state_fitted"]
            assert (await say(client, sid, "hello"))["error"] is None
            await view(client, sid)

    asyncio.run(main())


def test_the_memory_store_keeps_the_state_text_it_is_given() -> None:
    async def main() -> None:
        store = store_from_url("memory://")
        state = {"format": "x", "numbers": [0.5, 1e-05]}
        await store.create_session(SessionRecord("s1", "A", "k1", "v1", state))
        got = await store.get_session("s1")
        assert got is not None and got.state_text == jsontext.dumps(state)
        text = '{"format": "x", "n": 1}'  # as a caller wrote it, spaces and all
        async with store.lock_session("s1", 1.0) as lock:
            assert lock.session.state == state
            outcome = TurnOutcome(
                state={"format": "x", "n": 1},
                state_text=text,
                record=TurnRecord("s1", 1, {}, {}),
                ended=False,
                escalated=False,
                expires_at=None,
            )
            await lock.commit(outcome)
        outcome.state["n"] = 2  # the caller's dict is not what is stored
        got = await store.get_session("s1")
        assert got is not None and (got.state_text, got.state) == (text, {"format": "x", "n": 1})
        got.state["n"] = 3
        again = await store.get_session("s1")
        assert again is not None and again.state == {"format": "x", "n": 1}

    asyncio.run(main())
