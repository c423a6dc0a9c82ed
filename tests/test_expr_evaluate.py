"""Evaluator and value rules: every operator, reference rules, errors with spans, coercion, display."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from types import MappingProxyType

import pytest

from agentscript.diagnostics import Span
from agentscript.expr import parse_expression
from agentscript.expr.evaluate import (
    MAX_SEQUENCE_LENGTH,
    Env,
    EvalError,
    compile_expr,
    condition_holds,
    evaluate,
)
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
from agentscript.expr.values import (
    TypeMismatch,
    coerce_to_type,
    describe_value,
    parse_type,
    to_display,
    truthy,
    type_matches,
    type_name_of,
)

S = Span(1, 1, 1, 2)


def sp(column: int, end: int) -> Span:
    return Span(1, column, 1, end)


def lit(value: object, kind: str = "number") -> Literal:
    return Literal(S, value, kind)


def var(*path: str, ns: str = "variables") -> Expr:
    node: Expr = AtName(S, ns)
    for part in path:
        node = Member(S, node, part)
    return node


def make_env(**variables: object) -> Env:
    return Env(
        namespaces={
            "variables": variables,
            "outputs": {"items": [{"id": "a1"}, {"id": "b2"}], "count": 2},
            "system_variables": {"user_input": "hello"},
            "actions": {"Lookup": "lookup_order"},
        },
        names={"session": {"project": {"tier": "gold", "empty": None}}},
    )


def ev(text: str, env: Env | None = None, **variables: object) -> object:
    expr, diagnostics = parse_expression(text)
    assert diagnostics == [], [d.message for d in diagnostics]
    return evaluate(expr, env if env is not None else make_env(**variables))


def ev_error(text: str, env: Env | None = None, **variables: object) -> EvalError:
    expr, diagnostics = parse_expression(text)
    assert diagnostics == [], [d.message for d in diagnostics]
    with pytest.raises(EvalError) as info:
        evaluate(expr, env if env is not None else make_env(**variables))
    return info.value


# --- hand-built trees ----------------------------------------------------------------------


def test_literals_evaluate_to_their_values() -> None:
    env = Env()
    assert evaluate(lit(3), env) == 3
    assert evaluate(lit("x", "string"), env) == "x"
    assert evaluate(lit(True, "bool"), env) is True
    assert evaluate(lit(None, "none"), env) is None


def test_date_literals_evaluate_to_iso_strings() -> None:
    env = Env()
    assert evaluate(lit("2025-09-04", "date"), env) == "2025-09-04"
    assert evaluate(lit(dt.date(2025, 9, 4), "date"), env) == "2025-09-04"
    stamp = dt.datetime(2025, 9, 4, 12, 1)
    assert evaluate(lit(stamp, "datetime"), env) == "2025-09-04T12:01:00"


def test_hand_built_arithmetic_and_reference() -> None:
    expr = Binary(S, "+", var("count"), Binary(S, "*", lit(2), lit(3)))
    assert evaluate(expr, make_env(count=4)) == 10


def test_compiled_expression_is_reusable_across_envs() -> None:
    compiled = compile_expr(Compare(S, var("n"), [">"], [lit(1)]))
    assert compiled(make_env(n=5)) is True
    assert compiled(make_env(n=0)) is False


def test_env_defaults_are_empty() -> None:
    env = Env()
    assert env.namespaces == {}
    assert env.names == {}
    with pytest.raises(EvalError, match="unknown namespace @variables"):
        evaluate(var("x"), env)


def test_ellipsis_is_an_error_with_its_span() -> None:
    span = sp(5, 8)
    with pytest.raises(EvalError, match="placeholder") as info:
        evaluate(EllipsisExpr(span), Env())
    assert info.value.span == span


def test_error_placeholder_is_an_error() -> None:
    with pytest.raises(EvalError, match="syntax error: oops"):
        evaluate(ErrorExpr(S, "oops"), Env())


def test_spread_outside_list_or_call_is_an_error() -> None:
    with pytest.raises(EvalError, match="spread"):
        evaluate(Spread(S, ListExpr(S, [])), Env())


def test_unknown_operators_are_errors_not_crashes() -> None:
    assert_raises = [
        Unary(S, "~", lit(1)),
        Binary(S, "%", lit(1), lit(2)),
        Compare(S, lit(1), ["<>"], [lit(2)]),
        Compare(S, lit(1), ["<", "<"], [lit(2)]),
        Compare(S, lit(1), [], []),
    ]
    for expr in assert_raises:
        with pytest.raises(EvalError):
            evaluate(expr, Env())


def test_unsupported_node_type_is_an_error() -> None:
    class Strange(Expr):
        pass

    with pytest.raises(EvalError, match="unsupported expression node Strange"):
        evaluate(Strange(S), Env())


def test_dict_literal_with_bare_name_key_uses_the_name() -> None:
    expr = DictExpr(S, [Name(S, "a"), lit("b", "string")], [lit(1), lit(2)])
    assert evaluate(expr, Env()) == {"a": 1, "b": 2}


def test_ternary_hand_built() -> None:
    expr = Ternary(S, lit("yes", "string"), var("flag"), lit("no", "string"))
    assert evaluate(expr, make_env(flag=1)) == "yes"
    assert evaluate(expr, make_env(flag=0)) == "no"


def test_error_span_is_the_failing_node() -> None:
    bad = Binary(sp(10, 17), "/", lit(1), lit(0))
    expr = Binary(sp(1, 17), "+", lit(1), bad)
    with pytest.raises(EvalError) as info:
        evaluate(expr, Env())
    assert info.value.span == sp(10, 17)
    assert info.value.message == "division by zero"
    assert str(info.value) == "1:10: division by zero"
    diagnostic = info.value.to_diagnostic()
    assert diagnostic.code == "expression-error"
    assert diagnostic.span == sp(10, 17)


def test_deep_tree_is_reported_not_raised_as_recursion_error() -> None:
    expr: Expr = lit(1)
    for _ in range(20_000):
        expr = Unary(S, "-", expr)
    with pytest.raises(EvalError, match="nested too deeply"):
        evaluate(expr, Env())


def test_self_referential_value_is_reported() -> None:
    loop: list[object] = []
    loop.append(loop)
    other: list[object] = []
    other.append(other)
    env = make_env(a=loop, b=other)
    with pytest.raises(EvalError, match="nested too deeply"):
        evaluate(Compare(S, var("a"), ["=="], [var("b")]), env)


def test_foreign_failure_becomes_internal_eval_error() -> None:
    class Broken:
        def __eq__(self, other: object) -> bool:
            raise RuntimeError("boom")

        __hash__ = object.__hash__

    with pytest.raises(EvalError, match="internal evaluation error"):
        evaluate(Compare(S, var("x"), ["=="], [lit(1)]), make_env(x=Broken()))


# --- arithmetic ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1 + 2", 3),
        ("1.5 + 1", 2.5),
        ('"a" + "b"', "ab"),
        ("[1] + [2, 3]", [1, 2, 3]),
        ("5 - 7", -2),
        ("2 * 3.5", 7.0),
        ("7 / 2", 3.5),
        ("6 / 3", 2.0),
        ("-5", -5),
        ("+5", 5),
        ("-(2 + 3)", -5),
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("10 - 4 - 3", 3),
        ("8 / 4 / 2", 1.0),
        ("True + 1", 2),
    ],
)
def test_arithmetic(text: str, expected: object) -> None:
    result = ev(text)
    assert result == expected
    assert type(result) is type(expected)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('"a" + 1', "'+' is not defined for string and number"),
        ("[1] + 1", "'+' is not defined for list and number"),
        ("None + 1", "'+' is not defined for None and number"),
        ('"a" - "b"', "'-' is not defined for string and string"),
        ('"ab" * 3', "'*' is not defined for string and number"),
        ("[1] * 2", "'*' is not defined for list and number"),
        ('1 / "x"', "'/' is not defined for number and string"),
        ("1 / 0", "division by zero"),
        ("1.0 / 0.0", "division by zero"),
        ('-"x"', "unary '-' needs a number, not a string"),
        ("+None", "unary '+' needs a number, not a None"),
    ],
)
def test_arithmetic_errors(text: str, message: str) -> None:
    assert ev_error(text).message == message


def test_string_concatenation_is_bounded() -> None:
    big = "x" * (MAX_SEQUENCE_LENGTH // 2 + 1)
    err = ev_error("@variables.s + @variables.s", s=big)
    assert "longer than the allowed maximum" in err.message


def test_list_concatenation_is_bounded() -> None:
    big = [0] * (MAX_SEQUENCE_LENGTH // 2 + 1)
    err = ev_error("@variables.s + @variables.s", s=big)
    assert "longer than the allowed maximum" in err.message


def test_list_spread_is_bounded() -> None:
    big = [0] * (MAX_SEQUENCE_LENGTH // 2 + 1)
    err = ev_error("[*@variables.s, *@variables.s]", s=big)
    assert "longer than the allowed maximum" in err.message


def test_integer_growth_is_bounded() -> None:
    big = 2**3000
    assert ev("@variables.n * 2", n=big) == big * 2
    assert "too large" in ev_error("@variables.n * @variables.n", n=big).message


def test_float_overflow_from_huge_integers_is_an_error() -> None:
    big = 10**400
    assert "too large" in ev_error("@variables.n + 0.5", n=big).message
    assert "too large" in ev_error("@variables.n - 0.5", n=big).message
    assert "too large" in ev_error("@variables.n * 0.5", n=big).message
    assert "too large" in ev_error("@variables.n / 3.0", n=big).message


# --- boolean operators, ternary ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("True and False", False),
        ('"" or "default"', "default"),
        ('"a" or "b"', "a"),
        ("0 and 1 / 0", 0),  # short-circuit: the division never runs
        ("1 or 1 / 0", 1),
        ("None and True", None),
        ("not None", True),
        ("not 3", False),
        ("not []", True),
        ("True or False and False", True),
        ('"yes" if 1 > 0 else "no"', "yes"),
        ('"yes" if [] else "no"', "no"),
        ("1 if False else 2 if True else 3", 2),
        ("1 / 0 if False else 7", 7),
    ],
)
def test_boolean_and_ternary(text: str, expected: object) -> None:
    assert ev(text) == expected


# --- comparisons ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1 == 1.0", True),
        ("1 == True", True),
        ("0 == False", True),
        ('1 == "1"', False),
        ('"a" != "b"', True),
        ("None == None", True),
        ("[1, 2] == [1, 2]", True),
        ('{"a": 1} == {"a": 1}', True),
        ("1 < 2", True),
        ("2 <= 2", True),
        ("3 > 4", False),
        ("3 >= 3.0", True),
        ('"apple" < "banana"', True),
        ("[1, 2] < [1, 3]", True),
        ("1 < 2 < 3", True),
        ("1 < 3 < 2", False),
        ("3 > 2 == 2", True),
        ("1 == 1 != 2", True),
        ("None is None", True),
        ("0 is None", False),
        ("False is None", False),
        ("1 is True", False),
        ("True is True", True),
        ('"a" is "a"', True),
        ("1 is 1.0", False),
        ("0 is not None", True),
        ("None is not None", False),
        ('"b" in "abc"', True),
        ("2 in [1, 2]", True),
        ('"k" in {"k": 1}', True),
        ('"v" in {"k": "v"}', False),
        ("3 not in [1, 2]", True),
        ('"z" not in "abc"', True),
    ],
)
def test_comparisons(text: str, expected: bool) -> None:
    assert ev(text) is expected


def test_chained_comparison_stops_at_first_false() -> None:
    # `2 < 1` is false, so the incomparable third operand is never compared.
    assert ev('2 < 1 < "x"') is False


def test_chained_comparison_evaluates_middle_once() -> None:
    calls: list[int] = []

    class Counting(dict[str, object]):
        def __getitem__(self, key: str) -> object:
            calls.append(1)
            return super().__getitem__(key)

    env = Env(namespaces={"variables": Counting(n=2)})
    expr, _ = parse_expression("1 < @variables.n < 3")
    assert evaluate(expr, env) is True
    assert len(calls) == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('"a" < 1', "cannot compare string and number with '<'"),
        ("None < 1", "cannot compare None and number with '<'"),
        ('{"a": 1} <= {"a": 2}', "cannot compare object and object with '<='"),
        ('1 < 2 > "x"', "cannot compare number and string with '>'"),
        ('1 in "abc"', "'in' a string needs a string on the left"),
        ("1 in 5", "'in' needs a list, string or object, not a number"),
        ("1 not in None", "'not in' needs a list, string or object, not a None"),
        ('[1] in {"a": 1}', "a list cannot be an object key"),
    ],
)
def test_comparison_errors(text: str, message: str) -> None:
    assert ev_error(text).message == message


# --- references ----------------------------------------------------------------------------


def test_namespace_references() -> None:
    assert ev("@variables.name", name="Ada") == "Ada"
    assert ev("@system_variables.user_input") == "hello"
    assert ev("@actions.Lookup") == "lookup_order"
    assert ev("@outputs.items[1].id") == "b2"
    assert ev('@outputs["count"]') == 2


def test_unset_variable_value_is_none_not_an_error() -> None:
    assert ev("@variables.x is None", x=None) is True


def test_missing_namespace_entry_is_an_error_naming_the_reference() -> None:
    err = ev_error("@variables.missing == 1")
    assert err.message == "@variables.missing is not defined"
    assert err.span == Span(1, 1, 1, 19)
    assert ev_error('@outputs["nope"]').message == "@outputs['nope'] is not defined"


def test_unknown_namespace_is_an_error() -> None:
    assert ev_error("@nowhere.x").message == "unknown namespace @nowhere"
    assert ev_error("@nowhere").message == "unknown namespace @nowhere"
    assert ev_error("@nowhere[0]").message == "unknown namespace @nowhere"


def test_namespace_that_is_not_a_mapping() -> None:
    env = Env(namespaces={"odd": 5, "seq": ["a"]})
    with pytest.raises(EvalError, match="cannot be read by key"):
        evaluate(var("x", ns="odd"), env)
    assert evaluate(Index(S, AtName(S, "seq"), lit(0)), env) == "a"
    with pytest.raises(EvalError, match=r"@seq\[5\] is not defined"):
        evaluate(Index(S, AtName(S, "seq"), lit(5)), env)
    with pytest.raises(EvalError, match="cannot be indexed by a string"):
        evaluate(Index(S, AtName(S, "seq"), lit("k", "string")), env)


def test_bare_namespace_is_a_copy() -> None:
    variables = {"a": 1}
    result = ev("@variables", Env(namespaces={"variables": variables}))
    assert result == {"a": 1}
    assert result is not variables


def test_missing_key_inside_a_value_is_none() -> None:
    assert ev("@variables.customer.email", customer={"name": "Ada"}) is None
    assert ev('@variables.customer["email"]', customer={"name": "Ada"}) is None


def test_member_of_none_is_an_error_naming_the_reference() -> None:
    err = ev_error("@variables.customer.address.city", customer={"address": None})
    assert err.message == "cannot read '.city': @variables.customer.address is None"


def test_member_of_non_object_is_an_error() -> None:
    assert ev_error("@variables.n.foo", n=3).message == "cannot read '.foo' of a number"
    assert ev_error('("a" + "b").foo').message == "cannot read '.foo' of a string"


def test_member_of_none_from_an_expression() -> None:
    assert ev_error("(None).x").message == "cannot read '.x': the value is None"


def test_length_member() -> None:
    assert ev("@variables.s.length", s="abcd") == 4
    assert ev("@variables.s.length", s=[1, 2]) == 2
    assert ev("@variables.s.length", s={"a": 1}) == 1
    assert ev("@variables.s.length", s={"length": "long"}) == "long"
    assert ev("@variables.s.length", s=MappingProxyType({"a": 1, "b": 2})) == 2
    assert ev_error("@variables.s.length", s=5).message == "cannot read '.length' of a number"


def test_member_on_non_dict_mapping() -> None:
    proxy: Mapping[str, object] = MappingProxyType({"a": 1})
    assert ev("@variables.m.a", m=proxy) == 1
    assert ev("@variables.m.b", m=proxy) is None


def test_indexing() -> None:
    assert ev("@variables.xs[0]", xs=[10, 20]) == 10
    assert ev("@variables.xs[-1]", xs=[10, 20]) == 20
    assert ev("@variables.xs[1.0]", xs=[10, 20]) == 20
    assert ev("@variables.s[1]", s="abc") == "b"
    assert ev("@variables.d[1]", d={1: "one"}) == "one"


@pytest.mark.parametrize(
    ("text", "value", "message"),
    [
        ("@variables.v[2]", [1], "index 2 is out of range for a list of length 1"),
        ('@variables.v["a"]', [1], "a list index must be an integer, not a string"),
        ("@variables.v[0.5]", "ab", "a string index must be an integer, not a number"),
        ("@variables.v[True]", [1], "a list index must be an integer, not a boolean"),
        ("@variables.v[0]", None, "cannot index: @variables.v is None"),
        ("@variables.v[0]", 7, "cannot index a number"),
        ("@variables.v[[1]]", {"a": 1}, "an object key cannot be a list"),
    ],
)
def test_index_errors(text: str, value: object, message: str) -> None:
    assert ev_error(text, v=value).message == message


def test_bare_names_read_env_names() -> None:
    assert ev('session.project.tier == "gold"') is True
    assert ev("session.project.empty") is None
    assert ev("session.project.unset") is None
    assert ev_error("nobody").message == "unknown name 'nobody'"


def test_builtin_name_without_call_is_an_error() -> None:
    assert "is a function" in ev_error("len").message


# --- calls ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('len("abc")', 3),
        ("len([1, 2])", 2),
        ('len({"a": 1})', 1),
        ("min(3, 1, 2)", 1),
        ("max(3, 1, 2)", 3),
        ("min([4, 5])", 4),
        ('max(["a", "b"])', "b"),
        ("max(*[1, 9], 3)", 9),
        ("min(1, 2.5)", 1),
        ("len(@outputs.items)", 2),
    ],
)
def test_builtin_calls(text: str, expected: object) -> None:
    assert ev(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("len(1)", "len() of a number is not defined"),
        ("len(None)", "len() of a None is not defined"),
        ("len(1, 2)", "len() takes exactly one argument (2 given)"),
        ("len()", "len() takes exactly one argument (0 given)"),
        ("min()", "min() of an empty list"),
        ("max([])", "max() of an empty list"),
        ("min(5)", "min() of one argument needs a list"),
        ('max(1, "a")', "max() cannot compare number and string values"),
        ("print(1)", "unknown function 'print'; only len, min and max exist"),
        (
            "@variables.xs.append(1)",
            "only len, min and max can be called; methods cannot be called",
        ),
        ("len(*5)", "cannot spread a number"),
    ],
)
def test_call_errors(text: str, message: str) -> None:
    assert ev_error(text, xs=[]).message == message


def test_call_on_hand_built_non_name_callee() -> None:
    with pytest.raises(EvalError, match="only len, min and max can be called"):
        evaluate(Call(S, lit(1), []), Env())


# --- literals ------------------------------------------------------------------------------


def test_collection_literals() -> None:
    assert ev("[1, [2, 3], []]") == [1, [2, 3], []]
    assert ev('{"a": 1, b: [2]}') == {"a": 1, "b": [2]}
    assert ev("{}") == {}
    assert ev("[*@variables.xs, 3]", xs=[1, 2]) == [1, 2, 3]
    assert ev('[*"ab"]') == ["a", "b"]
    assert ev("[]") == []


def test_dict_literal_with_unhashable_key_is_an_error() -> None:
    expr = DictExpr(S, [ListExpr(S, [])], [lit(1)])
    with pytest.raises(EvalError, match="an object key cannot be a list"):
        evaluate(expr, Env())


def test_date_literals_from_text() -> None:
    assert ev("2025-09-04") == "2025-09-04"
    assert ev("2025-09-04 < 2025-10-01") is True


# --- condition_holds -----------------------------------------------------------------------


def test_condition_holds_fails_closed() -> None:
    env = make_env(n=3)
    assert condition_holds(compile_expr(Compare(S, var("n"), [">"], [lit(1)])), env) is True
    assert condition_holds(compile_expr(var("missing")), env) is False
    assert condition_holds(compile_expr(Binary(S, "/", lit(1), lit(0))), env) is False
    assert condition_holds(compile_expr(lit("", "string")), env) is False
    assert condition_holds(compile_expr(lit([1], "number")), env) is True


def test_condition_holds_survives_broken_truthiness() -> None:
    class NoBool:
        def __bool__(self) -> bool:
            raise RuntimeError("no")

    env = make_env(x=NoBool())
    assert condition_holds(compile_expr(var("x")), env) is False


def test_mantle_style_conditions() -> None:
    names = {"session": {"card": {"reason": "lost", "n": 3, "flag": None}}}
    env = Env(names=names)

    def holds(text: str) -> bool:
        expr, diagnostics = parse_expression(text)
        assert not diagnostics
        return condition_holds(compile_expr(expr), env)

    assert holds('session.card.reason == "lost"')
    assert holds("0 < session.card.n < 10")
    assert not holds("session.card.flag")
    assert holds("session.card.flag == None")
    assert not holds("session.card.n > 2 and session.card.flag")
    assert not holds("session.nothing.x == 1")  # member of None: error, so false
    assert not holds('session.card.n < "a"')


# --- values: coercion ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "type_name", "expected"),
    [
        ("hi", "string", "hi"),
        (3, "number", 3),
        (2.5, "Number", 2.5),
        (4.0, "integer", 4),
        (7, "long", 7),
        (9.99, "currency", 9.99),
        (True, "boolean", True),
        ({"a": 1}, "object", {"a": 1}),
        (MappingProxyType({"a": 1}), "object", {"a": 1}),
        ("001xx000003DGb2AAG", "id", "001xx000003DGb2AAG"),
        ("2025-09-04", "date", "2025-09-04"),
        (dt.date(2025, 9, 4), "date", "2025-09-04"),
        ("2025-09-04T12:01", "datetime", "2025-09-04T12:01"),
        ("2025-09-04T12:01:59.123Z", "datetime", "2025-09-04T12:01:59.123Z"),
        ("2025-09-04T12:01:59+02:00", "timestamp", "2025-09-04T12:01:59+02:00"),
        (dt.datetime(2025, 9, 4, 1, 2, 3), "datetime", "2025-09-04T01:02:03"),
        ("13:45", "time", "13:45"),
        ("13:45:10.5", "time", "13:45:10.5"),
        (dt.time(13, 45), "time", "13:45:00"),
        ([1, 2.5], "list[number]", [1, 2.5]),
        ((1, 2), "list[integer]", [1, 2]),
        (["a", 1], "list", ["a", 1]),
        ([[1], [2]], "list[list[number]]", [[1], [2]]),
        ([], "list[string]", []),
        (None, "number", None),
        (None, "list[string]", None),
    ],
)
def test_coerce_accepts(value: object, type_name: str, expected: object) -> None:
    result = coerce_to_type(value, type_name)
    assert result == expected
    assert type(result) is type(expected)
    assert type_matches(value, type_name)


@pytest.mark.parametrize(
    ("value", "type_name", "message"),
    [
        ("12", "number", 'expected a number, got the string "12"'),
        (True, "number", "expected a number, got the boolean True"),
        (float("nan"), "number", "expected a finite number, got nan"),
        (2.5, "integer", "expected an integer, got the number 2.5"),
        (False, "integer", "expected an integer, got the boolean False"),
        ("true", "boolean", 'expected a boolean (True or False), got the string "true"'),
        (1, "boolean", "expected a boolean (True or False), got the number 1"),
        (5, "string", "expected a string, got the number 5"),
        ([1], "object", "expected an object (JSON object), got the list [1]"),
        ("", "id", 'expected an id (non-empty string), got the string ""'),
        ("09/04/2025", "date", 'expected a date (YYYY-MM-DD), got the string "09/04/2025"'),
        ("2025-02-30", "date", "'2025-02-30' is not a valid calendar date"),
        ("20250904", "date", 'expected a date (YYYY-MM-DD), got the string "20250904"'),
        (dt.datetime(2025, 1, 1), "date", "expected a date (YYYY-MM-DD), got"),
        ("2025-09-04 12:00", "datetime", "expected a datetime"),
        ("2025-09-04T25:00", "datetime", "'2025-09-04T25:00' is not a valid datetime"),
        ("25:00", "time", "'25:00' is not a valid time"),
        ("noon", "time", "expected a time (HH:MM[:SS[.ffffff]])"),
        ("abc", "list", 'expected a list, got the string "abc"'),
        ([1, "2"], "list[number]", 'item 1: expected a number, got the string "2"'),
        ([1, None], "list[number]", "item 1: expected a number, got None"),
        ([[1, "x"]], "list[list[number]]", "item 0: item 1: expected a number"),
        ({"a": 1}, "list[string]", "expected a list of string values, got the object"),
    ],
)
def test_coerce_rejects(value: object, type_name: str, message: str) -> None:
    with pytest.raises(TypeMismatch) as info:
        coerce_to_type(value, type_name)
    assert info.value.message.startswith(message)
    assert info.value.type_name == type_name
    assert not type_matches(value, type_name)


def test_coerce_with_separate_item_type() -> None:
    assert coerce_to_type(["a"], "list", "string") == ["a"]
    with pytest.raises(TypeMismatch, match="item 0"):
        coerce_to_type([1], "list", "string")


def test_coerce_non_nullable() -> None:
    with pytest.raises(TypeMismatch, match="expected a string, got None"):
        coerce_to_type(None, "string", nullable=False)


@pytest.mark.parametrize(
    ("type_name", "param", "message"),
    [
        ("strng", None, "unknown type 'strng'"),
        ("list[nubmer]", None, "unknown type 'nubmer'"),
        ("number", "string", "type 'number' takes no item type"),
        ("list[number]", "string", "has two item types"),
    ],
)
def test_bad_type_names(type_name: str, param: str | None, message: str) -> None:
    with pytest.raises(TypeMismatch, match=message):
        coerce_to_type([], type_name, param)
    assert not type_matches([], type_name, param)


@pytest.mark.parametrize(
    ("type_name", "param", "shown"),
    [
        (("list", "number"), None, "the tuple ('list', 'number')"),
        (["list", "number"], None, "the list ['list', 'number']"),  # unhashable: past the cache
        (None, None, "the NoneType None"),
        ("list", 5, "the int 5"),
    ],
)
def test_a_type_that_is_not_a_string_is_a_type_mismatch(
    type_name: object, param: object, shown: str
) -> None:
    # The documented API takes the item type as `param`, never a (type, item) tuple.
    with pytest.raises(TypeMismatch) as info:
        coerce_to_type([1, "2"], type_name, param)  # type: ignore[arg-type]
    assert f"a type is a string such as 'number' or 'list[number]', not {shown}" in str(info.value)
    assert "coerce_to_type(value, 'list', 'number')" in info.value.message
    assert not type_matches([1], type_name, param)  # type: ignore[arg-type]


def test_parse_type() -> None:
    assert parse_type("List[ Number ]") == ("list", "Number")
    assert parse_type("BOOLEAN") == ("boolean", None)
    assert parse_type("list", "id") == ("list", "id")


def test_type_name_of_and_describe_value() -> None:
    samples: list[object] = [None, True, 1, 1.5, "s", [], (), {}]
    assert [type_name_of(v) for v in samples] == [
        "None",
        "boolean",
        "number",
        "number",
        "string",
        "list",
        "list",
        "object",
    ]
    assert type_name_of(dt.date(2025, 1, 1)) == "date"
    assert describe_value(None) == "None"
    assert describe_value("x" * 100).endswith("…")
    assert len(describe_value("x" * 100)) < 60


# --- values: display and truthiness --------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, ""),
        (True, "True"),
        (False, "False"),
        (3, "3"),
        (3.0, "3"),
        (-0.0, "0"),
        (2.5, "2.5"),
        (0.1 + 0.2, "0.30000000000000004"),
        (1e20, "1e+20"),
        (float("inf"), "inf"),
        (float("nan"), "nan"),
        ("plain text", "plain text"),
        ([1, "a", True, None, 2.0], '[1, "a", True, None, 2]'),
        ({"k": "v", "n": [1.5]}, '{"k": "v", "n": [1.5]}'),
        ({1: "one"}, '{1: "one"}'),
        ((1, 2), "[1, 2]"),
        ([], "[]"),
        ({}, "{}"),
        (['say "hi"\n'], '["say \\"hi\\"\\n"]'),
        (["é"], '["é"]'),
        (dt.date(2025, 9, 4), "2025-09-04"),
        ([dt.date(2025, 9, 4)], '["2025-09-04"]'),
    ],
)
def test_to_display(value: object, text: str) -> None:
    assert to_display(value) == text


def test_to_display_of_expression_results() -> None:
    assert to_display(ev("2 + 1")) == "3"
    assert to_display(ev("6 / 2")) == "3"
    assert to_display(ev("7 / 2")) == "3.5"


def test_to_display_of_huge_integer() -> None:
    assert to_display(10**5000) == "<16610-bit integer>"


def test_to_display_is_bounded() -> None:
    text = to_display(["x" * 1000] * 1000)
    assert len(text) <= 100_001
    assert text.endswith("…")


def test_to_display_bounds_depth() -> None:
    nested: list[object] = []
    for _ in range(200):
        nested = [nested]
    text = to_display(nested)
    assert "…" in text
    loop: list[object] = []
    loop.append(loop)
    assert to_display(loop).count("[") == 64


def test_to_display_of_foreign_objects() -> None:
    class Thing:
        def __str__(self) -> str:
            return "thing"

    class Broken:
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert to_display(Thing()) == "thing"
    assert to_display(Broken()) == "<Broken>"
    assert to_display([Thing()]) == '["thing"]'
    assert to_display([Broken()]) == '["<Broken>"]'


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, False),
        (0, False),
        (0.0, False),
        ("", False),
        ([], False),
        ({}, False),
        (False, False),
        (1, True),
        ("a", True),
        ([0], True),
        ({"a": None}, True),
        (True, True),
    ],
)
def test_truthy(value: object, expected: bool) -> None:
    assert truthy(value) is expected


def test_object_values_with_nan_or_infinity_inside_are_rejected() -> None:
    from agentscript.expr.values import TypeMismatch, coerce_to_type

    assert coerce_to_type({"a": [1.5, {"b": 2}]}, "object") == {"a": [1.5, {"b": 2}]}
    for bad in ({"a": float("nan")}, {"a": [1, {"b": float("inf")}]}):
        with pytest.raises(TypeMismatch):
            coerce_to_type(bad, "object")
