"""A turn cut at shutdown while its commit was on its way to the store may have committed:
the log says so, and its client is told to resend with the same Idempotency-Key (a PostgreSQL
commit whose answer was lost had been applied while the client read "nothing committed")."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentscript.models.function import FunctionModel
from agentscript.server.agents import load_agents, serve_agents
from agentscript.server.config import ServerConfig
from agentscript.server.errors import CUT_AT_SHUTDOWN
from agentscript.server.metrics import Metrics
from agentscript.server.service import SessionService
from agentscript.server.shutdown import ShutdownClock
from agentscript.store import store_from_url

from .harness import NOTES


@pytest.fixture(autouse=True)
def _clean_clock() -> None:
    ShutdownClock.reset()


def _service() -> SessionService:
    agents = load_agents([NOTES])
    served = serve_agents(agents, {a.name: FunctionModel(lambda m, i: "noted") for a in agents})
    return SessionService(served, store_from_url("memory://"), ServerConfig(), Metrics())


def test_a_turn_cut_while_committing_is_counted_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentscript.store import memory

    async def scenario() -> tuple[int, int, int]:
        service = _service()
        await service.store.open()
        sid = (await service.create("", "Notes", {}))["session_id"]
        sent = asyncio.Event()

        async def commit_never_answered(self: Any, outcome: Any) -> None:
            sent.set()
            await asyncio.sleep(3600)  # the database has it; its answer never comes

        monkeypatch.setattr(memory._MemoryLock, "commit", commit_never_answered)
        turn = asyncio.create_task(service.send("", sid, "tea", "key-1"))
        await asyncio.wait_for(sent.wait(), 5)
        turn.cancel()  # what uvicorn does to a request still running after the grace
        cut = await service.finish_turns(0.0)
        with pytest.raises(asyncio.CancelledError):
            await turn
        return cut, service.cut_while_committing

    assert asyncio.run(scenario()) == (1, 1)


def test_a_turn_cut_before_its_commit_is_not_counted_as_committing() -> None:
    async def scenario() -> tuple[int, int]:
        service = _service()
        service.background.add(asyncio.create_task(asyncio.sleep(3600)))  # still at its model
        cut = await service.finish_turns(0.0)
        return cut, service.cut_while_committing

    assert asyncio.run(scenario()) == (1, 0)


def test_the_client_of_a_cut_turn_is_told_to_resend_with_its_key() -> None:
    assert "same Idempotency-Key" in CUT_AT_SHUTDOWN
    assert "unless it was cut while committing" in CUT_AT_SHUTDOWN
