"""Every bound of a turn, in one documented dataclass (S11 and hostile-input bounds).

Callers override a field with ``Limits(max_llm_calls=4)`` (Python API) or in the
``[limits]`` table of ``agentscript.toml``; the error a bound causes names its field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-turn bounds (S11) and hostile-input bounds on tool arguments."""

    max_llm_calls: int = 16
    max_transitions: int = 10
    max_tool_calls_per_step: int = 8
    max_argument_chars: int = 20_000
    max_argument_depth: int = 16
    action_timeout: float = 30.0  # seconds, for every action without its own entry below
    action_timeouts: Mapping[str, float] = field(default_factory=dict)  # by action name
