"""Runtime values: type checks for declared Agent Script types, display and truthiness.

Values inside the runtime are plain JSON-like Python objects: ``None``, ``bool``, ``int``,
``float``, ``str``, ``list`` and ``dict``. Dates, datetimes and times are ISO strings.
See ``docs/expressions.md`` for the rules in table form.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import math
import re
import reprlib
from collections.abc import Iterable, Mapping

from agentscript.errors import Signal
from agentscript.limits import MAX_DISPLAY_CHARS as LIMIT_DISPLAY_CHARS
from agentscript.limits import MAX_DISPLAY_DEPTH as LIMIT_DISPLAY_DEPTH

__all__ = [
    "KNOWN_TYPES",
    "TypeMismatch",
    "coerce_to_type",
    "describe_value",
    "nested_deeper_than",
    "parse_type",
    "to_display",
    "truthy",
    "type_matches",
    "type_name_of",
]


class TypeMismatch(ValueError):
    """A value does not fit a declared type; the message is written for people and LLMs."""

    def __init__(self, message: str, type_name: str = "", value: object = None) -> None:
        super().__init__(message)
        self.message = message
        self.type_name = type_name
        self.value = value


KNOWN_TYPES = frozenset(
    {
        "string",
        "number",
        "integer",
        "long",
        "boolean",
        "object",
        "currency",
        "date",
        "datetime",
        "time",
        "timestamp",
        "id",
        "list",
    }
)

_LIST_TYPE = re.compile(r"\s*list\s*\[\s*(.*?)\s*\]\s*", re.IGNORECASE)
# Strict ISO shapes; the stdlib parsers below then reject impossible dates such as 2025-02-30.
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_TIME = re.compile(r"\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?(?:Z|[+-]\d{2}:\d{2})?")
_DATETIME = re.compile(
    r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?(?:Z|[+-]\d{2}:\d{2})?"
)

_ARTICLE = {
    "string": "a string",
    "number": "a number",
    "currency": "a currency amount (number)",
    "integer": "an integer",
    "long": "an integer",
    "boolean": "a boolean (True or False)",
    "object": "an object (JSON object)",
    "date": "a date (YYYY-MM-DD)",
    "datetime": "a datetime (YYYY-MM-DDTHH:MM[:SS[.ffffff]][Z|±HH:MM])",
    "timestamp": "a timestamp (YYYY-MM-DDTHH:MM[:SS[.ffffff]][Z|±HH:MM])",
    "time": "a time (HH:MM[:SS[.ffffff]])",
    "id": "an id (non-empty string)",
    "list": "a list",
}


def parse_type(type_name: str, param: str | None = None) -> tuple[str, str | None]:
    """Normalise a declared type: ``("List[Number]", None)`` -> ``("list", "number")``.

    Type names are case-insensitive. ``param`` is the item type of a list, if the caller
    already split it off. Raises :class:`TypeMismatch` for an unknown type name, and for a
    type or item type that is not a string (``("list", "number")`` as one argument).
    """
    if not isinstance(type_name, str):
        raise _not_a_type_name(type_name)
    if param is not None and not isinstance(param, str):
        raise _not_a_type_name(param)
    return _parse_type(type_name, param)


def _not_a_type_name(given: object) -> TypeMismatch:
    shown = reprlib.repr(given)  # bounded: the value may be any object a caller passed
    return TypeMismatch(
        f"a type is a string such as 'number' or 'list[number]', not the "
        f"{type(given).__name__} {shown}; give a list's item type inside the string or "
        "as param: coerce_to_type(value, 'list', 'number')",
        shown,
    )


# Checked above: every argument is a string, so the cache never sees an unhashable one.
@functools.lru_cache(maxsize=1024)
def _parse_type(type_name: str, param: str | None) -> tuple[str, str | None]:
    match = _LIST_TYPE.fullmatch(type_name)
    if match is not None:
        if param is not None:
            raise TypeMismatch(f"type {type_name!r} has two item types", type_name)
        param = match.group(1)
        base = "list"
    else:
        base = type_name.strip().lower()
    if base not in KNOWN_TYPES:
        raise TypeMismatch(f"unknown type {type_name!r}", type_name)
    if param is not None:
        if base != "list":
            raise TypeMismatch(f"type {base!r} takes no item type", type_name)
        param = param.strip()
        # Validate the item type eagerly so `list[nubmer]` fails even for an empty list.
        parse_type(param)
    return base, param


def type_name_of(value: object) -> str:
    """The Agent Script name of a runtime value's type, for messages."""
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "list"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def describe_value(value: object, limit: int = 40) -> str:
    """``the string "12"``: a short description of a value for error messages."""
    text = (
        to_display(value) if not isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    )
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    if value is None:
        return "None"
    return f"the {type_name_of(value)} {text}"


