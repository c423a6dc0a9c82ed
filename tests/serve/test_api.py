"""The HTTP API as pinned in issue 11, through the real ASGI app, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

from agentscript.server import sse
from agentscript.server.config import ServerConfig
from agentscript.trace import FORMAT as TRACE_FORMAT

from .harness import CARD_BANK, NOTES, new_session, run

TURN_FIELDS = {
    "user",
    "response",
    "node",
    "actions",
    "variables",
    "escalated",
    "ended",
    "error",
    "unused_moves",
    "turn",
    "trace_url",
}


JSON_BODY = {"content-type": "application/json"}


def error_of(response: httpx.Response) -> tuple[int, str]:
    data = response.json()
    assert set(data) == {"error"} and set(data["error"]) == {"code", "message"}, data
    return response.status_code, data["error"]["code"]


# ------------------------------------------------------------------ agents


def test_api_lists_and_describes_agents(api_store: str) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        listed = (await client.get("/v1/agents")).json()["agents"]
        assert sorted(a["name"] for a in listed) == ["Notes", "card-bank"]
        notes = (await client.get("/v1/agents/Notes")).json()
        assert notes["format"] == "agentscript" and notes["nodes"] == ["router"]
        count = next(v for v in notes["variables"] if v["name"] == "count")
        assert count == {
            "name": "count",
            "type": "number",
            "mutable": True,
            "linked": False,
            "description": "Notes saved",
        }
        bank = (await client.get("/v1/agents/card-bank")).json()
        assert bank["format"] == "mantle" and bank["skills"]
        missing = await client.get("/v1/agents/Nope")
        assert error_of(missing) == (404, "agent_not_found")

    run(api_store, scenario, paths=(NOTES, CARD_BANK))


# ------------------------------------------------------------------ sessions


def test_api_create_session_returns_id_and_welcome(api_store: str) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        response = await client.post(
            "/v1/agents/Notes/sessions", json={"variables": {"customer": "Ada"}}
        )
        assert response.status_code == 201
        data = response.json()
        assert data["agent"] == "Notes" and data["messages"] == ["Hi! I keep notes."]
        view = (await client.get(f"/v1/sessions/{data['session_id']}")).json()
        assert view["variables"]["customer"] == "Ada" and view["turns"] == 0
        # no body at all is an empty set of variables
        assert (await client.post("/v1/agents/Notes/sessions")).status_code == 201

    run(api_store, scenario)


def test_api_wrong_typed_variable_is_422_naming_it(api_store: str) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        response = await client.post(
            "/v1/agents/Notes/sessions", json={"variables": {"count": "many"}}
        )
        assert error_of(response) == (422, "invalid_variable")
        assert "count" in response.json()["error"]["message"]
        unknown = await client.post("/v1/agents/Notes/sessions", json={"variables": {"nope": 1}})
        assert error_of(unknown) == (422, "invalid_variable")
        assert "nope" in unknown.json()["error"]["message"]
        not_a_map = await client.post("/v1/agents/Notes/sessions", json={"variables": [1]})
        assert error_of(not_a_map) == (422, "invalid_request")
        assert "variables" in not_a_map.json()["error"]["message"]

    run(api_store, scenario)


TOOLS_AGENT = str(Path(__file__).parents[1] / "engine" / "agents" / "tools.agent")


def test_api_deeply_nested_json_is_a_4xx_never_a_500(api_store: str) -> None:
    """JSON nested past what a saved session reads back, or past what the parser recurses
    through, is refused where it enters: a message body (the fast path used to answer 500),
    a variable at creation (a session 300 levels deep used to be created, then 500 on reading)."""

    def nested(levels: int) -> str:
        return '{"a": ' * (levels - 1) + "{}" + "}" * (levels - 1)

    async def scenario(client: httpx.AsyncClient) -> None:
        sid = await new_session(client, "Tools_Test")
        for levels in (2_000, 30_000):
            body = '{"text": ' + "[" * levels + "]" * levels + "}"
            sent = await client.post(
                f"/v1/sessions/{sid}/messages", content=body, headers=JSON_BODY
            )
            assert error_of(sent) == (400, "invalid_body"), sent.text
            created = await client.post(
                "/v1/agents/Tools_Test/sessions",
                content='{"variables": {"payload": ' + nested(levels) + "}}",
                headers=JSON_BODY,
            )
            assert error_of(created) == (400, "invalid_body"), created.text
        too_deep = await client.post(
            "/v1/agents/Tools_Test/sessions",
            content='{"variables": {"payload": ' + nested(300) + "}}",
            headers=JSON_BODY,
        )
        assert error_of(too_deep) == (422, "invalid_variable")
        assert "@variables.payload: nested more than 64 levels deep" in too_deep.text
        deepest = await client.post(
            "/v1/agents/Tools_Test/sessions",
            content='{"variables": {"payload": ' + nested(64) + "}}",
            headers=JSON_BODY,
        )
        assert deepest.status_code == 201
        sid = deepest.json()["session_id"]
        assert (await client.get(f"/v1/sessions/{sid}")).status_code == 200
        turn = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "hi"})
        assert turn.status_code == 200 and turn.json()["turn"] == 1

    run(api_store, scenario, paths=(TOOLS_AGENT,))


def test_api_message_returns_the_turn_json(api_store: str) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        sid = await new_session(client)
        response = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "hello"})
        assert response.status_code == 200
        data = response.json()
        assert set(data) >= TURN_FIELDS
        assert data["response"] == "You said: hello" and data["turn"] == 1
        assert data["trace_url"] == f"/v1/sessions/{sid}/turns/1/trace"
        note = await client.post(
            f"/v1/sessions/{sid}/messages", json={"text": '/note {"text": "milk"}'}
        )
        assert note.json()["actions"] == ["note"] and note.json()["turn"] == 2
        assert note.json()["variables"]["last_note"] == "milk"
        view = (await client.get(f"/v1/sessions/{sid}")).json()
        assert view["turns"] == 2 and view["node"] == "router"
        assert view["variables"]["last_note"] == "milk"

    run(api_store, scenario)


def test_api_trace_is_the_trace_file_document(api_store: str) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        sid = await new_session(client)
        await client.post(f"/v1/sessions/{sid}/messages", json={"text": "hello"})
        trace = (await client.get(f"/v1/sessions/{sid}/turns/1/trace")).json()
        assert trace["format"] == TRACE_FORMAT and trace["sessionId"] == sid
        assert trace["turn"] == 1 and trace["userInput"] == "hello"
        kinds = [s["type"] for s in trace["planTrace"]["steps"]]
        assert kinds[0] == "NODE_ENTER" and "LLM_STEP" in kinds
        missing = await client.get(f"/v1/sessions/{sid}/turns/2/trace")
        assert error_of(missing) == (404, "turn_not_found")
        turns = (await client.get(f"/v1/sessions/{sid}/turns")).json()["turns"]
        assert [(t["turn"], t["user"], t["response"]) for t in turns] == [
            (1, "hello", "You said: hello")
        ]

    run(api_store, scenario)


def test_api_idempotency_key_returns_stored_result_without_running(
    api_store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("NOTES_LOG", str(log))

    async def scenario(client: httpx.AsyncClient) -> None:
        sid = await new_session(client)
        body = {"text": '/note {"text": "eggs"}'}
        headers = {"Idempotency-Key": "order-42"}
        first = await client.post(f"/v1/sessions/{sid}/messages", json=body, headers=headers)
        again = await client.post(f"/v1/sessions/{sid}/messages", json=body, headers=headers)
        assert first.status_code == again.status_code == 200
        assert again.json() == first.json()
        assert (await client.get(f"/v1/sessions/{sid}")).json()["turns"] == 1
        # the action ran once and received the key
        calls = [json.loads(line) for line in log.read_text().splitlines()]
        assert [(c["text"], c["key"]) for c in calls] == [("eggs", "order-42")]
        # another key runs a new turn
        other = await client.post(
            f"/v1/sessions/{sid}/messages", json=body, headers={"Idempotency-Key": "order-43"}
        )
        assert other.json()["turn"] == 2

    run(api_store, scenario)


def test_api_idempotency_key_sent_again_with_another_message_is_409(api_store: str) -> None:
    """A key reused for the next message is a client's bug: answering that message with the
    previous turn's result would lose it silently."""

    async def scenario(client: httpx.AsyncClient) -> None:
        sid = await new_session(client)
        headers = {"Idempotency-Key": "msg-1"}
        url = f"/v1/sessions/{sid}/messages"
        first = await client.post(url, json={"text": "hello"}, headers=headers)
        assert first.status_code == 200
        reused = await client.post(url, json={"text": "goodbye"}, headers=headers)
        assert error_of(reused) == (409, "idempotency_key_reused")
        assert "turn 1" in reused.json()["error"]["message"]
        streamed = await client.post(
            url,
            json={"text": "goodbye"},
            headers={**headers, "Accept": "text/event-stream"},
        )
        assert error_of(streamed) == (409, "idempotency_key_reused")
        assert (await client.get(f"/v1/sessions/{sid}")).json()["turns"] == 1
        retried = await client.post(url, json={"text": "hello"}, headers=headers)
        assert retried.json() == first.json()  # the same message still replays

    run(api_store, scenario)


