"""``agentscript validate`` on the conformance corpus, end to end through the CLI.

* every broken file of ``error-recovery/`` gets an error on the defect's line (the expected
  lines are data in ``tests/conformance.py``);
* validating the whole ``fixtures/`` folder reports errors in exactly the known files, with the
  known codes (the lists live in ``tests/check/test_corpus.py`` and are reused here).
"""

from __future__ import annotations

import importlib.util
import json
from collections import defaultdict
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from click.testing import CliRunner

from agentscript.cli import main
from conformance import (
    ERROR_RECOVERY,
    ERROR_RECOVERY_DIR,
    FIXTURES_DIR,
    error_recovery_files,
    fixture_files,
)

pytestmark = pytest.mark.skipif(not fixture_files(), reason="conformance corpus not available")


def _load_corpus_lists() -> ModuleType:
    path = Path(__file__).resolve().parent / "check" / "test_corpus.py"
    spec = importlib.util.spec_from_file_location("_check_corpus_lists", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_LISTS = _load_corpus_lists()
ORG_REJECTED: dict[str, set[str]] = _LISTS.ORG_REJECTED
BROKEN: dict[str, set[str]] = _LISTS.BROKEN


def validate_json(*args: str) -> tuple[int, list[dict[str, Any]]]:
    result = CliRunner().invoke(main, ["validate", "--format", "json", *args])
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    return result.exit_code, json.loads(result.stdout)


def errors_by_file(diagnostics: list[dict[str, Any]]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = defaultdict(set)
    for diag in diagnostics:
        if diag["severity"] == "error":
            found[Path(diag["file"]).name].add(diag["code"])
    return dict(found)


def test_every_error_recovery_file_has_an_expectation() -> None:
    names = {p.name for p in error_recovery_files()}
    assert len(names) == 36
    assert names == set(ERROR_RECOVERY)


# Not a defect in this runtime: `->` is optional where a procedure is expected (spec 5.1), so
# `instructions:` followed by `|` lines and a `run` is a procedure. The file still fails (its
# `reasoning:` block is not a top-level block), and `test_3c_is_a_procedure` pins the decision.
NOT_A_DEFECT = {"3c-missing-arrow.agent"}


def _case(name: str) -> object:
    if name in NOT_A_DEFECT:
        return pytest.param(name, marks=pytest.mark.skip(reason="valid syntax in this runtime"))
    return name


def test_3c_is_a_procedure() -> None:
    from agentscript.syntax import parse
    from agentscript.syntax.tree import RunStmt, TemplateStmt

    doc = parse((ERROR_RECOVERY_DIR / "3c-missing-arrow.agent").read_text())
    reasoning = doc.body.get("reasoning")
    assert reasoning is not None and reasoning.block is not None
    instructions = reasoning.block.get("instructions")
    assert instructions is not None and instructions.block is not None
    kinds = [type(item) for item in instructions.block.items]
    assert kinds == [TemplateStmt, RunStmt]
    assert not doc.has_errors


@pytest.mark.parametrize("name", [_case(n) for n in sorted(ERROR_RECOVERY)])
def test_error_recovery_file_gets_an_error_on_the_defect_line(name: str) -> None:
    expected = ERROR_RECOVERY[name]
    code, diagnostics = validate_json(str(ERROR_RECOVERY_DIR / name))
    assert code == 1
    lines = sorted({d["line"] for d in diagnostics if d["severity"] == "error"})
    assert expected.line in lines, f"{expected.reason}: errors only on lines {lines}"
    # Never an internal failure, whatever the damage.
    assert all(d["code"] != "internal-error" for d in diagnostics)


def test_error_recovery_folder_in_one_call() -> None:
    """One call over the folder: every file reported, exit 1, still no internal error."""
    code, diagnostics = validate_json(str(ERROR_RECOVERY_DIR))
    assert code == 1
    assert set(errors_by_file(diagnostics)) == set(ERROR_RECOVERY)
    assert all(d["code"] != "internal-error" for d in diagnostics)


def test_fixture_folder_reports_exactly_the_known_error_files() -> None:
    code, diagnostics = validate_json(str(FIXTURES_DIR))
    assert code == 1
    expected = {
        name: ORG_REJECTED.get(name, set()) | BROKEN.get(name, set())
        for name in {
            *ORG_REJECTED,
            *BROKEN,
        }
    }
    assert errors_by_file(diagnostics) == expected
    assert {Path(d["file"]).parent for d in diagnostics} <= {FIXTURES_DIR}


def test_fixture_folder_in_the_agentscript_dialect_keeps_only_the_broken_files() -> None:
    code, diagnostics = validate_json("--dialect", "agentscript", str(FIXTURES_DIR))
    assert code == 1
    assert errors_by_file(diagnostics) == BROKEN


def test_clean_fixtures_exit_zero_together() -> None:
    clean = [str(p) for p in fixture_files() if p.name not in ORG_REJECTED | BROKEN.keys()]
    assert len(clean) == 270 - len(ORG_REJECTED) - len(BROKEN)
    code, diagnostics = validate_json(*clean)
    assert code == 0
    assert [d for d in diagnostics if d["severity"] == "error"] == []
