"""The trace steps of both formats, built by one set of typed builders.

Each step type has one builder, and every builder writes the same keys every time (a field
that does not apply is ``null``), so a step type has the same shape whichever format, node or
path produced it: a reader of ``RESPONSE_STEP`` finds ``text``, ``node``, ``kind`` and
``response`` in an Agent Script trace and in a Mantle one. Builders return the step, still in
the trace, so the caller can fill in what it learns later (``output``, ``postVars``).

The closed vocabularies of the trace are ``StrEnum``s (step types, sources, response kinds,
stop reasons); the steps hold their plain string values, so the JSON output is unchanged.

Contract: builders only record; they never read state, raise, or decide anything.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from agentscript.redaction import shown_target
from agentscript.trace import TurnTrace

Step = dict[str, Any]


def _add(trace: TurnTrace, step_type: StepType, **fields: Any) -> Step:
    """Append the step with every vocabulary member as its plain string: traces are plain
    JSON data, and Python readers see ``'llm'``, not ``<Source.LLM: 'llm'>``. Only the fields
    that hold one are looked at (this runs for every step of every turn)."""
    step: Step = {"type": step_type._value_, **fields}
    for key in _VOCABULARY_FIELDS:
        value = step.get(key)
        if value is not None and type(value) is not str:
            step[key] = str(value)  # a StrEnum's str() is its value
    return trace.add(step)


def _plain(value: Any) -> Any:
    """A vocabulary member as its plain string (None stays None)."""
    return value if value is None or type(value) is str else str(value)


# The builders of the steps every turn records (node, resolution, model call, action,
# transition, response, hook) write their dict in one literal instead of going through
# ``_add``'s keyword dicts: about 5 % of a turn (issue 10). Same keys, same order.


# The builder parameters typed as a vocabulary (Source, ResponseKind, NotOffered);
# tests/kernel/test_step_shapes.py checks every step of the engine and Mantle suites.
_VOCABULARY_FIELDS = ("source", "kind", "via", "cause")


class StepType(StrEnum):
    NODE_ENTER = "NODE_ENTER"
    HOOK_STEP = "HOOK_STEP"
    RESOLUTION_STEP = "RESOLUTION_STEP"
    LLM_STEP = "LLM_STEP"
    ACTION_STEP = "ACTION_STEP"
    TRANSITION_STEP = "TRANSITION_STEP"
    REFUSED_STEP = "REFUSED_STEP"
    RESPONSE_STEP = "RESPONSE_STEP"
    ERROR_STEP = "ERROR_STEP"
    EVENT_STEP = "EVENT_STEP"
    SKILL_STEP = "SKILL_STEP"  # Mantle: a skill activated, completed, interrupted, ...
    BLOCK_STEP = "BLOCK_STEP"  # Mantle: an ordered block entered, advanced, completed, ...
    BUDGET_STEP = "BUDGET_STEP"  # a budget cap stopped an LLM call (engine/budgets.py)
    KNOWLEDGE_STEP = "KNOWLEDGE_STEP"  # Mantle: a search_knowledge query and its passages


class Source(StrEnum):
    """Who asked for an action or a refused call."""

    LLM = "llm"  # the model called a tool
    DETERMINISTIC = "deterministic"  # a procedure, hook or block step ran it
    STEP = "step"  # Mantle: an execute_tool block step (held for confirmation)
    USER = "user"  # the user answered a confirmation without the model
    BUTTON = "button"  # Mantle: the user tapped a button with a set: payload
    BUTTONS = "buttons"  # Mantle: a tool run to supply a response's buttons
    HOOK = "hook"  # Mantle: a post-write hook (run_after_setting_<entry>)
    MEMORY = "memory"  # Mantle: a read or write refused by a private memory scope


class ResponseKind(StrEnum):
    """Where a message said to the user comes from (``RESPONSE_STEP.kind``)."""

    LLM = "llm"  # the model's text answer
    ERROR = "error"  # the turn failed: the agent's error message
    ESCALATION = "escalation"  # the channel's escalation message
    CONFIRMATION = "confirmation"  # a yes/no question before a held call
    DENIAL = "denial"  # Mantle: said when the user declines a held call
    UTTER = "utter"  # Mantle: a named response (`utter:`, on_success/on_failure)
    ACTION = "action"  # Mantle: an `action:` block step's response
    TOOL = "tool"  # Mantle: a tool's context.send(...)
    COLLECT = "collect"  # Mantle: a collect step's question, spoken by the framework
    BUTTON = "button"  # Mantle: said when a tapped set: payload cannot be applied
    LIFECYCLE = "lifecycle"  # Mantle: a lifecycle skill's response (resume offer, ...)


class StopReason(StrEnum):
    """Why a tool call ends the turn."""

    ESCALATE = "escalate"
    END_SESSION = "end_session"
    CONFIRMATION = "confirmation"


def response_step(
    trace: TurnTrace,
    *,
    text: str,
    node: str | None,
    kind: ResponseKind,
    response: str | None = None,
    skill: str | None = None,
    block: str | None = None,
    step: str | None = None,
    buttons: list[dict[str, Any]] | None = None,
    metadata: dict[str, Any] | None = None,
) -> Step:
    """A message said to the user; ``response`` names the Mantle response it came from,
    ``skill``/``block``/``step`` the Mantle skill (and collect step) that said it, ``buttons``
    (``{title, payload}``) and ``metadata`` what the response carries for the channel.
    A response whose buttons a tool supplies gets them (or ``buttonsError``) at the end of
    the turn."""
    return trace.add(
        {
            "type": "RESPONSE_STEP",
            "text": text,
            "node": node,
            "kind": _plain(kind),
            "response": response,
            "skill": skill,
            "block": block,
            "step": step,
            "buttons": buttons,
            "metadata": metadata,
        }
    )


def error_step(trace: TurnTrace, *, message: str, node: str | None) -> Step:
    """Why the turn failed (or was refused)."""
    return _add(trace, StepType.ERROR_STEP, message=message, node=node)


def refused_step(
    trace: TurnTrace,
    *,
    name: str,
    reason: str,
    node: str | None,
    source: Source,
    arguments: Any = None,
    limit: str | None = None,
    skill: str | None = None,
    step: str | None = None,
    cause: str | None = None,
    access: str | None = None,
    via: str | None = None,
    reader: str | None = None,
    tool: str | None = None,
    response: str | None = None,
) -> Step:
    """A tool call not run. ``limit`` names the ``Limits`` field when a bound refused it;
    ``skill``/``step`` locate a Mantle block step that waits; ``cause`` says whether a tool the
    model was told is "not available now" was hidden or unknown (the trace keeps the truth).

    A Mantle memory scope refusal (``source: memory``, ``name`` the memory entry) also has
    ``access`` (``read``/``write``), ``via`` (``tool``/``response``), ``reader`` (the skill
    the access was for, null for project-level code) and the ``tool`` or ``response`` that
    tried it: these five keys are written together, only when ``access`` is given."""
    step_fields: dict[str, Any] = {} if cause is None else {"cause": cause}
    if access is not None:
        step_fields.update(access=access, via=via, reader=reader, tool=tool, response=response)
    return _add(
        trace,
        StepType.REFUSED_STEP,
        name=name,
        reason=reason,
        node=node,
        source=source,
        arguments=arguments,
        limit=limit,
        skill=skill,
        step=step,
        **step_fields,
    )


def action_step(
    trace: TurnTrace,
    *,
    name: str,
    action: str | None,
    node: str | None,
    source: Source,
    inputs: dict[str, Any],
    pre_vars: dict[str, Any],
    target: str | None = None,
    skill: str | None = None,
    step: str | None = None,
    printed: dict[str, str] | None = None,
) -> Step:
    """An action (or variable write) starting; the caller fills ``output``, ``error``,
    ``postVars`` and ``durationMs`` when it ends, and ``printed`` and ``ranTarget`` with
    :func:`action_ran`. A URL ``target`` is recorded without its user, password and query
    string, where credentials travel."""
    return trace.add(
        {
            "type": "ACTION_STEP",
            "name": name,
            "action": action,
            "target": _shown(target),
            "node": node,
            "source": _plain(source),
            "skill": skill,
            "step": step,
            "input": inputs,
            "output": None,
            "error": None,
            "preVars": pre_vars,
            "postVars": None,
            "durationMs": None,
            "printed": printed,
            "ranTarget": None,
            "stubbed": False,
        }
    )


def action_ran(
    step: Step,
    *,
    printed: dict[str, str] | None,
    ran_target: str | None,
    stubbed: bool = False,
) -> None:
    """What the action runner learned running the call of ACTION_STEP ``step``, whether it
    succeeded or failed: ``printed``, what the action wrote to stdout/stderr
    (``actions/capture.py``; ``null`` when it wrote nothing); ``ranTarget``, the
    ``python://`` target ``[actions.targets]`` ran instead of ``target`` (which stays the
    agent's own; ``null`` when a stub, a callable or the target itself ran), shown as
    ``target`` is; and ``stubbed``, whether a stub (a conversation file's or a test's)
    answered instead of any code."""
    step["printed"] = printed
    step["ranTarget"] = _shown(ran_target)
    step["stubbed"] = stubbed


def _shown(target: str | None) -> str | None:
    """A target as a step records it (:func:`agentscript.redaction.shown_target`)."""
    return shown_target(target) if target else target


def resolution_step(
    trace: TurnTrace,
    *,
    node: str,
    iteration: int,
    instructions: str,
    tools: list[str],
    hidden_tools: list[str],
    pre_vars: dict[str, Any],
    post_vars: dict[str, Any],
    duration_ms: float,
    warnings: list[str] | None = None,
    transition: str | None = None,
    discarded: str | None = None,
    instruction_lines: list[dict[str, Any]] | None = None,
) -> Step:
    """The prompt and tools of one model call. ``transition`` and ``discarded`` are present
    only when the resolution transitioned instead (Agent Script, S4): readers test for the
    key, so it is never written as null. ``instruction_lines`` (Agent Script; null in Mantle)
    are the pieces of the instructions (or of ``discarded``), each ``{text, line, branches}``
    with the ``if`` branches that produced it, outermost first (docs/trace.md)."""
    step = trace.add(
        {
            "type": "RESOLUTION_STEP",
            "node": node,
            "iteration": iteration,
            "instructions": instructions,
            "tools": tools,
            "hiddenTools": hidden_tools,
            "preVars": pre_vars,
            "postVars": post_vars,
            "durationMs": duration_ms,
            "warnings": list(warnings or []),
            "instructionLines": instruction_lines,
        }
    )
    if transition is not None:
        step.update(transition=transition, discarded=discarded or "")
    return step


def llm_step(
    trace: TurnTrace,
    *,
    node: str | None,
    iteration: int,
    inputs: dict[str, Any],
    messages_from: int | None = None,
    messages_dropped: int = 0,
    request_model: str | None = None,
    model_events: list[dict[str, Any]] | None = None,
) -> Step:
    """One model call starting; :func:`~agentscript.engine.llm.call_model` fills the rest.

    ``messages_from``: ``inputs["messages"]`` holds only the messages from that position of the
    call's history on (the earlier ones were in the session's previous call, ``trace_inputs.py``);
    ``None`` when they are complete. Recorded as ``input.messagesFrom``. ``messages_dropped``:
    where in the previous call's messages those earlier ones start (its oldest ones were
    trimmed since); recorded as ``input.messagesDropped`` only when not 0.

    ``request_model`` is the model asked (``model`` is added when the answer names the one
    that answered, e.g. a fallback); ``modelEvents`` lists the retries and fallbacks on the
    way to the answer (``[]`` when none; ``call_model`` fills it when the call ends).
    """
    given: dict[str, Any] = {}
    for key, value in inputs.items():  # messagesFrom just before the messages it locates
        if key == "messages":
            _locate(given, messages_from, messages_dropped)
        given[key] = value
    if "messagesFrom" not in given:
        _locate(given, messages_from, messages_dropped)
    return trace.add(
        {
            "type": "LLM_STEP",
            "node": node,
            "iteration": iteration,
            "input": given,
            "output": None,
            "requestModel": request_model,
            "modelEvents": list(model_events or []),
        }
    )


def _locate(given: dict[str, Any], messages_from: int | None, messages_dropped: int) -> None:
    """``messagesDropped`` (only when not 0) and ``messagesFrom``, in that order."""
    if messages_dropped and messages_from:
        given["messagesDropped"] = messages_dropped
    given["messagesFrom"] = messages_from


def budget_step(
    trace: TurnTrace,
    *,
    node: str | None,
    iteration: int,
    action: str,
    scope: str,
    cap: str,
    limit: float,
    would_reach: float,
) -> Step:
    """A budget cap stopped the next LLM call: ``scope`` ``turn``/``session``, ``cap`` the
    capped figure (``llm_calls``, ``input_tokens``, ``output_tokens``, ``cost``), ``limit``
    its cap, ``wouldReach`` the total the call would have reached (estimated for tokens and
    cost), ``action`` what the turn does (``error`` or ``escalate``)."""
    return _add(
        trace,
        StepType.BUDGET_STEP,
        node=node,
        iteration=iteration,
        action=action,
        scope=scope,
        cap=cap,
        limit=limit,
        wouldReach=would_reach,
    )


def confirmation_requested(
    trace: TurnTrace,
    *,
    node: str | None,
    tool: str,
    arguments: dict[str, Any],
    source: Source,
    skill: str | None = None,
) -> Step:
    return _add(
        trace,
        StepType.EVENT_STEP,
        event="confirmation_requested",
        node=node,
        skill=skill,
        tool=tool,
        arguments=arguments,
        source=source,
    )


def confirmation_resolved(
    trace: TurnTrace,
    *,
    node: str | None,
    tool: str,
    confirmed: bool,
    via: Source,
    skill: str | None = None,
) -> Step:
    return _add(
        trace,
        StepType.EVENT_STEP,
        event="confirmation_resolved",
        node=node,
        skill=skill,
        tool=tool,
        confirmed=confirmed,
        via=via,
    )


def event_step(
    trace: TurnTrace, *, event: str, node: str | None, tool: str | None, **fields: Any
) -> Step:
    """Another event (escalation, end of session, delegation) with its own ``fields``."""
    return _add(trace, StepType.EVENT_STEP, event=event, node=node, tool=tool, **fields)


def node_enter(trace: TurnTrace, *, node: str, reason: str) -> Step:
    return trace.add({"type": "NODE_ENTER", "node": node, "reason": reason})


def hook_step(trace: TurnTrace, *, node: str, hook: str, pre_vars: dict[str, Any]) -> Step:
    """A hook starting; ``postVars`` and ``durationMs`` come when it ends, ``transition``
    only when it transitions."""
    return trace.add(
        {
            "type": "HOOK_STEP",
            "node": node,
            "hook": hook,
            "preVars": pre_vars,
            "postVars": None,
            "durationMs": None,
        }
    )


def transition_step(trace: TurnTrace, *, source: str, target: str, via: str) -> Step:
    return trace.add({"type": "TRANSITION_STEP", "from": source, "to": target, "via": _plain(via)})


def skill_event(trace: TurnTrace, *, event: str, skill: str, **fields: Any) -> Step:
    return _add(trace, StepType.SKILL_STEP, event=event, skill=skill, **fields)


def block_event(
    trace: TurnTrace, *, event: str, skill: str, block: str, step: str | None, **fields: Any
) -> Step:
    return _add(
        trace, StepType.BLOCK_STEP, event=event, skill=skill, block=block, step=step, **fields
    )


def knowledge_step(
    trace: TurnTrace, *, node: str | None, query: str, passages: list[dict[str, Any]]
) -> Step:
    """A Mantle ``search_knowledge`` call: the query and the ranked passages returned."""
    return _add(trace, StepType.KNOWLEDGE_STEP, node=node, query=query, passages=passages)