def test_api_sse_streams_tokens_steps_then_turn(api_store: str) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        sid = await new_session(client)
        response = await client.post(
            f"/v1/sessions/{sid}/messages",
            json={"text": '/note {"text": "tea"}'},
            headers={"Accept": "text/event-stream"},
        )
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse.parse(response.text)
        names = [name for name, _ in events]
        assert names[-1] == "turn" and names.count("turn") == 1
        assert "token" in names
        steps = [data["type"] for name, data in events if name == "step"]
        assert steps[0] == "NODE_ENTER" and "ACTION_STEP" in steps
        action = next(d for n, d in events if n == "step" and d["type"] == "ACTION_STEP")
        assert action["output"] == {"saved": "tea", "count": 0}  # sent once filled in
        final = events[-1][1]
        assert final["turn"] == 1 and final["variables"]["last_note"] == "tea"
        tokens = "".join(d["text"] for n, d in events if n == "token")
        assert tokens == final["response"]
        stored = (await client.get(f"/v1/sessions/{sid}/turns/1/trace")).json()
        assert [s["type"] for s in stored["planTrace"]["steps"]] == steps

    run(api_store, scenario)


def test_api_sse_error_before_the_turn_is_a_status(api_store: str) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        response = await client.post(
            "/v1/sessions/nosuchsession/messages",
            json={"text": "hi"},
            headers={"Accept": "text/event-stream"},
        )
        assert error_of(response) == (404, "session_not_found")

    run(api_store, scenario)


