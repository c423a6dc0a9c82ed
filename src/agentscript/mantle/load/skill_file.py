"""``skill.md``: YAML frontmatter, prose paragraphs with ``if:`` markers, ordered blocks."""

from __future__ import annotations

import re

import yaml

from agentscript.diagnostics import Severity, Span
from agentscript.mantle.conditions import make_condition
from agentscript.mantle.load import yamlsrc as y
from agentscript.mantle.load.steps import read_block
from agentscript.mantle.load.tokens import find_references
from agentscript.mantle.model import (
    CompleteWhen,
    Condition,
    Paragraph,
    ReferenceKind,
    RequiresConfirmation,
    Skill,
    ToolConstraint,
    ToolRef,
    UtterTrigger,
)
from agentscript.source import normalise_newlines

FRONTMATTER_KEYS = frozenset(
    {
        "name",
        "description",
        "requires",
        "complete_when",
        "import_tools",
        "tool_constraints",
        "utter",
        "disabled",
        "routing",
    }
)
CONSTRAINT_KEYS = frozenset({"requires", "requires_confirmation", "on_success", "on_failure"})
CONFIRMATION_KEYS = frozenset({"enabled", "utter_for_confirmation", "utter_on_user_denial"})

_FENCE_OPEN = re.compile(r"^:::\s*ordered_block\b(.*)$")
_FENCE_ID = re.compile(r"""^\s*id\s*=\s*["']?([A-Za-z0-9_\-]+)["']?\s*$""")
_FENCE_CLOSE = re.compile(r"^:::\s*$")
_IF = re.compile(r"^if:(.*)$")
_ELSE = re.compile(r"^(else|elif)\b\s*.*:")


def read_skill(text: str, skill_id: str, folder: str, ctx: y.Ctx) -> Skill:
    skill = Skill(id=skill_id, folder=folder, file=ctx.file, span=Span(1, 1, 1, 4))
    # Lines as the renderer (render.source_lines) and the YAML reader count them: at LF, CRLF
    # and lone CR only; str.splitlines() also breaks at \f, \x85, U+2028 and U+2029, which
    # shifted every later line number.
    body = normalise_newlines(text.lstrip("\ufeff"))
    if body.endswith("\n"):
        body = body[:-1]
    lines = body.split("\n") if body else []
    body_start = _frontmatter(lines, skill, ctx)
    _body(lines, body_start, skill, ctx)
    return skill


def _frontmatter(lines: list[str], skill: Skill, ctx: y.Ctx) -> int:
    """Read the frontmatter; returns the 0-based index of the first body line."""
    if not lines or lines[0].strip() != "---":
        ctx.add(
            "mantle-frontmatter-delimiter",
            "skill.md must start with a '---' line, then the YAML frontmatter "
            "(name, description, ...), then a closing '---' line",
            Span(1, 1, 1, max(2, len(lines[0]) + 1 if lines else 2)),
        )
        return 0
    close = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
    if close is None:
        ctx.add(
            "mantle-frontmatter-delimiter",
            "the frontmatter opened on line 1 is never closed: add a '---' line after it",
            Span(1, 1, 1, 4),
        )
        return len(lines)
    fm_ctx = y.Ctx(ctx.file, line_offset=1, diagnostics=ctx.diagnostics)
    root = y.compose("\n".join(lines[1:close]) + "\n", fm_ctx)
    if root is None or y.is_null(root):
        if root is not None or not ctx.diagnostics:
            ctx.add(
                "mantle-frontmatter",
                "the frontmatter is empty: add 'name:' and 'description:'",
                Span(1, 1, 1, 4),
            )
        return close + 1
    if not y.is_map(root):
        ctx.add("mantle-frontmatter", "the frontmatter must be a YAML mapping", fm_ctx.span(root))
        return close + 1
    _read_keys(root, skill, fm_ctx)
    return close + 1


