"""Gate proofs: for each gated tool, when the model can see it and which writes can open it.

A gate is a reasoning action with ``available when`` (rule S5). For each one this module says
the condition, every write that can change a variable the condition reads (``set`` statements
with where they run, action outputs, ``@utils.setVariables`` slots the model fills, ``collect``,
linked inputs, the declared default), and whether the gate can open at all: a gate whose
variables only ever hold values that keep the condition false can never open, which is the
``gate-never-opens`` lint.

Assertions (``[[assert]]`` in ``agentscript.toml``, ``rule = "refund never offered unless
is_verified"``) are checked on the symbolic paths of :mod:`agentscript.authoring.prompts`: the
assertion fails when some path offers the tool (or leaves it to an undecided guard) while the
condition is not provably true there.

Never raises on a checked outline.
"""

from __future__ import annotations

import difflib
import itertools
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentscript.authoring.facts import Facts, readable, truth, variable_name, variables_in
from agentscript.check.outline import AgentOutline
from agentscript.engine.program import Program
from agentscript.expr.lexer import Lexer
from agentscript.expr.nodes import AtName, Expr, Literal, Member
from agentscript.expr.parser import parse_expression
from agentscript.models.config import MAX_CONFIG_BYTES, find_config, read_toml
from agentscript.reading import read_file_text
from agentscript.syntax.tree import Block, CollectStmt, IfStmt, RunStmt, SetStmt

ANY = object()  # a write whose value is not known statically (an action output, the model)
_MAX_COMBINATIONS = 4096


@dataclass(slots=True)
class Write:
    variable: str
    where: str  # "account: verify callback", "Order_Management instructions"
    how: str  # "set from verify_identity output verified", "the model (setVariables)"
    value: object = ANY
    line: int | None = None

    def __str__(self) -> str:
        suffix = f" (line {self.line})" if self.line else ""
        return f"{self.variable}: {self.how}, in {self.where}{suffix}"


@dataclass(slots=True)
class GateProof:
    node: str
    tool: str
    kind: str
    guard: str
    line: int | None
    writers: list[Write] = field(default_factory=list)
    can_open: bool = True
    # Variables the guard reads that nothing in the agent writes (only their default applies).
    unwritten: list[str] = field(default_factory=list)

    def sentence(self) -> str:
        what = "transition" if self.kind == "transition" else "tool"
        opener = "; ".join(w.how for w in self.writers) or "nothing in the agent"
        if not self.can_open:
            return (
                f"[{self.node}] {what} {self.tool} can NEVER be offered: {self.guard} cannot "
                f"become true (written by: {opener})"
            )
        return (
            f"[{self.node}] {what} {self.tool} is offered only when {self.guard}; "
            f"what can make it true: {opener}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "tool": self.tool,
            "kind": self.kind,
            "guard": self.guard,
            "line": self.line,
            "canOpen": self.can_open,
            "writers": [
                {"variable": w.variable, "where": w.where, "how": w.how, "line": w.line}
                for w in self.writers
            ],
            "unwritten": self.unwritten,
        }


def writes(outline: AgentOutline, program: Program | None = None) -> list[Write]:
    """Every place a variable can get a value."""
    program = program or Program(outline)
    found: list[Write] = []
    for name, info in outline.variables.items():
        if info.is_linked:
            found.append(
                Write(
                    name,
                    "the session",
                    f"linked input ({info.source or 'caller'})",
                    ANY,
                    info.span.line,
                )
            )
    for node in program.nodes.values():
        hooks: list[tuple[str, Any]] = [
            ("before_reasoning", node.info.before_reasoning),
            ("instructions", node.info.instructions),
            ("after_reasoning", node.info.after_reasoning),
        ]
        for where, block in hooks:
            if isinstance(block, Block):
                _scan(block, f"{node.name} {where}", None, found)
        for tool in node.tools.values():
            if tool.kind == "set_variables":
                binding = node.info.tools.get(tool.name)
                slots = binding.inputs if binding is not None else {}
                for slot, value in slots.items():
                    target = slot
                    how = f"the model, through {tool.name} (@utils.setVariables)"
                    known = value.value if isinstance(value, Literal) else ANY
                    found.append(
                        Write(target, node.name, how, known, binding.span.line if binding else None)
                    )
            if tool.callback is not None:
                _scan(
                    tool.callback,
                    f"{node.name}: {tool.name} callback",
                    tool.action.name if tool.action is not None else None,
                    found,
                )
    return found