def coerce_to_type(
    value: object, type_name: str, param: str | None = None, *, nullable: bool = True
) -> object:
    """Check ``value`` against a declared type and return its runtime form.

    Strict JSON typing: a number is never a string and a boolean is never a number.
    The only conversions are the lossless ones: an integral float for ``integer``/``long``
    becomes an ``int``, a tuple becomes a list, any mapping becomes a ``dict``, and
    ``datetime.date``/``datetime``/``time`` objects become ISO strings. ``None`` (unset)
    is accepted for every type unless ``nullable`` is false; list items are never None.
    """
    base, item = parse_type(type_name, param)
    if value is None:
        if nullable:
            return None
        raise TypeMismatch(f"expected {_expected(base, item)}, got None", type_name, value)
    return _coerce(value, base, item, type_name)


def type_matches(value: object, type_name: str, param: str | None = None) -> bool:
    """True when :func:`coerce_to_type` would accept ``value`` (None counts as a match)."""
    try:
        coerce_to_type(value, type_name, param)
    except TypeMismatch:
        return False
    return True


def _expected(base: str, item: str | None) -> str:
    if base == "list" and item is not None:
        return f"a list of {parse_type(item)[0]} values"
    return _ARTICLE[base]


def _fail(value: object, base: str, item: str | None, type_name: str) -> TypeMismatch:
    return TypeMismatch(
        f"expected {_expected(base, item)}, got {describe_value(value)}", type_name, value
    )


def _coerce(value: object, base: str, item: str | None, type_name: str) -> object:
    if base == "string":
        if isinstance(value, str):
            return value
    elif base in ("number", "currency"):
        if isinstance(value, int | float) and not isinstance(value, bool):
            if isinstance(value, float) and not math.isfinite(value):
                raise TypeMismatch(f"expected a finite number, got {value!r}", type_name, value)
            return value
    elif base in ("integer", "long"):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif base == "boolean":
        if isinstance(value, bool):
            return value
    elif base == "object":
        if isinstance(value, Mapping):
            if not _finite_json(value):
                raise TypeMismatch(
                    "expected an object of JSON values (no NaN or Infinity)", type_name, value
                )
            return value if type(value) is dict else dict(value)
    elif base == "id":
        if isinstance(value, str) and value.strip():
            return value
    elif base == "date":
        return _coerce_date(value, type_name)
    elif base in ("datetime", "timestamp"):
        return _coerce_datetime(value, base, type_name)
    elif base == "time":
        return _coerce_time(value, type_name)
    elif base == "list" and isinstance(value, list | tuple):
        return _coerce_list(value, item, type_name)
    raise _fail(value, base, item, type_name)