def _read_keys(root: yaml.Node, skill: Skill, ctx: y.Ctx) -> None:
    # Mantle ignores unknown top-level keys; we warn because they are usually typos.
    y.unknown_keys(root, set(FRONTMATTER_KEYS), ctx, "the frontmatter", Severity.WARNING)
    keys = {k: (kn, v) for k, kn, v in y.items(root, ctx)}
    for required in ("name", "description"):
        if required not in keys or not (y.string(keys[required][1], ctx, required) or "").strip():
            ctx.add(
                "mantle-frontmatter",
                f"the frontmatter needs a non-empty '{required}:'",
                ctx.span(keys[required][0]) if required in keys else skill.span,
            )
    skill.name = (y.string(keys["name"][1], ctx, "name") or "") if "name" in keys else ""
    if "description" in keys:
        skill.description = (y.string(keys["description"][1], ctx, "description") or "").strip()
    if "requires" in keys:
        skill.requires = _condition(keys["requires"][1], ctx, "requires")
    if "complete_when" in keys:
        skill.complete_when = _complete_when(keys["complete_when"][1], ctx)
    if "import_tools" in keys:
        for name, span in y.string_list(keys["import_tools"][1], ctx, "import_tools"):
            skill.import_tools.append(name)
            skill.tool_refs.append(ToolRef(name, "import_tools", ctx.file, span))
    if "tool_constraints" in keys:
        _constraints(keys["tool_constraints"][1], skill, ctx)
    if "utter" in keys:
        _utters(keys["utter"][1], skill, ctx)
    if "disabled" in keys:
        skill.disabled = y.boolean(keys["disabled"][1], ctx, "disabled")
    if "routing" in keys:
        routing = keys["routing"][1]
        if y.is_map(routing):
            y.unknown_keys(routing, {"engine_managed"}, ctx, "routing")
            for key, _, node in y.items(routing, ctx):
                if key == "engine_managed":
                    skill.engine_managed = y.boolean(node, ctx, "engine_managed")
        elif not y.is_null(routing):
            ctx.add("mantle-type", "'routing' must be a mapping", ctx.span(routing))


def _condition(node: yaml.Node, ctx: y.Ctx, what: str) -> Condition | None:
    if y.is_null(node):
        return None
    if not y.is_scalar(node):
        ctx.add(
            "mantle-condition",
            f"'{what}' must be a condition string such as \"session.project.authenticated\"",
            ctx.span(node),
        )
        return None
    text = y.string(node, ctx, what)
    if text is None:  # a value that cannot be read, reported by y.string
        return None
    condition, problems = make_condition(text, ctx.file, ctx.span(node))
    ctx.diagnostics.extend(problems)
    return condition


def _complete_when(node: yaml.Node, ctx: y.Ctx) -> CompleteWhen | None:
    span = ctx.span(node)
    if y.is_scalar(node) and not y.is_null(node):
        text = y.string(node, ctx, "complete_when") or ""
        ctx.add(
            "mantle-complete-when-string",
            "skill-level 'complete_when' is a mapping; write "
            f"'complete_when: {{condition: \"{' '.join(text.split())}\"}}' "
            "(optionally with 'criteria:' sentences)",
            span,
            Severity.WARNING,
        )
        return CompleteWhen(span, _condition(node, ctx, "complete_when"))
    if not y.is_map(node):
        ctx.add("mantle-type", "'complete_when' must be a mapping {condition, criteria}", span)
        return None
    y.unknown_keys(node, {"condition", "criteria"}, ctx, "complete_when")
    result = CompleteWhen(span)
    for key, _, value in y.items(node, ctx):
        if key == "condition":
            result.condition = _condition(value, ctx, "complete_when.condition")
        elif key == "criteria":
            if y.is_scalar(value) and not y.is_null(value):
                ctx.add("mantle-type", "'criteria' must be a list of sentences", ctx.span(value))
                result.criteria = [y.string(value, ctx, "criteria") or ""]
            else:
                result.criteria = [t for t, _ in y.string_list(value, ctx, "criteria")]
    return result


