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

What a busy server keeps alive after start-up is mostly the sessions it keeps for their next
turn (:mod:`.live`, about 30 tracked objects each, plus one per history message). CPython
counts a young collection from allocations *minus* deallocations, and every kept session that replaces an older one frees
about as much as it allocates, so the young generation filled with kept sessions until a
collection walked 14,600-65,000 objects at once: 5.5-61 ms, which every turn in flight waited
out (``docs/performance.md``, session 11). :class:`SurvivorFreezer` freezes the heap every
``FREEZE_EVERY`` kept sessions instead, which costs nothing (it links lists), so no generation
ever holds more than that many sessions' objects. Frozen objects are still freed by
reference counting as usual; only garbage in cycles among them waits, for a full pass that
runs once the process's memory has grown by ``FULL_PASS_GROWTH`` since the last one.

Why memory and not the number of frozen objects: counting them (``gc.get_freeze_count``)
walks the frozen list, and once kept sessions come and go that list is scattered across the
heap: 18-25 ms for about 117,000 objects in a served run, every turn in flight waiting, where
the compact start-up heap took 0.65 ms for 55,000 (``docs/performance.md``, session 12). The
resident memory is one small read, and garbage in cycles that nothing reclaims shows in it the
same way: the process holds more memory.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable

try:
    import resource
except ImportError:  # Windows
    resource = None  # type: ignore[assignment]

STATM = "/proc/self/statm"

# Net container allocations between two collections of the young generation (CPython: 700).
YOUNG_THRESHOLD = 10_000
# Sessions kept between two freezes: a young collection then walks a few thousand objects at
# most (about 1 ms), whatever the traffic.
FREEZE_EVERY = 64
# A full pass (unfreeze, collect everything, freeze again) once the process's memory is
# this fraction above what it was after the last one: the growth CPython waits for before its
# own full collections, so garbage in cycles is reclaimed about as late as without freezing.
FULL_PASS_GROWTH = 0.25
# Where memory cannot be read (neither /proc nor ``resource``), the frozen objects are counted
# instead, which walks them: only every this many freezes.
COUNT_EVERY = 16


def resident_memory() -> int:
    """The memory the process holds resident now, in bytes (Linux: one read of
    ``/proc/self/statm``, about 6 µs whatever the size of the heap)."""
    with open(STATM, "rb") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_memory() -> int:
    """The most memory the process has held resident so far (kB, bytes on macOS): where there
    is no /proc. Not used on Linux, where a process starts with its parent's peak."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def memory_gauge() -> Callable[[], int]:
    """How this platform reads the process's memory: resident now, else its peak, else (no
    ``resource`` module) the number of frozen objects."""
    if os.path.exists(STATM):
        return resident_memory
    if resource is not None:
        return peak_memory
    return gc.get_freeze_count


def freeze_startup_heap() -> None:
    """Collect once, then exempt everything alive now from later collections, and collect the
    young generation less often (``YOUNG_THRESHOLD``)."""
    gc.collect()
    gc.freeze()
    _young, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)


class SurvivorFreezer:
    """Freezes the heap every ``every`` sessions kept between turns (:meth:`kept`), and runs a
    full pass when ``measure`` (the process's memory by default, :func:`memory_gauge`) has
    grown by ``growth`` since the last one (or since the first look, after start-up).

    ``measure`` is read after every ``check_every``-th freeze: each one by default, every
    ``COUNT_EVERY``-th where it has to count the frozen objects."""

    def __init__(
        self,
        every: int = FREEZE_EVERY,
        growth: float = FULL_PASS_GROWTH,
        measure: Callable[[], int] | None = None,
        check_every: int | None = None,
    ) -> None:
        if measure is None:
            measure = memory_gauge()
        if check_every is None:
            check_every = COUNT_EVERY if measure is gc.get_freeze_count else 1
        self.every = every
        self.growth = growth
        self.measure = measure
        self.check_every = check_every
        self.freezes = 0
        self.full_passes = 0
        self._kept = 0
        self._baseline: int | None = None  # what measure read after the last full pass

    def kept(self) -> None:
        """One more session kept alive: freeze once ``every`` of them were."""
        self._kept += 1
        if self._kept < self.every:
            return
        self._kept = 0
        gc.freeze()
        self.freezes += 1
        if self.freezes % self.check_every == 0:
            size = self.measure()
            if self._baseline is None:
                self._baseline = size
            elif size > self._baseline * (1 + self.growth):
                self.full_pass()

    def full_pass(self) -> None:
        """Collect every generation, frozen objects included, then freeze what is left."""
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self.full_passes += 1
        self._baseline = self.measure()
