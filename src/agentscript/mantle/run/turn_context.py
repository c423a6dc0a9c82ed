"""The state one Mantle turn works on, shared by the modules that run the turn.

The turn loop (:mod:`.orchestrator`), block stepping (:mod:`.blocks`), skill transitions
(:mod:`.transitions`), tool runs (:mod:`.tool_execution`), confirmation (:mod:`.confirmation`) and
the model's tool calls (:mod:`.call_dispatch`, :mod:`.skill_control`) all read and change the
same session state, trace and reply; :class:`TurnContext` holds them with the few operations
every one of those modules needs (say something, write memory, record a tool exchange).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentscript.actions.registry import ActionRunner
from agentscript.engine.kernel import ToolCallWindow, TurnResult
from agentscript.engine.speech import Speech
from agentscript.engine.state import SessionState
from agentscript.jsonsafe import UnsafeValue, json_safe
from agentscript.limits import Limits
from agentscript.mantle.memory import MemoryWriteError
from agentscript.mantle.model import Project
from agentscript.mantle.run.delivery import Rendered, render
from agentscript.mantle.run.stack import SkillStack
from agentscript.models.base import Message, Model, ToolCall
from agentscript.trace import TurnTrace
from agentscript.trace_steps import ResponseKind, Source, refused_step, response_step


@dataclass(eq=False)
class TurnContext:
    """Session state, trace and reply of the running turn."""

    project: Project
    state: SessionState
    runner: ActionRunner
    trace: TurnTrace
    text: str
    model: Model
    limits: Limits
    stream: Callable[[str], None] | None = None
    result: TurnResult = field(default_factory=TurnResult)
    actions_run: list[str] = field(default_factory=list)
    displayable: list[dict[str, Any]] = field(default_factory=list)
    llm_calls: int = 0
    steps_run: int = 0
    tool_sends: int = 0  # context.send messages said this turn (Limits.max_tool_sends)
    output_chars: int = 0  # characters of the turn's kept tool results (max_turn_output_chars)
    stop: bool = False  # the turn ends now (a confirmation question or a denial was said)
    # Text the model sent with the tool calls being run, not said (S13): said before the
    # engine's words if they end the turn (a confirmation question, a denial, a collect
    # question), dropped when the model is called again.
    unsaid: str | None = None
    # The skill active when the next model call was resolved (None: routing), or "" before
    # any resolution this turn: what the model's calls of that answer were made against.
    resolved_skill: str | None = ""
    held_reported: set[str] = field(default_factory=set)  # steps whose wait was traced
    engine_calls: int = 0  # numbers the ids of tool calls the engine makes on its own
    searched: bool = False  # search_knowledge ran this turn: skill tools are withheld
    # Every write of the turn as (key, previous value, the turn it was last written in or
    # None): a rejected or failed write rolls back from it, its write turn included (an
    # ``ask_before_filling`` step must not count an undone write as an answer).
    journal: list[tuple[str, Any, int | None]] = field(default_factory=list)
    # Responses whose buttons a tool supplies: (RESPONSE_STEP, tool name, skill), filled at
    # the end of the turn.
    pending_buttons: list[tuple[dict[str, Any], str, str | None]] = field(default_factory=list)
    # The tool calls waiting for their answers: providers require the answers right after
    # the calls, so what is said meanwhile joins the history once the calls are answered.
    window: ToolCallWindow | None = None

    def __post_init__(self) -> None:
        self.stack = SkillStack(self.state.extra)
        self.speech = Speech(self.result, self.stream)  # every message of the reply goes through it

    @property
    def memory(self) -> dict[str, Any]:
        return self.state.variables

    def snapshot(self) -> dict[str, Any]:
        return dict(self.state.variables)

    def fingerprint(self) -> str:
        """Memory as one comparable string (a held step runs again once this changes)."""
        return json.dumps(self.memory, sort_keys=True, default=repr)

    def node_name(self) -> str:
        frame = self.stack.active()
        return frame["skill"] if frame else "router"

    def write(self, key: str, value: Any) -> None:
        """Store a memory value; one that is not JSON-safe or is larger than
        ``Limits.max_variable_chars`` is a MemoryWriteError. Every write is journaled with the
        previous value (post-write hooks roll back from it)."""
        try:
            value = json_safe(value, max_chars=self.limits.max_variable_chars)
        except UnsafeValue as exc:
            raise MemoryWriteError(
                f"{key}: cannot store this value ({exc.reason}; Limits.max_variable_chars)"
            ) from None
        self.journal.append((key, self.memory.get(key), self.stack.data["written"].get(key)))
        self.memory[key] = value
        self.stack.note_write(key, self.state.turn)

    # --- messages -------------------------------------------------------------------

    def say(
        self,
        text: str | None,
        kind: ResponseKind,
        *,
        response: str | None = None,
        skill: str | None = None,
        block: str | None = None,
        step: str | None = None,
        buttons: list[dict[str, Any]] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any] | None:
        """Deliver a message verbatim (responses, confirmations, ``context.send``); returns
        its ``RESPONSE_STEP`` (None when there was nothing to say)."""
        if not text:
            return None
        self.speech.say(text)
        if self.window is None:
            self.state.history.append(Message("assistant", text))
        else:
            self.window.say(text)
        return response_step(
            self.trace,
            text=text,
            node=self.node_name(),
            kind=kind,
            response=response,
            skill=skill,
            block=block,
            step=step,
            buttons=buttons,
            metadata=metadata,
        )

    def render(self, name: str | None) -> Rendered | None:
        """A response as it would be delivered now (scoped to its reader, see
        :mod:`.delivery`)."""
        frame = self.stack.active()
        active = frame["skill"] if frame else None
        return render(self.project, self.trace, self.memory, name, active)

    def utter(
        self,
        name: str | None,
        kind: ResponseKind,
        *,
        skill: str | None = None,
        block: str | None = None,
        step: str | None = None,
        ends_turn: bool = False,
    ) -> None:
        """Say a response (``ends_turn``: words of the engine that end the turn, which the
        model's unsaid text precedes)."""
        rendered = self.render(name)
        if rendered is None:
            return
        if ends_turn and rendered.text:
            self.say_unsaid()
        if rendered.buttons:
            self.result.buttons.extend(rendered.buttons)
        said = self.say(
            rendered.text,
            kind,
            response=name,
            skill=skill,
            block=block,
            step=step,
            buttons=rendered.buttons or None,
            metadata=rendered.metadata or None,
        )
        if said is not None and rendered.variant.buttons_source:
            frame = self.stack.active()
            source = rendered.variant.buttons_source
            self.pending_buttons.append((said, source, frame["skill"] if frame else None))

    def say_unsaid(self) -> None:
        """Say the model's text that came with its calls, once, before the engine's words that
        end the turn. Not added to the history again: it is the calls' message there."""
        text, self.unsaid = self.unsaid, None
        if text:
            self.speech.say(text, streamed=True)
            response_step(self.trace, text=text, node=self.node_name(), kind=ResponseKind.LLM)

    # --- the history the model reads ------------------------------------------------

    def open_calls(self, text: str, calls: list[ToolCall]) -> None:
        """The assistant message making ``calls``; each must then get its :meth:`answer`
        before :meth:`close_calls`."""
        self.window = ToolCallWindow(self.state.history)
        self.window.open(text, calls)

    def answer(self, call: ToolCall, result: Any) -> None:
        """The tool message answering ``call``."""
        assert self.window is not None, "answer() outside open_calls()/close_calls()"
        self.window.answer(call, result)

    def close_calls(self, unanswered: str = "not run: the turn was stopped") -> None:
        """Every call is answered (a call still open gets ``unanswered`` as its error): what
        was said meanwhile follows the answers."""
        if self.window is not None:
            self.window.close(unanswered)
        self.window = None

    def engine_call(self, prefix: str, name: str, arguments: dict[str, Any]) -> ToolCall:
        """A tool call the engine makes itself (a block step, a confirmed call), put into
        the history as if the model had asked, so the model sees it and its result."""
        self.engine_calls += 1
        call = ToolCall(f"{prefix}-{self.state.turn}-{self.engine_calls}", name, arguments)
        self.open_calls("", [call])
        return call

    def refuse_waiting_step(self, name: str, reason: str, skill: str, step: str) -> None:
        """Trace once per turn that a block step waits (its gate does not hold)."""
        if step in self.held_reported:
            return
        self.held_reported.add(step)
        refused_step(
            self.trace,
            name=name,
            reason=reason,
            node=self.node_name(),
            source=Source.DETERMINISTIC,
            skill=skill,
            step=step,
        )
