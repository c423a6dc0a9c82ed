"""A stored row that cannot be read (damaged on disk, written by hand) is refused by name, and
only where its damaged part is needed: the session's listing, its other turns, replays that do
not need it and its deletion keep working, and the row stays as it was found."""

from __future__ import annotations

import asyncio
import json
import logging
import zlib
from collections.abc import Callable
from typing import Any

import pytest

from agentscript.store import DamagedRecord, SessionRecord, TurnRecord, schema
from agentscript.store import lease as lease_module

from .harness import execute, lease_rows, new_session, run
from .test_api import error_of
from .test_store import sql

# Damaged text that would be a leak if an error quoted it.
TORN_STATE = '{"variables": {"card": "4111-SECRET"'


def test_damaged_session_state_is_refused_by_name_and_the_session_can_still_be_deleted(
    api_store: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario(client: Any) -> dict[str, Any]:
        sid = await new_session(client)
        first = await client.post(
            f"/v1/sessions/{sid}/messages", json={"text": "hi"}, headers={"Idempotency-Key": "k1"}
        )
        assert first.status_code == 200
        sql(api_store, f"UPDATE agentscript_sessions SET state = '{TORN_STATE}'")
        seen: dict[str, Any] = {"sid": sid}
        got = await client.get(f"/v1/sessions/{sid}")
        seen["get"] = error_of(got), got.json()["error"]["message"]
        sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "again"})
        seen["send"] = error_of(sent)
        seen["leases"] = lease_rows(api_store)
        replayed = await client.post(
            f"/v1/sessions/{sid}/messages",
            json={"text": "hi"},
            headers={"Idempotency-Key": "k1"},
        )
        seen["replay"] = replayed.status_code, replayed.json().get("turn")
        listed = (await client.get("/v1/sessions")).json()["sessions"]
        seen["listed"] = [(s["session_id"], s["turns"]) for s in listed]
        seen["turns"] = (await client.get(f"/v1/sessions/{sid}/turns")).status_code
        seen["trace"] = (await client.get(f"/v1/sessions/{sid}/turns/1/trace")).status_code
        seen["delete"] = (await client.delete(f"/v1/sessions/{sid}")).status_code
        seen["after"] = (await client.get(f"/v1/sessions/{sid}")).status_code
        return seen

    with caplog.at_level(logging.ERROR, logger="agentscript.server"):
        seen = run(api_store, scenario)
    sid = seen["sid"]
    (status, message) = seen["get"]
    assert status == (500, "session_damaged")
    assert sid in message and "stored state cannot be read" in message and "not JSON" in message
    assert seen["send"] == (500, "session_damaged")
    assert seen["leases"] == 0  # the refused turn gave its lease back
    assert seen["replay"] == (200, 1)  # a committed turn's stored result needs no state
    assert seen["listed"] == [(sid, 1)]
    assert (seen["turns"], seen["trace"]) == (200, 200)
    assert (seen["delete"], seen["after"]) == (204, 404)
    logged = [r.getMessage() for r in caplog.records if "damaged record" in r.getMessage()]
    assert logged and all(sid in line for line in logged)
    assert "SECRET" not in message and not any("SECRET" in line for line in logged)


