"""A store audit's findings on the service (server/service.py): another key's message to a busy
session is refused before it queues for the session's lock, and the owner's own turn pays no
read for that check on a worker that knows the session."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest

from agentscript.server.config import ServerConfig

from .harness import api, new_session

KEYS = ("key-a", "key-b")
KEY_B = {"Authorization": "Bearer key-b"}
UNKNOWN = "0" * 32
# Without the owner checked before the lock, key B's message would wait this long for key A's
# turn, then answer 409 session_busy: that the session exists and is busy.
LOCK_WAIT = 5.0
HANG_GUARD = 60.0  # an upper bound only, against a test that hangs


async def wait_for_file(path: Path) -> None:
    for _ in range(1000):  # until the turn is inside its action (bounded)
        if path.exists():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{path} never appeared")


def test_another_keys_message_to_a_busy_session_is_404_before_the_owners_turn_ends(
    api_store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the worker that created the session (owner known) and on another one (owner read),
    key B's message answers 404 while key A's turn is still blocked in its action, the same
    404 as for an id that does not exist, and with or without an Idempotency-Key."""
    block, log = tmp_path / "block", tmp_path / "calls.jsonl"
    block.touch()
    monkeypatch.setenv("NOTES_BLOCK", str(block))
    monkeypatch.setenv("NOTES_LOG", str(log))
    config = ServerConfig(rate_limit=0, lock_wait=LOCK_WAIT)

    async def main() -> None:
        async with AsyncExitStack() as stack:
            one = await stack.enter_async_context(api(api_store, keys=KEYS, config=config))
            two = await stack.enter_async_context(api(api_store, keys=KEYS, config=config))
            sid = await new_session(one)
            owners_turn = asyncio.create_task(
                one.post(f"/v1/sessions/{sid}/messages", json={"text": '/note {"text": "a"}'})
            )
            await wait_for_file(log)
            answers = [
                await asyncio.wait_for(
                    client.post(f"/v1/sessions/{target}/messages", json={"text": "hi"}, headers=h),
                    HANG_GUARD,
                )
                for client in (one, two)
                for target in (sid, UNKNOWN)
                for h in (KEY_B, {**KEY_B, "Idempotency-Key": "k1"})
            ]
            still_blocked = not owners_turn.done()
            block.unlink()
            finished = await owners_turn
        assert still_blocked
        errors = {(a.status_code, a.text.replace(sid, UNKNOWN)) for a in answers}
        assert len(errors) == 1 and errors.pop()[0] == 404  # an unknown id's answer, each time
        assert answers[-1].json()["error"]["code"] == "session_not_found"
        assert finished.status_code == 200 and finished.json()["turn"] == 1

    asyncio.run(main())


def test_the_owners_turn_reads_the_session_only_under_the_lock_once_the_worker_knows_it(
    api_store: str,
) -> None:
    """The check before the lock costs no round trip on the worker that created the session,
    and one on another worker, the first time only: a turn stays two statements. That read
    leaves the state out (it needs the owner only)."""

    async def main() -> None:
        async with AsyncExitStack() as stack:
            one = await stack.enter_async_context(api(api_store, keys=KEYS))
            two = await stack.enter_async_context(api(api_store, keys=KEYS))
            sid = await new_session(one)
            reads: list[str] = []
            for name, client in (("one", one), ("two", two)):
                store = client._transport.app.state.service.store  # type: ignore[attr-defined]
                store.get_session = counted(store.get_session, reads, name)
                store.get_session_summary = counted(
                    store.get_session_summary, reads, f"{name} without state"
                )
            for client in (one, two, two):
                sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "hi"})
                assert sent.status_code == 200, sent.text
        assert reads == ["two without state"]

    asyncio.run(main())


def counted(read: Any, reads: list[str], worker: str) -> Any:
    """``read``, noting ``worker`` in ``reads`` at each call."""

    async def reading(session_id: str) -> Any:
        reads.append(worker)
        return await read(session_id)

    return reading
