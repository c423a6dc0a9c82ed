"""A small JSONPath evaluator of our own, enough for Salesforce's custom evaluations.

Supported: ``$`` root, ``.name`` and ``['name']`` members, ``[N]`` (negative allowed),
``[*]`` and ``.*`` wildcards, ``..name`` recursive descent, and filters
``[?(@.a.b == 'x')]`` with ``== != < <= > >=``, bare existence ``[?(@.a)]``, ``&&`` and ``||``;
literals are quoted strings, numbers, ``true``, ``false``, ``null``. Nothing is evaluated as
Python. :func:`compile_path` raises :class:`JsonPathError` (with the column) on a path it
cannot read; :meth:`JsonPath.find` returns every match in document order.

>>> compile_path("$.a[*][?(@.n == 'x')].v").find({"a": [[{"n": "x", "v": 1}, {"n": "y"}]]})
[1]
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

Selector = Callable[[Any], list[Any]]


class JsonPathError(ValueError):
    """The path does not parse; ``column`` is 1-based."""

    def __init__(self, path: str, column: int, message: str) -> None:
        self.path = path
        self.column = column
        # Keep the error one readable line even for a path of thousands of characters.
        shown = path if len(path) <= 80 else path[:80] + "..."
        super().__init__(f"JSONPath {shown!r}, column {column}: {message}")


_NAME = re.compile(r"[A-Za-z_$][A-Za-z0-9_$-]*")
_NUMBER = re.compile(r"-?\d+(\.\d+)?")
_OPS = ("==", "!=", "<=", ">=", "<", ">")
# Filters and parentheses are parsed (and evaluated) recursively: deeper nesting than any real
# path needs is refused with a JsonPathError instead of ending in a RecursionError.
MAX_NESTING = 32


# Each `..*` can multiply the matches by the size of the value: chained (`$..*..*..*`) over a
# deeply nested value the count grows like size**n and a run would take minutes or exhaust
# memory. One evaluation (filters included) may visit at most this many values.
MAX_VISITS = 200_000


class JsonPathTooBroad(ValueError):
    """The path visited more than :data:`MAX_VISITS` values in one evaluation."""

    def __init__(self, path: str) -> None:
        shown = path if len(path) <= 80 else path[:80] + "..."
        super().__init__(
            f"JSONPath {shown!r} matches too much (more than {MAX_VISITS} values visited); "
            "make it more specific, e.g. fewer '..' steps"
        )


class _Budget:
    def __init__(self, path: str) -> None:
        self.path = path
        self.left = MAX_VISITS

    def spend(self, count: int) -> None:
        self.left -= count
        if self.left < 0:
            raise JsonPathTooBroad(self.path)


# The budget of the evaluation under way, shared with the paths of its filters (`@...`), which
# run once per candidate and could otherwise each spend a full budget.
_BUDGET: ContextVar[_Budget | None] = ContextVar("jsonpath_budget", default=None)


def _spend(count: int) -> None:
    budget = _BUDGET.get()
    if budget is not None:
        budget.spend(count)


@dataclass(frozen=True)
class JsonPath:
    text: str
    selectors: tuple[Selector, ...]

    def find(self, data: Any) -> list[Any]:
        """Every match in document order; :class:`JsonPathTooBroad` past :data:`MAX_VISITS`."""
        token = None
        if _BUDGET.get() is None:
            token = _BUDGET.set(_Budget(self.text))
        try:
            current = [data]
            for select in self.selectors:
                found: list[Any] = []
                for item in current:
                    matches = select(item)
                    _spend(len(matches) + 1)
                    found.extend(matches)
                current = found
            return current
        finally:
            if token is not None:
                _BUDGET.reset(token)


def compile_path(text: str) -> JsonPath:
    return _Parser(text).parse()


def _children(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return list(value.values())
    if isinstance(value, list):
        return list(value)
    return []


def _member(name: str) -> Selector:
    def select(value: Any) -> list[Any]:
        return [value[name]] if isinstance(value, dict) and name in value else []

    return select


def _index(index: int) -> Selector:
    def select(value: Any) -> list[Any]:
        if isinstance(value, list) and -len(value) <= index < len(value):
            return [value[index]]
        return []

    return select


def _descend(name: str | None) -> Selector:
    def select(value: Any) -> list[Any]:
        found: list[Any] = []
        queue = deque([value])
        while queue:
            item = queue.popleft()
            children = _children(item)
            # Spent while walking: one value's descendants alone can be far too many.
            _spend(len(children) + 1)
            if name is None:
                found.extend(children)
            elif isinstance(item, dict) and name in item:
                found.append(item[name])
            queue.extend(children)
        return found

    return select


def _filter(predicate: Callable[[Any], bool]) -> Selector:
    def select(value: Any) -> list[Any]:
        return [child for child in _children(value) if predicate(child)]

    return select


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.depth = 0

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self.fail(f"filters and parentheses nested deeper than {MAX_NESTING}")

    def fail(self, message: str) -> JsonPathError:
        return JsonPathError(self.text, self.pos + 1, message)

    def peek(self, token: str) -> bool:
        return self.text.startswith(token, self.pos)

    def skip_spaces(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] == " ":
            self.pos += 1

    def expect(self, token: str) -> None:
        self.skip_spaces()
        if not self.peek(token):
            raise self.fail(f"expected {token!r}")
        self.pos += len(token)

    def parse(self) -> JsonPath:
        text = self.text.strip()
        self.text = text
        if not text.startswith("$"):
            raise self.fail("a path starts with '$'")
        self.pos = 1
        selectors = self.selectors(stop=lambda: self.pos >= len(self.text))
        return JsonPath(text, tuple(selectors))

    def selectors(self, stop: Callable[[], bool]) -> list[Selector]:
        found: list[Selector] = []
        while not stop():
            if self.peek(".."):
                self.pos += 2
                if self.peek("*"):
                    self.pos += 1
                    found.append(_descend(None))
                else:
                    found.append(_descend(self.name()))
            elif self.peek("."):
                self.pos += 1
                if self.peek("*"):
                    self.pos += 1
                    found.append(_children)
                else:
                    found.append(_member(self.name()))
            elif self.peek("["):
                found.append(self.bracket())
            else:
                raise self.fail("expected '.', '..' or '['")
        return found

    def name(self) -> str:
        match = _NAME.match(self.text, self.pos)
        if not match:
            raise self.fail("expected a member name")
        self.pos = match.end()
        return match.group()

    def bracket(self) -> Selector:
        self.pos += 1
        self.skip_spaces()
        if self.peek("*"):
            self.pos += 1
            self.expect("]")
            return _children
        if self.peek("?"):
            self.pos += 1
            self.expect("(")
            self.enter()
            predicate = self.disjunction()
            self.depth -= 1
            self.expect(")")
            self.expect("]")
            return _filter(predicate)
        if self.peek("'") or self.peek('"'):
            name = self.string()
            self.expect("]")
            return _member(name)
        match = re.compile(r"-?\d+").match(self.text, self.pos)
        if match:
            self.pos = match.end()
            self.expect("]")
            return _index(int(match.group()))
        raise self.fail("expected '*', '?(...)', an index or a quoted name inside '[ ]'")

    def string(self) -> str:
        quote = self.text[self.pos]
        end = self.text.find(quote, self.pos + 1)
        if end < 0:
            raise self.fail("unterminated string")
        value = self.text[self.pos + 1 : end]
        self.pos = end + 1
        return value

    # ---------------------------------------------------------------- filters

    def disjunction(self) -> Callable[[Any], bool]:
        parts = [self.conjunction()]
        while True:
            self.skip_spaces()
            if not self.peek("||"):
                break
            self.pos += 2
            parts.append(self.conjunction())
        return lambda item: any(part(item) for part in parts)

    def conjunction(self) -> Callable[[Any], bool]:
        parts = [self.comparison()]
        while True:
            self.skip_spaces()
            if not self.peek("&&"):
                break
            self.pos += 2
            parts.append(self.comparison())
        return lambda item: all(part(item) for part in parts)

    def comparison(self) -> Callable[[Any], bool]:
        self.skip_spaces()
        if self.peek("("):
            self.pos += 1
            self.enter()
            inner = self.disjunction()
            self.depth -= 1
            self.expect(")")
            return inner
        left = self.operand()
        self.skip_spaces()
        op = next((o for o in _OPS if self.peek(o)), None)
        if op is None:
            return lambda item: bool(left(item))
        self.pos += len(op)
        right = self.operand()
        return lambda item: _compare(op, left(item), right(item))

    def operand(self) -> Callable[[Any], list[Any]]:
        self.skip_spaces()
        if self.peek("@"):
            self.pos += 1
            selectors = self.selectors(stop=self.operand_ends)
            path = JsonPath("@", tuple(selectors))
            return path.find
        if self.peek("'") or self.peek('"'):
            value: Any = self.string()
            return lambda item: [value]
        for word, literal in (("true", True), ("false", False), ("null", None)):
            if self.peek(word):
                self.pos += len(word)
                return _constant(literal)
        match = _NUMBER.match(self.text, self.pos)
        if match:
            self.pos = match.end()
            number = float(match.group()) if match.group(1) else int(match.group())
            return lambda item: [number]
        raise self.fail("expected '@...', a quoted string, a number, true, false or null")

    def operand_ends(self) -> bool:
        if self.pos >= len(self.text):
            raise self.fail("unterminated filter: expected ')]'")
        char = self.text[self.pos]
        return char in " )=!<>&|"


def _constant(value: Any) -> Callable[[Any], list[Any]]:
    return lambda item: [value]


def _compare(op: str, left: list[Any], right: list[Any]) -> bool:
    if not left or not right:
        return op == "!=" and bool(left) != bool(right)
    a, b = left[0], right[0]
    if op == "==":
        return bool(a == b)
    if op == "!=":
        return bool(a != b)
    try:
        if op == "<":
            return bool(a < b)
        if op == "<=":
            return bool(a <= b)
        if op == ">":
            return bool(a > b)
        return bool(a >= b)
    except TypeError:
        return False
