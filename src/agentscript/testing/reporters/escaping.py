"""Escaping for the reporters: case names, labels, errors and judge reasoning come from spec
authors, agents and judge models, so none of them may reach a terminal, a TAP stream or an XML
file raw (an ANSI/OSC sequence would clear the screen or set the window title, a newline would
forge a TAP line, a control character makes XML not well-formed)."""

from __future__ import annotations

import re

from agentscript.render import terminal_safe, visible_char

# Characters XML 1.0 does not allow (its Char production), plus lone surrogates.
_XML_UNSAFE = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def terminal_text(value: object) -> str:
    """``value`` as one line of plain text: controls and newlines become ``\\xNN``/``\\n``
    (``render.terminal_safe``: the same characters as the authoring commands escape)."""
    return terminal_safe(str(value))


def xml_text(value: str) -> str:
    """``value`` with every character XML 1.0 refuses written as a visible ``\\xNN``."""
    return _XML_UNSAFE.sub(visible_char, value)


# A ``#`` that could start a directive: any ``#`` except one right before a digit. A directive
# is ``#``, optional spaces, then SKIP or TODO, so ``#1`` (as in the default case names
# "Test Case #1") can never be one and stays readable.
_TAP_HASH = re.compile(r"#(?!\d)")


def tap_description(value: object) -> str:
    """A TAP 14 test point description: one line, with ``\\`` and ``#`` escaped so a ``#``
    in a name is not read as a SKIP/TODO directive."""
    return _TAP_HASH.sub(r"\\#", terminal_text(value).replace("\\", "\\\\"))
