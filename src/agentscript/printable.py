"""Outside text made harmless to print: what an MCP server, an HTTP API or a model wrote, on
its way to a terminal.

An ESC starts a sequence that clears the screen or sets the window title (``\\x1b]0;...\\x07``),
a carriage return overwrites the line, a bidi override reorders what follows it. Each such
character is written as its escape instead (``\\x1b``, ``\\r``, ``\\u202e``: Python's
``unicode_escape`` spelling), so it shows and never acts.

- :func:`printable_name` is for one name on one line (``validate --connect``'s tool names): it
  escapes every control, format, surrogate, private-use and unassigned character, the line and
  paragraph separators, newline and tab included, and the backslash (so an escape is never
  mistaken for the name's own text); the result is cut at ``limit`` characters.
- :func:`printable_text` is for text people read (``chat``'s replies, errors, streamed tokens):
  it escapes controls (C0, DEL, C1) except newline and tab, format characters (bidi marks,
  embeddings, overrides and isolates, zero-width and tag characters) except the zero-width
  joiner and non-joiner (emoji sequences and Persian or Indic words need them, and they move
  nothing), lone surrogates and the line and paragraph separators. Backslashes, private-use and
  unassigned characters are left alone: a reply may hold a path, and a newer emoji is
  unassigned to an older Python.

Neither ever raises; both return their input unchanged when nothing needs escaping.
"""

from __future__ import annotations

import unicodedata

# Control, format (bidi controls, zero-width), surrogate, private-use, unassigned, line and
# paragraph separator characters.
_NAME_ESCAPED = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_TEXT_ESCAPED = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_TEXT_KEPT = frozenset({"\n", "\t", "\u200c", "\u200d"})


def _escape(char: str) -> str:
    return char.encode("unicode_escape").decode("ascii")


def printable_name(text: str, limit: int) -> str:
    """``text`` fit for one terminal line: escaped, and cut at ``limit`` characters (``...``
    marks the cut)."""
    out = []
    for char in text[: limit * 2]:
        if unicodedata.category(char) in _NAME_ESCAPED or char == "\\":
            out.append(_escape(char))
        else:
            out.append(char)
    shown = "".join(out)
    if len(shown) > limit or len(text) > limit * 2:
        return shown[:limit] + "..."
    return shown


def printable_text(text: str) -> str:
    """``text`` with every character that could drive the terminal or reorder the display
    written as its escape; newlines and tabs kept."""
    if text.isprintable():  # no control, format, separator or surrogate character: the usual case
        return text
    return "".join(
        _escape(char)
        if unicodedata.category(char) in _TEXT_ESCAPED and char not in _TEXT_KEPT
        else char
        for char in text
    )
