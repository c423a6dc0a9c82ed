"""Trace of a turn: every decision the engine took, as JSON steps.

One file per turn at ``DIR/<agent>/sessions/<session id>/traces/<plan id>.json`` with the
format pinned in the design (``agentscript-trace/1``). Step types: NODE_ENTER, HOOK_STEP,
RESOLUTION_STEP, LLM_STEP, ACTION_STEP, TRANSITION_STEP, REFUSED_STEP, RESPONSE_STEP,
ERROR_STEP, EVENT_STEP (and SKILL_STEP / BLOCK_STEP for Mantle projects).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentscript.engine.history import HistoryLedger
    from agentscript.trace_inputs import MessageLog

FORMAT = "agentscript-trace/1"
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class TurnTrace:
    """Collects the steps of one turn."""

    __slots__ = (
        "_start",
        "agent",
        "branches",
        "inputs",
        "ledger",
        "observer",
        "plan_id",
        "response",
        "session_id",
        "steps",
        "turn",
        "usage",
        "user_input",
    )

    def __init__(
        self, agent: str, session_id: str, plan_id: str, turn: int, user_input: str
    ) -> None:
        self.agent = agent
        self.session_id = session_id
        self.plan_id = plan_id
        self.turn = turn
        self.user_input = user_input
        self.response = ""
        self.steps: list[dict[str, Any]] = []
        # Every `if` decided in the turn: {node, line, taken} (written only when there is one).
        self.branches: list[dict[str, Any]] = []
        # Totals over every LLM call of the turn (per-call figures are on each LLM_STEP).
        self.usage = {"llm_calls": 0, "input_tokens": 0, "output_tokens": 0, "llm_ms": 0.0}
        self._start = time.perf_counter()
        # The session's record of what the previous LLM call was given: when set, LLM_STEPs
        # hold only the messages added since (``trace_inputs.py``); None records them all.
        self.inputs: MessageLog | None = None
        # The session's running facts about its history (size, call ids, unanswered calls),
        # so the checks before each model call look only at new messages; None: full scans.
        self.ledger: HistoryLedger | None = None
        # Called with each step as it is added (the server streams them; OpenTelemetry export
        # chains itself in front to note when each started); None: nobody listens.
        self.observer: Callable[[dict[str, Any]], None] | None = None

    @classmethod
    def extending(
        cls,
        document: dict[str, Any],
        observer: Callable[[dict[str, Any]], None] | None = None,
    ) -> TurnTrace:
        """A trace that adds steps to a finished turn's trace ``document`` (:meth:`to_json`),
        calling ``observer`` with each, as the turn's own trace did: its steps are the
        document's own list, so a step added here is in the document."""
        turn = cls(
            document.get("agent", ""),
            document.get("sessionId", ""),
            document.get("planId", ""),
            document.get("turn", 0),
            document.get("userInput", ""),
        )
        turn.steps = document["planTrace"]["steps"]
        turn.observer = observer
        return turn

    def add(self, step: dict[str, Any]) -> dict[str, Any]:
        """Append a step (built by ``trace_steps``, its ``type`` first); it is returned so the
        caller can fill in what it learns later."""
        self.steps.append(step)
        if self.observer is not None:
            self.observer(step)
        return step

    def add_branch(self, node: str, line: int, taken: str = "else") -> dict[str, Any]:
        """Record an ``if`` decision; the caller sets ``taken`` to the branch that ran."""
        branch: dict[str, Any] = {"node": node, "line": line, "taken": taken}
        self.branches.append(branch)
        return branch

    def count_llm_call(self, input_tokens: int, output_tokens: int) -> None:
        """Count one answered LLM call and its tokens (its time: :meth:`count_llm_time`)."""
        usage = self.usage
        usage["llm_calls"] += 1
        usage["input_tokens"] += input_tokens
        usage["output_tokens"] += output_tokens

    def count_llm_time(self, duration_ms: float) -> None:
        """Add time spent waiting on the model, whether the call was answered or failed."""
        self.usage["llm_ms"] = round(self.usage["llm_ms"] + duration_ms, 3)

    def to_json(self) -> dict[str, Any]:
        data = {
            "format": FORMAT,
            "agent": self.agent,
            "sessionId": self.session_id,
            "planId": self.plan_id,
            "turn": self.turn,
            "userInput": self.user_input,
            "response": self.response,
            "durationMs": elapsed_ms(self._start),
            "usage": dict(self.usage),
            "planTrace": {"steps": self.steps},
        }
        if self.branches:
            data["branches"] = list(self.branches)
        return data

    def write(self, directory: Path) -> Path:
        agent, session = path_component(self.agent), path_component(self.session_id)
        folder = directory / agent / "sessions" / session / "traces"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{path_component(self.plan_id)}.json"
        path.write_text(
            json.dumps(self.to_json(), indent=2, default=_json_default) + "\n", encoding="utf-8"
        )
        return path


def path_component(name: str) -> str:
    """``name`` as one file or folder name: each run of other characters than letters, digits,
    ``_``, ``.`` and ``-`` becomes ``_``, and a name of dots only (or none) is ``_``, never
    ``.`` or ``..``, which would name a folder above (an agent named ``..`` wrote its traces
    beside ``--trace-dir``, not inside it)."""
    safe = _SAFE.sub("_", name)
    return safe if safe.strip(".") else "_"


def _json_default(value: object) -> object:
    # Values in state are JSON-like; anything else (a host object) is shown, not serialised.
    return repr(value)


def elapsed_ms(start: float) -> float:
    """Milliseconds since ``start`` (a ``time.perf_counter()`` reading)."""
    return round((time.perf_counter() - start) * 1000, 3)
