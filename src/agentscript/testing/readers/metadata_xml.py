"""``*.aiEvaluationDefinition-meta.xml`` and ``*.aiTestingDefinition-meta.xml`` test definitions.

Element order may vary. Only the lists of Salesforce's metadata repeat (``<testCase>``;
``<expectation>``, ``<scorer>``; ``<contextVariable>``, ``<conversationHistory>``;
``<parameter>``): any other element given twice in one place (a second ``<inputs>``,
``<utterance>`` or ``<expectedValue>``) is an error naming its line, never one of the two
silently dropped, and so is a context variable or a custom parameter named twice.

``<expectation>`` (evaluation definitions) and ``<scorer>`` (testing definitions) become the
same checks as the YAML spec's fields; a custom ``<expectation>`` with ``<parameter>``
children becomes a string/numeric comparison.
Entities are not expanded (an entity declaration is refused), so a hostile file cannot grow.
A value field's value is its whole text content: ``<expectedValue>Hello <b>there</b>
friend</expectedValue>`` is ``Hello there friend`` (child elements' text and the text after
them kept in order), not the ``Hello`` before the first child.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from xml.parsers import expat

from agentscript.testing.errors import SpecError
from agentscript.testing.readers.checks import custom_check, standard_check
from agentscript.testing.spec import (
    Case,
    Check,
    HistoryTurn,
    SpecFormat,
    Suite,
    TurnSpec,
)

_NS = "{http://soap.sforce.com/2006/04/metadata}"
_ROOTS = {
    "AiEvaluationDefinition": SpecFormat.EVALUATION_XML,
    "AiTestingDefinition": SpecFormat.TESTING_XML,
}
_HEADER = {"name", "description", "subjectName", "subjectType", "subjectVersion", "testCase"}
_CASE = {"number", "inputs", "expectation", "scorer"}
_INPUTS = {"utterance", "contextVariable", "conversationHistory"}
# The elements that are lists in Salesforce's AiEvaluationDefinition / AiTestingDefinition
# metadata (testCase[], inputs.contextVariable[], inputs.conversationHistory[], expectation[],
# scorer[], expectation.parameter[]); every other one holds one value.
_REPEATED = frozenset(
    {"testCase", "expectation", "scorer", "contextVariable", "conversationHistory", "parameter"}
)
_ACTION_NAMES = ("action_sequence_match", "actions_assertion")


def _no_actions(expected: str | None) -> bool:
    """Salesforce's converter writes ``[]`` for a YAML case without ``expectedActions``, and
    its run-eval translator skips an empty action list: no check, not "no action may run"."""
    return expected is None or expected.replace(" ", "") in ("", "[]")


def _parse(text: str, path: Path) -> tuple[ET.Element, dict[int, int]]:
    """The element tree, and the line each element starts on (ElementTree keeps none)."""
    builder = ET.TreeBuilder()
    lines: dict[int, int] = {}
    parser = expat.ParserCreate()

    def start(tag: str, attrs: dict[str, str]) -> None:
        lines[id(builder.start(tag, attrs))] = parser.CurrentLineNumber

    parser.StartElementHandler = start
    parser.EndElementHandler = builder.end
    parser.CharacterDataHandler = builder.data
    try:
        parser.Parse(text, True)
    except expat.ExpatError as exc:
        raise SpecError(path, exc.lineno, f"invalid XML: {expat.ErrorString(exc.code)}") from None
    return builder.close(), lines


def is_metadata_xml(path: Path) -> bool:
    name = path.name
    return name.endswith(("aiEvaluationDefinition-meta.xml", "aiTestingDefinition-meta.xml")) or (
        (path.suffix == ".xml" and "AiEvaluationDefinition" in _head(path))
        or (path.suffix == ".xml" and "AiTestingDefinition" in _head(path))
    )


def _head(path: Path) -> str:
    try:
        with path.open("r", encoding="utf-8", errors="replace") as handle:
            return handle.read(2000)
    except OSError:
        return ""


def read_metadata_xml(text: str, path: Path) -> Suite:
    if "<!ENTITY" in text or "<!DOCTYPE" in text:
        raise SpecError(path, None, "DOCTYPE and entity declarations are not allowed")
    root, lines = _parse(text, path)

    def line(element: ET.Element) -> int | None:
        return lines.get(id(element))

    def tag(element: ET.Element) -> str:
        return element.tag.removeprefix(_NS)

    def children(element: ET.Element, allowed: set[str], what: str) -> dict[str, list[ET.Element]]:
        found: dict[str, list[ET.Element]] = {}
        for child in element:
            name = tag(child)
            if name not in allowed:
                raise SpecError(
                    path,
                    line(child),
                    f"unknown element <{name}> in {what}; allowed: {', '.join(sorted(allowed))}",
                )
            if name in found and name not in _REPEATED:
                raise SpecError(
                    path,
                    line(child),
                    f"<{name}> is given twice in {what} (first at line {line(found[name][0])}); "
                    "keep one",
                )
            found.setdefault(name, []).append(child)
        return found

    def value(items: dict[str, list[ET.Element]], name: str) -> str | None:
        # A value field is text: markup inside it (an unescaped ``<b>``) is read as the text
        # it holds, with the text around and after each child (its tail) kept in order.
        elements = items.get(name)
        return "".join(elements[0].itertext()).strip() if elements else None

    kind = _ROOTS.get(tag(root))
    if kind is None:
        raise SpecError(
            path,
            line(root),
            f"<{tag(root)}> is not a test definition; expected "
            "<AiEvaluationDefinition> or <AiTestingDefinition>",
        )
    header = children(root, _HEADER, f"<{tag(root)}>")
    if value(header, "subjectType") not in (None, "AGENT"):
        raise SpecError(path, line(header["subjectType"][0]), "subjectType must be AGENT")
    cases: list[Case] = []
    for position, element in enumerate(header.get("testCase", []), start=1):
        parts = children(element, _CASE, "<testCase>")
        number = value(parts, "number") or str(position)
        inputs_el = parts.get("inputs", [])  # one at most: children() refuses a second
        if not inputs_el:
            raise SpecError(path, line(element), "a <testCase> needs <inputs>")
        inputs = children(inputs_el[0], _INPUTS, "<inputs>")
        utterance = value(inputs, "utterance")
        if not utterance:
            raise SpecError(path, line(inputs_el[0]), "<inputs> needs an <utterance>")
        variables: dict[str, str] = {}
        for var in inputs.get("contextVariable", []):
            fields = children(var, {"variableName", "variableValue"}, "<contextVariable>")
            name = value(fields, "variableName")
            if not name:
                raise SpecError(path, line(var), "<contextVariable> needs <variableName>")
            if name in variables:
                raise SpecError(path, line(var), f"context variable {name!r} is given twice")
            variables[name] = value(fields, "variableValue") or ""
        history: list[HistoryTurn] = []
        for turn in inputs.get("conversationHistory", []):
            fields = children(turn, {"role", "message", "topic", "index"}, "<conversationHistory>")
            role = value(fields, "role") or ""
            if role not in ("user", "agent"):
                raise SpecError(path, line(turn), "<role> must be user or agent")
            history.append(
                HistoryTurn(role, value(fields, "message") or "", value(fields, "topic"))
            )
        checks: list[Check] = []
        for exp in parts.get("expectation", []) + parts.get("scorer", []):
            fields = children(
                exp,
                {"name", "expectedValue", "label", "parameter", "scorerType"},
                f"<{tag(exp)}>",
            )
            name = value(fields, "name")
            if not name:
                raise SpecError(path, line(exp), f"<{tag(exp)}> needs a <name>")
            if "parameter" in fields:
                params: dict[str, tuple[object, bool]] = {}
                for param in fields["parameter"]:
                    pf = children(param, {"name", "value", "isReference"}, "<parameter>")
                    pname = value(pf, "name") or ""
                    if pname in params:
                        raise SpecError(
                            path, line(param), f"<parameter> {pname!r} is given twice; keep one"
                        )
                    params[pname] = (
                        value(pf, "value"),
                        (value(pf, "isReference") or "false").lower() == "true",
                    )
                checks.append(custom_check(name, value(fields, "label"), params, path, line(exp)))
            else:
                expected = value(fields, "expectedValue")
                if expected is None and name in (
                    "topic_sequence_match",
                    "topic_assertion",
                    "bot_response_rating",
                    "output_validation",
                ):
                    continue  # the converter writes all three standard ones, some empty
                if name in _ACTION_NAMES and _no_actions(expected):
                    continue
                checks.append(standard_check(name, expected, path, line(exp)))
        cases.append(
            Case(
                name=f"Test Case #{number}",
                turns=[TurnSpec(utterance, checks, line=line(inputs_el[0]))],
                line=line(element),
                context_variables=variables,
                history=history,
            )
        )
    if not cases:
        raise SpecError(path, line(root), "the definition has no <testCase>")
    return Suite(
        path=path,
        format=kind,
        name=value(header, "name") or path.name.split(".")[0],
        cases=cases,
        subject_name=value(header, "subjectName"),
    )
