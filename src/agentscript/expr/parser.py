"""Expression parser: Python precedence, never raises, reports precise diagnostics.

Precedence, lowest first: ternary ``a if c else b``; ``or``; ``and``; ``not``; comparisons
(``== != < <= > >= is, is not, in, not in``, chained like Python); ``+ -``; ``* / %``; unary
``+ - *``(spread); postfix member ``.x``, index ``[i]``, call ``f(...)``; atoms.

The parser stops at the first token that cannot continue an expression (``to``, ``=``, ``,``,
``:``, ``}``), so callers parse ``set a = b``, ``x to y`` and ``{!expr}`` with it.
"""

from __future__ import annotations

import re

from agentscript.diagnostics import Diagnostic, Span, error
from agentscript.errors import Signal
from agentscript.expr.lexer import KEYWORDS, Lexer, Token
from agentscript.expr.nodes import (
    AtName,
    Binary,
    Call,
    Compare,
    DictExpr,
    EllipsisExpr,
    ErrorExpr,
    Expr,
    Index,
    ListExpr,
    Literal,
    Member,
    Name,
    Spread,
    Ternary,
    Unary,
)
from agentscript.limits import MAX_EXPRESSION_DEPTH, MAX_EXPRESSION_OPERATORS
from agentscript.source import Source

# Nesting limit in parser levels (a bracket costs two: the bracket and the expression inside,
# about 11 Python frames together), so 40 nested brackets stay well inside the default
# recursion limit even within deeply nested blocks.
MAX_DEPTH = MAX_EXPRESSION_DEPTH
# Binary operators in one expression (limits.MAX_EXPRESSION_OPERATORS).
MAX_OPERATORS = MAX_EXPRESSION_OPERATORS
_COMPARE_OPS = frozenset({"==", "!=", "<", "<=", ">", ">="})
_CLOSERS = {"(": ")", "[": "]", "{": "}"}
_OPERAND_START = frozenset({"NUMBER", "STRING", "DATE", "DATETIME", "AT", "IDENT"})
# Operators that continue an expression after an operand (postfix ones are parsed with it).
_BINARY_OPS = frozenset({"+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", ">="})


class _TooDeep(Signal):
    def __init__(self, message: str = "expression is nested too deeply") -> None:
        super().__init__(message)
        self.message = message


