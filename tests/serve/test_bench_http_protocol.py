"""``bench/http_protocol.py`` drives both HTTP protocols to real answers (a quick run)."""

from __future__ import annotations

import asyncio

from fakes.bench_scripts import load_bench_script


def test_both_protocols_answer_every_request_of_the_bench() -> None:
    bench = load_bench_script("http_protocol.py", "bench_http_protocol")
    for request in (bench.BARE, bench.BROWSER):
        # measure() waits for each answer and raises if a protocol closed the connection
        timed = asyncio.wait_for(bench.measure(request, repeat=1, number=50), timeout=30)
        reference, ours, guarded = asyncio.run(timed)
        assert reference > 0 and ours > 0 and guarded > 0