def _single_key_items(
    node: yaml.Node, ctx: y.Ctx, what: str
) -> list[tuple[str, yaml.Node, yaml.Node]]:
    if y.is_null(node):
        return []
    if not y.is_seq(node):
        ctx.add(
            "mantle-type", f"'{what}' must be a list of '- <name>: {{...}}' entries", ctx.span(node)
        )
        return []
    out: list[tuple[str, yaml.Node, yaml.Node]] = []
    assert isinstance(node, yaml.SequenceNode)
    for item in node.value:
        pairs = y.items(item, ctx) if y.is_map(item) else []
        if len(pairs) != 1:
            ctx.add(
                "mantle-type",
                f"each '{what}' entry must be a single '<name>: {{...}}' mapping",
                ctx.span(item),
            )
            continue
        out.append(pairs[0])
    return out


def _constraints(node: yaml.Node, skill: Skill, ctx: y.Ctx) -> None:
    for tool, key_node, body in _single_key_items(node, ctx, "tool_constraints"):
        span = ctx.span(key_node)
        constraint = ToolConstraint(tool, ctx.file, span)
        if tool in skill.tool_constraints:
            ctx.add("mantle-duplicate-key", f"tool '{tool}' is constrained twice", span)
        skill.tool_constraints[tool] = constraint
        skill.tool_refs.append(ToolRef(tool, "tool_constraints", ctx.file, span))
        if y.is_null(body):
            continue
        if not y.is_map(body):
            ctx.add("mantle-type", f"the constraints of '{tool}' must be a mapping", ctx.span(body))
            continue
        y.unknown_keys(
            body,
            set(CONSTRAINT_KEYS),
            ctx,
            f"tool_constraints of '{tool}'",
            hints={"ask_confirmation": "use 'requires_confirmation: {enabled: true, ...}'"},
        )
        for key, _, value in y.items(body, ctx):
            if key == "requires":
                constraint.requires = _condition(value, ctx, "requires")
            elif key == "on_success":
                constraint.on_success = y.string(value, ctx, key)
            elif key == "on_failure":
                constraint.on_failure = y.string(value, ctx, key)
            elif key == "requires_confirmation":
                constraint.requires_confirmation = _confirmation(value, ctx)


def _confirmation(node: yaml.Node, ctx: y.Ctx) -> RequiresConfirmation | None:
    span = ctx.span(node)
    if y.is_scalar(node) and not y.is_null(node):
        return RequiresConfirmation(y.boolean(node, ctx, "requires_confirmation"), span)
    if not y.is_map(node):
        ctx.add("mantle-type", "'requires_confirmation' must be a mapping", span)
        return None
    y.unknown_keys(node, set(CONFIRMATION_KEYS), ctx, "requires_confirmation")
    keys = {k: v for k, _, v in y.items(node, ctx)}
    return RequiresConfirmation(
        enabled=y.boolean(keys.get("enabled"), ctx, "enabled"),
        span=span,
        utter_for_confirmation=y.string(
            keys.get("utter_for_confirmation"), ctx, "utter_for_confirmation"
        ),
        utter_on_user_denial=y.string(
            keys.get("utter_on_user_denial"), ctx, "utter_on_user_denial"
        ),
    )


def _utters(node: yaml.Node, skill: Skill, ctx: y.Ctx) -> None:
    for response, key_node, body in _single_key_items(node, ctx, "utter"):
        trigger = UtterTrigger(response, ctx.span(key_node))
        if y.is_map(body):
            y.unknown_keys(body, {"on", "when"}, ctx, f"utter '{response}'")
            for key, _, value in y.items(body, ctx):
                if key == "on":
                    trigger.on = y.string(value, ctx, "on")
                    if trigger.on != "activate":
                        ctx.add("mantle-utter", "'on:' only supports 'activate'", ctx.span(value))
                elif key == "when":
                    trigger.when = _condition(value, ctx, "when")
        if trigger.on is None and trigger.when is None:
            ctx.add(
                "mantle-utter",
                f"utter '{response}' needs 'on: activate' or 'when: <condition>'",
                trigger.span,
            )
        skill.utter.append(trigger)


# --- body -------------------------------------------------------------------------------


def _body(lines: list[str], start: int, skill: Skill, ctx: y.Ctx) -> None:
    chunk: list[tuple[int, str]] = []  # (1-based line, text)

    def flush() -> None:
        if chunk:
            _paragraphs(chunk, skill, ctx)
            chunk.clear()

    i = start
    while i < len(lines):
        line = lines[i]
        fence = _FENCE_OPEN.match(line.strip())
        if fence:
            flush()
            i = _block(lines, i, fence.group(1), skill, ctx)
            continue
        if line.strip():
            chunk.append((i + 1, line))
        else:
            flush()
        i += 1
    flush()


