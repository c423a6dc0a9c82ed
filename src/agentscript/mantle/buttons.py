"""Response buttons: ``set:`` payloads that write memory without the model, buttons a tool
supplies at delivery (``buttons: {source: <tool>}``), and their load-time checks.

A payload ``set:session.<skill | project>.<entry>=<value>`` is what a channel sends back
when the user taps the button. A user message that is exactly such a payload is applied by
the engine: the value is coerced to the entry's type and written like any write (type and
enum checks, write-once project entries, post-write hooks); a skill entry must belong to a
skill on the stack. The turn then goes on as after any write (deterministic steps first;
the model only when nothing else answers). A tap that cannot be applied (unknown, foreign,
invalid or write-once value) says ``utter_set_memory_button_skipped`` and ends the turn.

Tool-supplied buttons are filled at the end of the turn (tools are asynchronous): the tool
runs with no arguments (as an ``ACTION_STEP`` with source ``buttons``) and returns a list of
``{title, payload}`` (or ``{"buttons": [...]}``); they are added to the ``RESPONSE_STEP``
and to ``Reply.buttons``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from agentscript.diagnostics import Diagnostic, Severity
from agentscript.mantle import hooks
from agentscript.mantle.memory import MemoryWriteError, check_write, coerce_value
from agentscript.mantle.model import PROJECT_NAMESPACE, Button, Project, Tool
from agentscript.mantle.tool_run import run_tool
from agentscript.mantle.turn_context import TurnContext

PAYLOAD = re.compile(r"^set:session\.([A-Za-z_][\w\-]*)\.([A-Za-z_][\w\-]*)=(.*)$", re.DOTALL)
SKIPPED_RESPONSE = "utter_set_memory_button_skipped"
SKIPPED_TEXT = "That option is no longer available."


def parse_payload(text: str) -> tuple[str, str] | None:
    """``(qualified name, raw value)`` of a ``set:`` payload, or None."""
    match = PAYLOAD.match(text.strip())
    if match is None:
        return None
    return f"{match.group(1)}.{match.group(2)}", match.group(3).strip()


async def apply_payload(ctx: TurnContext) -> bool:
    """Apply the user's message when it is a ``set:`` payload; True when it was one."""
    parsed = parse_payload(ctx.text)
    if parsed is None:
        return False
    qualified, raw = parsed
    record = ctx.trace.add(
        "ACTION_STEP",
        name="set_memory_button",
        action="set_memory_button",
        source="button",
        input={"entry": qualified, "value": raw},
        output=None,
        error=None,
        preVars=ctx.snapshot(),
        postVars=None,
    )
    since = hooks.mark(ctx)
    problem = _write(ctx, qualified, raw)
    if problem is None:
        problem = await hooks.after_writes(ctx, since, engine_made=True)
    record.update(
        output=None if problem else {"updated": [qualified]},
        error=problem,
        postVars=ctx.snapshot(),
    )
    if problem is not None:
        rendered = ctx.render(SKIPPED_RESPONSE)
        ctx.say(rendered.text if rendered else SKIPPED_TEXT, "button", response=SKIPPED_RESPONSE)
        ctx.stop = True
    return True


def _write(ctx: TurnContext, qualified: str, raw: str) -> str | None:
    entry = ctx.project.memory_entry(qualified)
    namespace = qualified.partition(".")[0]
    if entry is None:
        return f"{qualified} is not a declared memory entry"
    if namespace != PROJECT_NAMESPACE and ctx.stack.find(namespace) is None:
        return f"{qualified} belongs to skill '{namespace}', which is not running"
    try:
        value = check_write(entry, ctx.memory, _literal(raw))
    except MemoryWriteError as exc:
        return str(exc)
    ctx.write(qualified, value)
    return None


def _literal(raw: str) -> Any:
    """The payload value: quotes stripped; type coercion is the entry's (``"true"``, ``"3"``)."""
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
        return raw[1:-1]
    return raw


# --- tool-supplied buttons ----------------------------------------------------------------


def source_tool(project: Project, name: str, skill_id: str | None) -> tuple[str, Tool] | None:
    if skill_id is not None and name in project.tools_for(skill_id):
        return skill_id, project.tools_for(skill_id)[name]
    for skill in project.skills.values():
        if name in skill.tools:
            return skill.id, skill.tools[name]
    if name in project.shared_tools:
        return skill_id or "", project.shared_tools[name]
    return None


async def fill_source_buttons(ctx: TurnContext) -> None:
    """Run the tools that supply buttons for responses said this turn."""
    pending, ctx.pending_buttons = ctx.pending_buttons, []
    for step, name, skill_id in pending:
        found = source_tool(ctx.project, name, skill_id)
        if found is None:
            step["buttonsError"] = f"button source tool '{name}' is not defined"
            continue
        owner, tool = found
        result, ok = await run_tool(ctx, owner, tool, {}, "buttons")
        items = result.get("buttons", result.get("result")) if ok else None
        buttons = [
            {"title": str(b["title"]), "payload": b.get("payload")}
            for b in items or []
            if isinstance(b, dict) and b.get("title")
        ]
        if not ok or not isinstance(items, list):
            step["buttonsError"] = f"'{name}' did not return a list of buttons"
        step["buttons"] = buttons
        ctx.result.buttons.extend(buttons)


# --- load-time checks -----------------------------------------------------------------------


def check_buttons(project: Project) -> Iterator[Diagnostic]:
    """Malformed or impossible ``set:`` payloads and unknown button source tools."""
    for response in project.responses.values():
        for variant in response.variants:
            for button in variant.buttons:
                problem = payload_problem(project, button)
                if problem is not None:
                    yield Diagnostic(
                        "mantle-button", problem, button.span, Severity.ERROR, variant.file
                    )
            source = variant.buttons_source
            if source is not None and source_tool(project, source, response.owner) is None:
                yield Diagnostic(
                    "mantle-button",
                    f"buttons of '{response.name}': source tool '{source}' is not defined in "
                    "any tools.py; define it or list the buttons",
                    variant.span,
                    Severity.ERROR,
                    variant.file,
                )


def payload_problem(project: Project, button: Button) -> str | None:
    payload = button.payload
    if payload is None or not payload.startswith("set:"):
        return None  # an ordinary payload (a message the channel sends back)
    parsed = parse_payload(payload)
    if parsed is None:
        return (
            f"button '{button.title}': payload '{payload}' must be "
            "'set:session.<skill or project>.<entry>=<value>'"
        )
    qualified, raw = parsed
    entry = project.memory_entry(qualified)
    if entry is None:
        return f"button '{button.title}': '{qualified}' is not a declared memory entry"
    if "{" in raw:
        return None  # filled at delivery; checked when tapped
    try:
        coerce_value(entry, _literal(raw))
    except MemoryWriteError as exc:
        return f"button '{button.title}': {exc}"
    return None