def test_damaged_turn_rows_leave_the_session_and_its_other_turns_working(api_store: str) -> None:
    torn_trace = "X'00ff'" if api_store.startswith("sqlite") else "'{\"steps\": ['"

    async def scenario(client: Any) -> dict[str, Any]:
        sid = await new_session(client)
        for n in (1, 2):
            sent = await client.post(
                f"/v1/sessions/{sid}/messages",
                json={"text": f"m{n}"},
                headers={"Idempotency-Key": f"k{n}"},
            )
            assert sent.status_code == 200
        sql(api_store, "UPDATE agentscript_turns SET result = '[1, 2]' WHERE turn = 1")
        sql(api_store, f"UPDATE agentscript_turns SET trace = {torn_trace} WHERE turn = 2")
        seen: dict[str, Any] = {"sid": sid}
        seen["turns"] = (await client.get(f"/v1/sessions/{sid}/turns")).json()["turns"]
        trace_1 = await client.get(f"/v1/sessions/{sid}/turns/1/trace")
        trace_2 = await client.get(f"/v1/sessions/{sid}/turns/2/trace")
        seen["traces"] = trace_1.status_code, error_of(trace_2), trace_2.json()["error"]["message"]
        replay = await client.post(
            f"/v1/sessions/{sid}/messages", json={"text": "m1"}, headers={"Idempotency-Key": "k1"}
        )
        seen["replay"] = error_of(replay), replay.json()["error"]["message"]
        seen["replay_2"] = (
            await client.post(
                f"/v1/sessions/{sid}/messages",
                json={"text": "m2"},
                headers={"Idempotency-Key": "k2"},
            )
        ).json()["turn"]
        nxt = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "m3"})
        seen["next"] = nxt.status_code, nxt.json()["turn"]
        return seen

    seen = run(api_store, scenario)
    first, second = seen["turns"]
    assert (first["turn"], first["user"], first["response"]) == (1, None, None)
    assert "result of turn 1 cannot be read (JSON array, not an object)" in first["damaged"]
    assert second["user"] == "m2" and "damaged" not in second
    trace_1, trace_2_error, trace_2_message = seen["traces"]
    assert trace_1 == 200 and trace_2_error == (500, "session_damaged")
    assert "trace of turn 2 cannot be read" in trace_2_message
    assert "start a new session" not in trace_2_message  # the session itself goes on
    (replay_error, replay_message) = seen["replay"]
    assert replay_error == (500, "session_damaged") and "result of turn 1" in replay_message
    assert seen["replay_2"] == 2  # its result is whole; only its trace is damaged
    assert seen["next"] == (200, 3)  # nothing ran for the refused replay


@pytest.mark.parametrize(
    ("stored", "reason"),
    [
        ('{"a": 1', "not JSON: Expecting ',' delimiter at line 1 column 8"),
        ("[]", "JSON array, not an object"),
        ("null", "JSON null, not an object"),
        ('"text"', "JSON string, not an object"),
        (b"{\xc3\x28}", "not UTF-8 text"),
        ('{"a": ' * 5000 + "1" + "}" * 5000, "JSON nested too deep to read"),
        ('{"a": ' + "9" * 5000 + "}", "JSON with an integer of more than 4300 digits"),
    ],
)
def test_store_rows_that_cannot_be_read_are_marked_not_raised(
    stored: str | bytes, reason: str
) -> None:
    session = schema.session_from_row(
        ("s1", "A", "k", "v", "f", stored, 3, 0, 0, 1.0, 2.0, None, None)
    )
    assert session.damaged == {"state": reason} and session.state == {}
    assert session.state_text is None and session.turns == 3
    turn = schema.turn_from_row(("s1", 2, None, stored, zlib.compress(b"\xff"), 1.0))
    assert turn.damaged == {"result": reason, "trace": "not UTF-8 text"}
    assert (turn.result, turn.trace) == ({}, {})
    torn = schema.turn_from_row(("s1", 2, None, "{}", b"\x00\xff", 1.0))
    assert torn.damaged["trace"].startswith("not a deflated trace: Error -3")
    whole = schema.turn_from_row(("s1", 2, None, '{"turn": 2}', schema.pack_trace({"a": 1}), 1.0))
    assert (whole.damaged, whole.result, whole.trace) == ({}, {"turn": 2}, {"a": 1})


