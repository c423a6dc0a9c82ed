"""Deterministic checks: each reads what a turn did (reply, trace steps by kind, generated
data) and returns a :class:`Verdict` whose explanation names the rule that failed.

Matching rules (docs/testing.md): the topic is the subagent (or Mantle skill) the turn ended
in, compared exactly and case-sensitively, also accepting Salesforce org-style names
(``p_<plannerId>_<Name>``, ``<Name>_<Id>``, or both); format C's ``contains`` operator passes
when the expected name (or its org-style bare name) is part of the actual one. Actions are the
actions and tools that ran, transitions included, compared by :class:`MatchRule` (``exact`` by
default). A handoff (``agent_handoff_match``: Salesforce's "target agent" of a multi-agent bot)
is a node the turn handed the conversation to (:func:`handoffs`), never merely the node it
started in. A turn that ends in an error fails unless the turn expects it (:func:`turn_error`).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Collection, Mapping
from itertools import pairwise
from typing import Any

from agentscript.expectations import Expectations
from agentscript.testing.jsonpath import JsonPath
from agentscript.testing.results import TurnOutcome, Verdict, generated_data
from agentscript.testing.spec import Check, CheckKind, MatchRule

# What an org adds around a topic's local name, as its test results show it
# (p_16jPl000000GwEX_Field_Support_Routing_16j8eeef13560aa): topics promoted in Setup get a
# ``p_<plannerId>_`` prefix, and runtime names a ``_<Id>`` suffix, a 15- or 18-character
# Salesforce Id that changes on every republish. Both hold a digit, so a word such as
# ``_Escalated`` or ``_Management`` is never taken for one.
_ORG_PREFIX = re.compile(r"p_(?=[A-Za-z0-9]*[0-9])[A-Za-z0-9]+_")
_ORG_SUFFIX = re.compile(r"_(?=[A-Za-z0-9]*[0-9])[A-Za-z0-9]{15,18}$")


def topic_names(expected: str) -> set[str]:
    """``expected`` as written, without its org prefix, without its org suffix, and without
    both: the names a local subagent may have when a spec was written against an org."""
    names = {expected}
    prefix = _ORG_PREFIX.match(expected)
    if prefix:
        names.add(expected[prefix.end() :])
    for name in list(names):
        suffix = _ORG_SUFFIX.search(name)
        if suffix and suffix.start() > 0:
            names.add(name[: suffix.start()])
    return names


def topic_matches(expected: str, actual: str | None, operator: str = "equals") -> bool:
    if actual is None:
        return False
    names = topic_names(expected)
    if operator == "contains":
        return any(name in actual for name in names)
    return actual in names


def actions_match(expected: list[str], actual: list[str], rule: MatchRule) -> bool:
    if rule is MatchRule.EXACT:
        return expected == actual
    if rule is MatchRule.IN_ORDER:
        remaining = iter(actual)
        return all(any(name == ran for ran in remaining) for name in expected)
    if rule is MatchRule.SUBSET:
        return not (Counter(expected) - Counter(actual))
    return set(actual) <= set(expected)


def by_tool_name(expected: list[str], turn: TurnOutcome) -> list[str]:
    """Expected names written as action *definition* names (``update_account_info``) mapped to
    the tool name that ran them (``update_account``), so either spelling matches."""
    ran = set(turn.reply.actions)
    alias = {
        str(step.get("action")): str(step.get("name"))
        for step in turn.steps
        if step.get("type") == "ACTION_STEP" and step.get("action") != step.get("name")
    }
    return [name if name in ran else alias.get(name, name) for name in expected]


# What hands the conversation to a node, by trace step: an Agent Script transition, a Mantle
# skill started or resumed.
_HANDOFF_EVENTS = {"activated", "resumed"}


def handoffs(turn: TurnOutcome) -> list[str]:
    """The nodes the turn handed the conversation to, in order: each subagent entered by a
    transition (``TRANSITION_STEP``'s ``to``), each Mantle skill started or resumed
    (``SKILL_STEP``). Not the node the turn started in: ``reply.path`` begins with it (the start
    agent, or the previous subagent), so a handoff to it would hold with no handoff at all."""
    found = []
    for step in turn.steps:
        if step.get("type") == "TRANSITION_STEP":
            found.append(str(step.get("to")))
        elif step.get("type") == "SKILL_STEP" and step.get("event") in _HANDOFF_EVENTS:
            found.append(str(step.get("skill")))
    return found


_RULE_TEXT = {
    MatchRule.EXACT: "exactly these actions in this order",
    MatchRule.IN_ORDER: "these actions in this order, others allowed between",
    MatchRule.SUBSET: "at least these actions, any order",
    MatchRule.SUPERSET: "no action other than these",
}


def check_turn(check: Check, turn: TurnOutcome, rule: MatchRule, number: int) -> list[Verdict]:
    """The verdicts of one deterministic check (EXPECT blocks give one per key)."""
    reply = turn.reply
    data = generated_data(turn)
    kind = check.kind

    def verdict(passed: bool, expected: Any, actual: Any, why: str) -> list[Verdict]:
        return [
            Verdict(
                check.label or check.name,
                expected,
                actual,
                passed,
                explanation="" if passed else why,
                line=check.line,
                turn=number,
            )
        ]

    if kind is CheckKind.TOPIC:
        operator = str(check.params.get("operator", "equals"))
        ok = topic_matches(str(check.expected), reply.node, operator)
        return verdict(
            ok,
            check.expected,
            reply.node,
            f"topic ({operator}): expected {check.expected!r}, got {reply.node!r}",
        )
    if kind is CheckKind.ACTIONS:
        chosen = check.params.get("rule", rule)
        assert isinstance(chosen, MatchRule)
        ok = actions_match(by_tool_name(list(check.expected), turn), reply.actions, chosen)
        why = (
            f"actions (rule {chosen.value}: {_RULE_TEXT[chosen]}): expected "
            f"{check.expected}, got {reply.actions}"
        )
        return verdict(ok, check.expected, reply.actions, why)
    if kind is CheckKind.HANDOFF:
        targets = handoffs(turn)
        return verdict(
            check.expected in targets,
            check.expected,
            targets,
            f"handoff: expected a handoff to {check.expected!r} in this turn (a subagent "
            f"entered by a transition, or a skill started or resumed), got {targets}",
        )
    if kind is CheckKind.LATENCY:
        limit = check.expected
        ok = limit is None or turn.latency_ms <= float(limit)
        return verdict(ok, limit, round(turn.latency_ms, 3), f"latency above {limit} ms")
    if kind in (CheckKind.STRING, CheckKind.NUMERIC):
        return verdict(*_compare(check, data))
    if kind is CheckKind.EXPECT:
        assert isinstance(check.expected, dict)
        return _expect_verdicts(check, check.expected, reply, number)
    raise ValueError(f"not a deterministic turn check: {kind}")


def _expect_verdicts(
    check: Check, spec: Mapping[str, Any], reply: Any, number: int
) -> list[Verdict]:
    """One verdict per key of an ``expect:`` block, each key checked alone, so a failure is
    always its own key's (telling them apart by the wording of the messages once let every
    ``response_contains`` pass). A failure of the whole block that no key reports alone
    becomes a failing ``expect`` verdict: a failure never vanishes."""
    by_key = {key: Expectations({key: value}).check(reply) for key, value in spec.items()}
    verdicts = [
        Verdict(
            f"expect.{key}",
            spec[key],
            _actual_of(key, reply),
            not failures,
            explanation="; ".join(failures),
            line=check.line,
            turn=number,
        )
        for key, failures in by_key.items()
    ]
    reported = {failure for failures in by_key.values() for failure in failures}
    unreported = [f for f in Expectations(spec).check(reply) if f not in reported]
    if unreported:
        verdicts.append(
            Verdict(
                "expect",
                dict(spec),
                None,
                False,
                explanation="; ".join(unreported),
                line=check.line,
                turn=number,
            )
        )
    return verdicts


def turn_error(
    turn: TurnOutcome,
    checks: list[Check],
    faulted: Collection[str],
    number: int,
    line: int | None = None,
) -> Verdict | None:
    """A failing verdict when the turn ended in an error that nothing expects, as
    ``agentscript run`` fails it. Expected are: an error its ``expect:`` names (``error:``
    judges it), one an ``action_failed`` assertion is about, and one where an action the case
    injects a fault into failed. A turn whose scripted moves ran out is the case's error."""
    reply = turn.reply
    if reply.error is None or reply.exhausted:
        return None
    if any(_expects_error(check) for check in checks):
        return None
    failed = {
        name
        for step in turn.steps
        if step.get("type") == "ACTION_STEP" and step.get("error")
        for name in (step.get("name"), step.get("action"))
    }
    if failed & set(faulted):
        return None
    return Verdict(
        "turn_error",
        None,
        reply.error,
        False,
        explanation=(
            f"the turn ended in an error no expectation expected: {reply.error}; if it "
            "should, say so (expect: {error: true}, or the text it contains, in a "
            "conversation file; an action_failed assertion in any spec)"
        ),
        line=line,
        turn=number,
    )


