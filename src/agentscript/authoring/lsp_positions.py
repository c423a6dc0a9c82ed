"""Columns between the index's code points and the client's position encoding.

The index counts columns in code points; LSP clients count in the encoding negotiated at
``initialize`` (UTF-16 code units unless both sides agree on another). pygls' own
``PositionCodec`` converts with a Python loop per character, too slow for a 10 MB line on
every keystroke, so these conversions go through the C codecs instead.
"""

from __future__ import annotations

import re
from itertools import islice

# LSP ends lines at \n, \r\n and \r only; ``str.splitlines`` also splits at \f, \u2028 and
# others, which would shift every later line against what the client and the parser count.
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def split_lines(text: str) -> list[str]:
    """``text``'s lines as the parser and the client number them (at \\n, \\r\\n and \\r only).
    A final line break leaves an empty last line, as the protocol counts it."""
    return _LINE_BREAK.split(text)


class ClientColumns:
    """One document version's lines, converting columns to and from the client's units."""

    def __init__(self, text: str, encoding: str | None) -> None:
        self._text = text
        self._lines: list[str] | None = None
        self.encoding = (encoding or "utf-16").lower()

    @property
    def lines(self) -> list[str]:
        # Split on first use: a diagnostics-only update on a huge document may never need it.
        if self._lines is None:
            self._lines = split_lines(self._text)
        return self._lines

    def line(self, number: int) -> str:
        return self.lines[number] if 0 <= number < len(self.lines) else ""

    def to_client(self, line: int, column: int) -> int:
        """The client's column for code point ``column`` of ``line``."""
        column = max(column, 0)
        prefix = self.line(line)[:column]
        # Past the end of the line is kept past the end, as the index reported it.
        extra = column - len(prefix)
        if self.encoding == "utf-32" or prefix.isascii():
            return len(prefix) + extra
        if self.encoding == "utf-8":
            return len(prefix.encode("utf-8", "surrogatepass")) + extra
        return len(prefix.encode("utf-16-le", "surrogatepass")) // 2 + extra

    def from_client(self, line: int, character: int) -> int:
        """The code point column for the client's ``character`` on ``line``: a position
        inside a character lands after it (UTF-16) or before it (UTF-8), never in it."""
        character = max(character, 0)
        text = self.line(line)
        if self.encoding == "utf-32" or text.isascii():
            return character
        # Each code point is at least one unit, so ``character`` code points are enough.
        prefix = text[:character]
        if self.encoding == "utf-8":
            data = prefix.encode("utf-8", "surrogatepass")[:character]
            try:
                return len(data.decode("utf-8", "surrogatepass")) + character - len(data)
            except UnicodeDecodeError as cut:  # a multi-byte character cut at its end
                return len(data[: cut.start].decode("utf-8", "surrogatepass"))
        data = prefix.encode("utf-16-le", "surrogatepass")[: 2 * character]
        found = len(data.decode("utf-16-le", "surrogatepass"))
        # Past the end of the line (a client may ask there) stays past it, in code points.
        units = len(data) // 2
        return found + max(character - units, 0)


def client_offset(text: str, line: int, character: int, encoding: str | None) -> int:
    """The offset in ``text`` of the client's position (``character`` in its units). As LSP
    says, a column past the end of its line means the line's end, and a line past the last
    means the end of the document."""
    start = 0
    if line > 0:
        # Only the lines up to ``line`` are scanned: a keystroke near the top of a large
        # document does not split all of it.
        ended = next(islice(_LINE_BREAK.finditer(text), line - 1, None), None)
        if ended is None:
            return len(text)
        start = ended.end()
    after = _LINE_BREAK.search(text, start)
    end = len(text) if after is None else after.start()
    column = ClientColumns(text[start:end], encoding).from_client(0, character)
    return start + min(column, end - start)


def replace_range(
    text: str,
    start: tuple[int, int],
    end: tuple[int, int],
    new_text: str,
    encoding: str | None,
) -> str:
    """``text`` after an editor's ranged change, its (line, character) ends in the client's
    units. pygls applies such a change on ``str.splitlines`` lines, which put an edit after a
    \\u2028 or \\f on another line than the client meant, so the server's copy drifted."""
    first = client_offset(text, *start, encoding)
    last = client_offset(text, *end, encoding)
    # A range given end first is read as the editor would, not as an insertion that
    # duplicates the text between.
    first, last = min(first, last), max(first, last)
    return text[:first] + new_text + text[last:]