class ExprParser:
    """Parses one expression from ``source.text[start:limit]``."""

    def __init__(self, source: Source, start: int, limit: int | None = None) -> None:
        self.source = source
        # Tokens are read on demand: the parser often stops early (at '}' of an interpolation,
        # at '=' of `set`), and lexing the rest of a long line each time would be quadratic.
        self._lexer = Lexer(source.text, start, limit)
        # The current token; a plain attribute because it is read on every grammar rule.
        self.tok: Token = self._lexer.next()
        self._peeked: Token | None = None
        self._last_end = self.tok.start
        self.depth = 0
        self.operators = 0
        self.diagnostics: list[Diagnostic] = []

    # ------------------------------------------------------------------ helpers

    @property
    def end_offset(self) -> int:
        """Offset just after the last consumed token."""
        return self._last_end

    @property
    def next_offset(self) -> int:
        """Offset of the first unconsumed token."""
        return self.tok.start

    def at_end(self) -> bool:
        return self.tok.kind == "END"

    def advance(self) -> Token:
        token = self.tok
        if token.kind != "END":
            self._last_end = token.end
            if self._peeked is not None:
                self.tok, self._peeked = self._peeked, None
            else:
                self.tok = self._lexer.next()
        return token

    def peek(self) -> Token:
        """The token after the current one."""
        if self.tok.kind == "END":
            return self.tok
        if self._peeked is None:
            self._peeked = self._lexer.next()
        return self._peeked

    def is_op(self, *ops: str) -> bool:
        t = self.tok
        return t.kind == "OP" and t.text in ops

    def is_kw(self, *words: str) -> bool:
        t = self.tok
        return t.kind == "KEYWORD" and t.text in words

    def span(self, start: int, end: int) -> Span:
        return self.source.span(start, end)

    def report(self, message: str, start: int, end: int, code: str = "syntax-error") -> None:
        # One error per position is enough; cascades only add noise.
        span = self.span(start, max(end, start + 1))
        if not any(d.span == span for d in self.diagnostics):
            self.diagnostics.append(error(code, message, span))

    def error_here(self, message: str) -> ErrorExpr:
        t = self.tok
        if t.kind == "ERROR":
            message = str(t.value)
            self.advance()
            code = "unterminated-string" if message.startswith("unterminated") else "syntax-error"
            self.report(message, t.start, t.end, code)
            return ErrorExpr(self.span(t.start, t.end), t.text)
        self.report(message, t.start, t.end)
        return ErrorExpr(self.span(t.start, max(t.end, t.start + 1)), t.text)

    # ------------------------------------------------------------------ grammar

    def parse(self) -> Expr:
        try:
            # Most expressions are one operand (`"text"`, `@variables.x`): parse it directly
            # and enter the precedence chain only when an operator follows it.
            if self.tok.kind in _OPERAND_START:
                first = self.postfix()
                t = self.tok
                if t.kind == "KEYWORD" or (t.kind == "OP" and t.text in _BINARY_OPS):
                    return self.ternary(first)
                return first
            return self.ternary()
        except _TooDeep as exc:
            t = self.tok
            self.report(exc.message, t.start, t.end)
            while not self.at_end():
                self.advance()
            return ErrorExpr(self.span(t.start, t.end), "")

    def operator(self) -> None:
        """Count one binary operator (see MAX_OPERATORS)."""
        self.operators += 1
        if self.operators > MAX_OPERATORS:
            raise _TooDeep(
                f"expression has more than {MAX_OPERATORS} operators; split it into "
                "several variables or conditions"
            )

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _TooDeep

    # ``first``, when given, is the already parsed leftmost operand (see ``parse``).

    def ternary(self, first: Expr | None = None) -> Expr:
        self.enter()
        try:
            body = self.or_expr(first)
            if self.is_kw("if"):
                self.advance()
                condition = self.or_expr()
                if not self.is_kw("else"):
                    self.error_here(
                        "expected 'else' in conditional expression 'a if condition else b'"
                    )
                    return Ternary(
                        body.span.to(condition.span), body, condition, ErrorExpr(condition.span)
                    )
                self.advance()
                orelse = self.ternary()
                return Ternary(body.span.to(orelse.span), body, condition, orelse)
            return body
        finally:
            self.depth -= 1

    def or_expr(self, first: Expr | None = None) -> Expr:
        left = self.and_expr(first)
        while self.is_kw("or"):
            self.advance()
            right = self.and_expr()
            self.operator()
            left = Binary(left.span.to(right.span), "or", left, right)
        return left

    def and_expr(self, first: Expr | None = None) -> Expr:
        left = self.not_expr(first)
        while self.is_kw("and"):
            self.advance()
            right = self.not_expr()
            self.operator()
            left = Binary(left.span.to(right.span), "and", left, right)
        return left

    def not_expr(self, first: Expr | None = None) -> Expr:
        if first is None and self.is_kw("not"):
            start = self.advance()
            self.enter()
            try:
                operand = self.not_expr()
            finally:
                self.depth -= 1
            return Unary(self.span(start.start, start.end).to(operand.span), "not", operand)
        return self.comparison(first)

    def comparison(self, first: Expr | None = None) -> Expr:
        left = self.additive(first)
        ops: list[str] = []
        comparators: list[Expr] = []
        while True:
            t = self.tok
            if t.kind == "OP" and t.text in _COMPARE_OPS:
                self.advance()
                op = t.text
            elif self.is_kw("is"):
                self.advance()
                op = "is"
                if self.is_kw("not"):
                    self.advance()
                    op = "is not"
            elif self.is_kw("in"):
                self.advance()
                op = "in"
            elif self.is_kw("not") and self.peek().text == "in":
                self.advance()
                self.advance()
                op = "not in"
            else:
                break
            ops.append(op)
            comparators.append(self.additive())
        if not ops:
            return left
        return Compare(left.span.to(comparators[-1].span), left, ops, comparators)

    def additive(self, first: Expr | None = None) -> Expr:
        left = self.multiplicative(first)
        while self.is_op("+", "-"):
            op = self.advance().text
            right = self.multiplicative()
            self.operator()
            left = Binary(left.span.to(right.span), op, left, right)
        return left

    def multiplicative(self, first: Expr | None = None) -> Expr:
        left = self.unary() if first is None else first
        while self.is_op("*", "/", "%"):
            op = self.advance().text
            right = self.unary()
            self.operator()
            left = Binary(left.span.to(right.span), op, left, right)
        return left

    def unary(self) -> Expr:
        if self.is_op("-", "+", "*"):
            start = self.advance()
            self.enter()
            try:
                operand = self.unary()
            finally:
                self.depth -= 1
            span = self.span(start.start, start.end).to(operand.span)
            if start.text == "*":
                return Spread(span, operand)
            if start.text == "-" and isinstance(operand, Literal) and operand.kind == "number":
                value = operand.value
                assert isinstance(value, int | float)
                return Literal(span, -value, "number")
            return Unary(span, start.text, operand)
        return self.postfix()

    def postfix(self) -> Expr:
        node = self.atom()
        while True:
            if self.is_op("."):
                dot = self.advance()
                t = self.tok
                if t.kind in ("IDENT", "KEYWORD"):
                    self.advance()
                    node = Member(node.span.to(self.span(t.start, t.end)), node, t.text)
                else:
                    self.report("expected a name after '.'", dot.start, dot.end + 1)
                    return node
            elif self.is_op("["):
                opener = self.advance()
                self.enter()
                try:
                    index = self.ternary()
                finally:
                    self.depth -= 1
                close = self.expect_closer(opener)
                node = Index(node.span.to(self.span(close, close + 1)), node, index)
            elif self.is_op("("):
                opener = self.advance()
                args = self.sequence(")")
                close = self.expect_closer(opener)
                node = Call(node.span.to(self.span(close, close + 1)), node, args)
            else:
                return node

    def expect_closer(self, opener: Token) -> int:
        """Consume the bracket closing ``opener``; return its offset (or where it should be)."""
        closer = _CLOSERS[opener.text]
        if self.is_op(closer):
            return self.advance().start
        t = self.tok
        if self.source.line_col(t.start)[0] != self.source.line_col(opener.start)[0]:
            # The expression ran on over lines: the mistake is the bracket left open.
            self.report(
                f"'{opener.text}' is never closed: expected '{closer}'", opener.start, opener.end
            )
        else:
            self.report(f"expected '{closer}'", t.start, t.end)
        return t.start

    def sequence(self, closer: str) -> list[Expr]:
        items: list[Expr] = []
        self.enter()
        try:
            while not self.is_op(closer) and not self.at_end():
                items.append(self.ternary())
                if self.is_op(","):
                    self.advance()
                elif not self.is_op(closer):
                    break
        finally:
            self.depth -= 1
        return items

    def atom(self) -> Expr:
        t = self.tok
        span = self.span(t.start, t.end)
        kind = t.kind
        if kind == "NUMBER":
            self.advance()
            return Literal(span, t.value, "number")
        if kind == "STRING":
            self.advance()
            return Literal(span, t.value, "string")
        if kind in ("DATE", "DATETIME"):
            self.advance()
            return Literal(span, t.value, kind.lower())
        if kind == "AT":
            self.advance()
            return AtName(span, t.text)
        if kind == "IDENT":
            self.advance()
            return Name(span, t.text)
        if kind == "KEYWORD":
            if t.text in ("True", "False"):
                self.advance()
                return Literal(span, t.text == "True", "bool")
            if t.text == "None":
                self.advance()
                return Literal(span, None, "none")
            return self.error_here(f"expected a value, found '{t.text}'")
        if kind == "OP":
            if t.text == "...":
                self.advance()
                return EllipsisExpr(span)
            if t.text == "(":
                self.advance()
                self.enter()
                try:
                    inner = self.ternary()
                finally:
                    self.depth -= 1
                self.expect_closer(t)
                return inner
            if t.text == "[":
                self.advance()
                items = self.sequence("]")
                close = self.expect_closer(t)
                return ListExpr(self.span(t.start, close + 1), items)
            if t.text == "{":
                return self.dict_literal(t)
        if kind == "END":
            return self.error_here("expected an expression")
        return self.error_here(f"unexpected '{t.text}' in expression")

    def dict_literal(self, open_token: Token) -> Expr:
        self.advance()
        keys: list[Expr] = []
        values: list[Expr] = []
        self.enter()
        try:
            while not self.is_op("}") and not self.at_end():
                t = self.tok
                if t.kind == "IDENT":  # bare keys are allowed: {name: "x"}
                    self.advance()
                    key: Expr = Literal(self.span(t.start, t.end), t.text, "string")
                else:
                    key = self.ternary()
                if not self.is_op(":"):
                    self.error_here("expected ':' after a dictionary key")
                    break
                self.advance()
                keys.append(key)
                values.append(self.ternary())
                if self.is_op(","):
                    self.advance()
                elif not self.is_op("}"):
                    break
        finally:
            self.depth -= 1
        close = self.expect_closer(open_token)
        return DictExpr(self.span(open_token.start, close + 1), keys, values)


