"""How `run` and `chat` show a variable's change: JSON values, text as written, nothing that
acts on a terminal."""

from __future__ import annotations

from agentscript.playback import describe_changes


def test_a_changed_text_is_shown_as_written() -> None:
    # json.dumps' default wrote "21 \u00b0C" for "21 °C".
    changes = describe_changes({"forecast": ""}, {"forecast": "sunny, 21 °C", "n": 1})
    assert changes == ['forecast: "" -> "sunny, 21 °C"', "n: null -> 1"]


def test_controls_and_bidi_overrides_in_a_value_are_escaped() -> None:
    (change,) = describe_changes({}, {"name": "a\x1b]0;title\x07\u202eb"})
    assert "\x1b" not in change and "\u202e" not in change and "\x07" not in change
    assert change == 'name: null -> "a\\u001b]0;title\\u0007\\u202eb"'


def test_an_unchanged_value_is_not_listed() -> None:
    assert describe_changes({"a": [1, {"b": "é"}]}, {"a": [1, {"b": "é"}]}) == []
