"""Requests that check a session's owner and existence, or read its turn count, and need nothing
of its state leave the state in the database: a page of turns, a turn's trace, a deletion, the
owner check before a turn queues for the lock. A state at the history limit is 4 MB to read
(5.5 ms of the event loop on SQLite per page). Their answers are the same: 404 for a session
missing, expired, deleted or of another key."""

from __future__ import annotations

import asyncio
import re
import sqlite3
import time
from contextlib import AsyncExitStack
from typing import Any

from .harness import api, execute, new_session

KEY_A, KEY_B = "key-a", "key-b"
# A statement that reads the state column (the turns' own columns are result and trace).
READS_STATE = re.compile(r"\bstate\b")


def sqlite_statements(client: Any) -> list[str]:
    """Every statement the served SQLite store runs from now on, as SQLite traces it."""
    statements: list[str] = []
    db: sqlite3.Connection = client._transport.app.state.service.store.db
    db.set_trace_callback(statements.append)
    return statements


def test_a_page_of_turns_a_trace_and_a_deletion_read_no_state(
    api_store: str, states_read: list[Any]
) -> None:
    async def main() -> None:
        async with api(api_store, keys=(KEY_A,)) as client:
            sid = await new_session(client)
            for text in ('/note {"text": "milk"}', "hello", "again"):
                sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": text})
                assert sent.status_code == 200, sent.text
            statements = sqlite_statements(client) if api_store.startswith("sqlite") else []
            states_read.clear()
            page = await client.get(f"/v1/sessions/{sid}/turns", params={"limit": 2})
            rest = await client.get(f"/v1/sessions/{sid}/turns", params={"after": 2})
            trace = await client.get(f"/v1/sessions/{sid}/turns/1/trace")
            missing = await client.get(f"/v1/sessions/{sid}/turns/9/trace")
            deleted = await client.delete(f"/v1/sessions/{sid}")
        assert [t["turn"] for t in page.json()["turns"]] == [1, 2]
        assert page.json()["next_after"] == 2
        assert [t["turn"] for t in rest.json()["turns"]] == [3]
        assert rest.json()["next_after"] is None
        assert trace.status_code == 200 and trace.json()
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "turn_not_found"
        assert deleted.status_code == 204
        # Each request read its session's row once, without the state.
        assert states_read == ["{}"] * 5
        assert not [s for s in statements if READS_STATE.search(s)]

    asyncio.run(main())


def test_the_owner_check_before_a_turns_lock_reads_no_state(
    api_store: str, states_read: list[Any]
) -> None:
    """A worker that does not know the session's owner yet reads it before the turn queues
    for the lock: without the state, which the lock read then reads (or leaves out)."""

    async def main() -> None:
        async with AsyncExitStack() as stack:
            one = await stack.enter_async_context(api(api_store, keys=(KEY_A,)))
            two = await stack.enter_async_context(api(api_store, keys=(KEY_A,)))
            sid = await new_session(one)
            states_read.clear()
            sent = await two.post(f"/v1/sessions/{sid}/messages", json={"text": "hi"})
            assert sent.status_code == 200, sent.text
        assert len(states_read) == 2 and states_read[0] == "{}"  # the owner's, then the lock's
        assert states_read[1] != "{}"

    asyncio.run(main())


def test_the_answers_are_the_same_for_a_session_missing_expired_deleted_or_another_keys(
    api_store: str,
) -> None:
    async def main() -> dict[str, list[int]]:
        async with AsyncExitStack() as stack:
            mine = await stack.enter_async_context(api(api_store, keys=(KEY_A, KEY_B)))
            theirs = await stack.enter_async_context(api(api_store, keys=(KEY_B, KEY_A)))
            ids = {}
            for name in ("live", "expired", "deleted", "theirs"):
                owner = theirs if name == "theirs" else mine
                ids[name] = await new_session(owner)
                sent = await owner.post(
                    f"/v1/sessions/{ids[name]}/messages", json={"text": "hello"}
                )
                assert sent.status_code == 200, sent.text
            ids["missing"] = "0" * 32
            execute(
                api_store,
                "UPDATE agentscript_sessions SET expires_at = ? WHERE session_id = ?",
                time.time() - 1,
                ids["expired"],
            )
            assert (await mine.delete(f"/v1/sessions/{ids['deleted']}")).status_code == 204
            seen: dict[str, list[int]] = {}
            for name, sid in ids.items():
                answers = [
                    await mine.get(f"/v1/sessions/{sid}/turns"),
                    await mine.get(f"/v1/sessions/{sid}/turns/1/trace"),
                    await mine.delete(f"/v1/sessions/{sid}"),
                ]
                for answer in answers:
                    if answer.status_code == 404:
                        assert answer.json()["error"]["code"] == "session_not_found"
                seen[name] = [a.status_code for a in answers]
            return seen

    seen = asyncio.run(main())
    assert seen == {
        "live": [200, 200, 204],
        "expired": [404, 404, 404],
        "deleted": [404, 404, 404],
        "theirs": [404, 404, 404],
        "missing": [404, 404, 404],
    }
