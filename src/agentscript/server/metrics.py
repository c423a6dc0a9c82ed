"""Process metrics in the Prometheus text format (``GET /metrics``), no client library needed.

Per process; with several workers, :mod:`.sharedmetrics` sums every worker's figures into the
text each one answers, through :meth:`Metrics.to_json`, :meth:`Metrics.from_json` and
:meth:`Metrics.add`. Turn latency is split into model time (the LLM calls of the turn, from its
trace) and engine time (the rest: prompt resolution, actions, store commit).
"""

from __future__ import annotations

import time
from collections import Counter, OrderedDict
from collections.abc import Iterable
from typing import Any

from agentscript.trace_steps import Source, StepType

# The tag of Metrics.to_json: a snapshot one worker writes and the others read.
FORMAT = "agentscript-metrics/2"
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# A session counts as active for this long after its last turn.
ACTIVE_WINDOW = 300.0
# Every counter of Metrics with the types of its key's parts: add, to_json and from_json all
# walk this table, so a counter added here is summed and written by each of them.
COUNTERS: tuple[tuple[str, tuple[type, ...]], ...] = (
    ("turns", (str, str)),  # (agent, outcome)
    ("llm_calls", (str,)),  # agent
    ("llm_errors", (str,)),  # agent
    ("tokens", (str, str)),  # (agent, direction)
    ("action_errors", (str,)),  # agent
    ("refusals", (str,)),  # agent
    ("http", (str, int)),  # (method, status)
    ("session_loads", (str,)),  # how a turn got its session
)
HISTOGRAMS = ("turn_time", "model_time", "engine_time")  # each by agent
# The methods counted by name in agentscript_http_requests_total; any other (a client can send
# any token, and h11 passes it on) is counted as "other", so a client cannot add label values.
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"})


def method_label(method: str) -> str:
    """The ``method`` label of a request: its method if a standard one, else ``other``."""
    return method if method in HTTP_METHODS else "other"


class Histogram:
    def __init__(self) -> None:
        self.counts = [0] * len(BUCKETS)
        self.total = 0
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.total += 1
        self.sum += seconds
        for i, bound in enumerate(BUCKETS):
            if seconds <= bound:
                self.counts[i] += 1

    def lines(self, name: str, labels: str) -> Iterable[str]:
        sep = "," if labels else ""
        for bound, count in zip(BUCKETS, self.counts, strict=True):
            yield f'{name}_bucket{{{labels}{sep}le="{bound:g}"}} {count}'
        yield f'{name}_bucket{{{labels}{sep}le="+Inf"}} {self.total}'
        yield f"{name}_sum{{{labels}}} {self.sum:.6f}"
        yield f"{name}_count{{{labels}}} {self.total}"

    def add(self, other: Histogram) -> None:
        # Each count is already cumulative (observe counts every bound at or above the value):
        # their sums are too.
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        self.total += other.total
        self.sum += other.sum

    def to_json(self) -> dict[str, Any]:
        return {"counts": list(self.counts), "total": self.total, "sum": self.sum}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Histogram:
        hist = cls()
        counts = [int(n) for n in data["counts"]]
        if len(counts) != len(BUCKETS):
            raise ValueError(f"a histogram of {len(counts)} buckets, not {len(BUCKETS)}")
        hist.counts, hist.total, hist.sum = counts, int(data["total"]), float(data["sum"])
        return hist


