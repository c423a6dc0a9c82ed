"""Tokens of one expression.

An expression ends at the end of its line (a ``\\`` before the newline continues it), at a
``#`` comment, or where the caller's limit is. Inside open brackets it goes on over the following
lines, like Python, as long as they are indented deeper than the line the expression started on
(or start with a closing bracket): so an unclosed bracket cannot swallow the rest of the file.
The lexer never raises: malformed input becomes an ``ERROR`` token with a message, so the parser
can report it at the right place.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Columns a tab advances to the next multiple of (the .agent parser counts indentation the same).
TAB_WIDTH = 4

KEYWORDS = frozenset({"and", "or", "not", "is", "in", "if", "else", "True", "False", "None"})

# Longest operators first so '==' wins over '='.
OPERATORS = (
    "...",
    "==",
    "!=",
    "<=",
    ">=",
    "<",
    ">",
    "+",
    "-",
    "*",
    "/",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    ",",
    ":",
    ".",
    "=",
    "%",
)

# ASCII digits only: str.isdigit() and \d also accept digits int() cannot read, such as '²'.
_NUMBER_PATTERN = r"(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:[eE][+-]?[0-9]+)?"
_NUMBER = re.compile(_NUMBER_PATTERN)
_DATE = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
    r"(?:T[0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]+)?)?(?:Z|[+-][0-9]{2}:[0-9]{2})?)?"
)
# The common tokens in one match (after spaces), so the usual case costs one regex call.
# A number followed by '-' may be a date; such text, escapes, newlines, comments and errors
# take the slower path in Lexer.next.
_FAST = re.compile(
    r"[ \t]*(?:"
    r"(?P<IDENT>[A-Za-z_][A-Za-z0-9_]*)"
    r"|@(?P<AT>[A-Za-z_][A-Za-z0-9_]*)"
    r'|"(?P<STRING>[^"\\\n]*)"'
    rf"|(?P<NUMBER>{_NUMBER_PATTERN})(?![0-9-])"
    r"|(?P<OP>\.\.\.|[=!<>]=|[-<>+*/()\[\]{},:.=%])"
    r")"
)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "'": "'", "0": "\0"}
_OPENERS = frozenset("([{")
_DIGITS = frozenset("0123456789")
_CLOSERS = frozenset(")]}")


@dataclass(slots=True)
class Token:
    kind: str  # NUMBER STRING DATE IDENT AT OP KEYWORD ERROR END
    text: str
    start: int
    end: int
    value: object = None


class Lexer:
    """Tokenises ``text[start:limit]``, stopping at the end of the (continued) line."""

    __slots__ = ("_after_colon", "_base_indent", "depth", "limit", "pos", "text")

    def __init__(self, text: str, start: int, limit: int | None = None) -> None:
        self.text = text
        self.pos = start
        self.limit = len(text) if limit is None else limit
        self.depth = 0  # open brackets so far
        self._base_indent = -1  # indentation of the first line, computed when first needed
        self._after_colon = False  # the last token was ':'

    def tokens(self) -> list[Token]:
        """Every token up to and including END."""
        out: list[Token] = []
        while True:
            token = self.next()
            out.append(token)
            if token.kind == "END":
                return out

    def next(self) -> Token:
        """The next token (END, again and again, once the expression's text is over)."""
        token = self._scan()
        self._after_colon = token.kind == "OP" and token.text == ":"
        return token

    def _scan(self) -> Token:
        text, limit = self.text, self.limit
        m = _FAST.match(text, self.pos, limit)
        if m is not None:
            kind = m.lastgroup
            end = m.end()
            self.pos = end
            if kind == "IDENT":
                word = m.group(kind)
                return Token("KEYWORD" if word in KEYWORDS else "IDENT", word, m.start(kind), end)
            if kind == "OP":
                op = m.group(kind)
                if op in _OPENERS:
                    self.depth += 1
                elif op in _CLOSERS and self.depth:
                    self.depth -= 1
                return Token("OP", op, m.start(kind), end)
            if kind == "AT":
                return Token("AT", m.group(kind), m.start(kind) - 1, end)
            if kind == "STRING":
                start = m.start(kind) - 1
                return Token("STRING", text[start:end], start, end, m.group(kind))
            raw = m.group("NUMBER")
            return Token("NUMBER", raw, m.start("NUMBER"), end, _number_value(raw))
        return self._next_slow()

    def _next_slow(self) -> Token:
        text, limit = self.text, self.limit
        pos = self.pos
        while pos < limit:
            ch = text[pos]
            if ch in " \t":
                pos += 1
            elif ch == "\\" and pos + 1 < limit and text[pos + 1] == "\n":
                pos += 2  # line continuation
            elif self.depth and (ch == "\n" or ch == "#"):
                joined = self._join_lines(pos)
                if joined == pos:
                    break
                pos = joined
            else:
                break
        self.pos = pos
        if pos >= limit or text[pos] == "\n" or text[pos] == "#":
            return Token("END", "", pos, pos)
        ch = text[pos]
        if ch == '"' or ch == "'":
            return self._string(pos, ch)
        if ch in _DIGITS or (ch == "." and pos + 1 < limit and text[pos + 1] in _DIGITS):
            m = _DATE.match(text, pos)
            if m and m.end() <= limit:
                self.pos = m.end()
                kind = "DATE" if "T" not in m.group() else "DATETIME"
                return Token(kind, m.group(), pos, m.end(), m.group())
            m = _NUMBER.match(text, pos)
            assert m is not None
            self.pos = m.end()
            raw = m.group()
            return Token("NUMBER", raw, pos, m.end(), _number_value(raw))
        if ch == "@":
            m = _IDENT.match(text, pos + 1)
            if m:
                self.pos = m.end()
                return Token("AT", m.group(), pos, m.end())
            self.pos = pos + 1
            return Token("ERROR", "@", pos, pos + 1, "expected a namespace name after '@'")
        m = _IDENT.match(text, pos)
        if m:
            self.pos = m.end()
            word = m.group()
            return Token("KEYWORD" if word in KEYWORDS else "IDENT", word, pos, m.end())
        for op in OPERATORS:
            if text.startswith(op, pos):
                self.pos = pos + len(op)
                if op in _OPENERS:
                    self.depth += 1
                elif op in _CLOSERS and self.depth:
                    self.depth -= 1
                return Token("OP", op, pos, self.pos)
        self.pos = pos + 1
        return Token("ERROR", ch, pos, pos + 1, f"unexpected character {ch!r}")

    def _join_lines(self, pos: int) -> int:
        """Inside brackets, at a newline or comment: the offset where the expression goes on,
        or ``pos`` itself when the next line does not continue it."""
        text, limit = self.text, self.limit
        if self._after_colon:
            # `if (x:` with the body below: the body is not part of the expression.
            return pos
        if self._base_indent < 0:
            self._base_indent = _indent_at(text, text.rfind("\n", 0, pos) + 1)
        origin = pos
        while True:
            newline = text.find("\n", pos, limit)
            if newline == -1:
                return origin
            line_start = newline + 1
            content = line_start
            while content < limit and text[content] in " \t":
                content += 1
            if content >= limit:
                return origin
            ch = text[content]
            if ch == "\n" or ch == "#":  # blank or comment lines inside brackets are skipped
                pos = content
                continue
            indent = _indent_at(text, line_start)
            if indent > self._base_indent or (ch in _CLOSERS and indent == self._base_indent):
                return content
            return origin

    def _string(self, start: int, quote: str) -> Token:
        text, limit = self.text, self.limit
        pos = start + 1
        chars: list[str] = []
        bad_escape = -1
        while pos < limit:
            ch = text[pos]
            if ch == quote:
                self.pos = pos + 1
                if quote == "'":
                    return Token(
                        "ERROR",
                        text[start : pos + 1],
                        start,
                        pos + 1,
                        "strings use double quotes: write \"...\" instead of '...'",
                    )
                if bad_escape >= 0:
                    return Token(
                        "ERROR",
                        text[start : pos + 1],
                        start,
                        pos + 1,
                        f"unknown escape '{text[bad_escape : bad_escape + 2]}' in string: "
                        "use \\n, \\t, \\r, \\\", \\' , \\\\ or \\0",
                    )
                return Token("STRING", text[start : pos + 1], start, pos + 1, "".join(chars))
            if ch == "\n":
                break
            if ch == "\\" and pos + 1 < limit and text[pos + 1] != "\n":
                escaped = _ESCAPES.get(text[pos + 1])
                if escaped is None and bad_escape < 0:
                    bad_escape = pos
                chars.append(escaped or "\\" + text[pos + 1])
                pos += 2
                continue
            chars.append(ch)
            pos += 1
        self.pos = pos
        return Token(
            "ERROR",
            text[start:pos],
            start,
            pos,
            "unterminated string: add the closing '\"' on the same line",
        )


def _number_value(raw: str) -> int | float:
    """The value of a number token: an int unless it has a point or an exponent."""
    return float(raw) if any(c in raw for c in ".eE") else int(raw)


def _indent_at(text: str, line_start: int) -> int:
    """Width of the indentation of the line starting at ``line_start`` (tabs to TAB_WIDTH)."""
    width = 0
    pos = line_start
    while pos < len(text):
        ch = text[pos]
        if ch == " ":
            width += 1
        elif ch == "\t":
            width += TAB_WIDTH - width % TAB_WIDTH
        else:
            break
        pos += 1
    return width