def test_api_turns_are_listed_in_pages(api_store: str) -> None:
    # A session's turns are never trimmed: the whole list in one answer reached 32 MB for
    # 1,000 long turns. Pages of `limit` (1-1,000, 1,000 by default) after turn `after`.
    async def scenario(client: httpx.AsyncClient) -> None:
        sid = await new_session(client)
        for text in ("a", "b", "c", "d", "e"):
            sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": text})
            assert sent.status_code == 200, sent.text
        url = f"/v1/sessions/{sid}/turns"

        async def page(**params: int) -> tuple[list[int], int | None]:
            listed = (await client.get(url, params=params)).json()
            return [t["turn"] for t in listed["turns"]], listed["next_after"]

        assert await page() == ([1, 2, 3, 4, 5], None)
        assert await page(limit=2) == ([1, 2], 2)
        assert await page(limit=2, after=2) == ([3, 4], 4)
        assert await page(limit=2, after=4) == ([5], None)
        assert await page(after=5) == ([], None)
        assert await page(after=10**30) == ([], None)  # past any turn, and past any SQL integer
        for bad in ({"limit": 0}, {"limit": 1001}, {"after": -1}):
            assert (await client.get(url, params=bad)).status_code == 422, bad

    run(api_store, scenario)


def test_api_list_sessions_gives_the_page_size_asked_for(api_store: str) -> None:
    # `limit` is documented as 1-1,000, but pages were cut at 100 without a word.
    async def scenario(client: httpx.AsyncClient) -> None:
        ids = sorted([await new_session(client) for _ in range(105)])
        page = (await client.get("/v1/sessions", params={"limit": 1000})).json()
        assert [s["session_id"] for s in page["sessions"]] == ids
        assert page["next_cursor"] is None

    run(api_store, scenario, config=ServerConfig(rate_limit=0))


