"""Source text with a line table, so offsets map to (line, column) spans cheaply."""

from __future__ import annotations

from bisect import bisect_right

from agentscript.diagnostics import Span


class Source:
    """Normalised text (LF newlines, no BOM) and the offset where each line starts."""

    __slots__ = ("_column_offset", "_line_offset", "line_starts", "path", "text")

    def __init__(
        self, text: str, path: str | None = None, *, first_line: int = 1, first_column: int = 1
    ) -> None:
        self.text = text
        self.path = path
        starts = [0]
        find = text.find
        i = find("\n")
        while i != -1:
            starts.append(i + 1)
            i = find("\n", i + 1)
        self.line_starts = starts
        self._line_offset = first_line - 1
        self._column_offset = first_column - 1

    def line_col(self, offset: int) -> tuple[int, int]:
        """The 1-based (line, column) of ``offset``, shifted by ``first_line``/``first_column``."""
        index = bisect_right(self.line_starts, offset) - 1
        column = offset - self.line_starts[index] + 1
        if index == 0:
            column += self._column_offset
        return index + 1 + self._line_offset, column

    def span(self, start: int, end: int) -> Span:
        """The span of ``text[start:end]`` (an ``end`` before ``start`` gives an empty span)."""
        if end < start:
            end = start
        starts = self.line_starts
        index = bisect_right(starts, start) - 1
        line_start = starts[index]
        column = start - line_start + 1
        if index == 0:
            column += self._column_offset
        line = index + 1 + self._line_offset
        # Most spans lie on one line: then the end needs no second search.
        if index + 1 == len(starts) or end < starts[index + 1]:
            return Span(line, column, line, column + end - start)
        end_line, end_column = self.line_col(end)
        return Span(line, column, end_line, end_column)


def normalise_newlines(text: str) -> str:
    """``text`` without a leading BOM and with CRLF and lone CR turned into LF."""
    if text.startswith("\ufeff"):
        text = text[1:]
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text