def _expects_error(check: Check) -> bool:
    if check.kind is CheckKind.EXPECT:
        return isinstance(check.expected, dict) and "error" in check.expected
    return check.kind is CheckKind.WHITEBOX and check.name == "action_failed"


def _actual_of(key: str, reply: Any) -> Any:
    if key == "response_contains":
        return reply.text
    if key == "response":
        return reply.text
    if key == "variables":
        return reply.variables
    return getattr(reply, key, None)


def _resolve(value: Any, data: dict[str, Any]) -> Any:
    if isinstance(value, JsonPath):
        found = value.find({"generatedData": data, **data})
        return found[0] if found else None
    return value


def _compare(check: Check, data: dict[str, Any]) -> tuple[bool, Any, Any, str]:
    operator = str(check.params["operator"])
    actual = _resolve(check.params["actual"], data)
    expected = _resolve(check.params["expected"], data)
    where = check.params["actual"]
    source = where.text if isinstance(where, JsonPath) else "actual"
    if actual is None:
        return False, expected, None, f"{check.name}: {source} matched nothing"
    if check.kind is CheckKind.STRING:
        a = actual if isinstance(actual, str) else json.dumps(actual)
        e = str(expected)
        ok = {
            "equals": a == e,
            "contains": e in a,
            "startswith": a.startswith(e),
            "endswith": a.endswith(e),
        }[operator]
    else:
        try:
            a_num, e_num = float(actual), float(expected)
        except (TypeError, ValueError):
            return False, expected, actual, f"{check.name}: not numbers: {actual!r}, {expected!r}"
        ok = {
            "equals": a_num == e_num,
            "greater_than": a_num > e_num,
            "greater_than_or_equal": a_num >= e_num,
            "less_than": a_num < e_num,
            "less_than_or_equal": a_num <= e_num,
        }[operator]
    return ok, expected, actual, f"{check.name} {operator}: expected {expected!r}, got {actual!r}"