def test_api_list_sessions_is_paged_and_filtered(api_store: str) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        ids = sorted([await new_session(client) for _ in range(3)])
        bank = await new_session(client, "card-bank")
        first = (await client.get("/v1/sessions", params={"limit": 2})).json()
        assert len(first["sessions"]) == 2 and first["next_cursor"]
        rest = (
            await client.get("/v1/sessions", params={"limit": 2, "cursor": first["next_cursor"]})
        ).json()
        seen = [s["session_id"] for s in first["sessions"] + rest["sessions"]]
        assert sorted(seen) == sorted([*ids, bank]) and rest["next_cursor"] is None
        notes = (await client.get("/v1/sessions", params={"agent": "Notes"})).json()
        assert sorted(s["session_id"] for s in notes["sessions"]) == ids
        bad = await client.get("/v1/sessions", params={"limit": 0})
        assert error_of(bad) == (422, "invalid_request")

    run(api_store, scenario, paths=(NOTES, CARD_BANK))


def test_api_delete_session_is_real(api_store: str) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        sid = await new_session(client)
        await client.post(f"/v1/sessions/{sid}/messages", json={"text": "hi"})
        assert (await client.delete(f"/v1/sessions/{sid}")).status_code == 204
        assert error_of(await client.get(f"/v1/sessions/{sid}")) == (404, "session_not_found")
        gone = await client.get(f"/v1/sessions/{sid}/turns/1/trace")
        assert error_of(gone) == (404, "session_not_found")
        assert error_of(await client.delete(f"/v1/sessions/{sid}")) == (404, "session_not_found")
        sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "hi"})
        assert error_of(sent) == (404, "session_not_found")

    run(api_store, scenario)


def test_api_session_ttl_expires_sessions(api_store: str) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        sid = await new_session(client)
        await asyncio.sleep(0.6)
        assert error_of(await client.get(f"/v1/sessions/{sid}")) == (404, "session_not_found")
        listed = (await client.get("/v1/sessions")).json()["sessions"]
        assert listed == []

    run(api_store, scenario, config=ServerConfig(session_ttl=0.5))


def test_api_mantle_session_shows_its_skill_stack(api_store: str) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        sid = await new_session(client, "card-bank")
        assert not (await client.get(f"/v1/sessions/{sid}")).json()["skill_stack"]
        text = '/activate_skill {"skill": "authenticate"}'
        response = await client.post(f"/v1/sessions/{sid}/messages", json={"text": text})
        assert response.status_code == 200, response.text
        assert response.json()["path"] == ["authenticate"]
        view = (await client.get(f"/v1/sessions/{sid}")).json()
        assert view["agent"] == "card-bank" and view["turns"] == 1
        assert view["skill_stack"] == ["authenticate"]

    run(api_store, scenario, paths=(CARD_BANK,))


# ------------------------------------------------------------------ errors and bounds


