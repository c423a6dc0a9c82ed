"""Every bound of the runtime, in one place: :class:`Limits` (per session, overridable) and
the fixed bounds that protect the parsers and evaluators from hostile input.

:class:`Limits` is read by the turn runners of both formats and by the action runner. Callers
override a field from the Python API (``agent.session(limits=Limits(max_llm_calls=4))``) or in
the ``[limits]`` table of ``agentscript.toml``, read when the agent is loaded::

    [limits]
    max_llm_calls = 8
    action_timeout = 10.0
    action_timeouts = { slow_report = 60.0 }

Every error a bound causes names its field (``Limits.max_llm_calls = 16``); a refused tool
call's ``REFUSED_STEP`` carries it as ``limit``.

The fixed bounds below are not per session: they keep recursion inside Python's stack and
arithmetic inside sane sizes whatever the input, so they are constants the parsers and
evaluators import from here (documented in ``docs/limits.md``).
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

# --- fixed bounds (hostile input; not overridable) -----------------------------------------

# Blocks nested deeper than this in a `.agent` file are ignored with a diagnostic: about 6
# interpreter frames per block level, well inside Python's default recursion limit of 1000.
MAX_BLOCK_DEPTH: Final = 50
# Expression nesting (brackets, unary operators, parenthesised sub-expressions) the expression
# parser accepts; about 11 frames per level, so 80 levels stay under the recursion limit.
MAX_EXPRESSION_DEPTH: Final = 80
# Integers an expression's arithmetic may produce (bits), and strings or lists it may build
# (items); larger results are an EvalError rather than a slow or memory-hungry success.
MAX_INT_BITS: Final = 4096
MAX_SEQUENCE_LENGTH: Final = 1_000_000
# `{!expr}` display of a value: longer text is cut, deeper structure shown as "...".
MAX_DISPLAY_CHARS: Final = 100_000
MAX_DISPLAY_DEPTH: Final = 64
# Tool-call arguments nested deeper than this are dropped before anything records them:
# json.dumps (traces, saved sessions, the next request) overflows near 1000 levels.
MAX_KEPT_ARGUMENT_DEPTH: Final = 64
# A value a host gives a variable (``session(variables=...)``, a server's new session): the
# depth a model-written argument may keep, so every saved session reads back.
MAX_GIVEN_DEPTH: Final = MAX_KEPT_ARGUMENT_DEPTH
# Names listed in one "unknown variable(s)" message; a client can send thousands.
MAX_NAMES_SHOWN: Final = 10
# Bytes read from an http(s):// action's response body.
MAX_HTTP_RESPONSE_BYTES: Final = 5_000_000
# Binary operators in one expression. A chain `1 + 1 + ...` is parsed by a loop, but its tree
# is as deep as it is long, and every later pass (checker, compiler, printer) recurses on the
# tree: 1,000 terms overflowed the stack. Real conditions use a handful.
MAX_EXPRESSION_OPERATORS: Final = 200
# Bytes of one file read on a user's behalf (reading.read_file_bytes): the largest real agent
# or conversation file seen is under 200 KB; an agent folder's Python files are not read
# through here.
MAX_FILE_BYTES: Final = 8 * 1024 * 1024
# Nodes a YAML document may expand to once aliases are followed (reading.compose_yaml). Real
# files have a few thousand; the classic "billion laughs" (nine aliases per level, nine
# levels) expands to 9^9, which is refused after visiting a few dozen nodes.
MAX_YAML_NODES: Final = 200_000


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-turn bounds (S11) and hostile-input bounds on what the model sends.

    Each field's name appears in the error it causes.
    """

    # One turn (S11): past any of these the turn ends with the error message; the session
    # stays usable.
    max_llm_calls: int = 16  # LLM calls in one turn (both formats)
    max_transitions: int = 10  # Agent Script transitions in one turn
    # Mantle block steps run without the model, per turn (a `call:`/`link:` or `next:` cycle
    # must end); hitting it cancels the skill stack so the session stays usable.
    max_deterministic_steps: int = 100
    # Mantle skills on the stack at once: starting one more (activation, `call:` step) is
    # refused past it, so interrupts and calls cannot grow a session without end.
    max_stack_depth: int = 16
    # Mantle tools' `context.send` messages in one turn, all tools together: a send past it
    # is refused inside the tool. 16 sends of at most max_reply_chars each are what a turn's
    # model may say (max_llm_calls replies), and fit in max_history_chars; a tool says one or
    # two things, and without a count a loop of short sends grew the reply, the history and
    # the trace by a message each.
    max_tool_sends: int = 16
    # One LLM step: calls past this many are refused (REFUSED_STEP with `limit`).
    max_tool_calls_per_step: int = 8
    # What the model sends: arguments past these are refused (REFUSED_STEP with `limit`).
    max_argument_chars: int = 20_000  # JSON text of one call's arguments
    max_argument_depth: int = 16  # nesting of one call's arguments
    # Actions: seconds before an action is abandoned (ActionError naming the timeout).
    action_timeout: float = 30.0  # every action without its own entry below
    action_timeouts: Mapping[str, float] = field(default_factory=dict)  # by action name
    # Size caps (JSON characters) on what enters state, traces and later model requests:
    # one action call's outputs and all a turn's, one model reply's text, one variable's value,
    # the history.
    max_output_chars: int = 1_000_000  # one action call's outputs: an error result past it
    # What a turn's actions return, all calls together (both formats, hooks and block steps
    # included): a call whose outputs would take the turn past it gets an error result
    # instead, so a turn's additions to the history, the trace and memory are bounded at the
    # source. Without it a turn may make max_llm_calls x max_tool_calls_per_step calls
    # (16 x 8) of max_output_chars each, 128M characters. The same as max_history_chars: what
    # one turn's actions return fills the history at most once.
    max_turn_output_chars: int = 4_000_000
    # one model reply's text (the turn ends past it), and one Mantle `context.send`'s
    # (refused inside the tool)
    max_reply_chars: int = 200_000
    max_variable_chars: int = 200_000  # one variable's value: the write fails past it
    max_history_chars: int = 4_000_000  # the history: oldest exchanges dropped past it

    def output_bound(self, spent: int) -> tuple[int, str]:
        """The most characters one action call's outputs may take when the turn's kept
        outputs already took ``spent`` (the tighter of ``max_output_chars`` and what is left of
        ``max_turn_output_chars``), and that bound as a call past it is told: "larger than"
        it."""
        left = self.max_turn_output_chars - spent
        if self.max_output_chars <= left:
            return self.max_output_chars, (
                f"Limits.max_output_chars ({self.max_output_chars} characters)"
            )
        return left, (
            "what is left this turn of Limits.max_turn_output_chars "
            f"({self.max_turn_output_chars} characters)"
        )

    def replaced(self, table: Mapping[str, Any], *, where: str = "limits") -> Limits:
        """A copy with the fields of ``table`` (a ``[limits]`` table) changed; ValueError
        names the first unknown field or ill-typed value."""
        fields = {f.name: f for f in dataclasses.fields(self)}
        changes: dict[str, Any] = {}
        for name, value in table.items():
            if name not in fields:
                raise ValueError(f"{where}: unknown limit '{name}'; known: {sorted(fields)}")
            changes[name] = _checked(where, name, value, getattr(self, name))
        return dataclasses.replace(self, **changes)


