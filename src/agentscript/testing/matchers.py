"""Deterministic checks: each reads what a turn did (reply, trace steps by kind, generated
data) and returns a :class:`Verdict` whose explanation names the rule that failed.

Matching rules (docs/testing.md): the topic is the subagent (or Mantle skill) the turn ended
in, compared exactly, also accepting Salesforce org-style names (``p_<id>_<Name>`` prefixes,
``_<hash>`` suffixes); format C's ``contains`` operator compares by substring. Actions are the
actions and tools that ran, transitions included, compared by :class:`MatchRule` (``exact`` by
default).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from agentscript.testing.jsonpath import JsonPath
from agentscript.testing.results import TurnOutcome, Verdict, generated_data
from agentscript.testing.spec import Check, CheckKind, MatchRule

_ORG_PREFIX = re.compile(r"^p_[A-Za-z0-9]+_")
_ORG_SUFFIX = re.compile(r"_[0-9A-Za-z]{8,}$")


def topic_matches(expected: str, actual: str | None, operator: str = "equals") -> bool:
    if actual is None:
        return False
    if operator == "contains":
        return expected in actual or actual in expected
    if expected == actual:
        return True
    bare = _ORG_SUFFIX.sub("", _ORG_PREFIX.sub("", expected))
    return bare == actual or bare.lower() == actual.lower()


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
        ok = check.expected in reply.path
        return verdict(
            ok,
            check.expected,
            reply.path,
            f"handoff: expected {check.expected!r} among {reply.path}",
        )
    if kind is CheckKind.LATENCY:
        limit = check.expected
        ok = limit is None or turn.latency_ms <= float(limit)
        return verdict(ok, limit, round(turn.latency_ms, 3), f"latency above {limit} ms")
    if kind in (CheckKind.STRING, CheckKind.NUMERIC):
        return verdict(*_compare(check, data))
    if kind is CheckKind.EXPECT:
        assert isinstance(check.expected, dict)
        from agentscript.expectations import Expectations

        failures = Expectations(check.expected).check(reply)
        return [
            Verdict(
                f"expect.{key}",
                check.expected[key],
                _actual_of(key, reply),
                not [f for f in failures if f.startswith(key)],
                explanation="; ".join(f for f in failures if f.startswith(key)),
                line=check.line,
                turn=number,
            )
            for key in check.expected
        ]
    raise ValueError(f"not a deterministic turn check: {kind}")


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


def check_mantle(check: Check, turns: list[TurnOutcome]) -> Verdict:
    """A Mantle goal assertion over every step of every turn of the case."""
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
        final = turns[-1].reply.variables if turns else {}
        found = params["name"] in final and (
            "value" not in params or final[params["name"]] == params["value"]
        )
    else:
        found = any(str(params["text_matches"]) in t.reply.text for t in turns)
    return Verdict(
        kind,
        params,
        None if found else "no matching event",
        found,
        explanation="" if found else f"{kind} {params}: no recorded event matches",
        line=check.line,
        turn=len(turns),
    )