@pytest.mark.parametrize("stored", ['{"a": ["\\ud800"]}', b'{"\\uDFFF": 1}'])
def test_store_rows_with_a_lone_surrogate_read_back_whole(stored: str | bytes) -> None:
    """A lone surrogate escaped in stored JSON is what a model said (a model's answer can hold
    one): it reads back as it was written, in a state as in a turn, never as damage."""
    value = json.loads(stored)
    session = schema.session_from_row(
        ("s1", "A", "k", "v", "f", stored, 3, 0, 0, 1.0, 2.0, None, None)
    )
    assert (session.damaged, session.state) == ({}, value)
    turn = schema.turn_from_row(("s1", 2, None, stored, schema.pack_trace(value), 1.0))
    assert (turn.damaged, turn.result, turn.trace) == ({}, value, value)


def test_damaged_record_names_the_session_and_the_part() -> None:
    state = SessionRecord("s1", "A", "k", "v", {}, damaged={"state": "not JSON"})
    turn = TurnRecord("s1", 4, {}, {}, damaged={"trace": "not UTF-8 text"})
    assert state.damaged and turn.damaged
    assert "session s1: its stored state cannot be read (not JSON)" in str(
        DamagedRecord("s1", "state", "not JSON")
    )
    assert "session s1: the stored trace of turn 4 cannot be read (not UTF-8 text)" in str(
        DamagedRecord("s1", "trace", "not UTF-8 text", 4)
    )


class TakesThenFails:
    """A lease backend whose statement takes the lease, then fails before the turn has it
    (as a row that could not be read once did, or a cancellation)."""

    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.held: set[tuple[str, str]] = set()

    async def worker(self) -> str:
        return "w"

    async def take_lease(
        self, session_id: str, holder: str, kept: str | None = None
    ) -> tuple[bool, Any]:
        self.held.add((session_id, holder))
        raise self.error

    async def read_session(self, session_id: str) -> Any:
        raise AssertionError("no lease is held")

    async def drop_lease(self, session_id: str, holder: str) -> None:
        self.held.discard((session_id, holder))

    async def commit_turn(self, *args: Any) -> None:
        raise AssertionError("no turn runs")


@pytest.mark.parametrize("error", [RuntimeError("unreadable"), asyncio.CancelledError()])
def test_store_lease_taken_by_a_failed_statement_is_given_back_at_once(
    error: BaseException,
) -> None:
    backend = TakesThenFails(error)

    async def take() -> None:
        async with lease_module.Leases(backend).hold("s1", 1.0):
            raise AssertionError("not reached")

    with pytest.raises(type(error)):
        asyncio.run(take())
    assert backend.held == set()


def stored_state(url: str, sid: str) -> dict[str, Any]:
    found = sql(url, f"SELECT state FROM agentscript_sessions WHERE session_id = '{sid}'")
    return dict(json.loads(found))


def put_state(url: str, sid: str, text: str) -> None:
    execute(url, "UPDATE agentscript_sessions SET state = ? WHERE session_id = ?", text, sid)


# JSON a parser refuses or no answer can write, in place of a variable's value: with the reason
# the session's error gives.
UNREADABLE = {
    "deep": ("[" * 5000 + "]" * 5000, "JSON nested too deep to read"),
    "long_integer": ("9" * 5000, "JSON with an integer of more than 4300 digits"),
}


