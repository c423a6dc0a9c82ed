"""``json_safe``: what may enter session state, traces and model requests. Its fast paths (a
plain string, a flat dict of scalars: most action outputs and variable writes, issue 10) must
decide exactly as the full walk does: the same copy, or an error for the same values."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentscript.jsonsafe import UnsafeValue, _Walker, json_safe, json_safe_sized

scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
)
value = st.recursive(
    scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=8), st.integers(0, 3)), inner, max_size=5),
    ),
    max_leaves=12,
)


def walked(data: Any, max_chars: int, max_depth: int) -> Any:
    return _Walker(max_chars, max_depth, "").copy(data, 0)


def outcome(call: Any) -> tuple[str, Any]:
    try:
        return "ok", call()
    except UnsafeValue as exc:
        return "error", (exc.too_large, str(exc))


@settings(max_examples=500, deadline=None)
@given(value, st.integers(0, 400), st.integers(0, 4))
def test_the_fast_paths_decide_as_the_full_walk(data: Any, max_chars: int, depth: int) -> None:
    fast = outcome(lambda: json_safe(data, max_chars=max_chars, max_depth=depth))
    full = outcome(lambda: walked(data, max_chars, depth))
    assert fast[0] == full[0]
    if fast[0] == "ok":
        assert fast[1] == full[1]
        if isinstance(data, dict | list):
            assert fast[1] is not data  # containers are copies
        json.dumps(fast[1], allow_nan=False)


def test_a_flat_dict_is_copied_not_shared() -> None:
    outputs = {"status": "late", "count": 3, "ok": True, "note": None}
    copy = json_safe(outputs, max_chars=1000)
    assert copy == outputs and copy is not outputs


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"n": 10**5000}, "n: an integer too long to print as JSON"),
        ({"x": float("nan")}, "x: nan is not a finite JSON number"),
        ({1: "a"}, "key 1 is a int, not a string"),
        ("x" * 50, "larger than the limit of 20 characters"),
    ],
)
def test_unsafe_values_are_named(data: Any, problem: str) -> None:
    with pytest.raises(UnsafeValue) as caught:
        json_safe(data, max_chars=20)
    assert problem in str(caught.value)


@settings(max_examples=300, deadline=None)
@given(value, st.integers(0, 400))
def test_the_sized_check_decides_and_counts_as_the_full_walk(data: Any, max_chars: int) -> None:
    # The turn's budget adds up these counts: a fast path must count as the walker does.
    walker = _Walker(max_chars, 32, "")
    try:
        expected = (walker.copy(data, 0), int(walker.used))
    except UnsafeValue:
        with pytest.raises(UnsafeValue):
            json_safe_sized(data, max_chars=max_chars)
        return
    assert json_safe_sized(data, max_chars=max_chars) == expected
    assert json_safe(data, max_chars=max_chars) == expected[0]
