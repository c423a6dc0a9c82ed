"""Agent Script calls that wait for the user's yes/no (``require_user_confirmation``, S13).

:func:`hold_for_confirmation` keeps the call in the session state and asks the question (the
turn ends); next turn :func:`resolve_confirmation` reads the answer with the kernel's
:func:`~.kernel.read_yes_no` rule (only a plain yes confirms), runs the call on yes if its
``available when`` still holds (S5: refused as a hidden tool otherwise), reports a refusal on
no, and says where the turn goes on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentscript.engine.kernel import TURN_ENDING, ToolCallWindow, read_yes_no
from agentscript.engine.procedures import TransitionSignal
from agentscript.engine.program import ProgramNode, ProgramTool
from agentscript.engine.state import PendingConfirmation
from agentscript.models.base import Message, ToolCall
from agentscript.trace_steps import (
    Source,
    StopReason,
    confirmation_requested,
    confirmation_resolved,
)

if TYPE_CHECKING:
    from agentscript.engine.tool_calls import ToolOutcome
    from agentscript.engine.turn import TurnRunner


def hold_for_confirmation(
    turn: TurnRunner,
    tool: ProgramTool,
    node: ProgramNode,
    call: ToolCall,
    arguments: dict[str, Any],
) -> ToolOutcome:
    assert tool.action is not None
    turn.state.pending_confirmation = PendingConfirmation(node.name, tool.name, call.id, arguments)
    label = tool.action.label or humanize_action(tool.action.name)
    question = f"Before I run {label}, please confirm: yes or no?"
    confirmation_requested(
        turn.trace, node=node.name, tool=tool.name, arguments=arguments, source=Source.LLM
    )
    turn.speech.say(question)
    turn.result.confirmation = question
    return {"status": "waiting for the user to confirm"}, None, StopReason.CONFIRMATION


async def resolve_confirmation(
    turn: TurnRunner, pending: PendingConfirmation
) -> tuple[str, str | None]:
    """The user's answer to a held call: run it on yes (if its ``available when`` still
    holds, S5), report a refusal on no. Returns the node the turn goes on in and the reason to
    enter it, None when it goes on in the asking node, which this enters before the call runs
    (the node that ran the action is on the turn's path)."""
    state = turn.state
    state.pending_confirmation = None
    confirmed = read_yes_no(turn.user_input) is True
    node = turn.program.nodes.get(pending.node)
    tool = node.tools.get(pending.tool) if node else None
    confirmation_resolved(
        turn.trace, node=pending.node, tool=pending.tool, confirmed=confirmed, via=Source.USER
    )
    state.history.append(Message("user", turn.user_input))
    if node is None or tool is None:  # a redeploy removed it: nothing to answer
        return turn.program.start, "turn start (router)"
    turn.enter(node.name, "confirmation resolved")
    call = ToolCall(f"{pending.call_id}-confirmed", tool.name, dict(pending.arguments))
    window = ToolCallWindow(state.history)
    window.open("", [call])
    tool_calls = turn.tool_calls
    try:
        result, transition = await _answer(turn, tool, node, call, confirmed)
        window.answer(call, result)
    except TURN_ENDING as exc:
        window.answer(call, tool_calls.cut_short_answer(exc))
        raise
    finally:
        window.close()
    if transition is not None:
        turn.follow(node.name, TransitionSignal(transition, f"tool {tool.name}"))
        return transition, f"transition from {node.name}"
    return node.name, None


async def _answer(
    turn: TurnRunner, tool: ProgramTool, node: ProgramNode, call: ToolCall, confirmed: bool
) -> tuple[dict[str, Any], str | None]:
    """What the held call gives the model, and the transition its callback asked for."""
    tool_calls = turn.tool_calls
    if not confirmed:
        return {"status": "the user did not confirm; the action was not run"}, None
    # The gate was judged when the model called; the variables may have changed since (the
    # host's restore) and so may the gate (a redeploy): a "yes" does not reopen it (S5).
    closed = tool_calls.gate_closed(tool, node, since="since the call was held")
    if closed is not None:
        return tool_calls.refuse_hidden(node, call, closed), None
    result, transition, _ = await tool_calls.run_tool_action(tool, node, dict(call.arguments or {}))
    return result, transition


def humanize_action(name: str) -> str:
    return name.replace("_", " ")
