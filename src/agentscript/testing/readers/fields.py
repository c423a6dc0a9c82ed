"""Small field validators shared by the readers: every failure names the file and line."""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agentscript.actions.registry import StubBook
from agentscript.testing.errors import SpecError
from agentscript.testing.yamlmarks import line_of


def mapping(value: Any, path: Path, line: int | None, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SpecError(path, line_of(value) or line, f"{what} must be a mapping")
    return value


def optional_mapping(value: Any, path: Path, line: int | None, what: str) -> dict[str, Any]:
    """A mapping, or an empty one for a missing or null key; any other value (a falsy 0, false
    or "" too) is an error."""
    return {} if value is None else mapping(value, path, line, what)


def stub_results(ext: dict[str, Any], path: Path) -> dict[str, Any]:
    """The stub results under ``actions`` of an ``x-agentscript`` mapping, checked."""
    stubs = optional_mapping(ext.get("actions"), path, line_of(ext, "actions"), "actions")
    try:
        StubBook.from_data(stubs)
    except ValueError as exc:
        raise SpecError(path, line_of(ext, "actions"), f"actions: {exc}") from None
    return dict(stubs)


def listing(value: Any, path: Path, line: int | None, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise SpecError(path, line_of(value) or line, f"{what} must be a list")
    return value


def text(data: dict[str, Any], key: str, path: Path, *, required: bool = False) -> str | None:
    value = data.get(key)
    if value is None:
        if required:
            raise SpecError(path, line_of(data), f"missing required field '{key}'")
        return None
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise SpecError(path, line_of(data, key), f"'{key}' must be a text")
    return str(value)


def no_unknown(data: dict[str, Any], allowed: Iterable[str], path: Path, what: str) -> None:
    allowed_set = set(allowed)
    for key in data:
        if key not in allowed_set:
            raise SpecError(
                path,
                line_of(data, key),
                f"unknown field '{key}' in {what}; allowed: {', '.join(sorted(allowed_set))}",
            )


def latency_limit(value: Any, path: Path, line: int | None) -> float | None:
    """The limit of ``output_latency_milliseconds``: none, or a number of milliseconds (a
    numeric text counts, as XML and Salesforce's list strings write numbers as text)."""
    if value is None or value == "":
        return None
    try:
        limit = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        limit = math.nan
    if not math.isfinite(limit) or limit < 0:
        raise SpecError(
            path,
            line,
            f"output_latency_milliseconds: the limit must be milliseconds, got {value!r}",
        )
    return limit
