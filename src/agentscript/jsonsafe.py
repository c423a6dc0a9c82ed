"""JSON-safe values: what may enter session state, traces, saved sessions and model requests.

:func:`json_safe` takes a value from outside the engine (an action's outputs, a computed
variable value) and returns a plain JSON copy of it (``dict`` with string keys, ``list``,
``str``, finite ``int``/``float``, ``bool``, ``None``), or raises :class:`UnsafeValue` naming
the first problem: NaN or Infinity, a cycle, a type JSON has no form for (sets, datetimes,
bytes, objects), nesting deeper than ``max_depth`` or a size over ``max_chars``.
:func:`json_safe_sized` also returns the size it counted, for a budget shared by many values.

The walk never serialises the value and stops as soon as the size budget is spent, so a
50 MB string is refused in constant time; recursion is bounded by ``max_depth``, so any
input (a self-referencing dict included) is safe to check.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

DEFAULT_MAX_DEPTH = 32


class UnsafeValue(ValueError):
    """A value that cannot be kept as JSON; ``path`` says where (``outputs.items[3]``).
    ``problem`` says which bound or rule refused it, for callers that answer each their own
    way: ``"size"`` (the size budget), ``"depth"`` (nesting), ``"integer"`` (too long for
    Python to print) or ``"value"`` (no JSON form: NaN, a set, a cycle, a key that is no
    string)."""

    def __init__(self, reason: str, path: str, *, problem: str = "value") -> None:
        super().__init__(f"{path}: {reason}" if path else reason)
        self.reason = reason
        self.path = path
        self.problem = problem

    @property
    def too_large(self) -> bool:
        return self.problem == "size"


def json_safe(
    value: Any, *, max_chars: int, max_depth: int = DEFAULT_MAX_DEPTH, path: str = ""
) -> Any:
    """A plain JSON copy of ``value`` whose JSON text is at most about ``max_chars`` long."""
    kind = type(value)
    # Most values checked are a string, or a dict of strings, numbers and booleans (an
    # action's outputs): no walker, no path stack for them.
    if kind is str and len(value) + 2 <= max_chars:
        return value
    if (
        kind is dict
        and max_depth > 0
        and len(value) <= 64
        and _flat_size(value, max_chars) is not None
    ):
        return dict(value)
    return _Walker(max_chars, max_depth, path).copy(value, 0)


def json_safe_sized(
    value: Any, *, max_chars: int, max_depth: int = DEFAULT_MAX_DEPTH, path: str = ""
) -> tuple[Any, int]:
    """:func:`json_safe`'s copy of ``value`` and the characters it counted for it (what
    ``max_chars`` bounds), for a caller that keeps one budget across many values (a turn's
    action outputs). The same fast paths and walker: it decides exactly as json_safe does."""
    # json_safe does not return its count: its callers would pay a tuple and a call on every
    # output and variable write (about 200 ns, as much again as a short string's check).
    kind = type(value)
    if kind is str and len(value) + 2 <= max_chars:
        return value, len(value) + 2
    if kind is dict and max_depth > 0 and len(value) <= 64:
        used = _flat_size(value, max_chars)
        if used is not None:
            return dict(value), used
    walker = _Walker(max_chars, max_depth, path)
    return walker.copy(value, 0), int(walker.used)


def _flat_size(value: dict[Any, Any], max_chars: float) -> int | None:
    """The size, as the walker counts it, of a dict whose keys are strings and whose values
    are strings, booleans, None or small integers, when within ``max_chars``; None for
    anything else (the walker then decides, and names the problem)."""
    used = 2
    for name, item in value.items():
        if type(name) is not str:
            return None
        kind = type(item)
        if kind is str:
            used += len(name) + len(item) + 6
        elif item is None or kind is bool:
            used += len(name) + 9
        elif kind is int and -(10**30) < item < 10**30:
            used += len(name) + 4 + len(str(item))
        else:
            return None
    if used > max_chars:
        return None
    return used


def json_size(value: Any) -> int:
    """An estimate of the JSON text length of a value already known to be JSON-safe."""
    walker = _Walker(math.inf, 10**9, "")
    walker.copy(value, 0)
    return int(walker.used)


class _Walker:
    """One walk. The path to the current value is kept as a stack of keys and indexes and
    spelt out only for an error: the walk runs on every action output and variable write."""

    def __init__(self, max_chars: float, max_depth: int, root: str) -> None:
        self.budget = max_chars
        self.max_depth = max_depth
        self.used: float = 0
        self.ancestors: set[int] = set()
        self.root = root
        self.parts: list[str | int] = []

    def path(self) -> str:
        text = self.root
        for part in self.parts:
            if isinstance(part, int):
                text += f"[{part}]"
            else:
                text = f"{text}.{part}" if text else part
        return text

    def spend(self, chars: int) -> None:
        self.used += chars
        if self.used > self.budget:
            raise UnsafeValue(
                f"larger than the limit of {int(self.budget)} characters",
                self.path(),
                problem="size",
            )

    def copy(self, value: Any, depth: int) -> Any:
        kind = type(value)
        if kind is str:
            self.spend(len(value) + 2)
            return value
        if kind is dict or kind is list:
            return self.container(value, depth)
        if value is None or isinstance(value, bool):
            self.spend(5)
            return value
        if isinstance(value, int):
            if -(10**30) < value < 10**30:
                self.spend(len(str(value)))
            else:
                try:  # CPython refuses to print more than sys.get_int_max_str_digits() digits
                    digits = len(str(value))
                except ValueError:
                    raise UnsafeValue(
                        "an integer too long to print as JSON", self.path(), problem="integer"
                    ) from None
                self.spend(digits)
            return int(value)
        if isinstance(value, float):
            if not math.isfinite(value):
                raise UnsafeValue(f"{value!r} is not a finite JSON number", self.path())
            self.spend(24)
            return float(value)
        if isinstance(value, str):
            self.spend(len(value) + 2)
            return str(value)
        if isinstance(value, Mapping | list | tuple):
            return self.container(value, depth)
        raise UnsafeValue(f"a {type(value).__name__} is not a JSON value", self.path())

    def container(self, value: Any, depth: int) -> Any:
        if depth >= self.max_depth:
            raise UnsafeValue(
                f"nested more than {self.max_depth} levels deep", self.path(), problem="depth"
            )
        key = id(value)
        if key in self.ancestors:
            raise UnsafeValue("contains itself (a cycle)", self.path())
        self.ancestors.add(key)
        parts = self.parts
        try:
            self.spend(2)
            if type(value) is dict or isinstance(value, Mapping):
                out: dict[str, Any] = {}
                for name, item in value.items():
                    if type(name) is not str:
                        if not isinstance(name, str):
                            raise UnsafeValue(
                                f"key {name!r} is a {type(name).__name__}, not a string",
                                self.path(),
                            )
                        name = str(name)
                    self.spend(len(name) + 4)
                    parts.append(name)
                    out[name] = self.copy(item, depth + 1)
                    parts.pop()
                return out
            items = []
            for index, item in enumerate(value):
                parts.append(index)
                items.append(self.copy(item, depth + 1))
                parts.pop()
            return items
        finally:
            self.ancestors.discard(key)