def test_api_bad_requests_are_4xx_with_error_body(api_store: str) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        sid = await new_session(client)
        url = f"/v1/sessions/{sid}/messages"
        not_json = await client.post(
            url, content=b"{", headers={"Content-Type": "application/json"}
        )
        assert error_of(not_json) == (400, "invalid_body")
        assert not_json.json()["error"]["message"] == (
            "the body is not JSON: Expecting property name enclosed in double quotes "
            "(at character 1)"
        )
        for bad_bytes in (b'{"text": "\xff\xfe"}', b"\xef\xbb"):  # not UTF-8
            not_utf8 = await client.post(
                url, content=bad_bytes, headers={"Content-Type": "application/json"}
            )
            assert error_of(not_utf8) == (400, "invalid_body")
            assert "UTF-8" in not_utf8.json()["error"]["message"]
        no_text = await client.post(url, json={"txt": "hi"})
        assert error_of(no_text) == (422, "invalid_request")
        assert "text" in no_text.json()["error"]["message"]
        wrong_type = await client.post(url, json={"text": 5})
        assert error_of(wrong_type) == (422, "invalid_request")
        assert error_of(await client.get("/v1/nothing")) == (404, "not_found")
        assert error_of(await client.put(url, json={})) == (405, "method_not_allowed")
        assert error_of(await client.get("/v1/sessions/bad%20id")) == (422, "invalid_request")

    run(api_store, scenario)


def test_api_message_and_body_bounds(api_store: str) -> None:
    config = ServerConfig(max_message_chars=10, max_body_bytes=200)

    async def scenario(client: httpx.AsyncClient) -> None:
        sid = await new_session(client)
        long = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "x" * 11})
        assert error_of(long) == (422, "message_too_long")
        assert "max_message_chars" in long.json()["error"]["message"]
        huge = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "x" * 500})
        assert error_of(huge) == (413, "body_too_large")
        assert (await client.get(f"/v1/sessions/{sid}")).json()["turns"] == 0

    run(api_store, scenario, config=config)


def test_api_lone_surrogates_are_422_before_anything_runs(api_store: str) -> None:
    """JSON can escape a lone surrogate; UTF-8 cannot encode it. Taken in, the turn would run
    and commit, then its answer fail with a 500."""

    async def scenario(client: httpx.AsyncClient) -> None:
        bad_value = b'{"variables": {"customer": ["ok", {"x": "\\udc80"}]}}'
        created = await client.post(
            "/v1/agents/Notes/sessions", content=bad_value, headers=JSON_BODY
        )
        assert error_of(created) == (422, "invalid_variable")
        assert "@variables.customer" in created.json()["error"]["message"]
        sid = await new_session(client)
        sent = await client.post(
            f"/v1/sessions/{sid}/messages", content=b'{"text": "ab\\ud800"}', headers=JSON_BODY
        )
        assert error_of(sent) == (422, "invalid_text")
        assert "at character 2" in sent.json()["error"]["message"]
        assert (await client.get(f"/v1/sessions/{sid}")).json()["turns"] == 0

    run(api_store, scenario)


