"""The junit reporter: ``<testsuites>``, one ``<testsuite>`` per case, one ``<testcase>`` per
expectation (a failed one carries ``<failure>``; a case that could not run, ``<error>``).

A case's action calls are its suite's ``<properties>``, one ``<property>`` per call in order:
``name="turnN.actionM"``, ``value="ACTION: HOW"`` with HOW ``stub``, ``fault``,
``mapped python://m:f`` or ``ran`` (what answered the call)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from agentscript.testing.reporters.escaping import xml_text
from agentscript.testing.results import CaseResult, RunResult, action_runs


def _make_well_formed(root: ET.Element) -> None:
    """Escape what XML 1.0 refuses in every attribute and text: names, labels, errors and
    judge reasoning are free text, and ElementTree writes control characters as they are."""
    for element in root.iter():
        for key, value in element.attrib.items():
            element.set(key, xml_text(value))
        if element.text is not None:
            element.text = xml_text(element.text)
        if element.tail is not None:
            element.tail = xml_text(element.tail)


def _add_properties(suite: ET.Element, case: CaseResult) -> None:
    """The case's action calls as the suite's ``<properties>`` (its first child, as the
    JUnit schema orders them); none when the case ran no action."""
    properties = ET.Element("properties")
    for turn_number, turn in enumerate(case.turns, start=1):
        for call_number, call in enumerate(action_runs(turn), start=1):
            ET.SubElement(
                properties,
                "property",
                name=f"turn{turn_number}.action{call_number}",
                value=f"{call.name}: {call.label}",
            )
    if len(properties):
        suite.insert(0, properties)


def render_junit(run: RunResult, verbose: bool = False) -> str:
    root = ET.Element("testsuites", name="agentscript test", time=f"{run.duration_ms / 1000:.3f}")
    total = failures = errors = 0
    for case in run.cases:
        suite = ET.SubElement(
            root,
            "testsuite",
            name=f"{case.suite}.{case.case}",
            file=case.spec_path,
            time=f"{case.duration_ms / 1000:.3f}",
        )
        _add_properties(suite, case)
        count = fail = 0
        if case.error is not None:
            test = ET.SubElement(suite, "testcase", name="run", classname=case.case)
            ET.SubElement(test, "error", message=case.error)
            errors += 1
            count += 1
        for v in case.verdicts:
            count += 1
            test = ET.SubElement(
                suite,
                "testcase",
                name=f"turn{v.turn}.{v.name}",
                classname=f"{case.suite}.{case.case}",
            )
            if not v.passed and (run.judged_blocking or not v.judged):
                fail += 1
                message = (
                    f"{v.name}: expected {json.dumps(v.expected, default=repr)}, "
                    f"actual {json.dumps(v.actual, default=repr)}"
                )
                failure = ET.SubElement(test, "failure", message=message)
                failure.text = v.explanation
            elif not v.passed:
                ET.SubElement(test, "skipped", message=f"judged, not blocking: {v.explanation}")
        suite.set("tests", str(count))
        suite.set("failures", str(fail))
        suite.set("errors", "1" if case.error else "0")
        total += count
        failures += fail
    root.set("tests", str(total))
    root.set("failures", str(failures))
    root.set("errors", str(errors))
    _make_well_formed(root)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, "unicode") + "\n"
