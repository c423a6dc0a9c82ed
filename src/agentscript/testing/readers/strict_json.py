"""JSON text read strictly, for the JSON files the test runner reads (run-eval specs, recordings).

:func:`load_json` is :func:`json.loads` refusing what the standard reader lets through silently
or raises as a bare ``ValueError``: a key given twice in one object (the standard reader keeps
the last value), an integer longer than Python converts (``sys.get_int_max_str_digits()``,
4,300 digits by default); with ``finite=True`` NaN, Infinity and numbers that overflow to
infinity; with ``unicode=True`` a string or key holding a lone surrogate (a ``"\\udfff"``
escape: no Unicode character, which no reply, trace or report can write as UTF-8). Each, like
text that is not JSON or is nested too deeply, is a :class:`JsonProblem` with its line when it
can be told; the caller makes it its own error (a spec error, a recording error). No other
exception comes out for any text.
"""

from __future__ import annotations

import json
import json.decoder
import json.scanner
import math
import re
import sys
from typing import Any


class JsonProblem(Exception):
    """Why the text cannot be read: ``problem``, the ``fix`` when there is one, and ``line``
    (None when it cannot be told). ``message`` is ``invalid JSON: <problem>; <fix>``."""

    def __init__(self, problem: str, line: int | None, fix: str = "") -> None:
        self.problem = problem
        self.fix = fix
        self.line = line
        self.message = f"invalid JSON: {problem}" + (f"; {fix}" if fix else "")
        super().__init__(self.message)


class _Refused(Exception):
    """Raised from a decoder hook: what is wrong, its fix, and a text to find its line by."""

    def __init__(self, problem: str, fix: str, needle: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.fix = fix
        self.needle = needle


class _Duplicate(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


class _Found(Exception):
    def __init__(self, start: int) -> None:
        super().__init__(start)
        self.start = start


def _pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in items:
        if key in result:
            raise _Duplicate(key)
        result[key] = value
    return result


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:  # longer than sys.get_int_max_str_digits() allows
        digits = len(text.lstrip("-"))
        raise _Refused(
            f"an integer of {digits} digits is longer than Python reads "
            f"(sys.get_int_max_str_digits(): {sys.get_int_max_str_digits()})",
            "write it as a string",
            text,
        ) from None


def _constant(name: str) -> Any:
    # Python's json reads NaN/Infinity/-Infinity, which JSON does not have: an expected value
    # of NaN never compares equal, and it would be copied into a report that is not JSON.
    raise _Refused(f"{name} is not a finite JSON number", "", name)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400 overflows to infinity
        raise _Refused(f"{text} is not a finite JSON number", "", text)
    return value


def _line(text: str, at: int) -> int:
    return text.count("\n", 0, at) + 1


def _shown(text: str, limit: int = 80) -> str:
    # Quoted and escaped (control characters, lone surrogates), at most `limit` characters.
    return repr(text if len(text) <= limit else text[:limit] + "...")


def load_json(text: str, *, finite: bool = False, unicode: bool = False) -> Any:
    """The value of JSON ``text``, or :class:`JsonProblem` (see the module's docstring)."""
    options: dict[str, Any] = {"object_pairs_hook": _pairs, "parse_int": _int}
    if finite:
        options.update(parse_constant=_constant, parse_float=_finite_float)
    try:
        value = json.loads(text, **options)
    except json.JSONDecodeError as exc:
        raise JsonProblem(exc.msg, exc.lineno) from None
    except _Refused as exc:
        at = text.find(exc.needle)
        raise JsonProblem(exc.problem, _line(text, at) if at >= 0 else None, exc.fix) from None
    except _Duplicate as exc:
        start = _duplicate_start(text)  # the line of the object that has the key twice
        raise JsonProblem(
            f"an object gives the key {_shown(exc.key)} twice",
            _line(text, start) if start is not None else None,
            "keep one",
        ) from None
    except RecursionError:
        raise JsonProblem("nested too deeply", 1) from None
    if unicode:
        _refuse_lone_surrogates(text, value)
    return value


# The standard library's pure-Python scanner and object parser (json.scanner, json.decoder;
# there since Python 2.6, not in typeshed): the scanner passes each object's position.
_py_make_scanner: Any = json.scanner.py_make_scanner  # type: ignore[attr-defined]
_json_object: Any = json.decoder.JSONObject  # type: ignore[attr-defined]


def _duplicate_start(text: str) -> int | None:
    """Where the first object giving a key twice starts: the text read again with the
    pure-Python scanner, which passes each object's position (several times slower than the
    C one, so only on this error path). None when it cannot tell."""
    decoder: Any = json.JSONDecoder(parse_int=_int)

    def parse_object(
        s_and_end: tuple[str, int],
        strict: bool,
        scan_once: Any,
        object_hook: Any,
        object_pairs_hook: Any,
        memo: Any,
    ) -> tuple[dict[str, Any], int]:
        start = s_and_end[1] - 1  # the scanner passes the position after the "{"

        def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
            if len({key for key, _ in items}) != len(items):
                raise _Found(start)
            return dict(items)

        found: tuple[dict[str, Any], int] = _json_object(
            s_and_end, strict, scan_once, object_hook, pairs, memo
        )
        return found

    decoder.parse_object = parse_object
    decoder.scan_once = _py_make_scanner(decoder)
    try:
        decoder.decode(text)
    except _Found as found:
        return found.start
    except (ValueError, RecursionError, _Refused):
        # The C reader got that far; this one, deeper in recursion per level, may not.
        return None
    return None


# A \uD800-\uDFFF escape (a pair's two halves too: only the decoded strings tell them apart).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _refuse_lone_surrogates(text: str, value: Any) -> None:
    """The first string or key (in document order) holding a lone surrogate is refused with
    its JSON pointer. The text was read as UTF-8, so one can only come from an escape: text
    without such an escape is not walked."""
    if not _SURROGATE_ESCAPE.search(text):
        return
    pending: list[tuple[Any, str]] = [(value, "")]
    while pending:  # a stack, not recursion: the value may be nested ~1,000 deep
        item, pointer = pending.pop()
        if isinstance(item, str):
            found = _SURROGATE.search(item)
            if found is not None:
                _lone_surrogate(text, pointer or "/", found.group(), "string")
        elif isinstance(item, dict):
            children: list[tuple[Any, str]] = []
            for key, child in item.items():
                part = _escaped(key.replace("~", "~0").replace("/", "~1"))
                found = _SURROGATE.search(key)
                if found is not None:
                    _lone_surrogate(text, f"{pointer}/{part}", found.group(), "key")
                children.append((child, f"{pointer}/{part}"))
            pending.extend(reversed(children))
        elif isinstance(item, list):
            pending.extend(reversed([(child, f"{pointer}/{i}") for i, child in enumerate(item)]))


def _escaped(text: str) -> str:
    # A pointer naming a key that holds a lone surrogate must still be printable.
    return _SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", text)


def _lone_surrogate(text: str, pointer: str, char: str, what: str) -> None:
    escape = f"\\u{ord(char):04x}"
    at = re.search(re.escape(escape), text, re.IGNORECASE)  # its first escape: the likely one
    raise JsonProblem(
        f"{pointer}: the {what} holds a lone surrogate ({escape}), which is no Unicode character",
        _line(text, at.start()) if at is not None else None,
        "write the character itself, or both escapes of its UTF-16 pair",
    )