def check_mantle(check: Check, turns: list[TurnOutcome], before: Mapping[str, Any]) -> Verdict:
    """A Mantle goal assertion over every step of every turn of the case; ``before`` is the
    memory before the first turn (after the scenario's ``setup``)."""
    steps = [step for turn in turns for step in turn.steps]
    params = check.params
    kind = check.name
    found: bool
    if kind.startswith("skill_"):
        event = kind.removeprefix("skill_")
        found = any(
            s.get("type") == "SKILL_STEP"
            and s.get("event") == event
            and s.get("skill") == params["skill_id"]
            and ("step_id" not in params or s.get("step") == params["step_id"])
            for s in steps
        )
    elif kind in ("tool_executed", "tool_not_executed"):
        ran = any(
            s.get("type") == "ACTION_STEP"
            and params["tool_name"] in (s.get("name"), s.get("action"))
            and not s.get("error")
            for s in steps
        )
        found = ran if kind == "tool_executed" else not ran
    elif kind == "memory_was_set":
        found = _memory_was_set(params, turns, before)
    else:
        try:
            found = _uttered(str(params["text_matches"]), turns)
        except re.error as exc:
            # Normally refused when the spec is read; never a traceback mid-run.
            why = f"{kind}: text_matches is not a regular expression ({exc}); fix the pattern"
            return Verdict(kind, params, None, False, explanation=why, line=check.line,
                           turn=len(turns))  # fmt: skip
    return Verdict(
        kind,
        params,
        None if found else "no matching event",
        found,
        explanation="" if found else f"{kind} {params}: no recorded event matches",
        line=check.line,
        turn=len(turns),
    )


def _uttered(pattern: str, turns: list[TurnOutcome]) -> bool:
    """Rasa's ``bot_uttered.text_matches``: a regular expression searched (``re.search``, so
    unanchored) in each message the agent said, as Rasa searches each ``BotUttered`` event's
    text (rasa/e2e_test/assertions.py, ``BotUtteredAssertion.run``). A plain text without
    special characters still matches as the substring it was before."""
    compiled = re.compile(pattern)
    return any(
        compiled.search(message)
        for turn in turns
        for message in (turn.reply.messages or [turn.reply.text])
    )


def _memory_was_set(
    params: Mapping[str, Any], turns: list[TurnOutcome], before: Mapping[str, Any]
) -> bool:
    """Whether the conversation wrote the slot: its value changed to something other than
    None (to ``value`` when given) between two successive views of memory. The final memory
    alone cannot tell: it holds every declared slot, None when unset, and keeps what
    ``setup`` seeded."""
    name = params["name"]
    views = [view for view in _memory_views(turns, before) if name in view]
    return any(
        new[name] is not None
        and new[name] != old[name]
        and ("value" not in params or new[name] == params["value"])
        for old, new in pairwise(views)
    )


def _memory_views(turns: list[TurnOutcome], before: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Memory before the conversation, around each step that records it (``preVars``,
    ``postVars``) and at each turn's end, in order; a slot set and cleared within one turn
    shows in the step views."""
    views: list[Mapping[str, Any]] = [before]
    for turn in turns:
        for step in turn.steps:
            views += [
                step[key] for key in ("preVars", "postVars") if isinstance(step.get(key), dict)
            ]
        views.append(turn.reply.variables)
    return views
