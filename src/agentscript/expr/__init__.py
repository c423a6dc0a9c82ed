"""Expressions: parser, safe evaluator and coercion rules."""

from agentscript.expr.nodes import Expr, reference_path
from agentscript.expr.parser import ExprParser, parse_expression

__all__ = ["Expr", "ExprParser", "parse_expression", "reference_path"]