def _checked(where: str, name: str, value: Any, current: Any) -> Any:
    if isinstance(current, Mapping):
        if not isinstance(value, Mapping) or not all(
            _is_number(v) and v > 0 for v in value.values()
        ):
            raise ValueError(f"{where}: {name} must be a table of positive numbers (seconds)")
        return {str(k): float(v) for k, v in value.items()}
    if isinstance(current, float):
        if not _is_number(value) or value <= 0:
            raise ValueError(f"{where}: {name} must be a positive number, not {value!r}")
        return float(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{where}: {name} must be a positive integer, not {value!r}")
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def configured_limits(start: Path | None = None) -> tuple[Limits, Path | None]:
    """:class:`Limits` with the ``[limits]`` table of the ``agentscript.toml`` that applies
    to ``start`` (``$AGENTSCRIPT_CONFIG``, else the nearest one), and that file.

    No file, or a file that is not valid TOML, gives the defaults (the model configuration
    reports an unreadable file); a bad ``[limits]`` table is a ValueError naming the field.
    """
    # the one rule for finding the file, and the one size cap for reading it
    from agentscript.models.config import find_config, read_toml

    path = find_config(start)
    if path is None:
        return Limits(), None
    try:
        data = read_toml(path)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return Limits(), path
    table = data.get("limits")
    if table is None:
        return Limits(), path
    if not isinstance(table, Mapping):
        raise ValueError("'limits' must be a table, e.g. [limits]")
    return Limits().replaced(table, where="[limits]"), path