def test_api_second_message_to_a_busy_session_waits_then_409(
    api_store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    block, log = tmp_path / "block", tmp_path / "calls.jsonl"
    block.touch()
    monkeypatch.setenv("NOTES_BLOCK", str(block))
    monkeypatch.setenv("NOTES_LOG", str(log))

    async def scenario(client: httpx.AsyncClient) -> None:
        sid = await new_session(client)
        other = await new_session(client)
        url = f"/v1/sessions/{sid}/messages"
        first = asyncio.create_task(client.post(url, json={"text": '/note {"text": "a"}'}))
        for _ in range(1000):  # until the first turn is inside its action (bounded)
            await asyncio.sleep(0.01)
            if log.exists():
                break
        second = await client.post(url, json={"text": "hi"})
        assert error_of(second) == (409, "session_busy")
        # another session does not wait
        free = await client.post(f"/v1/sessions/{other}/messages", json={"text": "hi"})
        assert free.status_code == 200
        block.unlink()
        assert (await first).status_code == 200
        assert (await client.get(f"/v1/sessions/{sid}")).json()["turns"] == 1

    run(api_store, scenario, config=ServerConfig(lock_wait=0.2))


def test_api_concurrent_turn_cap_is_503_with_retry_after(
    api_store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    block = tmp_path / "block"
    block.touch()
    monkeypatch.setenv("NOTES_BLOCK", str(block))

    async def scenario(client: httpx.AsyncClient) -> None:
        a, b = await new_session(client), await new_session(client)
        first = asyncio.create_task(
            client.post(f"/v1/sessions/{a}/messages", json={"text": '/note {"text": "a"}'})
        )
        for _ in range(200):
            await asyncio.sleep(0.01)
            if "agentscript_turns_in_progress 1" in (await client.get("/metrics")).text:
                break
        refused = await client.post(f"/v1/sessions/{b}/messages", json={"text": "hi"})
        assert error_of(refused) == (503, "too_many_turns")
        assert refused.headers["Retry-After"] == "1"
        block.unlink()
        assert (await first).status_code == 200

    run(api_store, scenario, config=ServerConfig(max_concurrent_turns=1))


def test_api_turns_per_key_cap_is_429_for_that_key_while_other_keys_run(
    api_store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    block = tmp_path / "block"
    block.touch()
    monkeypatch.setenv("NOTES_BLOCK", str(block))
    other = {"Authorization": "Bearer key-two"}

    async def scenario(client: httpx.AsyncClient) -> None:
        a, b = await new_session(client), await new_session(client)
        made = await client.post("/v1/agents/Notes/sessions", json={}, headers=other)
        theirs = made.json()
        first = asyncio.create_task(
            client.post(f"/v1/sessions/{a}/messages", json={"text": '/note {"text": "a"}'})
        )
        for _ in range(200):
            await asyncio.sleep(0.01)
            if "agentscript_turns_in_progress 1" in (await client.get("/metrics")).text:
                break
        refused = await client.post(f"/v1/sessions/{b}/messages", json={"text": "hi"})
        assert error_of(refused) == (429, "too_many_turns_for_key")
        assert refused.headers["Retry-After"] == "1"
        sid = theirs["session_id"]
        ran = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "hi"}, headers=other)
        assert ran.status_code == 200  # the other key still finds a slot
        block.unlink()
        assert (await first).status_code == 200
        again = await client.post(f"/v1/sessions/{b}/messages", json={"text": "hi"})
        assert again.status_code == 200  # its turn ended: the key's share is free again
        assert (await client.get(f"/v1/sessions/{b}")).json()["turns"] == 1

    run(
        api_store,
        scenario,
        keys=("key-one", "key-two"),
        config=ServerConfig(max_concurrent_turns=8, max_turns_per_key=1),
    )


# ------------------------------------------------------------------ keys


def test_api_keys_required_and_sessions_belong_to_their_key(api_store: str) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        sid = await new_session(client)
        other = {"Authorization": "Bearer key-two"}
        assert error_of(await client.get(f"/v1/sessions/{sid}", headers=other)) == (
            404,
            "session_not_found",
        )
        sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "hi"}, headers=other)
        assert error_of(sent) == (404, "session_not_found")
        listed = (await client.get("/v1/sessions", headers=other)).json()["sessions"]
        assert listed == []
        deleted = await client.delete(f"/v1/sessions/{sid}", headers=other)
        assert error_of(deleted) == (404, "session_not_found")
        for bad in ({"Authorization": "Bearer nope"}, {"Authorization": "Basic a2V5LW9uZQ=="}):
            response = await client.get("/v1/agents", headers=bad)
            assert error_of(response) == (401, "unauthorized")
            assert "nope" not in response.text
        async with httpx.AsyncClient(transport=client._transport, base_url="http://test") as anon:
            assert error_of(await anon.get("/v1/agents")) == (401, "unauthorized")
            assert (await anon.get("/healthz")).status_code == 200
        assert (await client.get(f"/v1/sessions/{sid}")).status_code == 200

    run(api_store, scenario, keys=("key-one", "key-two"))


