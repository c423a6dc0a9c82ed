"""Two server processes on one store, 50 simultaneous messages to one session: contiguous turn
numbers, no lost update, no turn interleaving another (PostgreSQL as pinned, SQLite as well)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx2 as httpx

from agentscript.trace_inputs import rebuild_messages

from .harness import NOTES
from .process import serving

MESSAGES = 50


async def within_rate(client: httpx.AsyncClient, url: str) -> httpx.Response:
    """``GET url``, again after the wait a ``429 rate_limited`` answer asks for."""
    while True:
        response = await client.get(url)
        if response.status_code != 429:
            return response
        await asyncio.sleep(float(response.headers.get("Retry-After", "0.1")))


def test_concurrency_two_workers_fifty_messages_one_session(api_store: str, tmp_path: Path) -> None:
    args = [NOTES, "--model", "standin", "--store", api_store]
    with (
        serving(args, {}, tmp_path / "a.log") as a,
        serving(args, {}, tmp_path / "b.log") as b,
    ):

        async def main() -> list[httpx.Response]:
            async with httpx.AsyncClient(timeout=60) as client:
                created = await client.post(f"{a.url}/v1/agents/Notes/sessions", json={})
                sid = created.json()["session_id"]
                sends = [
                    client.post(
                        f"{(a, b)[i % 2].url}/v1/sessions/{sid}/messages",
                        json={"text": f"message {i}"},
                    )
                    for i in range(MESSAGES)
                ]
                responses = await asyncio.gather(*sends)
                responses.append(await client.get(f"{b.url}/v1/sessions/{sid}"))
                responses.append(await client.get(f"{a.url}/v1/sessions/{sid}/turns"))
                for number in range(1, MESSAGES + 1):
                    url = f"{(a, b)[number % 2].url}/v1/sessions/{sid}/turns/{number}/trace"
                    responses.append(await within_rate(client, url))
                return responses

        responses = asyncio.run(main())
    sent, (view, turns), traces = (
        responses[:MESSAGES],
        responses[MESSAGES : MESSAGES + 2],
        responses[MESSAGES + 2 :],
    )
    assert [r.status_code for r in sent] == [200] * MESSAGES, [
        r.text for r in sent if r.status_code != 200
    ][:2]
    numbers = sorted(r.json()["turn"] for r in sent)
    assert numbers == list(range(1, MESSAGES + 1))  # contiguous, none twice
    assert view.json()["turns"] == MESSAGES
    by_turn = {t["turn"]: t for t in turns.json()["turns"]}
    for response in sent:
        data = response.json()
        # each turn answered its own message: no turn saw another's input mid-way
        assert data["response"] == f"You said: {data['user']}"
        assert by_turn[data["turn"]]["user"] == data["user"]
    # no lost update: the last turn's model input holds every earlier message, in turn order
    # (rebuilt from the stored traces: each holds the messages added since the previous call,
    # whichever worker ran the turn before)
    last = rebuild_messages(t.json() for t in traces)[-1]
    users = [m["content"] for m in last if m["role"] == "user"]
    assert users == [by_turn[n]["user"] for n in range(1, MESSAGES + 1)]