def _block(lines: list[str], i: int, attrs: str, skill: Skill, ctx: y.Ctx) -> int:
    """Read the fence starting at ``lines[i]``; returns the index after its closing ':::'."""
    fence_line = i + 1
    end = next((j for j in range(i + 1, len(lines)) if _FENCE_CLOSE.match(lines[j].strip())), None)
    if end is None:
        ctx.add(
            "mantle-block-fence",
            "this ':::ordered_block' fence is never closed: add a ':::' line after its steps",
            Span(fence_line, 1, fence_line, len(lines[i]) + 1),
        )
        end = len(lines)
    id_match = _FENCE_ID.match(attrs)
    if not id_match:
        ctx.add(
            "mantle-block-fence",
            "write the fence as ':::ordered_block id=<block_id>'",
            Span(fence_line, 1, fence_line, len(lines[i]) + 1),
        )
        return end + 1
    block_id = id_match.group(1)
    span = Span(fence_line, 1, fence_line, len(lines[i]) + 1)
    block_ctx = y.Ctx(ctx.file, line_offset=fence_line, diagnostics=ctx.diagnostics)
    block = read_block(block_id, "\n".join(lines[i + 1 : end]) + "\n", span, block_ctx)
    if block_id in skill.blocks:
        ctx.add("mantle-duplicate-block", f"ordered block '{block_id}' is defined twice", span)
    else:
        skill.blocks[block_id] = block
    skill.paragraphs.append(Paragraph("", span, block_id=block_id))
    for step in block.steps:
        skill.references.extend(step.references)
        if step.execute_tool:
            skill.tool_refs.append(ToolRef(step.execute_tool, "execute_tool", ctx.file, step.span))
    return end + 1


def _paragraphs(chunk: list[tuple[int, str]], skill: Skill, ctx: y.Ctx) -> None:
    """Split a run of non-blank lines at ``if:`` markers; each marker scopes what follows."""
    groups: list[list[tuple[int, str]]] = [[]]
    for line_no, text in chunk:
        if _IF.match(text.strip()) and groups[-1]:
            groups.append([])
        groups[-1].append((line_no, text))
    for group in groups:
        _paragraph(group, skill, ctx)


def _paragraph(group: list[tuple[int, str]], skill: Skill, ctx: y.Ctx) -> None:
    first_line, first = group[0]
    condition: Condition | None = None
    body = group
    marker = _IF.match(first.strip())
    if marker:
        body = group[1:]
        cond_text = marker.group(1).strip()
        column = first.index("if:") + 4 + (len(marker.group(1)) - len(marker.group(1).lstrip()))
        span = Span(first_line, column, first_line, column + max(1, len(cond_text)))
        if cond_text in (">", "|", ">-", "|-"):
            ctx.add(
                "mantle-if-marker",
                "an 'if:' marker takes its whole condition on the same line (no YAML folding)",
                span,
            )
        condition, problems = make_condition(cond_text, ctx.file, span)
        ctx.diagnostics.extend(problems)
        if not body:
            ctx.add(
                "mantle-if-marker",
                "this 'if:' marker has no paragraph beneath it",
                span,
                Severity.WARNING,
            )
            return
    elif _ELSE.match(first.strip()):
        ctx.add(
            "mantle-if-marker",
            "there is no 'else:'/'elif:' marker: write one 'if:' paragraph per case",
            Span(first_line, 1, first_line, len(first) + 1),
        )
    text = "\n".join(line for _, line in body)
    last_line, last = body[-1]
    paragraph = Paragraph(text, Span(body[0][0], 1, last_line, len(last) + 1), condition)
    paragraph.references = find_references(body, ctx)
    skill.references.extend(paragraph.references)
    for ref in paragraph.references:
        if ref.kind is ReferenceKind.TOOL:
            skill.tool_refs.append(ToolRef(ref.target, "@tool", ctx.file, ref.span))
    skill.paragraphs.append(paragraph)
