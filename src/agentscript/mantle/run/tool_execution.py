"""Running one project tool in a turn: through the engine's ``ActionRunner`` (stubs first),
with a ``context`` bound to the session's memory, traced as an ``ACTION_STEP``, followed by
the constraint's ``on_success``/``on_failure`` response. Failures are results, never raised.

The ``context`` lives as long as the call (:class:`CallScope`): once the call has ended
(returned, raised or timed out) its ``memory.get``/``memory.set`` and ``send`` raise
:class:`ContextClosed` and reach nothing of the session. A synchronous tool that timed out
goes on running on its worker thread (Python cannot stop a thread), and without this it
would write memory and say things after the model was told it failed, outside the turn's
trace. A call that raised or timed out also has the memory writes it made before rolled back
(an ``EVENT_STEP write_rolled_back`` with ``hook: null``): the tool did not finish, so what
it half did is not kept. A tool that returns a result reporting failure (``error``,
``ok: false``) finished and keeps its writes (an attempts counter, say).

``context.send`` is bounded as the model's words are: a text longer than
``Limits.max_reply_chars``, or a send once the turn's tools have sent
``Limits.max_tool_sends`` messages, raises :class:`SendRefused` inside the tool (uncaught, the
call's error result) and is traced as an ``EVENT_STEP send_refused`` with the text's length
and its first characters only; nothing is said.

A result is bounded as an Agent Script action's outputs are: one call's by
``Limits.max_output_chars``, the turn's calls together (hooks and buttons included) by
``Limits.max_turn_output_chars``; past either it becomes an error result.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from agentscript.actions.registry import ActionError
from agentscript.jsonsafe import UnsafeValue, json_safe_sized
from agentscript.limits import Limits
from agentscript.mantle.memory import MemoryWriteError, check_write, resolve_name
from agentscript.mantle.model import Project, Tool
from agentscript.mantle.queries import tool_constraint
from agentscript.mantle.run.scopes import readable, refuse_access
from agentscript.mantle.run.tool_handler import (
    MemoryView,
    ToolContext,
    failed,
    tool_request,
    tool_target,
)
from agentscript.mantle.run.turn_context import TurnContext
from agentscript.trace import elapsed_ms
from agentscript.trace_steps import ResponseKind, Source, action_ran, action_step, event_step

_log = logging.getLogger(__name__)
R = TypeVar("R")


async def run_tool(
    ctx: TurnContext,
    skill_id: str,
    tool: Tool,
    arguments: dict[str, Any],
    source: Source,
    step_id: str | None = None,
) -> tuple[dict[str, Any], bool]:
    """The tool's result and whether it succeeded."""
    ctx.actions_run.append(tool.name)
    record = action_step(
        ctx.trace,
        name=tool.name,
        action=tool.callable_ref,
        target=tool_target(tool),
        node=ctx.node_name(),
        source=source,
        skill=skill_id,
        step=step_id,
        inputs=dict(arguments),
        pre_vars=ctx.snapshot(),
    )
    inputs = dict(arguments)
    scope = CallScope(tool.name)
    context: ToolContext | None = None
    if tool.takes_context:
        context = inputs["context"] = tool_context(ctx, tool, skill_id, scope)
    since = len(ctx.journal)  # where this call's memory writes begin
    started = time.perf_counter()
    error: str | None = None
    request = tool_request(tool, inputs)
    try:
        result = await ctx.runner.run(request, timeout=tool_timeout(ctx.project))
    except ActionError as exc:
        error = str(exc)
        result = {"error": error}
        if context is not None:
            context.is_cancelled = True  # a timed-out tool still running may look
    finally:
        scope.close()  # nothing the call does from now on reaches the session
    if error is not None:
        undo_failed_call(ctx, tool, since, error)
    else:
        result, error = checked_result(ctx, tool, result)
    # The same keys, filled the same way, as an Agent Script action's (engine/procedures.py).
    action_ran(record, printed=request.printed, ran_target=request.ran, stubbed=request.stubbed)
    ok = error is None and not failed(result)
    record.update(
        output=result, error=error, postVars=ctx.snapshot(), durationMs=elapsed_ms(started)
    )
    constraint = tool_constraint(ctx.project, skill_id, tool.name)
    if constraint is not None:
        ctx.utter(constraint.on_success if ok else constraint.on_failure, ResponseKind.UTTER)
    return result, ok


def checked_result(ctx: TurnContext, tool: Tool, result: Any) -> tuple[Any, str | None]:
    """``result`` as plain JSON within ``Limits.max_output_chars`` and what is left of the
    turn's ``Limits.max_turn_output_chars`` (then counted against it), or an error result and
    its message. Hooks and buttons run as tools, so they spend the same budget."""
    bound, bounded_by = ctx.limits.output_bound(ctx.output_chars)
    try:
        clean, used = json_safe_sized(result, max_chars=bound)
    except UnsafeValue as exc:
        error = (
            f"tool '{tool.name}' returned a result larger than {bounded_by}"
            if exc.too_large
            else f"tool '{tool.name}' returned a result that is not JSON: {exc}"
        )
        return {"error": error}, error
    ctx.output_chars += used
    return clean, None


def undo_failed_call(ctx: TurnContext, tool: Tool, since: int, error: str) -> None:
    """Roll back what a call that raised or timed out wrote (journal entries since
    ``since``, each entry's write turn included). Traced as ``write_rolled_back`` when there
    was something to undo; post-write hooks then see no write of it."""
    # hooks imports this module (hooks run as tools), so its rollback is imported here.
    from agentscript.mantle.run.hooks import rollback

    undone = rollback(ctx, since)
    if undone:
        event_step(
            ctx.trace,
            event="write_rolled_back",
            node=ctx.node_name(),
            tool=tool.name,
            hook=None,
            keys=undone,
            error=error,
        )


