"""Mantle memory at run time: flat qualified names, declared types, write rules.

A session's memory is ``SessionState.variables``: every declared entry under its qualified
name (``project.authenticated``, ``card_replace.reason``), ``None`` meaning unset. This
module checks values against the declared ``type``/``enum_values`` and resolves the bare
names tools use (``context.memory.set("reason", ...)``) to qualified ones.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from agentscript.engine.given import some
from agentscript.mantle.model import PROJECT_NAMESPACE, MemoryEntry, Project
from agentscript.mantle.run.tool_handler import integral_float


class MemoryWriteError(ValueError):
    """A write the declarations do not allow; the message says why."""


_TRUE = frozenset({"true", "yes", "1"})
_FALSE = frozenset({"false", "no", "0"})
# Numbers as text are taken only in the ASCII decimal forms (spaces around them allowed):
# Python's int() and float() also read other scripts' digits ("٣", fullwidth "４２") and
# digit-group underscores ("1_000", even "1_0.5"), which no one writing a number means and
# which do not read back as what was given. re.ASCII keeps \d and \s to ASCII.
_INT_TEXT = re.compile(r"\s*[+-]?\d+\s*", re.ASCII)
_FLOAT_TEXT = re.compile(r"\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\s*", re.ASCII)


def coerce_value(entry: MemoryEntry, value: Any) -> Any:
    """``value`` in the entry's runtime form, or :class:`MemoryWriteError` (None = unset)."""
    if value is None:
        return None
    kind = entry.type
    where = entry.qualified_name
    if kind == "text":
        if isinstance(value, str):
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            try:
                return str(value)
            except ValueError:  # an int too long to print (Python's digit limit)
                pass
    elif kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
    elif kind == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return _json_data(entry, value)  # a number too long for JSON is refused
        if integral_float(value):
            return int(value)  # the tool arguments' rule (2.0 is 2), bound included
        if isinstance(value, float) and value.is_integer():
            raise MemoryWriteError(
                f"{where}: {shown(value)} is past 2**53, where a float stands for no one "
                "integer; give the integer's digits instead"
            )
        if isinstance(value, str) and _INT_TEXT.fullmatch(value):
            try:
                return int(value)
            except ValueError:  # more digits than Python converts (its digit limit)
                pass
    elif kind == "float":
        number = _finite_float(value)
        if number is not None:
            return number
    elif kind == "list":
        if isinstance(value, list | tuple):
            return _json_data(entry, list(value))
    elif kind == "categorical":
        return _categorical(entry, value)
    else:  # json, any: anything JSON can hold
        return _json_data(entry, value)
    raise MemoryWriteError(f"{where}: expected a {kind} value, got {shown(value)}")


def shown(value: Any, limit: int = 80) -> str:
    """``repr`` for error messages, cut to ``limit`` characters (values come from models)."""
    try:
        text = repr(value)
    except ValueError:  # an int too long to print (Python's digit limit)
        return "<a number too long to show>"
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def _finite_float(value: Any) -> float | None:
    """A number or numeric text as a finite float; NaN and infinities are not JSON, and
    memory must survive ``to_json``/``restore``."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    if isinstance(value, str) and not _FLOAT_TEXT.fullmatch(value):
        return None
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def _json_data(entry: MemoryEntry, value: Any) -> Any:
    """``value`` when strict JSON can hold it (no NaN, no objects), so memory survives
    ``to_json``/``restore``."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        raise MemoryWriteError(f"{entry.qualified_name}: the value is not JSON data") from None
    return value


def _categorical(entry: MemoryEntry, value: Any) -> Any:
    allowed = entry.enum_values
    if not allowed:
        return _json_data(entry, value)
    if value in allowed:
        return value
    if isinstance(value, str):
        # Models vary the case ("Express"); the declared spelling is what gets stored.
        for option in allowed:
            if isinstance(option, str) and option.lower() == value.strip().lower():
                return option
    raise MemoryWriteError(
        f"{entry.qualified_name}: {shown(value)} is not one of {', '.join(map(str, allowed))}"
    )


def initial_memory(project: Project) -> dict[str, Any]:
    """Every declared entry: its ``initial_value`` or None."""
    values: dict[str, Any] = {}
    for entry in project.all_memory():
        values[entry.qualified_name] = entry.initial_value if entry.has_initial_value else None
    return values


def seeded_memory(project: Project, given: Mapping[str, Any]) -> dict[str, Any]:
    """Initial memory overridden by ``given`` (qualified names); unknown names are errors."""
    values = initial_memory(project)
    unknown = sorted(name for name in given if name not in values)
    if unknown:
        raise ValueError(
            f"unknown memory entr{'y' if len(unknown) == 1 else 'ies'} {some(unknown)}; "
            f"declared: {some(sorted(values))}"
        )
    for name, value in given.items():
        entry = project.memory_entry(name)
        assert entry is not None
        try:
            values[name] = coerce_value(entry, value)
        except MemoryWriteError as exc:
            raise ValueError(str(exc)) from None
    return values


def resolve_name(project: Project, name: str, namespaces: list[str]) -> MemoryEntry | None:
    """A qualified name, or a bare one looked up in ``namespaces`` then ``project``."""
    if "." in name:
        return project.memory_entry(name.removeprefix("session."))
    for namespace in [*namespaces, PROJECT_NAMESPACE]:
        entry = project.memory_entry(f"{namespace}.{name}")
        if entry is not None:
            return entry
    return None


def check_write(entry: MemoryEntry, memory: Mapping[str, Any], value: Any) -> Any:
    """The value to store; project entries are write-once unless declared mutable."""
    coerced = coerce_value(entry, value)
    current = memory.get(entry.qualified_name)
    if entry.write_once and current is not None and current != coerced:
        raise MemoryWriteError(
            f"{entry.qualified_name} is already set for this session and is not mutable"
        )
    return coerced
