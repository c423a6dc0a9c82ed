"""What the same work costs after the core idled: the floor under a turn served one at a time.

A served turn one at a time idles while its model answers (50 ms twice in ``bench/serve.py``),
then runs its next part. ``bench/serve.py`` found such a turn costing our server 2-3 times the
CPU of the same turn in its closed loop, where the core never idles. This bench asks whether
that is our code or the machine: it runs a fixed piece of work on one pinned core, right after
the previous one (gap 0) and after the thread slept ``gap`` ms, and reads the CPU the work took
(``time.thread_time``, the thread's own). Two pieces of work:

* ``engine turn``: one in-process turn of the seed-002 agent (``bench/turn.py``'s scenario:
  scripted model, stubbed actions, trace built), what the server runs between its waits;
* ``plain Python``: JSON and dict work of about the same length, none of our code.

If both grow alike with the gap, the growth is the machine's (a core that idles is put in a
deeper sleep state, its caches cold and its clock low when it wakes), not the engine's, and it
is paid again at each wake-up of a turn: our server wakes three times a turn one at a time
(the request and two model answers).

Usage: ``python bench/idle_cost.py [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from collections.abc import Callable

from common import machine
from turn import fresh_sessions, seed_scenario

GAPS_MS = (0.0, 0.5, 2.0, 10.0, 50.0)


def plain_work() -> None:
    """JSON and dict work of about an engine turn's length, none of agentscript's code."""
    data = {f"key{i}": {"text": "x" * 40, "n": i, "items": list(range(8))} for i in range(60)}
    for _ in range(6):
        text = json.dumps(data)
        data = json.loads(text)
        data = {k: dict(v, n=v["n"] + 1) for k, v in data.items()}


def engine_work() -> Callable[[], None]:
    """A callable running one first turn of a fresh seed-002 session per call (sessions made
    ahead, outside the timing)."""
    scenario = seed_scenario()
    loop = asyncio.new_event_loop()
    pool = fresh_sessions(scenario, 4000)

    def work() -> None:
        loop.run_until_complete(pool.pop().send_async(scenario.user))

    return work


def cpu_after_gaps(work: Callable[[], None], gap_ms: float, repeat: int) -> float:
    """Median thread CPU (ms) of ``work`` run ``repeat`` times, each after sleeping ``gap_ms``."""
    for _ in range(20):  # warm-up
        work()
    costs = []
    for _ in range(repeat):
        if gap_ms:
            time.sleep(gap_ms / 1000)
        start = time.thread_time()
        work()
        costs.append((time.thread_time() - start) * 1000)
    return statistics.median(costs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (smoke test)")
    args = parser.parse_args()
    repeat = 30 if args.quick else 300
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core, as serve's worker
    print(f"# bench/idle_cost.py: {machine()}")
    print(f"# median thread CPU of the same work run after the core idled; {repeat} runs each")
    print()
    works = {"engine turn": engine_work(), "plain Python": plain_work}
    print("| work | " + " | ".join(f"gap {g:g} ms" for g in GAPS_MS) + " |")
    print("|---|" + "---|" * len(GAPS_MS))
    for name, work in works.items():
        costs = [cpu_after_gaps(work, gap, repeat) for gap in GAPS_MS]
        cells = [f"{c:.3f} ms ({c / costs[0]:.2f}x)" for c in costs]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
