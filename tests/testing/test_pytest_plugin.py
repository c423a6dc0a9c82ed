"""The pytest plugin: one item per case, failures naming expectation, expected and actual, and
nothing collected unless the project lists its specs in `agentscript_specs`."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import ROOT

PLUGIN = "agentscript.testing.pytest_plugin"


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    # Only the plugin under test: an installed copy (entry point) would register it twice.
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    shutil.copytree(ROOT / "examples" / "order_status", pytester.path / "order_status")
    return pytester


def test_each_case_is_an_item_and_passes(project: pytest.Pytester) -> None:
    project.makeini("[pytest]\nagentscript_specs = order_status/specs\n")
    result = project.runpytest("-p", PLUGIN, "-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*Order_Status-testSpec.yaml::Test Case #1 PASSED*"])


def test_a_failing_case_names_expectation_expected_and_actual(project: pytest.Pytester) -> None:
    agent = project.path / "order_status" / "order_status.agent"
    agent.write_text(
        agent.read_text(encoding="utf-8").replace(
            "go_to_orders: @utils.transition to @subagent.Order_Management",
            "go_to_orders: @utils.transition to @subagent.escalate_order",
        ),
        encoding="utf-8",
    )
    project.makeini("[pytest]\nagentscript_specs = order_status/specs\n")
    result = project.runpytest("-p", PLUGIN)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["*topic_sequence_match (line 14): expected 'Order_Management', actual 'escalate_order'*"]
    )


def test_nothing_is_collected_without_the_ini_option(project: pytest.Pytester) -> None:
    result = project.runpytest("-p", PLUGIN, str(Path("order_status")))
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED


def test_a_bad_spec_is_a_collection_error_with_its_line(project: pytest.Pytester) -> None:
    spec = project.path / "order_status" / "specs" / "bad.yaml"
    spec.write_text(
        "name: B\nsubjectName: Order_Status\ntestCases:\n  - utterance: hi\n    expectedTopc: x\n",
        encoding="utf-8",
    )
    project.makeini("[pytest]\nagentscript_specs = order_status/specs\n")
    result = project.runpytest("-p", PLUGIN)
    result.stdout.fnmatch_lines(["*bad.yaml:5: unknown field 'expectedTopc'*"])
    assert result.ret == pytest.ExitCode.INTERRUPTED


def test_a_whitebox_name_the_agent_lacks_fails_the_case_as_the_command_does(
    project: pytest.Pytester,
) -> None:
    # tools_hidden of a misspelt tool would hold whatever the agent does: a spec error instead.
    spec = project.path / "order_status" / "specs" / "Order_Status-testSpec.yaml"
    text = spec.read_text(encoding="utf-8")
    spec.write_text(
        text.replace(
            "    x-agentscript:\n      model:\n        - tool: go_to_orders\n",
            "    x-agentscript:\n      assert:\n        - tools_hidden: {tools: [go_to_ordrs]}\n"
            "      model:\n        - tool: go_to_orders\n",
            1,
        ),
        encoding="utf-8",
    )
    project.makeini("[pytest]\nagentscript_specs = order_status/specs\n")
    result = project.runpytest("-p", PLUGIN)
    # The spec is refused as a whole, as `agentscript test` refuses it (exit 2): every case fails.
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*'go_to_ordrs' is not a tool of the agent Order_Status*"])


def test_a_file_in_a_listed_folder_that_is_no_spec_is_skipped(project: pytest.Pytester) -> None:
    # `agentscript test FOLDER` skips them; the plugin interrupted the session with 2 errors.
    specs = project.path / "order_status" / "specs"
    (specs / "fixture.json").write_text('{"fixture": 1}\n', encoding="utf-8")
    (specs / "memory.yml").write_text("slots:\n  a: 1\n", encoding="utf-8")
    project.makeini("[pytest]\nagentscript_specs = order_status/specs\n")
    result = project.runpytest("-p", PLUGIN)
    result.assert_outcomes(passed=2, errors=0)
    assert result.ret == pytest.ExitCode.OK


def test_a_file_listed_by_itself_that_is_no_spec_is_a_collection_error(
    project: pytest.Pytester,
) -> None:
    (project.path / "order_status" / "specs" / "fixture.json").write_text(
        '{"fixture": 1}\n', encoding="utf-8"
    )
    listed = "order_status/specs\n    order_status/specs/fixture.json"
    project.makeini(f"[pytest]\nagentscript_specs =\n    {listed}\n")
    result = project.runpytest("-p", PLUGIN)
    result.stdout.fnmatch_lines(["*fixture.json:1: not a run-eval payload*"])
    assert result.ret == pytest.ExitCode.INTERRUPTED
