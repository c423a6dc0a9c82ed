"""Shared access to the conformance data in ``shared/conformance`` (Apache-2.0 test data).

The repository is checked out next to a copy of ``shared/`` (locally ``/work/main`` and
``/work/shared``; in CI a clone beside a copy), so paths are resolved relative to this file.

Besides paths and loaders this module holds data other tests rely on:
:data:`ERROR_RECOVERY` says, for each broken file in ``error-recovery/``, on which line an
error must be reported and whether the parser or the checker is responsible for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

_REPO = Path(__file__).resolve().parents[1]
# Beside the checkout; a git worktree one level further down (``wt/<name>``) looks one up.
SHARED = next(
    (p / "shared" for p in (_REPO.parent, _REPO.parent.parent) if (p / "shared").is_dir()),
    _REPO.parent / "shared",
)
CONFORMANCE = SHARED / "conformance"
AGENTSCRIPT = CONFORMANCE / "agentscript"
FIXTURES_DIR = AGENTSCRIPT / "fixtures"
EXAMPLES_DIR = AGENTSCRIPT / "examples"
ERROR_RECOVERY_DIR = AGENTSCRIPT / "error-recovery"
PARSER_CORPUS_DIR = AGENTSCRIPT / "parser-corpus"
MANTLE = CONFORMANCE / "mantle"


def fixture_files() -> list[Path]:
    """The 270 well-formed ``.agent`` fixtures, sorted by name."""
    return sorted(FIXTURES_DIR.glob("*.agent"))


def example_files() -> list[Path]:
    """The 7 example agents, sorted by name."""
    return sorted(EXAMPLES_DIR.glob("*.agent"))


def error_recovery_files() -> list[Path]:
    """The 36 deliberately broken scripts, sorted by name."""
    return sorted(ERROR_RECOVERY_DIR.glob("*.agent"))


def read_text(path: Path) -> str:
    # newline="" keeps CR/LF exactly as stored: the parser itself must normalise them.
    with path.open(encoding="utf-8", newline="") as handle:
        return handle.read()


# ---------------------------------------------------------------- parser corpus


@dataclass(frozen=True)
class CorpusCase:
    """One case of a tree-sitter style corpus file."""

    file: str  # corpus file name without ".txt"
    name: str  # the title between the '====' lines
    source: str  # the input text
    expected: str  # the expected S-expression tree

    @property
    def id(self) -> str:
        return f"{self.file}::{self.name}"

    @property
    def expects_error(self) -> bool:
        """True when the expected tree contains an ERROR or MISSING node."""
        return re.search(r"\((?:ERROR|MISSING)\b", self.expected) is not None

    def count(self, node_type: str) -> int:
        """How many ``(node_type`` nodes the expected tree has."""
        return len(re.findall(r"\(" + re.escape(node_type) + r"\b", self.expected))


_HEADER = re.compile(r"^(={3,})\n(?P<name>[^\n]*)\n\1\n", re.MULTILINE)
_DIVIDER = re.compile(r"^-{3,}$", re.MULTILINE)


def parse_corpus_file(path: Path) -> list[CorpusCase]:
    text = read_text(path)
    headers = list(_HEADER.finditer(text))
    cases: list[CorpusCase] = []
    for index, header in enumerate(headers):
        body_end = headers[index + 1].start() if index + 1 < len(headers) else len(text)
        body = text[header.end() : body_end]
        # The last '---' divides input from tree: inputs never contain one, trees never do.
        dividers = list(_DIVIDER.finditer(body))
        if not dividers:
            continue
        divider = dividers[-1]
        source = body[: divider.start()]
        # tree-sitter's corpus format drops the newline that precedes the divider.
        if source.endswith("\n"):
            source = source[:-1]
        expected = body[divider.end() :].strip()
        cases.append(CorpusCase(path.stem, header.group("name").strip(), source, expected))
    return cases


@cache
def corpus_cases() -> tuple[CorpusCase, ...]:
    """Every case of every file in ``parser-corpus/``."""
    cases: list[CorpusCase] = []
    for path in sorted(PARSER_CORPUS_DIR.glob("*.txt")):
        cases.extend(parse_corpus_file(path))
    return tuple(cases)


# ---------------------------------------------------------------- error recovery


@dataclass(frozen=True)
class ExpectedError:
    """Where a broken file must get an error-severity diagnostic.

    ``stage`` is "parser" when the text is not well-formed Agent Script, "checker" when it is
    well-formed but means something invalid (unknown field, bad type, duplicate key, ...).
    """

    line: int
    stage: str
    reason: str


ERROR_RECOVERY: dict[str, ExpectedError] = {
    "1a-unterminated-string.agent": ExpectedError(2, "parser", "unterminated string"),
    "1b-unterminated-string-expression.agent": ExpectedError(
        3, "parser", "unterminated string in a set value"
    ),
    "1c-unterminated-list.agent": ExpectedError(2, "parser", "list without ']'"),
    "1d-unterminated-dict.agent": ExpectedError(2, "parser", "dictionary without '}'"),
    "1e-unterminated-template-placeholder.agent": ExpectedError(
        3, "parser", "'{!' without '}' in a template"
    ),
    "1f-single-quote-string.agent": ExpectedError(1, "parser", "single-quoted string"),
    "2a-under-indented.agent": ExpectedError(
        4, "checker", "GetWeather lands in the topic: unknown field (and 'actions:' is empty)"
    ),
    "2b-over-indented.agent": ExpectedError(
        3, "checker", "'actions:' becomes a block under the string field 'description'"
    ),
    "2c-inconsistent-indentation.agent": ExpectedError(
        3, "checker", "'age' becomes a property block of the variable 'name'"
    ),
    "3a-missing-colon-block.agent": ExpectedError(1, "parser", "missing ':' after a block key"),
    "3b-missing-colon-field.agent": ExpectedError(2, "parser", "missing ':' after a field key"),
    "3c-missing-arrow.agent": ExpectedError(
        4, "checker", "'run' statement in 'instructions:' written without '->'"
    ),
    "3d-missing-to.agent": ExpectedError(2, "parser", "'transition' without 'to'"),
    "3e-missing-equals-set.agent": ExpectedError(4, "parser", "'set' without '='"),
    "3f-missing-equals-variable.agent": ExpectedError(
        2, "parser", "declaration default without '='"
    ),
    "4a-misspelled-modifier.agent": ExpectedError(2, "checker", "unknown modifier 'mutble'"),
    "4b-misspelled-type.agent": ExpectedError(2, "checker", "unknown type 'strng'"),
    "4c-wrong-conditional.agent": ExpectedError(5, "parser", "'elseif' instead of 'else if'"),
    "4d-misspelled-keyword.agent": ExpectedError(3, "parser", "'runn' is not a statement"),
    "5a-partial-block-key.agent": ExpectedError(4, "parser", "bare word without ':'"),
    "5b-empty-template.agent": ExpectedError(8, "checker", "empty '|' template"),
    "5c-partial-expression.agent": ExpectedError(3, "parser", "'>' without right operand"),
    "5d-partial-set.agent": ExpectedError(3, "parser", "'set x =' without a value"),
    "5e-partial-run.agent": ExpectedError(3, "parser", "'run' without a target"),
    "5f-partial-at-identifier.agent": ExpectedError(3, "parser", "'@action.' without a name"),
    "6a-duplicate-keys.agent": ExpectedError(3, "checker", "duplicate key 'agent_name'"),
    "6b-wrong-nesting-level.agent": ExpectedError(
        3, "checker", "action 'GetWeather' outside 'actions:': unknown topic field"
    ),
    "6c-orphaned-content.agent": ExpectedError(
        4, "checker", "orphaned block lands under the string field 'agent_name'"
    ),
    "6d-multiple-colons.agent": ExpectedError(1, "parser", "second ':' on a key line"),
    "7a-invalid-operator.agent": ExpectedError(3, "parser", "'===' is not an operator"),
    "7b-unbalanced-parens.agent": ExpectedError(3, "parser", "unbalanced '('"),
    "7c-comma-separated.agent": ExpectedError(3, "parser", "two values separated by ','"),
    "7d-missing-operand.agent": ExpectedError(3, "parser", "'+' without right operand"),
    "8a-missing-space-dash.agent": ExpectedError(3, "parser", "'-' without a space"),
    "8b-mixed-sequence-mapping.agent": ExpectedError(
        4, "parser", "sequence item in a block of entries"
    ),
    "9a-comment-colon-value.agent": ExpectedError(
        2, "checker", "'agent_name:' has only a comment, no value"
    ),
}
