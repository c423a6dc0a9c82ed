"""Response buttons: ``set:`` payloads that write memory without the model, buttons a tool
supplies at delivery (``buttons: {source: <tool>}``). The payload grammar is in
:mod:`agentscript.mantle.buttons`, the load-time checks in :mod:`agentscript.mantle.load.validate`.

A payload ``set:session.<skill | project>.<entry>=<value>`` is what a channel sends back
when the user taps the button. A user message that is exactly such a payload is applied by
the engine only when it is one of the buttons offered with the previous turn's responses
(the turn records them in the stack's ``offered`` list): otherwise anyone could type a
payload and write any entry, gates that ``requires:`` reads included (M1, M6). A private
entry is never written by a payload. The value is coerced to the entry's type and written
like any write (type and enum checks, write-once project entries, post-write hooks); a skill
entry must belong to a skill on the stack. The turn then goes on as after any write
(deterministic steps first; the model only when nothing else answers). A tap that cannot be
applied (not offered, unknown, private, foreign, invalid or write-once value) says
``utter_set_memory_button_skipped`` and ends the turn.

Tool-supplied buttons are filled at the end of the turn (tools are asynchronous): the tool
runs with no arguments (as an ``ACTION_STEP`` with source ``buttons``) and returns a list of
``{title, payload}`` (or ``{"buttons": [...]}``); they are added to the ``RESPONSE_STEP``
and to ``Reply.buttons``. The tool's ``tool_constraints`` apply (M5): while its ``requires``
does not hold, or when it requires confirmation, it is not run, the response shows no
buttons and its ``RESPONSE_STEP`` says why in ``buttonsError``.
"""

from __future__ import annotations

import time

from agentscript.mantle.buttons import parse_payload, payload_value, source_tool
from agentscript.mantle.memory import MemoryWriteError, check_write
from agentscript.mantle.model import PROJECT_NAMESPACE
from agentscript.mantle.queries import tool_allowed, tool_constraint
from agentscript.mantle.run import hooks
from agentscript.mantle.run.tool_execution import run_tool
from agentscript.mantle.run.turn_context import TurnContext
from agentscript.trace import elapsed_ms
from agentscript.trace_steps import ResponseKind, Source, action_step

SET_MEMORY_BUTTON = "set_memory_button"  # the ACTION_STEP name of an applied payload
SKIPPED_RESPONSE = "utter_set_memory_button_skipped"
SKIPPED_TEXT = "That option is no longer available."


async def apply_payload(ctx: TurnContext, offered: list[str]) -> bool:
    """Apply the user's message when it is a ``set:`` payload among ``offered`` (the
    payloads of the previous turn's buttons); True when it was a payload."""
    parsed = parse_payload(ctx.text)
    if parsed is None:
        return False
    qualified, raw = parsed
    started = time.perf_counter()
    record = action_step(
        ctx.trace,
        name=SET_MEMORY_BUTTON,
        action=SET_MEMORY_BUTTON,
        node=ctx.node_name(),
        source=Source.BUTTON,
        inputs={"entry": qualified, "value": raw},
        pre_vars=ctx.snapshot(),
    )
    since = hooks.mark(ctx)
    problem = _write(ctx, qualified, raw, parsed in {parse_payload(o) for o in offered})
    if problem is None:
        problem = await hooks.after_writes(ctx, since, engine_made=True)
    record.update(
        output=None if problem else {"updated": [qualified]},
        error=problem,
        postVars=ctx.snapshot(),
        durationMs=elapsed_ms(started),
    )
    if problem is not None:
        rendered = ctx.render(SKIPPED_RESPONSE)
        text = rendered.text if rendered else SKIPPED_TEXT
        ctx.say(text, ResponseKind.BUTTON, response=SKIPPED_RESPONSE)
        ctx.stop = True
    return True


def _write(ctx: TurnContext, qualified: str, raw: str, was_offered: bool) -> str | None:
    entry = ctx.project.memory_entry(qualified)
    namespace = qualified.partition(".")[0]
    if entry is None:
        return f"{qualified} is not a declared memory entry"
    if entry.visibility == "private":
        return f"{qualified} is private to its skill; a button cannot set it"
    if namespace != PROJECT_NAMESPACE and ctx.stack.find(namespace) is None:
        return f"{qualified} belongs to skill '{namespace}', which is not running"
    if not was_offered:
        return f"'set:session.{qualified}={raw}' is not a button of the last response"
    try:
        value = check_write(entry, ctx.memory, payload_value(raw))
    except MemoryWriteError as exc:
        return str(exc)
    ctx.write(qualified, value)
    return None


# --- tool-supplied buttons ----------------------------------------------------------------


async def fill_source_buttons(ctx: TurnContext) -> None:
    """Run the tools that supply buttons for responses said this turn."""
    pending, ctx.pending_buttons = ctx.pending_buttons, []
    for step, name, skill_id in pending:
        found = source_tool(ctx.project, name, skill_id)
        if found is None:
            step["buttonsError"] = f"button source tool '{name}' is not defined"
            continue
        owner, tool = found
        gate = source_gate(ctx, owner, name)
        if gate is not None:
            step["buttonsError"] = gate
            step["buttons"] = []
            continue
        result, ok = await run_tool(ctx, owner, tool, {}, Source.BUTTONS)
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


def source_gate(ctx: TurnContext, skill_id: str, name: str) -> str | None:
    """Why the button source tool ``name`` may not run now (None: it may). Its
    ``tool_constraints`` apply whoever calls it (M5, boundary rule 5): not while its
    ``requires`` does not hold, and never when it requires confirmation, since a source
    runs at the end of the turn with nobody to ask."""
    constraint = tool_constraint(ctx.project, skill_id, name)
    if constraint is None:
        return None
    confirm = constraint.requires_confirmation
    if confirm is not None and confirm.enabled:
        return (
            f"button source tool '{name}' requires confirmation; it is not run to supply "
            "buttons (list the buttons, or use a tool without confirmation)"
        )
    if not tool_allowed(ctx.project, skill_id, name, ctx.memory):
        return f"button source tool '{name}' is not available now: its requires does not hold"
    return None
