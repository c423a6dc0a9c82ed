"""The YAML body of an ``:::ordered_block`` fence: ``steps:`` and their kinds."""

from __future__ import annotations

import yaml

from agentscript.diagnostics import Span
from agentscript.mantle.conditions import make_condition
from agentscript.mantle.load import yamlsrc as y
from agentscript.mantle.load.tokens import find_references
from agentscript.mantle.model import END_STEP, Condition, NextBranch, OrderedBlock, Step, StepKind

# The key that names a step's kind, and the extra keys that kind accepts.
KIND_KEYS: dict[str, StepKind] = {
    "instructions": StepKind.INSTRUCTIONS,
    "collect": StepKind.COLLECT,
    "action": StepKind.ACTION,
    "execute_tool": StepKind.EXECUTE_TOOL,
    "noop": StepKind.NOOP,
    "set_memory": StepKind.SET_MEMORY,
    "call": StepKind.CALL,
    "link": StepKind.LINK,
}
EXTRA_KEYS: dict[StepKind, frozenset[str]] = {
    StepKind.INSTRUCTIONS: frozenset({"complete_when"}),
    StepKind.COLLECT: frozenset({"utterance", "ask_before_filling", "description"}),
    StepKind.EXECUTE_TOOL: frozenset({"parameters"}),
}
COMMON_KEYS = frozenset({"id", "next"})
BLOCK_KEYS = frozenset({"steps", "name", "description"})
HINTS = {"utter": "a collect step names its question with 'utterance:'"}


def read_block(block_id: str, text: str, span: Span, ctx: y.Ctx) -> OrderedBlock:
    block = OrderedBlock(block_id, ctx.file, span)
    reported = len(ctx.diagnostics)
    root = y.compose(text, ctx)
    if root is None:
        if len(ctx.diagnostics) == reported:  # empty, not invalid: as `steps: []` is
            ctx.add("mantle-block", f"block '{block_id}' needs a non-empty 'steps:' list", span)
        return block
    if not y.is_map(root):
        ctx.add(
            "mantle-block", f"block '{block_id}' must contain a YAML mapping with 'steps:'", span
        )
        return block
    y.unknown_keys(root, set(BLOCK_KEYS), ctx, f"ordered block '{block_id}'")
    keys = {k: (kn, v) for k, kn, v in y.items(root, ctx)}
    block.name = y.string(keys["name"][1], ctx, "name") if "name" in keys else None
    if "description" in keys:
        block.description = y.string(keys["description"][1], ctx, "description")
    steps = keys.get("steps", (None, None))[1]
    if steps is None or not y.is_seq(steps) or not steps.value:
        ctx.add("mantle-block", f"block '{block_id}' needs a non-empty 'steps:' list", span)
        return block
    assert isinstance(steps, yaml.SequenceNode)
    for node in steps.value:
        step = _step(node, ctx)
        if step is not None:
            block.steps.append(step)
    return block


def _step(node: yaml.Node, ctx: y.Ctx) -> Step | None:
    span = ctx.span(node)
    if not y.is_map(node):
        ctx.add("mantle-step", "each step must be a mapping with an 'id:'", span)
        return None
    keys = {k: (kn, v) for k, kn, v in y.items(node, ctx)}
    step_id = y.string(keys["id"][1], ctx, "id") if "id" in keys else None
    if not step_id:
        ctx.add("mantle-step", "this step has no 'id:'", span)
        step_id = f"<step at line {span.line}>"
    span = ctx.span(keys["id"][1]) if "id" in keys else span
    kinds = [k for k in keys if k in KIND_KEYS]
    if len(kinds) > 1:
        ctx.add("mantle-step-kind", f"step '{step_id}' has several kinds: {', '.join(kinds)}", span)
    if kinds:
        kind = KIND_KEYS[kinds[0]]
    elif step_id == END_STEP:
        kind = StepKind.END
    else:
        others = [k for k in keys if k not in COMMON_KEYS]
        found = f" (found: {', '.join(others)})" if others else ""
        ctx.add(
            "mantle-step-kind",
            f"step '{step_id}' has no known kind{found}; use one of: {', '.join(KIND_KEYS)}",
            span,
        )
        return None
    allowed = (
        set(COMMON_KEYS) | set(EXTRA_KEYS.get(kind, ())) | {kinds[0]} if kinds else set(COMMON_KEYS)
    )
    y.unknown_keys(node, allowed, ctx, f"{kind.value} step '{step_id}'", hints=HINTS)
    step = Step(step_id, kind, ctx.file, span)
    for key, _, value in y.items(node, ctx):
        _field(step, key, value, ctx)
    return step


