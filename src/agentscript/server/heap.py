"""Keep the cycle collector's full passes short in a long-running server.

A full (generation 2) collection walks every container object alive, and a started server holds
a few hundred thousand that live as long as it does: FastAPI, pydantic, the model SDK, the
loaded agents. Walking them took 30-50 ms on the benchmark machine, a pause every turn in
flight waited out (it was most of serve's p99 at half capacity). ``gc.freeze`` moves them to
the permanent generation, which collections skip; objects created later are collected as usual.
Turns themselves create no reference cycles (pinned by tests/serve/test_heap.py), so what is left
for the collector is small.
"""

from __future__ import annotations

import gc


def freeze_startup_heap() -> int:
    """Collect once, then exempt everything alive now from later collections; how many
    objects were frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
