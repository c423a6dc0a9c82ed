"""Format one ``.agent`` file canonically, without writing it (``format_path``), then show or
write the result (``FormattedFile.diff``, ``FormattedFile.write``).

``format_path`` never raises: an unreadable file, syntax errors (the file is then left alone)
and a bug of ours all come back as ``problems``. Line endings are not a formatting matter: a
CRLF file is compared with LF endings and written back with CRLF.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path

from agentscript.diagnostics import Diagnostic


@dataclass
class FormattedFile:
    """One file's formatting: its text, the canonical text, or why it was not formatted."""

    path: Path
    text: str | None = None  # as read, None when it could not be read
    formatted: str | None = None  # None when not formatted (see problems)
    problems: list[Diagnostic] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        """Whether formatting changes the file (line endings aside)."""
        return (
            self.text is not None
            and self.formatted is not None
            and self.formatted != self.text.replace("\r\n", "\n")
        )

    def diff(self) -> str:
        """A unified diff from the file to its formatted text ('' when unchanged)."""
        if not self.changed:
            return ""
        assert self.text is not None and self.formatted is not None
        return "".join(
            difflib.unified_diff(
                self.text.replace("\r\n", "\n").splitlines(keepends=True),
                self.formatted.splitlines(keepends=True),
                f"{self.path} (original)",
                f"{self.path} (formatted)",
            )
        )

    def write(self) -> None:
        """Write the formatted text back, keeping the file's line endings; a write that fails
        (OSError) leaves the file as it was."""
        from agentscript.writing import write_text_atomically

        assert self.text is not None and self.formatted is not None
        newline = "\r\n" if "\r\n" in self.text else None
        write_text_atomically(self.path, self.formatted, newline=newline)


def format_path(path: Path, *, fix: bool = False) -> FormattedFile:
    """Read and format ``path``; errors go to ``problems`` and leave ``formatted`` None.
    ``fix`` first applies the safe lint fixes (``agentscript fmt --fix``)."""
    from agentscript.loader import read_source
    from agentscript.syntax.formatter import format_text
    from agentscript.validation import internal_error

    text, problem = read_source(path)
    if text is None:
        return FormattedFile(path, problems=[problem] if problem is not None else [])
    try:
        source = text
        if fix:
            from agentscript.authoring.lints import fix_source

            source, _count = fix_source(text.replace("\r\n", "\n"), str(path))
        formatted, diagnostics = format_text(source, str(path))
    except Exception as exc:  # a bug of ours is reported for this file, not raised
        return FormattedFile(path, text, problems=[internal_error(path, exc)])
    errors = [d for d in diagnostics if d.is_error]
    if errors:
        return FormattedFile(path, text, problems=errors)
    return FormattedFile(path, text, formatted)


__all__ = ["FormattedFile", "format_path"]