def _scan(block: Block, where: str, action: str | None, found: list[Write]) -> None:
    for item in block.statements():
        if isinstance(item, SetStmt):
            name = variable_name(item.target)
            if name is None:
                continue
            output = _output_name(item.value)
            if output is not None:
                how = f"set from {action or 'an action'} output {output}"
                value: object = ANY
            elif isinstance(item.value, Literal):
                how, value = f"set to {readable(item.value)}", item.value.value
            else:
                how, value = f"set to {readable(item.value)}", ANY
            found.append(Write(name, where, how, value, item.span.line))
        elif isinstance(item, CollectStmt):
            name = variable_name(item.target)
            if name is not None:
                found.append(Write(name, where, "collected from the user", ANY, item.span.line))
        elif isinstance(item, RunStmt) and item.body is not None:
            target = item.target
            ran = target.name if isinstance(target, Member) else action
            _scan(item.body, where, ran, found)
        elif isinstance(item, IfStmt):
            _scan(item.body, where, action, found)
            for elif_ in item.else_ifs:
                _scan(elif_.body, where, action, found)
            if item.else_clause is not None:
                _scan(item.else_clause.body, where, action, found)


def _output_name(expr: Expr) -> str | None:
    if (
        isinstance(expr, Member)
        and isinstance(expr.obj, AtName)
        and expr.obj.namespace == "outputs"
    ):
        return expr.name
    return None


def gate_proofs(outline: AgentOutline, program: Program | None = None) -> list[GateProof]:
    """One proof per gated tool or transition, in node order."""
    program = program or Program(outline)
    all_writes = writes(outline, program)
    types = {name: info.type for name, info in outline.variables.items()}
    defaults: dict[str, object] = {}
    for name, info in outline.variables.items():
        if isinstance(info.default, Literal):
            defaults[name] = info.default.value
        elif info.default is None and info.type.lower() == "boolean" and not info.is_linked:
            defaults[name] = ANY
        else:
            defaults[name] = ANY
    proofs: list[GateProof] = []
    for node in program.nodes.values():
        for tool in node.tools.values():
            if tool.guard is None:
                continue
            names = sorted(variables_in(tool.guard))
            writers = [w for w in all_writes if w.variable in names]
            binding = node.info.tools.get(tool.name)
            proof = GateProof(
                node.name,
                tool.name,
                "transition" if tool.kind == "transition" else tool.kind,
                readable(tool.guard),
                binding.span.line if binding is not None else None,
                writers,
                unwritten=[n for n in names if not any(w.variable == n for w in writers)],
            )
            proof.can_open = _can_open(tool.guard, names, writers, defaults, types)
            proofs.append(proof)
    return proofs


def _can_open(
    guard: Expr,
    names: list[str],
    writers: list[Write],
    defaults: dict[str, object],
    types: dict[str, str],
) -> bool:
    """False only when every combination of the values the variables can hold keeps the
    guard false. A variable with any statically unknown write can hold anything."""
    choices: list[list[object]] = []
    for name in names:
        values = [defaults.get(name, ANY), *(w.value for w in writers if w.variable == name)]
        if ANY in values or name not in types:
            choices.append([ANY])
        else:
            unique: list[object] = []
            for value in values:
                if value not in unique:
                    unique.append(value)
            choices.append(unique)
    for count, combination in enumerate(itertools.product(*choices)):
        if count >= _MAX_COMBINATIONS:
            return True
        facts = Facts(types)
        for name, value in zip(names, combination, strict=True):
            if value is not ANY:
                facts.equal[name] = value
        if truth(guard, facts) is not False:
            return True
    return False


# -- assertions -------------------------------------------------------------------------

_RULE = re.compile(r"^\s*(?P<tool>[A-Za-z_]\w*)\s+never\s+offered\s+unless\s+(?P<cond>.+)$")


@dataclass(slots=True)
class Assertion:
    rule: str
    tool: str
    condition: Expr
    source: str
    index: int = 0  # its place among the file's [[assert]] tables, from 1 (for messages)


@dataclass(slots=True)
class AssertProblem:
    """Why an ``[[assert]]`` rule cannot be read or cannot apply, and where it is: ``line``
    is the rule's line in ``file`` when the file's text shows it (None: the file as a whole).
    ``str()`` gives the line check-gates prints: ``FILE:LINE: assert N: ...``."""

    message: str  # "assert N: ..."
    file: str
    line: int | None = None

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {self.message}"


