"""Budgets: caps on LLM calls, tokens and cost, per turn and per session, enforced at the one
shared LLM call (:func:`agentscript.engine.llm.call_model`) so both formats obey them.

In: a :class:`Budget` (from ``agentscript.toml`` ``[budgets]`` / ``[prices.MODEL]``, or built
in Python and passed to ``agent.session(budget=...)``). The session opens a
:class:`BudgetMeter` around each turn (:func:`metering`); ``call_model`` asks
:meth:`BudgetMeter.check` before every call and reports usage with :meth:`BudgetMeter.record`.

Out: a call that would cross a cap is not made: :class:`BudgetExceeded` (a ``TurnError``) ends
the turn with the agent's error message, or with an escalation when ``on_exceed =
"escalate"``; the trace gets a ``BUDGET_STEP`` naming the cap. Usage and cost totals go to the
trace's ``usage``, the turn JSON and :class:`~agentscript.engine.session.Reply`.

"Would cross" is decided before the call, from what is known then: the call count exactly;
input tokens from an estimate of the request (:func:`estimate_input_tokens`, 4 characters a
token); output tokens and cost from the totals so far plus that estimate. Prices are per
million tokens. A cost cap with a model missing from ``[prices]`` is a configuration error,
never a silent zero.

```toml
[budgets]
on_exceed = "error"            # or "escalate"
turn = { llm_calls = 8, output_tokens = 4000 }
session = { cost = 0.50, input_tokens = 200000 }

[prices."openai:gpt-4o-mini"]  # the model spec or its model name
input = 0.15                   # per million input tokens
output = 0.60                  # per million output tokens
```
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from agentscript.errors import TurnError
from agentscript.models.base import ModelRequest

CHARS_PER_TOKEN = 4  # the usual rule of thumb for English text; only used before a call
_CAP_KEYS = ("llm_calls", "input_tokens", "output_tokens", "cost")


class BudgetConfigError(ValueError):
    """The ``[budgets]`` or ``[prices]`` table is wrong; the message says where and the fix."""


class OnExceed(Enum):
    ERROR = "error"
    ESCALATE = "escalate"


@dataclass(frozen=True, slots=True)
class Caps:
    """Upper bounds for one scope (a turn or a session); None means no cap."""

    llm_calls: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost: float | None = None

    def any(self) -> bool:
        return any(getattr(self, k) is not None for k in _CAP_KEYS)


@dataclass(frozen=True, slots=True)
class Price:
    """Cost per million tokens."""

    input: float
    output: float

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input + output_tokens * self.output) / 1_000_000


@dataclass(frozen=True, slots=True)
class Budget:
    turn: Caps = Caps()
    session: Caps = Caps()
    prices: Mapping[str, Price] = field(default_factory=dict)
    on_exceed: OnExceed = OnExceed.ERROR

    @property
    def needs_prices(self) -> bool:
        return self.turn.cost is not None or self.session.cost is not None

    def price_of(self, model: str) -> Price | None:
        """The price of a model spec (``openai:gpt-4o``) or of its bare model name."""
        if model in self.prices:
            return self.prices[model]
        _, _, bare = model.partition(":")
        return self.prices.get(bare) if bare else None


@dataclass(slots=True)
class Usage:
    """Running totals; ``cost`` is None when no price is known for a model used."""

    llm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "llm_calls": self.llm_calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost": None if self.cost is None else round(self.cost, 8),
        }

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> Usage:
        cost = data.get("cost", 0.0)
        return Usage(
            int(data.get("llm_calls", 0)),
            int(data.get("input_tokens", 0)),
            int(data.get("output_tokens", 0)),
            None if cost is None else float(cost),
        )


@dataclass(frozen=True, slots=True)
class CapHit:
    """Which cap a call would cross: scope ("turn"|"session"), cap name, limit, and the
    total the call would have reached (an estimate for tokens and cost)."""

    scope: str
    cap: str
    limit: float
    would_reach: float

    def message(self) -> str:
        return (
            f"the {self.scope} budget for {self.cap.replace('_', ' ')} ({self.limit:g}) would be "
            f"exceeded by the next LLM call (reaching about {self.would_reach:g}); raise "
            f"[budgets] {self.scope}.{self.cap} in agentscript.toml or the Budget passed to the session"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "cap": self.cap,
            "limit": self.limit,
            "wouldReach": self.would_reach,
        }


class BudgetExceeded(TurnError):
    """A cap stops the turn before an LLM call."""

    def __init__(self, hit: CapHit) -> None:
        super().__init__(hit.message())
        self.hit = hit


class BudgetMeter:
    """The usage of one session (``session``) and of its current turn (``turn``)."""

    def __init__(self, budget: Budget, session: Usage | None = None) -> None:
        self.budget = budget
        # Whether a cap is set at all: the common case (none) then costs one test per call.
        self.capped = budget.turn.any() or budget.session.any()
        self.session = session or Usage()
        self.turn = Usage()
        self.hit: CapHit | None = None

    def start_turn(self) -> None:
        self.turn = Usage()
        self.hit = None

    def check(self, model: str, request: ModelRequest) -> CapHit | None:
        """The cap the next call to ``model`` would cross, if any. Raises TurnError when a
        cost cap is set and ``model`` has no price."""
        if not self.capped:
            return None  # no cap (so no cost cap either): nothing to price or estimate
        price = self.budget.price_of(model)
        if price is None and self.budget.needs_prices:
            # The Budget may come from agentscript.toml or from Python: name both remedies.
            raise TurnError(
                f"budget: a cost cap is set but no price is known for model '{model}'; add "
                f'[prices."{model}"] (input and output per million tokens) to agentscript.toml, '
                f'or prices={{"{model}": Price(input=..., output=...)}} to the Budget'
            )
        scopes = [c for c in (self.budget.turn, self.budget.session) if c.any()]
        if not scopes:
            return None  # no cap: nothing to estimate (the common case costs one check)
        needs_estimate = any(c.input_tokens is not None or c.cost is not None for c in scopes)
        estimate = estimate_input_tokens(request) if needs_estimate else 0
        for scope, caps, used in (
            ("turn", self.budget.turn, self.turn),
            ("session", self.budget.session, self.session),
        ):
            projected = {
                "llm_calls": used.llm_calls + 1,
                "input_tokens": used.input_tokens + estimate,
                # Output is unknown until the call answers: a call is made while under the cap.
                "output_tokens": used.output_tokens + (1 if caps.output_tokens else 0),
                "cost": (used.cost or 0.0) + (price.cost(estimate, 0) if price else 0.0),
            }
            for cap in _CAP_KEYS:
                limit = getattr(caps, cap)
                if limit is not None and projected[cap] > limit:
                    self.hit = CapHit(scope, cap, float(limit), float(projected[cap]))
                    return self.hit
        return None

    def record(self, model: str, input_tokens: int, output_tokens: int) -> None:
        price = self.budget.price_of(model)
        for usage in (self.turn, self.session):
            usage.llm_calls += 1
            usage.input_tokens += input_tokens
            usage.output_tokens += output_tokens
            if usage.cost is not None:
                usage.cost = usage.cost + price.cost(input_tokens, output_tokens) if price else None


def estimate_input_tokens(request: ModelRequest) -> int:
    """A rough count of the tokens a request sends (system, instructions, messages, tools)."""
    size = len(request.system) + len(request.instructions)
    for message in request.messages:
        size += len(message.content or "") + len(
            json.dumps(message.to_json().get("tool_calls", []))
        )
    for tool in request.tools:
        size += len(tool.name) + len(tool.description or "") + len(json.dumps(tool.parameters))
    return math.ceil(size / CHARS_PER_TOKEN)


# ---------------------------------------------------------------------- the turn's meter

_active: ContextVar[BudgetMeter | None] = ContextVar("agentscript_budget_meter", default=None)


def active_meter() -> BudgetMeter | None:
    """The meter of the turn running in this context, if any."""
    return _active.get()


@contextlib.contextmanager
def metering(meter: BudgetMeter | None) -> Iterator[BudgetMeter | None]:
    """Make ``meter`` the active one for the duration of a turn."""
    if meter is not None:
        meter.start_turn()
    token = _active.set(meter)
    try:
        yield meter
    finally:
        _active.reset(token)


# ---------------------------------------------------------------------- configuration


def budget_from_config(config: Any) -> Budget | None:
    """The Budget of an :class:`~agentscript.integrations.config.IntegrationConfig`, or None
    when it sets neither a cap nor a price. Raises BudgetConfigError naming the table and the fix."""
    return parse_budget(config.budgets, config.prices, where=str(config.path or "agentscript.toml"))


def parse_budget(
    budgets: Mapping[str, Any], prices: Mapping[str, Any], *, where: str = "agentscript.toml"
) -> Budget | None:
    unknown = sorted(set(budgets) - {"turn", "session", "on_exceed"})
    if unknown:
        raise BudgetConfigError(
            f"{where}: [budgets] has unknown key(s) {unknown}; known: turn, session, on_exceed"
        )
    mode = budgets.get("on_exceed", "error")
    try:
        on_exceed = OnExceed(mode)
    except ValueError:
        raise BudgetConfigError(
            f'{where}: [budgets] on_exceed must be "error" or "escalate", not {mode!r}'
        ) from None
    turn = _caps(budgets.get("turn", {}), "turn", where)
    session = _caps(budgets.get("session", {}), "session", where)
    table = {name: _price(name, spec, where) for name, spec in prices.items()}
    if not turn.any() and not session.any() and not table:
        return None
    return Budget(turn=turn, session=session, prices=table, on_exceed=on_exceed)


def _caps(spec: Any, scope: str, where: str) -> Caps:
    if not isinstance(spec, Mapping):
        raise BudgetConfigError(f"{where}: [budgets] {scope} must be a table of caps")
    unknown = sorted(set(spec) - set(_CAP_KEYS))
    if unknown:
        raise BudgetConfigError(
            f"{where}: [budgets] {scope} has unknown cap(s) {unknown}; known: {', '.join(_CAP_KEYS)}"
        )
    values: dict[str, Any] = {}
    for key, value in spec.items():
        integer = key != "cost"
        ok = not isinstance(value, bool) and (
            isinstance(value, int) if integer else isinstance(value, int | float)
        )
        if not ok or value < 0:
            kind = "a whole number" if integer else "a number"
            raise BudgetConfigError(f"{where}: [budgets] {scope}.{key} must be {kind} >= 0")
        values[key] = value
    return Caps(**values)


def _price(name: str, spec: Any, where: str) -> Price:
    if not isinstance(spec, Mapping) or set(spec) != {"input", "output"}:
        raise BudgetConfigError(
            f'{where}: [prices."{name}"] must have exactly `input` and `output` '
            "(cost per million tokens)"
        )
    for key in ("input", "output"):
        value = spec[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise BudgetConfigError(f'{where}: [prices."{name}"] {key} must be a number >= 0')
    return Price(float(spec["input"]), float(spec["output"]))
