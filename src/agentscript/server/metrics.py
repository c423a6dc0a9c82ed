"""Process metrics in the Prometheus text format (``GET /metrics``), no client library needed.

Per process: with several workers, each exposes its own figures (Prometheus sums them). Turn
latency is split into model time (the LLM calls of the turn, from its trace) and engine time
(the rest: prompt resolution, actions, store commit).
"""

from __future__ import annotations

import time
from collections import Counter, OrderedDict
from collections.abc import Iterable
from typing import Any

from agentscript.trace_steps import Source, StepType

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# A session counts as active for this long after its last turn.
ACTIVE_WINDOW = 300.0
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


class Metrics:
    """Counters, histograms and gauges of one server process."""

    def __init__(self) -> None:
        self.turns: Counter[tuple[str, str]] = Counter()  # (agent, outcome)
        self.llm_calls: Counter[str] = Counter()
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
            elif kind == StepType.REFUSED_STEP and step.get("source") != Source.MEMORY:
                # A Mantle memory refusal is a refused read or write, not a tool call.
                self.refusals[agent] += 1
            elif kind == StepType.ERROR_STEP:
                failed = True
        self.turns[(agent, "error" if failed else "ok")] += 1
        now = time.monotonic()
        self._last_turn[session_id] = now
        self._last_turn.move_to_end(session_id)
        self._forget_before(now - ACTIVE_WINDOW)

    def active_sessions(self) -> int:
        self._forget_before(time.monotonic() - ACTIVE_WINDOW)
        return len(self._last_turn)

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
            ("agentscript_llm_calls_total", self.llm_calls, "LLM calls."),
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