@pytest.mark.parametrize("kind", sorted(UNREADABLE))
def test_unreadable_json_in_a_state_is_damaged_and_the_session_still_listed_and_deleted(
    api_store: str, kind: str
) -> None:
    raw, reason = UNREADABLE[kind]

    async def scenario(client: Any) -> dict[str, Any]:
        sid, other = await new_session(client), await new_session(client)
        for each in (sid, other):
            sent = await client.post(f"/v1/sessions/{each}/messages", json={"text": "hi"})
            assert sent.status_code == 200
        state = stored_state(api_store, sid)
        state["variables"]["last_note"] = "PLACE"
        put_state(api_store, sid, json.dumps(state).replace('"PLACE"', raw))
        seen: dict[str, Any] = {"sid": sid, "other": other}
        got = await client.get(f"/v1/sessions/{sid}")
        seen["get"] = error_of(got), got.json()["error"]["message"]
        sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "again"})
        seen["send"] = error_of(sent)
        listed = await client.get("/v1/sessions")
        seen["listed"] = sorted(s["session_id"] for s in listed.json()["sessions"])
        seen["other_get"] = (await client.get(f"/v1/sessions/{other}")).status_code
        seen["turns"] = (await client.get(f"/v1/sessions/{sid}/turns")).status_code
        seen["delete"] = (await client.delete(f"/v1/sessions/{sid}")).status_code
        seen["after"] = (await client.get(f"/v1/sessions/{sid}")).status_code
        return seen

    seen = run(api_store, scenario)
    (status, message) = seen["get"]
    assert status == (500, "session_damaged")
    assert seen["sid"] in message and reason in message
    assert seen["send"] == (500, "session_damaged")
    assert seen["listed"] == sorted([seen["sid"], seen["other"]])
    assert (seen["other_get"], seen["turns"]) == (200, 200)
    assert (seen["delete"], seen["after"]) == (204, 404)


def test_unreadable_json_in_a_turn_fails_only_that_turn_and_part(api_store: str) -> None:
    deep, deep_reason = UNREADABLE["deep"]
    long_integer, long_reason = UNREADABLE["long_integer"]

    async def scenario(client: Any) -> dict[str, Any]:
        sid = await new_session(client)
        for n in (1, 2):
            sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": f"m{n}"})
            assert sent.status_code == 200
        execute(
            api_store,
            "UPDATE agentscript_turns SET result = ? WHERE turn = 1",
            '{"user": ' + deep + "}",
        )
        execute(
            api_store,
            "UPDATE agentscript_turns SET trace = ? WHERE turn = 2",
            '{"steps": ' + long_integer + "}",
        )
        seen: dict[str, Any] = {}
        seen["turns"] = (await client.get(f"/v1/sessions/{sid}/turns")).json()["turns"]
        trace = await client.get(f"/v1/sessions/{sid}/turns/2/trace")
        seen["trace"] = error_of(trace), trace.json()["error"]["message"]
        seen["listed"] = len((await client.get("/v1/sessions")).json()["sessions"])
        nxt = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "m3"})
        seen["next"] = nxt.status_code, nxt.json()["turn"]
        return seen

    seen = run(api_store, scenario)
    first, second = seen["turns"]
    assert first["user"] is None and deep_reason in first["damaged"]
    assert second["user"] == "m2" and "damaged" not in second
    (trace_error, trace_message) = seen["trace"]
    assert trace_error == (500, "session_damaged") and long_reason in trace_message
    assert seen["listed"] == 1 and seen["next"] == (200, 3)


def test_state_naming_another_session_is_damaged_and_runs_nothing(api_store: str) -> None:
    """A row whose state is another session's (copied by hand) is refused: restored, its turns
    would be traced and committed under the other session's id."""

    async def scenario(client: Any) -> dict[str, Any]:
        sid, other = await new_session(client), await new_session(client)
        for each in (sid, other):
            sent = await client.post(f"/v1/sessions/{each}/messages", json={"text": "hi"})
            assert sent.status_code == 200
        state = stored_state(api_store, sid)
        state["session_id"] = other
        put_state(api_store, sid, json.dumps(state))
        seen: dict[str, Any] = {"sid": sid, "other": other}
        sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "again"})
        seen["send"] = error_of(sent), sent.json()["error"]["message"]
        seen["get"] = error_of(await client.get(f"/v1/sessions/{sid}"))
        seen["turns"] = len((await client.get(f"/v1/sessions/{sid}/turns")).json()["turns"])
        seen["state"] = stored_state(api_store, sid)["session_id"]
        after = await client.post(f"/v1/sessions/{other}/messages", json={"text": "on"})
        seen["other_turn"] = after.status_code, after.json()["turn"]
        return seen

    seen = run(api_store, scenario)
    (error, message) = seen["send"]
    assert error == (500, "session_damaged") and "it names another session" in message
    assert seen["other"] not in message  # the other session's id is not told
    assert seen["get"] == (500, "session_damaged")
    assert seen["turns"] == 1  # nothing committed
    assert seen["state"] == seen["other"]  # the row stays as found
    assert seen["other_turn"] == (200, 2)