@dataclass(slots=True)
class AssertFailure:
    assertion: Assertion
    node: str
    path: str  # the case label where the tool is offered without the condition ("always")
    # The tool's guard as printed when the path leaves it undecided (the tool is offered when
    # the guard holds, and the guard does not imply the condition); None: offered outright.
    guard: str | None = None
    # The path assumed nothing: the tool is offered whatever the variables are.
    unconditional: bool = False

    def describe(self) -> str:
        if self.guard is not None:
            when = "whenever" if self.unconditional else f"when {self.path} and"
            offered = (
                f"offered {when} its guard {self.guard} holds, which does not imply the condition"
            )
        elif self.unconditional:
            offered = "offered whatever the variables are"
        else:
            offered = f"offered when {self.path}"
        return f"{self.assertion.rule!r} fails in {self.node}: {self.assertion.tool} is {offered}"

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.assertion.rule,
            "node": self.node,
            "path": self.path,
            "guard": self.guard,
            "source": self.assertion.source,
        }


def load_asserts(
    agent_path: Path, outline: AgentOutline
) -> tuple[list[Assertion], list[AssertProblem]]:
    """The ``[[assert]]`` rules of the ``agentscript.toml`` that applies to the agent (the
    one :func:`~agentscript.models.config.find_config` picks, as for ``[limits]``). Returns
    the rules and the problems that keep a rule from being read or from applying: a rule
    naming a tool the agent does not have would hold on every path, so it is a problem.

    ``outline`` is the agent's checked outline, whose tools the rules are compared with."""
    rules, problems, lines = _read_rules(agent_path)
    known: list[Assertion] = []
    offered_as = _tools_by_action(outline) if rules else {}  # one Program for all the rules
    for rule in rules:
        problem = _unknown_tool(rule, outline, offered_as)
        if problem is None:
            known.append(rule)
        else:
            problems.append(
                AssertProblem(f"assert {rule.index}: {problem}", rule.source, lines.get(rule.index))
            )
    return known, problems


