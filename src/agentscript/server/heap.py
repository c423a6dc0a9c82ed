"""Keep the cycle collector cheap in a long-running server.

A full (generation 2) collection walks every container object alive, and a started server holds
a few hundred thousand that live as long as it does: FastAPI, pydantic, the model SDK, the
loaded agents. Walking them took 30-50 ms on the benchmark machine, a pause every turn in
flight waited out (it was most of serve's p99 at half capacity). ``gc.freeze`` moves them to
the permanent generation, which collections skip; objects created later are collected as usual.

Turns themselves create no reference cycles (pinned by tests/serve/test_heap.py), so the young
generation is almost all objects that reference counting frees moments later. At CPython's
default threshold (a young collection every 700 net allocations) a busy server ran about one
young collection per turn, each walking the objects of every turn in flight, and promoted them
to older generations that later full passes walked again: 5 % of the server's CPU at 500
turns/s. Collecting the young generation every 10,000 allocations instead cut the CPU per turn
of ``bench/serve.py`` (``openai-lean:``, SQLite) by 8-9 % (docs/performance.md, session 7).
Garbage in cycles, if any, still goes; it waits a little longer.
"""

from __future__ import annotations

import gc

# Net container allocations between two collections of the young generation (CPython: 700).
YOUNG_THRESHOLD = 10_000


def freeze_startup_heap() -> int:
    """Collect once, then exempt everything alive now from later collections, and collect the
    young generation less often (``YOUNG_THRESHOLD``); how many objects were frozen."""
    gc.collect()
    gc.freeze()
    _young, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
    return gc.get_freeze_count()