def nested_deeper_than(value: object, limit: int) -> bool:
    """True when lists/dicts nest more than ``limit`` levels. Iterative: any depth is safe."""
    pending: list[tuple[object, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        kind = type(item)
        children: Iterable[object]
        # Exact built-in types first: tool arguments and outputs are plain JSON data, and the
        # Mapping check is an ABC lookup.
        if kind is dict:
            children = item.values()  # type: ignore[attr-defined]
        elif kind is list or kind is tuple:
            children = item  # type: ignore[assignment]
        elif kind in _SCALARS:
            continue
        elif isinstance(item, Mapping):
            children = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth >= limit:
            return True
        next_depth = depth + 1
        pending.extend((v, next_depth) for v in children)
    return False


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _finite_json(value: object) -> bool:
    """No NaN/Infinity anywhere inside: they are not JSON, and state must stay JSON.
    Iterative, so any depth is safe."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                return False
        elif isinstance(item, Mapping):
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
    return True


def _coerce_list(
    value: list[object] | tuple[object, ...], item: str | None, type_name: str
) -> list[object]:
    if item is None:
        return list(value)
    item_base, item_item = parse_type(item)
    out: list[object] = []
    for position, element in enumerate(value):
        if element is None:
            expected = _expected(item_base, item_item)
            raise TypeMismatch(f"item {position}: expected {expected}, got None", type_name, value)
        try:
            out.append(_coerce(element, item_base, item_item, item))
        except TypeMismatch as exc:
            raise TypeMismatch(f"item {position}: {exc.message}", type_name, value) from None
    return out


def _coerce_date(value: object, type_name: str) -> str:
    if isinstance(value, _dt.date) and not isinstance(value, _dt.datetime):
        return value.isoformat()
    if isinstance(value, str) and _DATE.fullmatch(value):
        try:
            _dt.date.fromisoformat(value)
        except ValueError:
            raise TypeMismatch(
                f"{value!r} is not a valid calendar date", type_name, value
            ) from None
        return value
    raise _fail(value, "date", None, type_name)


def _coerce_datetime(value: object, base: str, type_name: str) -> str:
    if isinstance(value, _dt.datetime):
        return value.isoformat()
    if isinstance(value, str) and _DATETIME.fullmatch(value):
        try:
            _dt.datetime.fromisoformat(value)
        except ValueError:
            raise TypeMismatch(f"{value!r} is not a valid {base}", type_name, value) from None
        return value
    raise _fail(value, base, None, type_name)


def _coerce_time(value: object, type_name: str) -> str:
    if isinstance(value, _dt.time):
        return value.isoformat()
    if isinstance(value, str) and _TIME.fullmatch(value):
        try:
            _dt.time.fromisoformat(value)
        except ValueError:
            raise TypeMismatch(f"{value!r} is not a valid time", type_name, value) from None
        return value
    raise _fail(value, "time", None, type_name)


def truthy(value: object) -> bool:
    """Python truthiness: None, False, 0, 0.0, "", [] and {} are false."""
    return bool(value)


# Interpolation output is bounded so a huge or deeply nested value cannot flood a prompt.
MAX_DISPLAY_CHARS = LIMIT_DISPLAY_CHARS
MAX_DISPLAY_DEPTH = LIMIT_DISPLAY_DEPTH


class _Full(Signal):
    pass


def to_display(value: object) -> str:
    """The text ``{!expr}`` inserts for a value.

    None -> "" (an unset value renders as nothing); booleans -> "True"/"False"; integral
    floats without ".0" (3.0 -> "3"); other numbers as Python prints them; strings as-is;
    lists and dicts in Agent Script literal syntax (``["a", 1, True, None]``,
    ``{"k": 2.5}``). Output longer than ``MAX_DISPLAY_CHARS`` is cut and ends with "…".
    """
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int | float):
        return _number(value)
    if isinstance(value, _dt.date | _dt.time):
        return value.isoformat()
    if not isinstance(value, list | tuple | Mapping):
        try:
            return str(value)[:MAX_DISPLAY_CHARS]
        except Exception:
            return f"<{type(value).__name__}>"
    parts: list[str] = []
    budget = [MAX_DISPLAY_CHARS]
    try:
        _literal(value, parts, budget, 0)
    except _Full:
        parts.append("…")
    return "".join(parts)


def _number(value: int | float) -> str:
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e16:
            return str(int(value))
        return repr(value)
    try:
        return str(value)
    except ValueError:  # beyond sys.int_max_str_digits
        return f"<{value.bit_length()}-bit integer>"


def _emit(text: str, parts: list[str], budget: list[int]) -> None:
    if len(text) > budget[0]:
        parts.append(text[: budget[0]])
        raise _Full
    budget[0] -= len(text)
    parts.append(text)


def _literal(value: object, parts: list[str], budget: list[int], depth: int) -> None:
    if value is None:
        _emit("None", parts, budget)
    elif isinstance(value, str):
        _emit(json.dumps(value, ensure_ascii=False), parts, budget)
    elif isinstance(value, bool):
        _emit("True" if value else "False", parts, budget)
    elif isinstance(value, int | float):
        _emit(_number(value), parts, budget)
    elif depth >= MAX_DISPLAY_DEPTH and isinstance(value, list | tuple | Mapping):
        _emit("…", parts, budget)
    elif isinstance(value, list | tuple):
        _emit("[", parts, budget)
        for position, item in enumerate(value):
            if position:
                _emit(", ", parts, budget)
            _literal(item, parts, budget, depth + 1)
        _emit("]", parts, budget)
    elif isinstance(value, Mapping):
        _emit("{", parts, budget)
        for position, (key, item) in enumerate(value.items()):
            if position:
                _emit(", ", parts, budget)
            _literal(key, parts, budget, depth + 1)
            _emit(": ", parts, budget)
            _literal(item, parts, budget, depth + 1)
        _emit("}", parts, budget)
    elif isinstance(value, _dt.date | _dt.time):
        _emit(json.dumps(value.isoformat()), parts, budget)
    else:
        # Foreign objects only reach here from host code; never let their repr fail a render.
        try:
            text = str(value)
        except Exception:
            text = f"<{type(value).__name__}>"
        _emit(json.dumps(text, ensure_ascii=False), parts, budget)