def _field(step: Step, key: str, node: yaml.Node, ctx: y.Ctx) -> None:
    if key == "next":
        step.next_span = ctx.span(node)
        step.next = _next(node, ctx)
    elif key == "instructions":
        step.instructions = y.string(node, ctx, key)
        _instruction_refs(step, node, ctx)
    elif key == "complete_when":
        step.complete_when = _condition(node, ctx, key)
    elif key in ("collect", "utterance", "description", "action", "execute_tool", "call", "link"):
        setattr(step, key, y.string(node, ctx, key))
    elif key == "ask_before_filling":
        step.ask_before_filling = y.boolean(node, ctx, key)
    elif key == "noop":
        y.boolean(node, ctx, key, default=True)
    elif key == "set_memory":
        ok, raw = y.try_value(node, ctx)
        if isinstance(raw, dict):
            step.set_memory = raw
        elif ok:
            ctx.add("mantle-step", "'set_memory' must map memory entries to values", ctx.span(node))
    elif key == "parameters":
        _parameters(step, node, ctx)


def _instruction_refs(step: Step, node: yaml.Node, ctx: y.Ctx) -> None:
    if step.instructions is None:
        return
    # Block scalars start on the line after the key; plain scalars on the key's line.
    first = ctx.span(node).line + (1 if getattr(node, "style", None) in ("|", ">") else 0)
    lines = [(first + i, text) for i, text in enumerate(step.instructions.splitlines())]
    step.references = find_references(lines, ctx)


def _condition(node: yaml.Node, ctx: y.Ctx, what: str) -> Condition | None:
    if y.is_null(node):
        return None
    text = y.string(node, ctx, what)
    if text is None:
        return None
    condition, problems = make_condition(text, ctx.file, ctx.span(node))
    ctx.diagnostics.extend(problems)
    return condition


def _next(node: yaml.Node, ctx: y.Ctx) -> str | list[NextBranch] | None:
    if y.is_scalar(node):
        return y.string(node, ctx, "next")
    if not y.is_seq(node):
        ctx.add(
            "mantle-next",
            "'next' must be a step id or a list of if/then and else branches",
            ctx.span(node),
        )
        return None
    branches: list[NextBranch] = []
    assert isinstance(node, yaml.SequenceNode)
    for item in node.value:
        span = ctx.span(item)
        keys = {k: v for k, _, v in y.items(item, ctx)} if y.is_map(item) else {}
        if set(keys) == {"if", "then"}:
            target = y.string(keys["then"], ctx, "then") or ""
            branches.append(NextBranch(target, span, _condition(keys["if"], ctx, "if")))
        elif set(keys) == {"else"}:
            branches.append(NextBranch(y.string(keys["else"], ctx, "else") or "", span))
        else:
            ctx.add(
                "mantle-next",
                "each 'next' branch is '- if: <condition>' with 'then: <step>', "
                "or '- else: <step>'",
                span,
            )
    for branch in branches[:-1]:
        if branch.condition is None:
            ctx.add("mantle-next", "'else:' must be the last branch", branch.span)
    return branches


def _parameters(step: Step, node: yaml.Node, ctx: y.Ctx) -> None:
    if not y.is_map(node):
        ctx.add("mantle-step", "'parameters' must map argument names to values", ctx.span(node))
        return
    for name, _, value in y.items(node, ctx):
        raw = y.value(value, ctx)
        # Strings naming memory are expressions; anything else is passed as a literal.
        if isinstance(raw, str) and raw.strip().startswith("session."):
            condition, problems = make_condition(raw, ctx.file, ctx.span(value))
            ctx.diagnostics.extend(problems)
            step.parameters[name] = condition
        else:
            step.parameters[name] = raw
