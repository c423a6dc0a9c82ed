"""Values a host gives a session's variables (``Agent.session(variables=...)``, the variables
of a server's new session), bounded before either format types them, and the names they got
wrong, listed within reason.

A client of ``agentscript serve`` chooses these values. Typing accepts any depth for an
``object`` variable, but a value nested a few hundred levels deep is saved and then cannot be
restored, rendered as JSON or answered over HTTP; thousands of unknown names would make an
error message as long as the request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentscript.expr.values import nested_deeper_than
from agentscript.limits import MAX_GIVEN_DEPTH, MAX_NAMES_SHOWN


def bounded(variables: Mapping[str, Any]) -> Mapping[str, Any]:
    """``variables`` unchanged; ValueError naming the first value nested deeper than
    :data:`~agentscript.limits.MAX_GIVEN_DEPTH` levels."""
    for name, value in variables.items():
        if nested_deeper_than(value, MAX_GIVEN_DEPTH):
            raise ValueError(f"@variables.{name}: nested more than {MAX_GIVEN_DEPTH} levels deep")
    return variables


def some(names: Sequence[str]) -> str:
    """``names`` as a list for a message, the first :data:`MAX_NAMES_SHOWN` of them and how
    many more."""
    if len(names) <= MAX_NAMES_SHOWN:
        return str(list(names))
    shown = str(list(names[:MAX_NAMES_SHOWN]))
    return f"{shown[:-1]}, ... and {len(names) - MAX_NAMES_SHOWN} more]"
