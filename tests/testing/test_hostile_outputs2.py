"""Output paths that cannot be written and a ``-k`` that selects nothing: one-line usage errors
(exit 2) found before any case runs, so no run ends unwritten and no typo passes CI."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import ORDER_STUBS, run_test

SPEC = (
    "name: WB\n"
    + ORDER_STUBS
    + """testCases:
  - utterance: "Where is my order?"
    x-agentscript:
      assert: [{instructions_snapshot: {name: snap}}]
      model:
        - tool: go_to_orders
        - say: "ok"
"""
)


def _spec(folder: Path) -> Path:
    spec = folder / "wb.yaml"
    spec.write_text(SPEC, encoding="utf-8")
    return spec


def _usage_error(spec: Path, *args: str) -> str:
    code, out, err = run_test(str(spec), *args)
    assert code == 2, out + err
    assert "Traceback" not in out + err
    assert len(err.strip().splitlines()) == 1, err
    # No case ran: the first run of a snapshot check writes the snapshot.
    assert not (spec.parent / "wb.yaml.snapshots").exists()
    return err


def test_output_dir_that_is_a_file_is_a_usage_error_before_any_case(order_copy: Path) -> None:
    spec = _spec(order_copy)
    taken = order_copy / "afile"
    taken.write_text("keep me", encoding="utf-8")
    err = _usage_error(spec, "-d", str(taken))
    assert str(taken) in err and "not a folder" in err
    assert taken.read_text(encoding="utf-8") == "keep me"


def test_output_dir_under_a_file_is_a_usage_error(order_copy: Path) -> None:
    spec = _spec(order_copy)
    (order_copy / "afile").write_text("", encoding="utf-8")
    err = _usage_error(spec, "-d", str(order_copy / "afile" / "out"))
    assert "--output-dir" in err and "cannot create the folder" in err


@pytest.mark.parametrize("flag", ["--coverage-json", "--coverage-html"])
def test_coverage_file_in_a_missing_folder_is_a_usage_error(order_copy: Path, flag: str) -> None:
    spec = _spec(order_copy)
    err = _usage_error(spec, flag, str(order_copy / "nodir" / "c.out"))
    assert flag in err and "nodir" in err and "does not exist" in err
    assert not (order_copy / "nodir").exists()


def test_coverage_file_that_is_a_folder_is_a_usage_error(order_copy: Path) -> None:
    spec = _spec(order_copy)
    (order_copy / "c.json").mkdir()
    err = _usage_error(spec, "--coverage-json", str(order_copy / "c.json"))
    assert "is a folder" in err


def test_writable_output_paths_still_get_the_result(order_copy: Path) -> None:
    spec = _spec(order_copy)
    out_dir = order_copy / "new" / "results"
    coverage = order_copy / "c.json"
    code, out, err = run_test(str(spec), "-d", str(out_dir), "--coverage-json", str(coverage))
    assert code == 0, out + err
    assert "1 cases: 1 passed" in (out_dir / "test-result.txt").read_text(encoding="utf-8")
    assert coverage.read_text(encoding="utf-8").startswith("[")


def test_k_matching_no_case_is_a_usage_error_naming_the_expression(order_copy: Path) -> None:
    spec = _spec(order_copy)
    err = _usage_error(spec, "-k", "wehre")
    assert "-k 'wehre' matches no test case" in err


def test_k_matching_a_case_runs_only_that_case(order_copy: Path) -> None:
    spec = order_copy / "specs" / "Order_Status-testSpec.yaml"
    code, out, err = run_test(str(spec), "-k", "person")
    assert code == 0, out + err
    assert "1 cases: 1 passed" in out