def test_api_rate_limit_is_429_with_retry_after(api_store: str) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        statuses = [(await client.get("/v1/agents")).status_code for _ in range(4)]
        assert statuses[:2] == [200, 200] and statuses[-1] == 429
        limited = await client.get("/v1/agents")
        assert error_of(limited) == (429, "rate_limited")
        assert int(limited.headers["Retry-After"]) >= 1
        # the limit is per key
        other = await client.get("/v1/agents", headers={"Authorization": "Bearer key-two"})
        assert other.status_code == 200

    run(
        api_store,
        scenario,
        keys=("key-one", "key-two"),
        config=ServerConfig(rate_limit=0.01, rate_burst=2),
    )


# ------------------------------------------------------------------ operations


def test_api_health_ready_metrics_openapi(api_store: str) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        ready = (await client.get("/readyz")).json()
        # The store's kind, never its URL (anyone may ask; a URL names hosts and users).
        kind = api_store.split(":", 1)[0]
        assert ready == {"status": "ready", "store": kind, "agents": ["Notes"]}
        for path in ("/healthz", "/readyz"):  # load balancers' checks often send HEAD
            head = await client.head(path)
            assert head.status_code == 200 and head.content == b""
        sid = await new_session(client)
        await client.post(f"/v1/sessions/{sid}/messages", json={"text": '/note {"text": "x"}'})
        text = (await client.get("/metrics")).text
        assert 'agentscript_turns_total{agent="Notes",outcome="ok"} 1' in text
        assert 'agentscript_llm_calls_total{agent="Notes"} 2' in text
        assert 'agentscript_turn_model_seconds_count{agent="Notes"} 1' in text
        assert 'agentscript_turn_engine_seconds_count{agent="Notes"} 1' in text
        assert 'agentscript_tokens_total{agent="Notes",direction="input"} 20' in text
        assert "agentscript_active_sessions 1" in text
        schema = (await client.get("/openapi.json")).json()
        paths = set(schema["paths"])
        assert {
            "/v1/agents",
            "/v1/agents/{agent}",
            "/v1/agents/{agent}/sessions",
            "/v1/sessions",
            "/v1/sessions/{session_id}",
            "/v1/sessions/{session_id}/messages",
            "/v1/sessions/{session_id}/turns",
            "/v1/sessions/{session_id}/turns/{turn}/trace",
            "/healthz",
            "/readyz",
            "/metrics",
        } <= paths

    run(api_store, scenario)


def test_api_session_of_a_changed_agent_is_409(api_store: str, tmp_path: Path) -> None:
    agent = tmp_path / "notes.agent"
    agent.write_text(Path(NOTES).read_text())
    (tmp_path / "notes_backend.py").write_text(
        (Path(NOTES).parent / "notes_backend.py").read_text()
    )

    async def create(client: httpx.AsyncClient) -> str:
        sid = await new_session(client)
        assert (await client.get(f"/v1/sessions/{sid}")).json()["compatible"] is True
        return sid

    sid = run(api_store, create, paths=(str(agent),))
    agent.write_text(
        agent.read_text().replace(
            '    last_note: mutable string = ""', "    last_note: mutable number = 0"
        )
    )

    async def resume(client: httpx.AsyncClient) -> Any:
        # Told before any message: the view and the list say the next turn cannot run here.
        assert (await client.get(f"/v1/sessions/{sid}")).json()["compatible"] is False
        listed = (await client.get("/v1/sessions")).json()["sessions"]
        assert [(s["session_id"], s["compatible"]) for s in listed] == [(sid, False)]
        fresh = await new_session(client)
        listed = (await client.get("/v1/sessions")).json()["sessions"]
        assert {s["session_id"]: s["compatible"] for s in listed} == {sid: False, fresh: True}
        return await client.post(f"/v1/sessions/{sid}/messages", json={"text": "hi"})

    response = run(api_store, resume, paths=(str(agent),))
    assert error_of(response) == (409, "session_incompatible")
    assert "another version" in response.json()["error"]["message"]