class Metrics:
    """Counters, histograms and gauges of one server process (or, summed by :meth:`add`, of
    several). A session is active for ``active_window`` seconds after its last turn here:
    :data:`ACTIVE_WINDOW`, or less when sessions expire sooner (``--session-ttl``)."""

    def __init__(self, active_window: float = ACTIVE_WINDOW) -> None:
        self.active_window = active_window
        self.turns: Counter[tuple[str, str]] = Counter()  # (agent, outcome)
        self.llm_calls: Counter[str] = Counter()  # answered
        self.llm_errors: Counter[str] = Counter()  # an error, a timeout, or an answer refused
        self.tokens: Counter[tuple[str, str]] = Counter()  # (agent, direction)
        self.action_errors: Counter[str] = Counter()
        self.refusals: Counter[str] = Counter()
        self.http: Counter[tuple[str, int]] = Counter()  # (method, status)
        self.model_time: dict[str, Histogram] = {}
        self.engine_time: dict[str, Histogram] = {}
        self.turn_time: dict[str, Histogram] = {}
        self.in_progress = 0
        # How each turn got its session: kept in memory since its last turn, or restored.
        self.session_loads: Counter[str] = Counter()
        self.kept_sessions = 0
        # Each session's last turn, oldest first: forgotten after ACTIVE_WINDOW as turns come, so
        # a server nobody scrapes does not keep every session it ever served.
        self._last_turn: OrderedDict[str, float] = OrderedDict()
        # The active sessions of the figures added from other workers (add, from_json).
        self.active_elsewhere = 0

    def turn(self, agent: str, session_id: str, seconds: float, trace: dict[str, Any]) -> None:
        usage = trace.get("usage") or {}
        model_s = float(usage.get("llm_ms", 0.0)) / 1000.0
        self.turn_time.setdefault(agent, Histogram()).observe(seconds)
        self.model_time.setdefault(agent, Histogram()).observe(model_s)
        self.engine_time.setdefault(agent, Histogram()).observe(max(0.0, seconds - model_s))
        self.llm_calls[agent] += int(usage.get("llm_calls", 0))
        self.tokens[(agent, "input")] += int(usage.get("input_tokens", 0))
        self.tokens[(agent, "output")] += int(usage.get("output_tokens", 0))
        steps = (trace.get("planTrace") or {}).get("steps") or []
        failed = False
        for step in steps:
            kind = step.get("type")
            if kind == StepType.ACTION_STEP and step.get("error"):
                self.action_errors[agent] += 1
            elif kind == StepType.LLM_STEP and step.get("error"):
                self.llm_errors[agent] += 1
            elif kind == StepType.REFUSED_STEP and step.get("source") != Source.MEMORY:
                # A Mantle memory refusal is a refused read or write, not a tool call.
                self.refusals[agent] += 1
            elif kind == StepType.ERROR_STEP:
                failed = True
        self.turns[(agent, "error" if failed else "ok")] += 1
        now = time.monotonic()
        self._last_turn[session_id] = now
        self._last_turn.move_to_end(session_id)
        self._forget_before(now - self.active_window)

    def forget(self, session_id: str) -> None:
        """A session deleted: no longer active."""
        self._last_turn.pop(session_id, None)

    def active_sessions(self) -> int:
        self._forget_before(time.monotonic() - self.active_window)
        return len(self._last_turn) + self.active_elsewhere

    def add(self, other: Metrics, *, gauges: bool = True) -> None:
        """Add ``other``'s counters and histograms to these, and its gauges unless ``gauges`` is
        false (a worker that ended: what it counted stays counted, what it held is gone)."""
        for name, _ in COUNTERS:
            getattr(self, name).update(getattr(other, name))
        for name in HISTOGRAMS:
            table = getattr(self, name)
            for agent, hist in getattr(other, name).items():
                table.setdefault(agent, Histogram()).add(hist)
        if gauges:
            self.in_progress += other.in_progress
            self.kept_sessions += other.kept_sessions
            self.active_elsewhere += other.active_sessions()

    def to_json(self) -> dict[str, Any]:
        """These figures as plain JSON (:data:`FORMAT`), the gauges as they read now: each
        counter a list of rows, its key's parts then its count."""
        data: dict[str, Any] = {"format": FORMAT}
        for name, shape in COUNTERS:
            rows = getattr(self, name).items()
            # A key of one part is kept bare in its counter, a key of several as a tuple.
            data[name] = [[key, n] if len(shape) == 1 else [*key, n] for key, n in rows]
        for name in HISTOGRAMS:
            data[name] = {agent: hist.to_json() for agent, hist in getattr(self, name).items()}
        data["in_progress"] = self.in_progress
        data["kept_sessions"] = self.kept_sessions
        data["active_sessions"] = self.active_sessions()
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Metrics:
        """The figures :meth:`to_json` wrote (ValueError for another format)."""
        if data.get("format") != FORMAT:
            raise ValueError(f"not {FORMAT} figures: {str(data.get('format'))[:40]!r}")
        got = cls()
        for name, shape in COUNTERS:
            counter = getattr(got, name)
            for *key, n in data[name]:
                if len(key) != len(shape):
                    raise ValueError(f"a {name} row of {len(key)} key parts, not {len(shape)}")
                parts = tuple(kind(part) for kind, part in zip(shape, key, strict=True))
                counter[parts[0] if len(parts) == 1 else parts] += int(n)
        for name in HISTOGRAMS:
            table = getattr(got, name)
            table.update({str(a): Histogram.from_json(h) for a, h in data[name].items()})
        got.in_progress = int(data["in_progress"])
        got.kept_sessions = int(data["kept_sessions"])
        got.active_elsewhere = int(data["active_sessions"])
        return got

    def _forget_before(self, cutoff: float) -> None:
        last = self._last_turn
        while last and last[next(iter(last))] < cutoff:
            last.popitem(last=False)

    def render(self) -> str:
        out: list[str] = []

        def family(name: str, kind: str, help_text: str) -> None:
            out.append(f"# HELP {name} {help_text}")
            out.append(f"# TYPE {name} {kind}")

        family("agentscript_turns_total", "counter", "Turns committed, by agent and outcome.")
        for (agent, outcome), n in sorted(self.turns.items()):
            out.append(f'agentscript_turns_total{{agent="{_esc(agent)}",outcome="{outcome}"}} {n}')
        for name, table, text in (
            ("agentscript_turn_seconds", self.turn_time, "Turn latency (whole turn)."),
            ("agentscript_turn_model_seconds", self.model_time, "Turn time spent in the model."),
            ("agentscript_turn_engine_seconds", self.engine_time, "Turn time outside the model."),
        ):
            family(name, "histogram", text)
            for agent, hist in sorted(table.items()):
                out.extend(hist.lines(name, f'agent="{_esc(agent)}"'))
        for name, counter, text in (
            ("agentscript_llm_calls_total", self.llm_calls, "LLM calls answered."),
            ("agentscript_llm_errors_total", self.llm_errors, "LLM calls that failed the turn."),
            ("agentscript_action_errors_total", self.action_errors, "Actions that failed."),
            ("agentscript_refusals_total", self.refusals, "Tool calls refused by the engine."),
        ):
            family(name, "counter", text)
            for agent, n in sorted(counter.items()):
                out.append(f'{name}{{agent="{_esc(agent)}"}} {n}')
        family("agentscript_tokens_total", "counter", "Model tokens, by direction.")
        for (agent, direction), n in sorted(self.tokens.items()):
            out.append(
                f'agentscript_tokens_total{{agent="{_esc(agent)}",direction="{direction}"}} {n}'
            )
        family("agentscript_http_requests_total", "counter", "HTTP requests, by status.")
        for (method, status), n in sorted(self.http.items()):
            out.append(
                f'agentscript_http_requests_total{{method="{method}",status="{status}"}} {n}'
            )
        family("agentscript_turns_in_progress", "gauge", "Turns running now.")
        out.append(f"agentscript_turns_in_progress {self.in_progress}")
        family(
            "agentscript_session_loads_total",
            "counter",
            "Turns by where their session came from: kept in memory, or restored from the store.",
        )
        for source in ("kept", "restored"):
            out.append(
                f'agentscript_session_loads_total{{source="{source}"}} {self.session_loads[source]}'
            )
        family("agentscript_kept_sessions", "gauge", "Sessions kept in memory between turns.")
        out.append(f"agentscript_kept_sessions {self.kept_sessions}")
        family("agentscript_active_sessions", "gauge", "Sessions with a turn in the last 5 min.")
        out.append(f"agentscript_active_sessions {self.active_sessions()}")
        return "\n".join(out) + "\n"


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