def test_state_failing_the_restore_checks_is_damaged_on_get_and_post_alike(
    api_store: str,
) -> None:
    """A state that parses but that the engine's restore checks refuse (a variable of another
    type, NaN) was written by no server: GET and POST both answer 500 session_damaged, naming
    the field but quoting no value; only another agent or version of it is 409."""

    async def scenario(client: Any) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        changes: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
            ("type", lambda d: d["variables"].update(count="4111-SECRET")),
            ("nan", lambda d: d["variables"].update(count=float("nan"))),
            ("hash", lambda d: d["agent"].update(hash="sha256:0")),
        ]
        for label, change in changes:
            sid = await new_session(client)
            sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "hi"})
            assert sent.status_code == 200
            state = stored_state(api_store, sid)
            change(state)
            put_state(api_store, sid, json.dumps(state))
            got = await client.get(f"/v1/sessions/{sid}")
            sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "again"})
            if label == "hash":  # another version of the agent: shown as stored, no turn
                seen[label] = got.status_code, error_of(sent), sent.json()["error"]["message"]
                continue
            seen[label] = (
                error_of(got),
                error_of(sent),
                got.json()["error"]["message"],
                sent.json()["error"]["message"],
            )
        return seen

    seen = run(api_store, scenario)
    for label, field in (("type", "variables.count"), ("nan", "NaN is not JSON")):
        got, sent, got_message, sent_message = seen[label]
        assert got == sent == (500, "session_damaged"), label
        assert got_message == sent_message and field in got_message
        assert "SECRET" not in got_message
    got_status, sent, sent_message = seen["hash"]
    assert got_status == 200 and sent == (409, "session_incompatible")
    assert "agent.hash" in sent_message


def test_get_of_a_kept_session_restores_nothing(
    api_store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session kept in memory at the stored state was committed by this server: GET shows it
    without a restore (a full restore per poll stalled the worker on a long history)."""
    from agentscript.server import service as service_module

    restores: list[str] = []
    real = service_module.SessionService._restore

    def counted(self: Any, record: Any, **kwargs: Any) -> Any:
        restores.append(record.session_id)
        return real(self, record, **kwargs)

    monkeypatch.setattr(service_module.SessionService, "_restore", counted)

    async def scenario(client: Any) -> tuple[int, int, int]:
        sid = await new_session(client)
        sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "hi"})
        assert sent.status_code == 200
        before = len(restores)
        got = await client.get(f"/v1/sessions/{sid}")
        kept = len(restores) - before
        state = stored_state(api_store, sid)
        state["variables"]["last_note"] = "changed elsewhere"
        put_state(api_store, sid, json.dumps(state))  # no longer the kept state: checked
        again = await client.get(f"/v1/sessions/{sid}")
        return got.status_code, kept, again.status_code

    got, kept, again = run(api_store, scenario)
    assert (got, kept, again) == (200, 0, 200)
    assert len(restores) >= 1  # the changed state was restored to be checked


def test_signed_state_edited_in_the_store_is_damaged(
    api_store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTSCRIPT_SESSION_KEY", "test-key-" * 4)

    async def scenario(client: Any) -> tuple[Any, ...]:
        sid = await new_session(client)
        sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "hi"})
        assert sent.status_code == 200
        state = stored_state(api_store, sid)
        state["variables"]["count"] = 99
        put_state(api_store, sid, json.dumps(state))
        got = await client.get(f"/v1/sessions/{sid}")
        sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "again"})
        return error_of(got), error_of(sent), sent.json()["error"]["message"]

    got, sent, message = run(api_store, scenario)
    assert got == sent == (500, "session_damaged")
    assert "signature does not match" in message