def test_api_no_traceback_in_any_error(api_store: str) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        for response in (
            await client.post("/v1/agents/Notes/sessions", content=b"\xff\xfe"),
            await client.post("/v1/sessions/x/messages", json={"text": None}),
            await client.get("/v1/sessions/x/turns/0/trace"),
            await client.get("/v1/sessions", params={"limit": "many"}),
        ):
            assert 400 <= response.status_code < 500, response.text
            assert "Traceback" not in response.text

    run(api_store, scenario)


def test_api_sse_tokens_from_a_streaming_openai_compatible_model(tmp_path: Path) -> None:
    """Through the real OpenAI client and the stand-in HTTP model server (streamed answer)."""
    from agentscript.models.config import model_from_spec
    from agentscript.server.agents import load_agents, serve_agents
    from agentscript.server.app import create_app
    from agentscript.server.standin import StandInServer
    from agentscript.store import MemoryStore

    async def main(base_url: str) -> list[tuple[str, Any]]:
        agents = load_agents([NOTES])
        model = model_from_spec("openai:standin", base_url=base_url)
        app = create_app(serve_agents(agents, {"Notes": model}), MemoryStore(), purge_every=None)
        transport = httpx.ASGITransport(app=app)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://test") as client,
        ):
            sid = await new_session(client)
            response = await client.post(
                f"/v1/sessions/{sid}/messages",
                json={"text": "stream this please"},
                headers={"Accept": "text/event-stream"},
            )
            return sse.parse(response.text)

    with StandInServer() as server:
        events = asyncio.run(main(server.base_url))
    tokens = [d["text"] for n, d in events if n == "token"]
    assert len(tokens) > 1  # the answer arrived in pieces
    assert "".join(tokens) == events[-1][1]["response"] == "You said: stream this please"


def test_api_cors_off_unless_configured(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    preflight = {
        "Origin": "https://app.example.com",
        "Access-Control-Request-Method": "POST",
    }

    async def scenario(client: httpx.AsyncClient) -> tuple[int, dict[str, str]]:
        response = await client.options("/v1/agents/Notes/sessions", headers=preflight)
        get = await client.get("/v1/agents", headers={"Origin": "https://app.example.com"})
        return response.status_code, {**get.headers, **response.headers}

    status, headers = run(url, scenario)
    assert "access-control-allow-origin" not in headers and status == 405
    config = ServerConfig(cors_origins=["https://app.example.com"])
    status, headers = run(url, scenario, config=config)
    assert status == 200
    assert headers["access-control-allow-origin"] == "https://app.example.com"


def test_api_restores_each_turn_from_the_stored_text_without_walking_it(
    api_store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store hands ``restore`` its JSON text: only the depth is checked, no walk and copy
    of the whole history in Python before every turn (which grew with the session)."""
    from agentscript.engine import restore

    def no_walk(*args: object, **kwargs: object) -> object:
        raise AssertionError("json_safe walked a stored session")

    monkeypatch.setattr(restore, "json_safe", no_walk)

    async def scenario(client: httpx.AsyncClient) -> None:
        sid = await new_session(client)
        for n in range(1, 4):
            response = await client.post(f"/v1/sessions/{sid}/messages", json={"text": f"hi {n}"})
            assert response.status_code == 200, response.text
            assert response.json()["turn"] == n

    # Every turn restored (none kept in memory), so each one takes this path.
    run(api_store, scenario, config=ServerConfig(live_sessions=0))


def test_restoring_json_text_still_refuses_what_a_mapping_is_refused_for() -> None:
    from agentscript.engine.restore import SESSION_MAX_DEPTH, SessionRestoreError, decode

    deep: object = 1
    for _ in range(SESSION_MAX_DEPTH + 2):
        deep = [deep]
    for bad, reason in (
        ('{"a": NaN}', "NaN is not JSON"),
        ('{"a": ' + "9" * 5000 + "}", "not valid JSON"),
        ("[1, 2]", "expected a JSON object, got list"),
        (json.dumps({"history": deep}), f"nested more than {SESSION_MAX_DEPTH} levels deep"),
    ):
        with pytest.raises(SessionRestoreError) as caught:
            decode(bad)
        assert reason in str(caught.value)
