"""Project knowledge: Markdown under ``references/`` indexed for ``search_knowledge``.

Every ``*.md`` file under the project's ``references/`` and each skill's
``skills/<id>/references/`` goes into one project-wide index (a search covers all of it,
whatever skill is active). Files are split at Markdown headings; a section longer than
``chunk_size`` characters is split further at paragraph boundaries, consecutive chunks
sharing up to ``chunk_overlap`` characters (``agent.yml`` ``references.chunking``; defaults
1000 and 100). Each chunk keeps its file (relative to the project root) and its heading path
(``"FAQ > Fees"``).

The index is SQLite FTS5 ranked with BM25: embedded, no network, no model download. It is
built when the project loads and cached by content hash (file names, file contents, chunking
settings, index version) under ``$AGENTSCRIPT_CACHE_DIR`` (else ``$XDG_CACHE_HOME/agentscript``,
else ``~/.cache/agentscript``) as ``knowledge/<hash>.sqlite``; an unchanged project reuses
it, a changed one builds a new file. When the cache folder cannot be written the index is
built in memory. Problems (an unreadable file, bad chunking settings) are diagnostics.
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentscript.diagnostics import UNKNOWN_SPAN, Diagnostic, Severity
from agentscript.reading import FileInputError, read_file_text

INDEX_VERSION = "1"
DEFAULT_CHUNK_SIZE = 1000
DEFAULT_CHUNK_OVERLAP = 100
MAX_PASSAGES = 5  # passages returned per search
MAX_QUERY_TERMS = 32  # a longer query is cut: terms beyond this add little to BM25

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_TERM = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True, slots=True)
class Chunk:
    file: str
    heading: str
    text: str


@dataclass(frozen=True, slots=True)
class Passage:
    """One search hit: where it comes from and how well it ranks (higher is better)."""

    file: str
    heading: str
    text: str
    score: float

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "heading": self.heading,
            "text": self.text,
            "score": round(self.score, 4),
        }


class KnowledgeIndex:
    """A built index; :meth:`search` returns ranked passages."""

    def __init__(self, path: str | None, connection: sqlite3.Connection | None, files: list[str]):
        self.path = path  # the cache file, or None for an in-memory index
        self._memory = connection
        self.files = files

    def _connect(self) -> sqlite3.Connection:
        if self._memory is not None:
            return self._memory
        assert self.path is not None
        return sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)

    def search(self, query: str, limit: int = MAX_PASSAGES) -> list[Passage]:
        terms = [t.lower() for t in _TERM.findall(query)][:MAX_QUERY_TERMS]
        if not terms:
            return []
        # Every term quoted: the user's text is never FTS5 query syntax.
        match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        connection = self._connect()
        try:
            rows = connection.execute(
                "SELECT file, heading, text, bm25(chunks) FROM chunks WHERE chunks MATCH ? "
                "ORDER BY bm25(chunks) LIMIT ?",
                (match, limit),
            ).fetchall()
        finally:
            if connection is not self._memory:
                connection.close()
        return [Passage(str(f), str(h), str(t), -float(r)) for f, h, t, r in rows]


def reference_files(root: Path) -> list[Path]:
    """``references/**/*.md`` of the project and of every skill, in a stable order.

    Every such name but a folder is listed, so one that is not a regular file (a FIFO, a
    device, a link to nothing) reaches the reader and is reported, never skipped."""
    folders = [root / "references"]
    skills = root / "skills"
    if skills.is_dir():
        folders.extend(p / "references" for p in sorted(skills.iterdir()) if p.is_dir())
    out: list[Path] = []
    for folder in folders:
        if folder.is_dir():
            out.extend(sorted(p for p in folder.rglob("*.md") if not p.is_dir()))
    return out


def chunk_markdown(file: str, text: str, size: int, overlap: int) -> Iterator[Chunk]:
    """Sections at headings, long sections split at paragraphs (with overlap)."""
    path: list[tuple[int, str]] = []
    body: list[str] = []

    def flush() -> Iterator[Chunk]:
        heading = " > ".join(title for _, title in path)
        section = "\n".join(body).strip()
        if section:
            yield from _split(file, heading, section, size, overlap)

    for line in text.splitlines():
        found = _HEADING.match(line)
        if found is None:
            body.append(line)
            continue
        yield from flush()
        body = []
        level = len(found.group(1))
        path = [(lvl, title) for lvl, title in path if lvl < level]
        path.append((level, found.group(2)))
    yield from flush()


def _split(file: str, heading: str, section: str, size: int, overlap: int) -> Iterator[Chunk]:
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", section) if p.strip()]
    current = ""
    for paragraph in paragraphs:
        while len(paragraph) > size:  # one paragraph longer than a chunk: cut it
            if current:
                yield Chunk(file, heading, current)
                current = ""
            yield Chunk(file, heading, paragraph[:size])
            paragraph = paragraph[size - overlap :]
        if current and len(current) + 2 + len(paragraph) > size:
            yield Chunk(file, heading, current)
            tail = current[-overlap:] if overlap else ""
            current = f"{tail}\n\n{paragraph}" if tail else paragraph
        else:
            current = f"{current}\n\n{paragraph}" if current else paragraph
    if current:
        yield Chunk(file, heading, current)


def chunking(settings: Mapping[str, Any]) -> tuple[int, int, str | None]:
    """``(chunk_size, chunk_overlap, problem)`` from ``agent.yml`` ``references``."""
    raw = settings.get("chunking") or {}
    if not isinstance(raw, Mapping):
        return DEFAULT_CHUNK_SIZE, DEFAULT_CHUNK_OVERLAP, "references.chunking must be a mapping"
    unknown = sorted(set(raw) - {"chunk_size", "chunk_overlap"})
    if unknown:
        return (
            DEFAULT_CHUNK_SIZE,
            DEFAULT_CHUNK_OVERLAP,
            f"unknown references.chunking key(s) {unknown}; known: chunk_size, chunk_overlap",
        )
    size = raw.get("chunk_size", DEFAULT_CHUNK_SIZE)
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
        return DEFAULT_CHUNK_SIZE, DEFAULT_CHUNK_OVERLAP, "chunk_size must be a positive integer"
    overlap = raw.get("chunk_overlap", min(DEFAULT_CHUNK_OVERLAP, size - 1))
    if not isinstance(overlap, int) or isinstance(overlap, bool) or not 0 <= overlap < size:
        return (
            DEFAULT_CHUNK_SIZE,
            DEFAULT_CHUNK_OVERLAP,
            "chunk_overlap must be an integer from 0 to chunk_size - 1",
        )
    return size, overlap, None


def cache_dir() -> Path:
    explicit = os.environ.get("AGENTSCRIPT_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "agentscript"


def build_index(
    root: Path, settings: Mapping[str, Any], agent_file: str
) -> tuple[KnowledgeIndex | None, list[Diagnostic]]:
    """The project's index (None when it has no references) and the problems found."""
    diagnostics: list[Diagnostic] = []
    size, overlap, problem = chunking(settings)
    if problem is not None:
        diagnostics.append(
            Diagnostic(
                "mantle-references",
                f"{problem}; the defaults are used",
                UNKNOWN_SPAN,
                file=agent_file,
            )
        )
    chunks: list[Chunk] = []
    files: list[str] = []
    digest = hashlib.sha256(f"{INDEX_VERSION}:{size}:{overlap}".encode())
    for path in reference_files(root):
        relative = path.relative_to(root).as_posix()
        try:
            # Bounded like every project file (limits.MAX_FILE_BYTES); only regular files.
            text = read_file_text(path, encoding="utf-8")
        except FileInputError as exc:
            reason = exc.reason
            if path.is_symlink() and not path.exists():
                reason = "a link to nothing (dangling or a loop)"
            diagnostics.append(
                Diagnostic(
                    "mantle-references",
                    f"cannot read this reference file: {reason}",
                    UNKNOWN_SPAN,
                    Severity.ERROR,
                    str(path),
                )
            )
            continue
        except (OSError, UnicodeDecodeError) as exc:
            diagnostics.append(
                Diagnostic(
                    "mantle-references",
                    f"cannot read this reference file ({exc}); save it as UTF-8 Markdown",
                    UNKNOWN_SPAN,
                    Severity.ERROR,
                    str(path),
                )
            )
            continue
        found = list(chunk_markdown(relative, text, size, overlap))
        if not found:
            diagnostics.append(
                Diagnostic(
                    "mantle-references",
                    "this reference file is empty; add Markdown text or remove it",
                    UNKNOWN_SPAN,
                    Severity.WARNING,
                    str(path),
                )
            )
        files.append(relative)
        chunks.extend(found)
        digest.update(relative.encode() + b"\0" + text.encode() + b"\0")
    if not chunks:
        return None, diagnostics
    return _cached(digest.hexdigest(), chunks, files), diagnostics


def _cached(key: str, chunks: list[Chunk], files: list[str]) -> KnowledgeIndex:
    target = cache_dir() / "knowledge" / f"{key}.sqlite"
    if target.is_file():
        return KnowledgeIndex(str(target), None, files)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, temp = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
        os.close(handle)
        try:
            connection = sqlite3.connect(temp)
            _fill(connection, chunks)
            connection.close()
            os.replace(temp, target)  # atomic: a concurrent loader sees all or nothing
        finally:
            if os.path.exists(temp):
                os.remove(temp)
        return KnowledgeIndex(str(target), None, files)
    except (OSError, sqlite3.Error):
        connection = sqlite3.connect(":memory:", check_same_thread=False)
        _fill(connection, chunks)
        return KnowledgeIndex(None, connection, files)


def _fill(connection: sqlite3.Connection, chunks: list[Chunk]) -> None:
    connection.execute(
        "CREATE VIRTUAL TABLE chunks USING fts5("
        "file UNINDEXED, heading, text, tokenize = 'porter unicode61')"
    )
    connection.executemany(
        "INSERT INTO chunks (file, heading, text) VALUES (?, ?, ?)",
        [(c.file, c.heading, c.text) for c in chunks],
    )
    connection.commit()