def _read_rules(
    agent_path: Path,
) -> tuple[list[Assertion], list[AssertProblem], dict[int, int]]:
    """The rules, the problems, and the line of each rule (by its index) in the file."""
    config = find_config(agent_path)
    if config is None or not config.is_file():
        return [], [], {}  # $AGENTSCRIPT_CONFIG naming no file means no configuration
    try:
        data = read_toml(config)
        lines = _rule_lines(read_file_text(config, max_bytes=MAX_CONFIG_BYTES, encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        return [], [AssertProblem(f"cannot read: {exc}", str(config))], {}
    raw = data.get("assert", [])
    if isinstance(raw, dict):
        raw = [raw]
    if not isinstance(raw, list):
        return (
            [],
            [AssertProblem("[[assert]] must be a list of tables with a `rule`", str(config))],
            {},
        )
    rules: list[Assertion] = []
    problems: list[AssertProblem] = []
    for index, entry in enumerate(raw, 1):
        text = entry.get("rule") if isinstance(entry, dict) else entry
        if not isinstance(text, str):
            message = "`rule` must be a string"
        elif (match := _RULE.match(text)) is None:
            message = f"{text!r} does not read '<tool> never offered unless <condition>'"
        else:
            expr, diags = parse_expression(_bare_names_as_variables(match.group("cond")))
            if not diags:
                rules.append(Assertion(text, match.group("tool"), expr, str(config), index))
                continue
            message = f"cannot read the condition {match.group('cond')!r}: {diags[0].message}"
        problems.append(AssertProblem(f"assert {index}: {message}", str(config), lines.get(index)))
    return rules, problems, lines


def _bare_names_as_variables(condition: str) -> str:
    """``status == "open" and not is_verified`` -> ``@variables.status == "open" and not
    @variables.is_verified``: each bare name token becomes a variable reference. Tokens come
    from the expression lexer, so a word inside a string literal (``"open"``, ``"a \\" b"``)
    stays as written, and keywords, function names (``len(x)``) and members (``x.y``'s ``y``)
    are left alone. Text the lexer stops at (a ``#``) is kept for the parser to report."""
    tokens = Lexer(condition, 0).tokens()
    out: list[str] = []
    position = 0
    for number, token in enumerate(tokens):
        if token.kind != "IDENT":
            continue
        before = tokens[number - 1] if number else None
        after = tokens[number + 1] if number + 1 < len(tokens) else None
        if before is not None and before.kind == "OP" and before.text == ".":
            continue
        if after is not None and after.kind == "OP" and after.text == "(":
            continue
        out.append(condition[position : token.start])
        out.append(f"@variables.{token.text}")
        position = token.end
    out.append(condition[position:])
    return "".join(out)


_ASSERT_HEADER = re.compile(r"^[ \t]*\[\[[ \t]*assert[ \t]*\]\][ \t]*(?:#.*)?$")
_TABLE_HEADER = re.compile(r"^[ \t]*\[")
_RULE_KEY = re.compile(r"^[ \t]*(?:rule|\"rule\"|'rule')[ \t]*=")


def _rule_lines(text: str) -> dict[int, int]:
    """The line of each ``[[assert]]`` table's ``rule`` (its header's when the table has no
    ``rule`` line), by the table's place among them from 1. Read from the text, since
    ``tomllib`` keeps no positions; the tables written another way (``assert = [...]``) have
    none, and their problems point at the file."""
    found: dict[int, int] = {}
    index = 0
    inside = False
    for number, line in enumerate(text.replace("\r\n", "\n").split("\n"), 1):
        if _ASSERT_HEADER.match(line):
            index += 1
            inside = True
            found[index] = number
        elif _TABLE_HEADER.match(line):
            inside = False
        elif inside and _RULE_KEY.match(line):
            found[index] = number
            inside = False
    return found


def _unknown_tool(
    rule: Assertion, outline: AgentOutline, offered_as: dict[str, set[str]]
) -> str | None:
    """Why ``rule`` names no tool of the agent, or None (``offered_as``: the tools each
    action is offered as). An action no node offers is a tool that exists and is never
    offered (the rule holds); an action offered under another name is named wrongly, since
    rules name the tools the model sees."""
    from agentscript.limits import MAX_NAMES_SHOWN

    tools = sorted({name for names in offered_as.values() for name in names})
    if rule.tool in tools:
        return None
    if rule.tool in offered_as:
        return (
            f"'{rule.tool}' is an action; name the tool the model sees it as: "
            f"{', '.join(sorted(offered_as[rule.tool]))}"
        )
    if any(rule.tool in node.actions for node in outline.subagents.values()):
        return None
    close = _closest_tool(rule.tool, tools)
    if close is not None:
        return f"the agent has no tool '{rule.tool}'. Did you mean '{close}'?"
    shown = ", ".join(tools[:MAX_NAMES_SHOWN]) + (", ..." if len(tools) > MAX_NAMES_SHOWN else "")
    return f"the agent has no tool '{rule.tool}'. Name one of its tools: {shown or 'none'}"


def _closest_tool(name: str, tools: list[str]) -> str | None:
    """The tool ``name`` probably means: a close spelling (``refnd``: ``refund``), else a tool
    whose name holds it as a word (``refund``: ``issue_refund``), the most similar first;
    None when nothing is close (the caller lists the tools)."""
    from agentscript.check.context import closest

    hit = closest(name, tools)
    if hit is not None:
        return hit
    words = set(name.lower().split("_")) - {""}
    holding = [t for t in tools if words and words <= set(t.lower().split("_"))]
    if not holding:
        return None
    return difflib.get_close_matches(name, holding, n=1, cutoff=0.0)[0]


def _tools_by_action(outline: AgentOutline) -> dict[str, set[str]]:
    """The names of the tools the model can see, by the name of the action each runs (a
    transition or utility tool by its own name)."""
    found: dict[str, set[str]] = {}
    for node in Program(outline).nodes.values():
        for tool in node.tools.values():
            found.setdefault(tool.action.name if tool.action else tool.name, set()).add(tool.name)
    return found


def check_asserts(outline: AgentOutline, rules: list[Assertion]) -> list[AssertFailure]:
    """The paths where an asserted tool is offered without its condition provably holding."""
    from agentscript.authoring.prompts import node_prompts_with_facts

    if not rules:
        return []
    failures: list[AssertFailure] = []
    for node, label, facts, offered in node_prompts_with_facts(outline):
        for rule in rules:
            if rule.tool not in offered:
                continue
            guard = offered[rule.tool]
            opened = facts if guard is None else _assume_true(guard, facts)
            if opened is None:
                continue
            if truth(rule.condition, opened) is not True:
                shown = None if guard is None else readable(guard)
                failures.append(AssertFailure(rule, node, label, shown, not facts.atoms))
    return failures


def _assume_true(guard: Expr, facts: Facts) -> Facts | None:
    from agentscript.authoring.facts import assume

    return assume(guard, True, facts)


__all__ = [
    "ANY",
    "AssertFailure",
    "AssertProblem",
    "Assertion",
    "GateProof",
    "Write",
    "check_asserts",
    "gate_proofs",
    "load_asserts",
    "writes",
]
