"""jsontext writes the JSON the standard library writes, value for value, with or without
orjson; what orjson cannot write exactly falls back to the standard library."""

from __future__ import annotations

import dataclasses
import datetime
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentscript import jsontext


def standard(value: Any) -> str:
    """What the store wrote before jsontext."""
    return json.dumps(value, separators=(",", ":"), default=repr)


# JSON-safe values (what jsonsafe lets into state and traces), with the text any agent may
# carry: every code point, lone surrogates included, and integers of any size.
TEXT = st.text(
    st.characters(exclude_categories=()) | st.sampled_from('\ud800\udfff\u00e9\u2028\x00"'),
    max_size=30,
)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(TEXT, inner, max_size=5),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(VALUES)
def test_jsontext_writes_the_values_the_standard_library_writes(value: Any) -> None:
    text = jsontext.dumps(value)
    assert json.loads(text) == json.loads(standard(value))
    assert jsontext.dumps_bytes(value) == text.encode("utf-8")


@settings(max_examples=200, deadline=None)
@given(VALUES)
def test_jsontext_without_orjson_writes_what_the_standard_library_writes(value: Any) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(jsontext, "orjson", None)
        assert jsontext.dumps(value) == standard(value)


@dataclasses.dataclass
class Order:
    number: int


@pytest.mark.parametrize(
    "value",
    [
        2**64,  # over orjson's 64 bits
        {"id": -(2**70)},
        "\ud800 alone",  # a lone surrogate orjson refuses
        {1: "a key that is no string", "b": 2},
        {"when": datetime.date(2026, 12, 2), "order": Order(7)},  # shown by repr
        {"set": {1}},
    ],
)
def test_jsontext_falls_back_or_shows_repr_as_the_standard_library_does(value: Any) -> None:
    assert json.loads(jsontext.dumps(value)) == json.loads(standard(value))
