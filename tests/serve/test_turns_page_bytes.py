"""GET /v1/sessions/{id}/turns ends a page at a size as well as at a count, on every store.

1,000 turns of 16,000-character messages made a default page of 32 MB, built on the event
loop in about 140 ms (every other request waited) and held whole for each client that did not
read it. A page now also ends at the first turn whose stored result brings the page's results
to MAX_TURNS_PAGE_BYTES, and says ``next_after`` as a page cut by its count does; a turn
larger than that alone is a page of its own.
"""

from __future__ import annotations

import httpx2 as httpx

from agentscript import jsontext
from agentscript.server.config import ServerConfig
from agentscript.server.service import MAX_TURNS_PAGE, MAX_TURNS_PAGE_BYTES

from .harness import new_session, run

# The longest message the server takes by default: its turn's result, which holds it twice
# (the message and the stand-in model's echo of it), is about 32 kB.
LONG = "m" * 16_000
# A message whose turn's result alone is larger than a page may be: its stored result holds it
# twice, 1.5 MB in UTF-8 though 380,000 characters (a page is measured in bytes), below the
# stand-in model's longest reply.
HUGE = "\U0001f600" * 190_000
# Room for HUGE (a client may send it as \u escapes, 12 bytes a character); no rate limit for
# the tests' many requests.
CONFIG = ServerConfig(rate_limit=0, max_message_chars=len(HUGE), max_body_bytes=4 << 20)


async def send(client: httpx.AsyncClient, sid: str, text: str) -> int:
    """Run a turn; the size of its stored result as the stores measure it (its compact JSON
    in UTF-8, which the turn's answer is)."""
    sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": text})
    assert sent.status_code == 200, sent.text[:300]
    return len(jsontext.dumps_bytes(sent.json()))


async def pages(client: httpx.AsyncClient, sid: str, **params: int) -> list[list[int]]:
    """The turn numbers of each page, reading from the first by following ``next_after``."""
    found: list[list[int]] = []
    after: int | None = 0
    while after is not None:
        listed = await client.get(f"/v1/sessions/{sid}/turns", params={**params, "after": after})
        assert listed.status_code == 200, listed.text[:300]
        found.append([t["turn"] for t in listed.json()["turns"]])
        after = listed.json()["next_after"]
        assert after is None or after == found[-1][-1], (after, found[-1])
        assert len(found) <= 1000, "next_after never ends"
    return found


def expected(sizes: list[int], limit: int = MAX_TURNS_PAGE) -> list[list[int]]:
    """Pages of turns of ``sizes``: each ends at ``limit`` turns or at the first turn at which
    its results reach MAX_TURNS_PAGE_BYTES."""
    found: list[list[int]] = []
    page: list[int] = []
    total = 0
    for turn, size in enumerate(sizes, 1):
        page.append(turn)
        total += size
        if len(page) == limit or total >= MAX_TURNS_PAGE_BYTES:
            found.append(page)
            page, total = [], 0
    return [*found, page] if page or not found else found


def test_long_turns_are_paged_by_size_and_every_turn_comes_once(store_url: str) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        sid = await new_session(client)
        sizes = [await send(client, sid, f"{i:05d}{LONG[5:]}") for i in range(70)]
        assert min(sizes) > 30_000 and sum(sizes) > 2 * MAX_TURNS_PAGE_BYTES

        first = await client.get(f"/v1/sessions/{sid}/turns")
        turns = [t["turn"] for t in first.json()["turns"]]
        # Cut by size, not at 1,000 (nor at the 70 there are), where the results reach it.
        assert 1 < len(turns) < 70 and turns == list(range(1, len(turns) + 1))
        assert sum(sizes[: len(turns) - 1]) < MAX_TURNS_PAGE_BYTES <= sum(sizes[: len(turns)])
        assert first.json()["next_after"] == turns[-1]
        assert len(first.content) < MAX_TURNS_PAGE_BYTES + 2 * max(sizes)

        read = await pages(client, sid)
        assert read == expected(sizes) and len(read) == 3, [len(p) for p in read]
        assert [t for page in read for t in page] == list(range(1, 71))
        # A smaller count still ends a page first; the size where it comes first.
        assert await pages(client, sid, limit=10) == expected(sizes, 10)
        assert await pages(client, sid, limit=40) == expected(sizes, 40)

    run(store_url, scenario, config=CONFIG)


def test_a_turn_larger_than_a_page_is_a_page_of_its_own(store_url: str) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        sid = await new_session(client)
        sizes = [await send(client, sid, text) for text in ("a", "b", HUGE, HUGE, "c", "d")]
        assert sizes[2] > MAX_TURNS_PAGE_BYTES and sizes[3] > MAX_TURNS_PAGE_BYTES
        # The page that reaches the size with a huge turn ends at it; the next huge one is
        # alone on its page, which is never empty.
        read = await pages(client, sid)
        assert read == [[1, 2, 3], [4], [5, 6]] == expected(sizes)
        listed = (await client.get(f"/v1/sessions/{sid}/turns", params={"after": 3})).json()
        assert [t["turn"] for t in listed["turns"]] == [4] and listed["next_after"] == 4
        assert listed["turns"][0]["user"] == HUGE
        assert await pages(client, sid, limit=1) == [[1], [2], [3], [4], [5], [6]]

    run(store_url, scenario, config=CONFIG)


def test_short_turns_still_come_by_the_count(store_url: str) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        sid = await new_session(client)
        sizes = [await send(client, sid, text) for text in (HUGE, HUGE, HUGE)]
        sizes += [await send(client, sid, f"short {i}") for i in range(12)]
        # Past the turns cut by size, short ones come `limit` to a page, or all of them.
        assert await pages(client, sid, limit=5) == [
            [1],
            [2],
            [3],
            [4, 5, 6, 7, 8],
            [9, 10, 11, 12, 13],
            [14, 15],
        ]
        assert await pages(client, sid) == [[1], [2], [3], list(range(4, 16))]
        assert await pages(client, sid, limit=5) == expected(sizes, 5)
        # A session of short turns only is paged by the count alone, as before.
        short = await new_session(client)
        for i in range(12):
            await send(client, short, f"short {i}")
        assert await pages(client, short, limit=5) == [
            list(range(1, 6)),
            list(range(6, 11)),
            [11, 12],
        ]
        assert await pages(client, short) == [list(range(1, 13))]

    run(store_url, scenario, config=CONFIG)
