"""Agent Script calls that wait for the user's yes/no (``require_user_confirmation``, S13).

:func:`hold_for_confirmation` keeps the call in the session state and asks the question (the
turn ends); next turn :func:`resolve_confirmation` reads the answer with the kernel's
:func:`~.kernel.read_yes_no` rule (only a plain yes confirms), runs the call on yes, reports a
refusal on no, and says where the turn goes on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentscript.engine.kernel import ToolCallWindow, read_yes_no
from agentscript.engine.procedures import TransitionSignal
from agentscript.engine.program import ProgramNode, ProgramTool
from agentscript.engine.state import PendingConfirmation
from agentscript.errors import TurnError
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
    turn.result.messages.append(question)
    turn.result.confirmation = question
    return {"status": "waiting for the user to confirm"}, None, StopReason.CONFIRMATION


async def resolve_confirmation(turn: TurnRunner, pending: PendingConfirmation) -> tuple[str, bool]:
    """The user's answer to a held call: run it on yes, report a refusal on no. Returns the
    node the turn goes on in and whether a transition took it there."""
    state = turn.state
    state.pending_confirmation = None
    confirmed = read_yes_no(turn.user_input) is True
    node = turn.program.nodes.get(pending.node)
    tool = node.tools.get(pending.tool) if node else None
    confirmation_resolved(
        turn.trace, node=pending.node, tool=pending.tool, confirmed=confirmed, via=Source.USER
    )
    state.history.append(Message("user", turn.user_input))
    if node is None or tool is None:
        return turn.program.start, True
    state.current_node = node.name
    call = ToolCall(f"{pending.call_id}-confirmed", tool.name, dict(pending.arguments))
    window = ToolCallWindow(state.history)
    window.open("", [call])
    cut_short = "not completed: the turn was stopped"
    try:
        if not confirmed:
            result: dict[str, Any] = {"status": "the user did not confirm; the action was not run"}
            transition = None
        else:
            try:
                result, transition, _ = await turn.tool_calls.run_tool_action(
                    tool, node, dict(pending.arguments)
                )
            except TurnError as exc:
                cut_short = f"not completed: {exc}"
                raise
        window.answer(call, result)
    finally:
        window.close(cut_short)
    if transition is not None:
        turn.follow(node.name, TransitionSignal(transition, f"tool {tool.name}"))
        return transition, True
    return node.name, False


def humanize_action(name: str) -> str:
    return name.replace("_", " ")