# A whole value that is one plain string, number or dotted name, then only a comment or the end
# of the line. Such values are most of a file; ``quick_parse`` builds them without tokenising.
_QUICK = re.compile(
    r'(?:"(?P<string>[^"\\\n]*)"'
    r"|(?P<number>-?[0-9]+(?:\.[0-9]+)?)(?![-0-9.eE:T])"
    r"|(?P<ref>@?[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*))"
    r"[ \t]*(?=#|\n|$)"
)
_CONSTANTS: dict[str, tuple[object, str]] = {
    "True": (True, "bool"),
    "False": (False, "bool"),
    "None": (None, "none"),
}


def quick_parse(source: Source, start: int, limit: int | None = None) -> tuple[Expr, int] | None:
    """The expression at ``start`` and the offset just after it, when the rest of the line is a
    simple value (see ``_QUICK``); None when it needs the full parser. Same tree either way."""
    text = source.text
    m = _QUICK.match(text, start, len(text) if limit is None else limit)
    if m is None:
        return None
    kind = m.lastgroup
    # Everything matched is on one line: find it once, then count columns.
    line, column = source.line_col(start)
    if kind == "string":
        end = m.end(kind) + 1
        span = Span(line, column, line, column + end - start)
        return Literal(span, m.group(kind), "string"), end
    if kind == "number":
        raw = m.group(kind)
        end = m.end(kind)
        value = float(raw) if "." in raw else int(raw)
        return Literal(Span(line, column, line, column + end - start), value, "number"), end
    ref = m.group("ref")
    names = ref.split(".")
    head = names[0]
    end_column = column + len(head)
    node: Expr
    if head[0] == "@":
        node = AtName(Span(line, column, line, end_column), head[1:])
    elif head in KEYWORDS:
        constant = _CONSTANTS.get(head)
        if constant is None or len(names) > 1:
            return None  # `and`, `not x`, `True.x`: leave the diagnostics to the parser
        span = Span(line, column, line, end_column)
        return Literal(span, constant[0], constant[1]), start + len(head)
    else:
        node = Name(Span(line, column, line, end_column), head)
    for name in names[1:]:
        end_column += 1 + len(name)
        node = Member(Span(line, column, line, end_column), node, name)
    return node, m.end("ref")


def parse_expression(text: str, line: int = 1, column: int = 1) -> tuple[Expr, list[Diagnostic]]:
    """Parse a whole string as one expression (used for conditions outside .agent files)."""
    source = Source(text, first_line=line, first_column=column)
    parser = ExprParser(source, 0)
    try:
        expr = parser.parse()
    except RecursionError:  # only from an already deep caller stack
        span = Span(line, column, line, column + 1)
        return ErrorExpr(span, text), [
            error("syntax-error", "expression is nested too deeply", span)
        ]
    if not parser.at_end() and not parser.diagnostics:
        t = parser.tok
        parser.report(f"unexpected '{t.text}' after the expression", t.start, len(text))
    # A '#' stops the lexer; in a standalone condition it is an error, not a comment.
    elif parser.at_end() and parser.tok.start < len(text.rstrip()) and not parser.diagnostics:
        parser.report("unexpected '#' in expression", parser.tok.start, len(text))
    return expr, parser.diagnostics
