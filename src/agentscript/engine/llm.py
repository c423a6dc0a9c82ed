"""One LLM call, recorded: the ``LLM_STEP`` of the trace and the turn's usage totals.

Shared by every turn runner (Agent Script nodes, Mantle skills), so each call is traced the
same way and a model failure always ends the turn the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from agentscript.engine.budgets import BudgetExceeded, BudgetMeter, active_meter
from agentscript.engine.kernel import check_answered, internal_error
from agentscript.errors import LimitReached, TurnError
from agentscript.jsonsafe import UnsafeValue, json_safe
from agentscript.limits import MAX_KEPT_ARGUMENT_DEPTH
from agentscript.models.base import (
    Message,
    Model,
    ModelError,
    ModelRequest,
    ModelResponse,
    ScriptExhausted,
    TextSink,
    ToolCall,
)
from agentscript.trace import TurnTrace, elapsed_ms
from agentscript.trace_steps import budget_step, llm_step

__all__ = ["MAX_KEPT_DEPTH", "TurnError", "bounded_call", "call_model", "distinct_ids"]


async def call_model(
    model: Model,
    request: ModelRequest,
    trace: TurnTrace,
    *,
    iteration: int,
    stream: TextSink | None = None,
    max_reply_chars: int | None = None,
    spend_call: Callable[[], None] | None = None,
) -> ModelResponse:
    """Ask ``model``; record its input, output, duration and usage; failures raise TurnError
    (their duration recorded too: the step's ``durationMs`` and ``usage.llm_ms``).

    The turn's budget meter (:mod:`agentscript.engine.budgets`), when one is active, is asked
    first: a call that would cross a cap is not made (``BudgetExceeded``, a ``BUDGET_STEP``).
    A request whose history holds a tool call without its answer is not sent either (the
    kernel's last check): providers reject it, and it would mean the engine lost track of a call.
    A reply whose text is longer than ``max_reply_chars`` (``Limits.max_reply_chars``) is a
    failure too: it is neither stored in the history nor traced in full.
    An answer with neither text nor a tool call is asked again once (:func:`_ask_again`);
    ``spend_call`` counts that second call against the turn's ``Limits.max_llm_calls`` (it
    raises LimitReached past them); without it, the empty answer fails the turn at once.
    """
    # Every Model has a name; a hand-written one without it is still recorded.
    model_name = str(getattr(model, "name", None) or type(model).__name__)
    meter = active_meter()
    if meter is not None:
        _check_budget(meter, model_name, request, trace, iteration)
    check_answered(request.messages, trace.ledger)
    messages: Sequence[Message] = request.messages
    messages_from: int | None = None
    messages_dropped = 0
    if trace.inputs is not None:  # only what was added since the session's previous call
        messages_dropped, messages_from, messages = trace.inputs.delta(messages)
    step = llm_step(
        trace,
        node=request.node,
        iteration=iteration,
        messages_from=messages_from,
        messages_dropped=messages_dropped,
        inputs={
            "system": request.system,
            "instructions": request.instructions,
            "messages": [m.to_json() for m in messages],
            "tools": [
                {"name": t.name, "description": t.description, "parameters": t.parameters}
                for t in request.tools
            ],
        },
        request_model=model_name,
    )
    if stream is not None and max_reply_chars is not None:
        stream = _bounded_sink(stream, max_reply_chars)
    started = time.perf_counter()
    try:
        response = await _answer(model, request, step, stream)
        _account(trace, meter, model_name, response)
        if response.empty():
            response = await _ask_again(
                model, model_name, request, trace, step, stream, iteration, response, spend_call
            )
    finally:
        # A call that failed, timed out (retries and their waits included) or was cancelled
        # waited on the model too: its time is the model's, not the engine's (serve's
        # /metrics splits a turn's time by usage.llm_ms, OpenTelemetry times the chat span
        # by this durationMs).
        step["durationMs"] = elapsed_ms(started)
        trace.count_llm_time(step["durationMs"])
    step["modelEvents"] = list(response.events)
    if max_reply_chars is not None and len(response.text or "") > max_reply_chars:
        error = _too_long(max_reply_chars)
        step["error"] = str(error)
        step["output"] = {"text": (response.text or "")[:200] + "…", "tool_calls": []}
        raise error
    most = max_reply_chars if max_reply_chars is not None else DEFAULT_MAX_ARGUMENT_CHARS
    response.tool_calls = distinct_ids(
        [bounded_call(call, most) for call in response.tool_calls],
        request.messages,
        taken=trace.ledger.call_ids if trace.ledger is not None else None,
    )
    step["output"] = response.to_json()
    if response.model:
        step["model"] = response.model
    return response


async def _answer(
    model: Model, request: ModelRequest, step: dict[str, Any], stream: TextSink | None
) -> ModelResponse:
    """``model``'s answer; its failures recorded on ``step`` and raised as TurnError (or
    LimitReached, when the streamed text outgrew the reply limit). An exception that is not a
    ModelError is an internal error (:func:`~.kernel.internal_error`); a cancelled call
    (``CancelledError``, not an Exception) is not caught."""
    if stream is not None:
        stream = _after_leading_space(stream)
    try:
        return await model.complete(request, stream=stream)
    except LimitReached as exc:  # the streamed text outgrew max_reply_chars
        step["error"] = str(exc)
        raise
    except ScriptExhausted as exc:
        step["error"] = str(exc)
        raise TurnError(str(exc), exhausted=True) from None
    except ModelError as exc:
        step["error"] = str(exc)
        step["modelEvents"] = list(exc.events)
        raise TurnError(f"the model failed: {exc}") from None
    except TurnError:
        raise
    except Exception as exc:  # a model, or the stream sink it feeds, raising anything else
        error = internal_error(exc)
        step["error"] = str(error)
        raise error from None


# Stop reasons that say the model ran out of tokens: asking again would end the same way.
CUT_SHORT = frozenset({"length", "max_tokens", "model_context_window_exceeded"})


async def _ask_again(
    model: Model,
    model_name: str,
    request: ModelRequest,
    trace: TurnTrace,
    step: dict[str, Any],
    stream: TextSink | None,
    iteration: int,
    first: ModelResponse,
    spend_call: Callable[[], None] | None,
) -> ModelResponse:
    """The answer to the same request asked once more, after ``first`` said nothing.

    An empty answer is seen from Claude after tool results, from reasoning models that spent
    their tokens thinking, and from content filters; a second try often speaks. The user is
    never answered with silence: a second empty answer, or a first one cut at the token
    limit (asking again would end the same way), fails the turn, naming the stop reason.
    """
    events = [*first.events, {"event": "empty_answer", "stopReason": first.stop_reason}]
    answer, asked = first, 1
    if first.stop_reason not in CUT_SHORT and spend_call is not None:
        try:
            spend_call()
        except LimitReached as exc:
            step["error"] = str(exc)
            step["modelEvents"] = events
            raise
        meter = active_meter()
        if meter is not None:
            _check_budget(meter, model_name, request, trace, iteration)
        try:
            answer = await _answer(model, request, step, stream)
        except TurnError:
            step["modelEvents"] = [*events, *step.get("modelEvents", [])]
            raise
        _account(trace, meter, model_name, answer)
        events, asked = [*events, *answer.events], 2
        if not answer.empty():
            answer.events = events
            return answer
    reason = answer.stop_reason
    if reason in CUT_SHORT:
        text = (
            f"the model failed: it ran out of tokens before it said anything (stop reason "
            f"'{reason}'); raise max_tokens in the agent's model parameters"
        )
    else:
        why = f" (stop reason '{reason}')" if reason else ""
        times = "twice" if asked == 2 else "once"
        text = f"the model failed: it answered {times} with neither text nor a tool call{why}"
    step["error"] = text
    step["output"] = answer.to_json()
    step["modelEvents"] = events
    raise TurnError(text)


def _account(
    trace: TurnTrace,
    meter: BudgetMeter | None,
    model_name: str,
    response: ModelResponse,
) -> None:
    """Count one answered call in the turn's usage and, when a budget is active, its cost
    (its time is counted by :func:`call_model`, answered or not)."""
    usage = response.usage
    input_tokens, output_tokens = (usage.input_tokens, usage.output_tokens) if usage else (0, 0)
    trace.count_llm_call(input_tokens, output_tokens)
    if meter is not None:
        # Charged at the price of the model that answered: a fallback's, when it stood in.
        meter.record(response.answered_by or model_name, input_tokens, output_tokens)


def _check_budget(
    meter: BudgetMeter, model_name: str, request: ModelRequest, trace: TurnTrace, iteration: int
) -> None:
    """BudgetExceeded (after a ``BUDGET_STEP``) when the next call would cross a cap."""
    hit = meter.check(model_name, request)
    if hit is not None:
        budget_step(
            trace,
            node=request.node,
            iteration=iteration,
            action=meter.budget.on_exceed.value,
            scope=hit.scope,
            cap=hit.cap,
            limit=hit.limit,
            would_reach=hit.would_reach,
        )
        raise BudgetExceeded(hit)


def _after_leading_space(sink: TextSink) -> TextSink:
    """``sink``, fed nothing until the answer's text has more than white space: an answer of
    white space only counts as empty (providers drop it) and is asked again, and the client
    must not have been shown it. Once real text comes, the held space goes with it."""
    held: list[str] = []
    speaking = False

    def feed(piece: str) -> None:
        nonlocal speaking
        if not speaking:
            held.append(piece)
            if not piece.strip():
                return
            speaking = True
            piece = "".join(held)
            held.clear()
        sink(piece)

    return feed


def _bounded_sink(sink: TextSink, most: int) -> TextSink:
    """``sink`` until the text fed to it passes ``most`` characters, then LimitReached: the
    stream ends there, before a hostile server's reply reaches the client or fills memory
    (a whole reply is held to the same bound once it arrives)."""
    fed = 0

    def bounded(piece: str) -> None:
        nonlocal fed
        fed += len(piece)
        if fed > most:
            raise _too_long(most)
        sink(piece)

    return bounded


def _too_long(most: int) -> LimitReached:
    return LimitReached(
        "max_reply_chars",
        most,
        f"the model's reply is longer than {most} characters; it was dropped",
    )


# Arguments nested deeper than this are dropped before anything records them: json.dumps
# (traces, saved sessions, the next provider request) overflows the stack near 1000 levels,
# which a provider's JSON parser still accepts. The turn runners refuse far shallower ones.
MAX_KEPT_DEPTH = MAX_KEPT_ARGUMENT_DEPTH


# Without a reply cap, arguments larger than this are dropped before they are kept.
DEFAULT_MAX_ARGUMENT_CHARS = 10_000_000


def distinct_ids(
    calls: list[ToolCall], history: Sequence[Message], *, taken: set[str] | None = None
) -> list[ToolCall]:
    """``calls`` with ids that are set and unique in the history: a model that sends an empty
    or repeated id (seen from hostile-model fuzzing) would otherwise get one answer for two
    calls, and the next request would be refused for an unanswered call."""
    if not calls:
        return calls  # a text reply: nothing to number (and no history to scan)
    # ``known``: the ids of the history's calls, from the session's ledger when it has them
    # (read, never changed: the ids given out here join it with their message).
    known = taken if taken is not None else {c.id for m in history for c in m.tool_calls}
    given: set[str] = set()  # ids handed out in this reply

    def free(call_id: str) -> bool:
        return call_id not in known and call_id not in given

    keep: set[int] = set()
    for index, call in enumerate(calls):  # ids already fine keep their value, first come first
        if call.id and free(call.id):
            given.add(call.id)
            keep.add(index)
    out: list[ToolCall] = []
    for index, call in enumerate(calls):
        if index in keep:
            out.append(call)
            continue
        number = 1
        while not free(f"{call.id or 'call'}_{number}"):
            number += 1
        new_id = f"{call.id or 'call'}_{number}"
        given.add(new_id)
        out.append(replace(call, id=new_id))
    return out


def bounded_call(call: ToolCall, max_chars: int = DEFAULT_MAX_ARGUMENT_CHARS) -> ToolCall:
    """``call``, or a copy without arguments when they are not a JSON object of sane depth
    and size: NaN, Infinity or anything else JSON has no form for would otherwise reach the
    history, the trace and saved sessions."""
    arguments = call.arguments
    if arguments is None:
        return call
    if not isinstance(arguments, dict):
        raw = call.raw_arguments or f"a {type(arguments).__name__}"
        return ToolCall(call.id, call.name, None, raw_arguments=raw[:200])
    try:
        # One bounded walk checks depth, size and JSON-ness (deep nesting included: it never
        # recurses past MAX_KEPT_DEPTH).
        json_safe(arguments, max_chars=max_chars, max_depth=MAX_KEPT_DEPTH)
    except UnsafeValue as exc:
        if exc.problem == "depth":
            note = f"(arguments nested more than {MAX_KEPT_DEPTH} levels deep; dropped)"
        elif exc.problem == "integer":
            # no trace or saved session could hold it
            note = "(arguments hold a number too long to print; dropped)"
        else:
            note = f"(arguments dropped: {exc})"
        return ToolCall(call.id, call.name, None, raw_arguments=note)
    return call
