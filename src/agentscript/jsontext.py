"""Compact JSON text for what a server writes on every turn: the stored state, turn and trace,
the turn's HTTP answer, and the lean OpenAI-compatible client's requests.

orjson writes it when installed (``agentscript[serve]`` brings it): a turn's trace of about
5 kB took 80 µs with the standard library on the benchmark machine and 6 µs with orjson, about
5 % of a served turn's CPU (docs/performance.md). Without orjson the standard library writes
the same JSON. The two texts may differ in spelling only, never in value: non-ASCII characters
written as UTF-8 or as ``\\u`` escapes, ``1e-05`` or ``0.00001``.

What reaches these functions is JSON-safe already (``jsonsafe.py``: plain types, finite
numbers, string keys). What orjson cannot write exactly (an integer over 64 bits, a string
with a lone surrogate, a key that is no string) goes to the standard library instead, and an
object JSON has no form for is written as its ``repr`` by both, as trace files show it. Three
values jsonsafe keeps out are written as orjson writes them: NaN and Infinity as ``null``, a
UUID as its string, an Enum as its value.
"""

from __future__ import annotations

import json
import re
from typing import Any

try:
    import orjson
except ImportError:  # pragma: no cover - the serve extra installs it
    orjson = None  # type: ignore[assignment]

# Datetimes and dataclasses are shown as the standard library shows them (repr), not as
# orjson would write them. A key that is no string (orjson refuses it; OPT_NON_STR_KEYS would
# double the time of every call) goes to the standard library.
_OPTIONS = (
    orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME if orjson is not None else 0
)


# A lone surrogate (U+D800..U+DFFF): a JSON "\ud800" escape gives one, and no encoder can
# write it as UTF-8.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _escaped(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def escape_lone_surrogates(text: str) -> str:
    """JSON ``text`` (written with ``ensure_ascii=False``) with each lone surrogate as its
    ``\\uXXXX`` escape, so that it can be written as UTF-8. In JSON a raw character can only
    stand inside a string, where its escape means the same character: the text reads back to
    the very same value."""
    return _LONE_SURROGATE.sub(_escaped, text)


def dumps(value: Any) -> str:
    """``value`` as compact JSON text."""
    return dumps_bytes(value).decode("utf-8")


def dumps_bytes(value: Any) -> bytes:
    """``value`` as compact JSON, UTF-8 encoded."""
    if orjson is not None:
        try:
            return orjson.dumps(value, default=repr, option=_OPTIONS)
        except TypeError:  # orjson.JSONEncodeError is one: what it cannot write exactly
            pass
    # ASCII: a lone surrogate is written as its \u escape, which any reader takes.
    return json.dumps(value, separators=(",", ":"), default=repr).encode("ascii")