class ContextClosed(RuntimeError):
    """A tool used its ``context`` after its call ended (it timed out and went on running,
    or handed the context to a thread or task that outlived the call)."""


class CallScope:
    """The lifetime of one call's ``context``: open while :func:`run_tool` waits for the
    call, closed when the call ends. A closed scope refuses every operation with
    :class:`ContextClosed` (logged once per call, since a worker thread's exception after
    its timeout is dropped). The lock makes closing atomic with an operation running on the
    tool's thread: once :meth:`close` returns, none is in progress and none starts."""

    def __init__(self, tool: str) -> None:
        self.tool = tool
        self._lock = threading.Lock()
        self._open = True
        self._reported = False

    def close(self) -> None:
        with self._lock:
            self._open = False

    def run(self, what: str, operation: Callable[[], R]) -> R:
        with self._lock:
            if self._open:
                return operation()
            if not self._reported:
                self._reported = True
                _log.warning(
                    "tool '%s' used context.%s after its call ended (it timed out or "
                    "outlived its call); refused, nothing reached the session",
                    self.tool,
                    what,
                )
        raise ContextClosed(
            f"context.{what} of tool '{self.tool}' was used after its call ended (it timed "
            "out or outlived its call): nothing reaches the session any more"
        )


class SendRefused(RuntimeError):
    """A ``context.send`` past a bound of :class:`~agentscript.limits.Limits`, raised inside
    the tool: nothing was said. ``limit`` names the field (``max_reply_chars``: the text is
    longer than a model reply may be; ``max_tool_sends``: the turn's tools already said that
    many messages). A tool may catch it; uncaught, it is the call's error result."""

    def __init__(self, limit: str, value: int, message: str) -> None:
        super().__init__(f"{message} (Limits.{limit} = {value}); nothing was sent")
        self.limit = limit
        self.value = value


# Characters of a refused send's text the trace keeps (an LLM_STEP keeps as many of a reply
# that was too long): enough to tell which send it was.
PREVIEW_CHARS = 200


def send_refusal(limits: Limits, sent: int, tool: str, text: str) -> SendRefused | None:
    """Why ``context.send(text)`` of ``tool`` is refused, after ``sent`` sends this turn (None:
    it is not). Each send is bounded as a model reply is, and their number per turn, so a tool
    cannot grow the reply, the history and the trace without end."""
    if len(text) > limits.max_reply_chars:
        return SendRefused(
            "max_reply_chars",
            limits.max_reply_chars,
            f"context.send of tool '{tool}' was refused: its text is {len(text)} characters, "
            f"longer than a reply may be",
        )
    if sent >= limits.max_tool_sends:
        return SendRefused(
            "max_tool_sends",
            limits.max_tool_sends,
            f"context.send of tool '{tool}' was refused: the turn's tools already sent "
            f"{sent} messages",
        )
    return None


DEFAULT_TOOL_TIMEOUT = 10.0  # seconds: Mantle's documented default for ``tool_timeout``


def tool_timeout(project: Project) -> float:
    """``tool_timeout`` of agent.yml, else the documented 10 seconds."""
    configured = project.agent.tool_timeout
    return DEFAULT_TOOL_TIMEOUT if configured is None else configured


def tool_context(ctx: TurnContext, tool: Tool, skill_id: str, scope: CallScope) -> ToolContext:
    """``context``: bare names look in the tool's skill, the active skill, then ``project``;
    every operation goes through ``scope`` (refused once the call has ended)."""
    namespaces = [ns for ns in (tool.owner, skill_id) if ns]
    reader = tool.owner or skill_id  # a shared tool acts for the active skill

    def read(name: str) -> Any:
        entry = resolve_name(ctx.project, name, namespaces)
        if entry is None:
            return None
        if not readable(entry, reader):
            refuse_access(
                ctx.trace,
                entry.qualified_name,
                reader,
                "read",
                "tool",
                node=ctx.node_name(),
                tool=tool.name,
            )
            return None
        return ctx.memory.get(entry.qualified_name)

    def write(name: str, value: Any) -> None:
        entry = resolve_name(ctx.project, name, namespaces)
        if entry is None:
            raise MemoryWriteError(f"'{name}' is not a declared memory entry")
        if not readable(entry, reader):
            raise MemoryWriteError(
                refuse_access(
                    ctx.trace,
                    entry.qualified_name,
                    reader,
                    "write",
                    "tool",
                    node=ctx.node_name(),
                    tool=tool.name,
                )
            )
        ctx.write(entry.qualified_name, check_write(entry, ctx.memory, value))

    def send(text: str) -> None:
        if not text:
            return  # nothing is said (TurnContext.say), so nothing is counted
        refusal = send_refusal(ctx.limits, ctx.tool_sends, tool.name, text)
        if refusal is not None:
            event_step(
                ctx.trace,
                event="send_refused",
                node=ctx.node_name(),
                tool=tool.name,
                limit=refusal.limit,
                chars=len(text),
                preview=text[:PREVIEW_CHARS] + ("…" if len(text) > PREVIEW_CHARS else ""),
                error=str(refusal),
            )
            raise refusal
        ctx.tool_sends += 1
        ctx.say(text, ResponseKind.TOOL)

    return ToolContext(
        MemoryView(
            lambda name: scope.run("memory.get", lambda: read(name)),
            lambda name, value: scope.run("memory.set", lambda: write(name, value)),
        ),
        lambda text: scope.run("send", lambda: send(text)),
    )
