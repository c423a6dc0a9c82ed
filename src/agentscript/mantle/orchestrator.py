"""One turn of a Mantle session: rules M1-M8 on the engine's Session/Reply/trace.

Per iteration the orchestrator first settles everything that needs no model (block steps
that are deterministic, ``utter: when:`` triggers, skill completion by condition), then
builds the prompt from live state (routing catalogue or the active skill's prose with
``if:`` paragraphs applied, the current step, the tools whose gates hold), calls the model
and dispatches its tool calls through the same gates. The loop ends on text, on a pause for
a confirmation, or on a limit.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from agentscript.actions.registry import ActionError, ActionRequest, ActionRunner
from agentscript.engine.llm import TurnError, call_model
from agentscript.engine.state import SessionState
from agentscript.engine.turn import NO, YES, LimitReached, Limits, TurnResult
from agentscript.mantle import prompt as p
from agentscript.mantle.memory import MemoryWriteError, check_write, resolve_name
from agentscript.mantle.model import (
    END_STEP,
    Condition,
    OrderedBlock,
    Project,
    Skill,
    Step,
    StepKind,
    Tool,
    ToolConstraint,
)
from agentscript.mantle.queries import (
    collect_key,
    default_evaluator,
    holds,
    next_step_id,
    offered_skills,
    tool_allowed,
    tool_constraint,
)
from agentscript.mantle.stack import ACTIVE, PARKED, PAUSED, BlockEntry, Frame, SkillStack
from agentscript.mantle.tool_runtime import (
    MemoryView,
    ToolContext,
    check_arguments,
    failed,
    tool_target,
)
from agentscript.models.base import (
    Message,
    Model,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolSpec,
)
from agentscript.trace import TurnTrace, elapsed_ms

SESSION_START_SKILL = "default_session_start"
MAX_DETERMINISTIC_STEPS = 100  # per turn: a `next:` cycle through noop steps must end


def yes_no(text: str) -> bool | None:
    """The user's plain yes/no (None when the answer needs the model to interpret)."""
    answer = text.strip().lower().rstrip(".!")
    if answer in YES:
        return True
    if answer in NO:
        return False
    return None


class MantleTurnRunner:
    """Runs one turn; the engine's :class:`Session` calls :meth:`run`."""

    def __init__(
        self,
        project: Project,
        state: SessionState,
        runner: ActionRunner,
        trace: TurnTrace,
        text: str,
        *,
        model: Model,
        limits: Limits,
        stream: Callable[[str], None] | None = None,
    ) -> None:
        self.project = project
        self.state = state
        self.runner = runner
        self.trace = trace
        self.text = text
        self.model = model
        self.limits = limits
        self.stream = stream
        self.stack = SkillStack(state.extra)
        self.result = TurnResult()
        self.actions_run: list[str] = []
        self.displayable: list[dict[str, Any]] = []
        self.llm_calls = 0
        self.steps_run = 0
        self.stop = False  # the turn ends now (a confirmation question or a denial was said)
        self._held_reported: set[str] = set()
        self._step_calls = 0

    @property
    def memory(self) -> dict[str, Any]:
        return self.state.variables

    def snapshot(self) -> dict[str, Any]:
        return dict(self.state.variables)

    # ------------------------------------------------------------------ the turn

    async def run(self) -> TurnResult:
        try:
            self.state.history.append(Message("user", self.text))
            if not self.stack.data["started"]:
                self.stack.data["started"] = True
                self.start_session_skill()
            if self.stack.pending is not None:
                answer = yes_no(self.text)
                if answer is not None:
                    await self.resolve(answer, via="user")
            if not self.stop:
                await self.loop()
        except (TurnError, LimitReached) as exc:
            self.result.exhausted = getattr(exc, "exhausted", False)
            self.fail(str(exc))
        top = self.stack.frames[-1]["skill"] if self.stack.frames else None
        self.state.current_node = top
        return self.result

    async def loop(self) -> None:
        while True:
            await self.settle()
            if self.stop:
                return
            self.llm_calls += 1
            if self.llm_calls > self.limits.max_llm_calls:
                raise LimitReached(
                    f"more than {self.limits.max_llm_calls} LLM calls in one turn; "
                    "the turn was stopped"
                )
            instructions, tools = self.resolve_prompt()
            response = await self.ask_model(instructions, tools)
            if response.tool_calls:
                await self.dispatch(response)
                if self.stop:
                    return
                continue
            text = response.text or ""
            self.state.history.append(Message("assistant", text))
            self.result.messages.append(text)
            self.trace.add("RESPONSE_STEP", text=text, node=self.node_name(), kind="llm")
            return

    def fail(self, message: str) -> None:
        self.trace.add("ERROR_STEP", message=message, node=self.node_name())
        self.result.error = message
        text = "Sorry, something went wrong."
        self.result.messages.append(text)
        self.trace.add("RESPONSE_STEP", text=text, node=self.node_name(), kind="error")

    def node_name(self) -> str:
        frame = self.stack.active()
        return frame["skill"] if frame else "router"

    def say(self, text: str | None, kind: str, **fields: Any) -> None:
        """Deliver a message verbatim (responses, confirmations, ``context.send``)."""
        if not text:
            return
        self.result.messages.append(text)
        self.state.history.append(Message("assistant", text))
        self.trace.add("RESPONSE_STEP", text=text, node=self.node_name(), kind=kind, **fields)

    def utter(self, name: str | None, kind: str) -> None:
        self.say(p.response_text(self.project, name, self.memory), kind, response=name)

    # ------------------------------------------------------------------ deterministic work (M3)

    async def settle(self) -> None:
        """Run everything that needs no model until the model (or the user) is needed."""
        while True:
            self.steps_run += 1
            if self.steps_run > MAX_DETERMINISTIC_STEPS:
                raise LimitReached(
                    f"more than {MAX_DETERMINISTIC_STEPS} deterministic steps in one turn; "
                    "the turn was stopped"
                )
            frame = self.stack.active()
            if frame is None:
                return
            skill = self.project.skills[frame["skill"]]
            self.fire_when_utters(skill)
            entry = SkillStack.block(frame)
            if entry is not None:
                progressed = await self.block_step(frame, skill, entry)
                if self.stop or not progressed:
                    return
                continue
            done = skill.complete_when
            if (
                done is not None
                and done.condition is not None
                and not done.criteria
                and holds(done.condition, self.memory)
            ):
                self.finish(frame, "completed", reason="complete_when holds")
                continue
            return

    def fire_when_utters(self, skill: Skill) -> None:
        for trigger in skill.utter:
            key = f"{skill.id}:{trigger.response}"
            if trigger.when is None or self.stack.fired(key):
                continue
            if holds(trigger.when, self.memory):
                self.stack.mark_fired(key)
                self.utter(trigger.response, "utter")

    async def block_step(self, frame: Frame, skill: Skill, entry: BlockEntry) -> bool:
        """Run or check the step under the pointer; True when something moved."""
        block = skill.blocks.get(entry["block"])
        if block is None:
            frame["blocks"].pop()
            return True
        if entry["step"] is None:
            entry["step"] = block.steps[0].id if block.steps else END_STEP
            self.trace.add(
                "BLOCK_STEP", event="entered", skill=skill.id, block=block.id, step=entry["step"]
            )
        step = block.step(entry["step"]) if entry["step"] != END_STEP else None
        if step is None or step.kind is StepKind.END:
            self.end_block(frame, skill, entry)
            return True
        kind = step.kind
        if kind is StepKind.COLLECT:
            if self.collect_done(skill, entry, step):
                self.advance(skill, entry, block, step)
                return True
            if step.ask_before_filling and step.id not in entry["asked"]:
                entry["asked"][step.id] = self.state.turn
            return False
        if kind is StepKind.INSTRUCTIONS:
            if step.complete_when is not None and holds(step.complete_when, self.memory):
                self.advance(skill, entry, block, step)
                return True
            return False
        if kind is StepKind.NOOP:
            self.advance(skill, entry, block, step)
            return True
        if kind is StepKind.SET_MEMORY:
            self.set_memory_step(skill, step)
            self.advance(skill, entry, block, step)
            return True
        if kind is StepKind.ACTION:
            self.utter(step.action, "action")
            self.advance(skill, entry, block, step)
            return True
        if kind is StepKind.EXECUTE_TOOL:
            return await self.execute_step(frame, skill, entry, block, step)
        if kind is StepKind.CALL:
            return self.call_step(frame, skill, entry, step)
        if kind is StepKind.LINK:
            return self.link_step(frame, skill, entry, step)
        return False

    def collect_done(self, skill: Skill, entry: BlockEntry, step: Step) -> bool:
        key = collect_key(skill.id, step)
        if key is None or self.memory.get(key) is None:
            return False
        if not step.ask_before_filling:
            return True
        # Asked first, answered after: a value given before the question does not count.
        asked = entry["asked"].get(step.id)
        return asked is not None and self.stack.written_turn(key) > int(asked)

    def advance(self, skill: Skill, entry: BlockEntry, block: OrderedBlock, step: Step) -> None:
        target = next_step_id(block, step, self.memory)
        self.trace.add(
            "BLOCK_STEP",
            event="advanced",
            skill=skill.id,
            block=block.id,
            step=step.id,
            next=target,
        )
        entry["step"] = target
        entry["held"] = None

    def end_block(self, frame: Frame, skill: Skill, entry: BlockEntry) -> None:
        frame["blocks"].pop()
        self.trace.add(
            "BLOCK_STEP", event="completed", skill=skill.id, block=entry["block"], step=END_STEP
        )
        parent = SkillStack.block(frame)
        if entry["call"] and parent is not None:
            self.advance_past_call(skill, parent)
        elif not frame["blocks"] and skill.body_is_single_block:
            self.finish(frame, "completed", reason="block reached END")

    def advance_past_call(self, skill: Skill, entry: BlockEntry) -> None:
        block = skill.blocks.get(entry["block"])
        step = block.step(entry["step"]) if block and entry["step"] else None
        if block is not None and step is not None:
            self.advance(skill, entry, block, step)

    def set_memory_step(self, skill: Skill, step: Step) -> None:
        for name, value in step.set_memory.items():
            entry = resolve_name(self.project, name, [skill.id])
            try:
                if entry is None:
                    raise MemoryWriteError(f"'{name}' is not a declared memory entry")
                self.write(entry.qualified_name, check_write(entry, self.memory, value))
            except MemoryWriteError as exc:
                raise TurnError(f"step {step.id} of {skill.id}: {exc}") from None

    def write(self, key: str, value: Any) -> None:
        self.memory[key] = value
        self.stack.note_write(key, self.state.turn)

    def fingerprint(self) -> str:
        return json.dumps(self.memory, sort_keys=True, default=repr)

    async def execute_step(
        self, frame: Frame, skill: Skill, entry: BlockEntry, block: OrderedBlock, step: Step
    ) -> bool:
        held = entry["held"]
        if held and held["step"] == step.id and held["memory"] == self.fingerprint():
            return False  # failed or declined before; runs again once memory changes
        pending = self.stack.pending
        if pending and pending.get("step") == step.id and pending.get("skill") == skill.id:
            return False
        name = step.execute_tool or ""
        tool = self.project.tools_for(skill.id).get(name)
        if tool is None:
            raise TurnError(f"step {step.id} of {skill.id}: tool '{name}' is not available")
        if not tool_allowed(self.project, skill.id, name, self.memory):
            if step.id not in self._held_reported:
                self._held_reported.add(step.id)
                self.trace.add(
                    "REFUSED_STEP",
                    name=name,
                    reason=f"requires of '{name}' does not hold; step {step.id} waits",
                    source="deterministic",
                    skill=skill.id,
                    step=step.id,
                )
            return False
        arguments: dict[str, Any] = {}
        for key, value in step.parameters.items():
            if isinstance(value, Condition):
                try:
                    arguments[key] = default_evaluator(value, self.memory)
                except Exception as exc:
                    raise TurnError(
                        f"step {step.id} of {skill.id}: parameter {key}: {exc}"
                    ) from None
            else:
                arguments[key] = value
        constraint = tool_constraint(self.project, skill.id, name)
        if _needs_confirmation(constraint):
            self.hold_for_confirmation(
                skill.id, tool, arguments, source="step", block=block.id, step=step.id
            )
            return False
        result, ok = await self.run_tool(skill.id, tool, arguments, "deterministic", step.id)
        self.record_step_call(tool.name, arguments, result)
        if ok:
            self.advance(skill, entry, block, step)
            return True
        entry["held"] = {"step": step.id, "memory": self.fingerprint()}
        return False

    def record_step_call(self, name: str, arguments: dict[str, Any], result: Any) -> None:
        """Deterministic tool results go into the history so the model can use them."""
        self._step_calls += 1
        call = ToolCall(f"step-{self.state.turn}-{self._step_calls}", name, dict(arguments))
        self.state.history.append(Message("assistant", "", tool_calls=[call]))
        self.state.history.append(
            Message(
                "tool",
                json.dumps(result, default=repr, ensure_ascii=False),
                tool_call_id=call.id,
                name=name,
            )
        )

    def call_step(self, frame: Frame, skill: Skill, entry: BlockEntry, step: Step) -> bool:
        target = step.call or ""
        if target in skill.blocks:
            SkillStack.enter_block(frame, target, call=True)
            return True
        callee = self.project.skills.get(target)
        if callee is None or not holds(callee.requires, self.memory):
            if step.id not in self._held_reported:
                self._held_reported.add(step.id)
                self.trace.add(
                    "REFUSED_STEP",
                    name=target,
                    reason=f"cannot call '{target}' now (unknown, or its requires does not hold)",
                    source="deterministic",
                    skill=skill.id,
                    step=step.id,
                )
            return False
        frame["status"] = PARKED
        self.start_skill(target, "invoked", via_call=True, invoked_by=skill.id)
        return True

    def link_step(self, frame: Frame, skill: Skill, entry: BlockEntry, step: Step) -> bool:
        target = step.link or ""
        if target in skill.blocks:
            frame["blocks"].pop()
            self.trace.add(
                "BLOCK_STEP", event="completed", skill=skill.id, block=entry["block"], step=step.id
            )
            SkillStack.enter_block(frame, target, call=entry["call"])
            return True
        if target not in self.project.skills:
            raise TurnError(f"step {step.id} of {skill.id}: link target '{target}' is unknown")
        self.stack.pop()
        self.trace.add("SKILL_STEP", event="completed", skill=skill.id, reason=f"link to {target}")
        self.start_skill(target, frame["kind"], via_call=frame["via_call"])
        return True

    # ------------------------------------------------------------------ the skill stack (M1, M2)

    def start_session_skill(self) -> None:
        skill = self.project.skills.get(SESSION_START_SKILL)
        if skill is not None and not skill.disabled and skill.body_is_single_block:
            self.start_skill(skill.id, "engine")

    def start_skill(
        self, skill_id: str, kind: str, *, via_call: bool = False, invoked_by: str | None = None
    ) -> Frame:
        skill = self.project.skills[skill_id]
        if self.stack.count_activation(skill_id) > 0:
            # A skill starting again starts clean (its public values survived until now).
            for name, entry in skill.memory.items():
                self.memory[f"{skill_id}.{name}"] = (
                    entry.initial_value if entry.has_initial_value else None
                )
            self.stack.clear_fired(skill_id)
        frame = self.stack.push(skill_id, kind, via_call=via_call)
        self.result.path.append(skill_id)
        fields: dict[str, Any] = {"kind": kind}
        if invoked_by:
            fields["invokedBy"] = invoked_by
        self.trace.add("SKILL_STEP", event="activated", skill=skill_id, **fields)
        for trigger in skill.utter:
            if trigger.on == "activate":
                self.utter(trigger.response, "utter")
        if skill.body_is_single_block:
            SkillStack.enter_block(frame, next(iter(skill.blocks)))
        return frame

    def finish(self, frame: Frame, event: str, *, reason: str | None = None) -> None:
        """Complete or cancel the top frame; an invoked skill hands control back (M2)."""
        self.stack.pop()
        fields: dict[str, Any] = {}
        entry = SkillStack.block(frame)
        if entry is not None:
            fields.update(block=entry["block"], step=entry["step"])
        if reason:
            fields["reason"] = reason
        self.trace.add("SKILL_STEP", event=event, skill=frame["skill"], **fields)
        pending = self.stack.pending
        if pending is not None and pending["skill"] == frame["skill"]:
            self.stack.pending = None
        if frame["kind"] != "invoked" or not self.stack.frames:
            return
        parent = self.stack.frames[-1]
        if parent["status"] != PARKED:
            return
        parent["status"] = ACTIVE
        self.result.path.append(parent["skill"])
        parent_entry = SkillStack.block(parent)
        resumed: dict[str, Any] = {}
        if parent_entry is not None:
            resumed.update(block=parent_entry["block"], step=parent_entry["step"])
        self.trace.add("SKILL_STEP", event="resumed", skill=parent["skill"], **resumed)
        if frame["via_call"] and parent_entry is not None:
            self.advance_past_call(self.project.skills[parent["skill"]], parent_entry)

    def pause(self, frame: Frame, by: str) -> None:
        frame["status"] = PAUSED
        entry = SkillStack.block(frame)
        fields: dict[str, Any] = {"by": by}
        if entry is not None:
            fields.update(block=entry["block"], step=entry["step"])
            self.trace.add(
                "BLOCK_STEP",
                event="paused",
                skill=frame["skill"],
                block=entry["block"],
                step=entry["step"],
            )
        self.trace.add("SKILL_STEP", event="interrupted", skill=frame["skill"], **fields)

    def invokes(self, frame: Frame, target: str) -> bool:
        """Whether the active skill names ``target`` as ``@skill.x`` where the model can see it
        (its visible prose or the instructions of its current step)."""
        skill = self.project.skills[frame["skill"]]
        if target in p.visible_skill_references(skill, self.memory):
            return True
        entry = SkillStack.block(frame)
        block = skill.blocks.get(entry["block"]) if entry else None
        step = block.step(entry["step"]) if block and entry and entry["step"] else None
        return step is not None and any(
            r.kind.value == "skill" and r.target == target for r in step.references
        )

    def activate(self, skill_id: str, block: str | None) -> dict[str, Any]:
        target = self.project.skills.get(skill_id)
        if target is None:
            return {"error": f"unknown skill '{skill_id}'"}
        active = self.stack.active()
        if active is not None and active["skill"] == skill_id:
            if block is None:
                return {"status": f"{skill_id} is already active"}
            return self.enter_prose_block(active, target, block)
        existing = self.stack.find(skill_id)
        offered = {s.id for s in offered_skills(self.project, self.memory)}
        if existing is None and skill_id not in offered:
            return {
                "error": f"skill '{skill_id}' is not available now (its requires does not hold)"
            }
        if existing is not None:
            if existing["status"] == PARKED:
                return {"error": f"skill '{skill_id}' waits for a skill it started"}
            if not holds(target.requires, self.memory):
                return {
                    "error": f"skill '{skill_id}' is not available now (its requires does not hold)"
                }
            if active is not None:
                self.pause(active, by=skill_id)
            self.stack.move_to_top(existing)
            existing["status"] = ACTIVE
            self.result.path.append(skill_id)
            entry = SkillStack.block(existing)
            fields: dict[str, Any] = {}
            if entry is not None:
                fields.update(block=entry["block"], step=entry["step"])
            self.trace.add("SKILL_STEP", event="resumed", skill=skill_id, **fields)
            status: dict[str, Any] = {"status": "resumed", "skill": skill_id, **fields}
        else:
            if active is not None and self.invokes(active, skill_id):
                active["status"] = PARKED
                self.start_skill(skill_id, "invoked", invoked_by=active["skill"])
            elif active is not None:
                self.pause(active, by=skill_id)
                self.start_skill(skill_id, "interrupt")
            else:
                self.start_skill(skill_id, "routed")
            status = {"status": "activated", "skill": skill_id}
        if block is not None:
            frame = self.stack.active()
            if frame is not None:
                entered = self.enter_prose_block(frame, target, block)
                if "error" in entered:
                    return entered
                status["block"] = block
        return status

    def enter_prose_block(self, frame: Frame, skill: Skill, block: str) -> dict[str, Any]:
        if block not in skill.blocks:
            return {"error": f"skill '{skill.id}' has no block '{block}'"}
        running = SkillStack.block(frame)
        if running is not None:
            return {"error": f"block '{running['block']}' is running (step {running['step']})"}
        SkillStack.enter_block(frame, block)
        return {"status": "block started", "block": block}

    # ------------------------------------------------------------------ the model

    def resolve_prompt(self) -> tuple[str, list[ToolSpec]]:
        pre = self.snapshot()
        started = time.perf_counter()
        memory = self.memory
        frame = self.stack.active()
        offered = offered_skills(self.project, memory)
        paused = [
            f["skill"]
            for f in self.stack.paused()
            if holds(self.project.skills[f["skill"]].requires, memory)
        ]
        activatable = [s.id for s in offered] + [
            s for s in paused if s not in {o.id for o in offered}
        ]
        parts: list[str] = []
        tools: list[ToolSpec] = []
        hidden: list[str] = []
        if frame is None:
            parts.append(p.routing_section(offered, paused, self.project))
            if activatable:
                tools.append(p.activate_spec(activatable, []))
            if self.stack.paused():
                tools.append(p.cancel_spec())
        else:
            skill = self.project.skills[frame["skill"]]
            parts.append(p.skill_section(self.project, skill, memory))
            entry = SkillStack.block(frame)
            if entry is not None:
                parts.extend(self.step_guidance(skill, entry))
            others = [s for s in offered if s.id != skill.id]
            if others:
                parts.append(
                    "If the user asks for something else, these skills can be started with "
                    "activate_skill:\n"
                    + "\n".join(f"- {s.id}: {' '.join(s.description.split())}" for s in others)
                )
            blocks = [] if entry is not None else p.visible_block_references(skill, memory)
            choices = [s for s in activatable if s != skill.id]
            if blocks:
                choices.insert(0, skill.id)
            if choices:
                tools.append(p.activate_spec(choices, blocks))
            if entry is None:
                tools.append(p.complete_spec())
            tools.append(p.cancel_spec())
            settable = p.settable_entries(self.project, skill)
            if settable:
                tools.append(p.set_fields_spec(settable))
            for name, tool in self.project.tools_for(skill.id).items():
                if tool_allowed(self.project, skill.id, name, memory):
                    tools.append(ToolSpec(name, tool.description, dict(tool.parameters_schema)))
                else:
                    hidden.append(name)
        pending = self.stack.pending
        if pending is not None:
            parts.append(
                f"The user was asked to confirm {pending['tool']} with "
                f"{json.dumps(pending['arguments'], default=repr)}. When they answer, call "
                "resolve_tool_confirmation with confirmed=true or confirmed=false."
            )
            tools.append(p.resolve_spec())
        instructions = "\n\n".join(part for part in parts if part)
        self.trace.add(
            "RESOLUTION_STEP",
            node=self.node_name(),
            iteration=self.llm_calls,
            instructions=instructions,
            tools=[t.name for t in tools],
            hiddenTools=hidden,
            preVars=pre,
            postVars=self.snapshot(),
            durationMs=elapsed_ms(started),
        )
        return instructions, tools

    def step_guidance(self, skill: Skill, entry: BlockEntry) -> list[str]:
        block = skill.blocks.get(entry["block"])
        step = block.step(entry["step"]) if block and entry["step"] else None
        if block is None or step is None:
            return []
        note = None
        if step.kind is StepKind.EXECUTE_TOOL:
            held = entry["held"]
            pending = self.stack.pending
            if pending is not None and pending.get("step") == step.id:
                note = f"{step.execute_tool} waits for the user's confirmation."
            elif held is not None:
                note = (
                    f"{step.execute_tool} did not succeed; it runs again when memory changes. "
                    "Tell the user and help them change what is needed."
                )
            else:
                note = f"{step.execute_tool} runs as soon as its requirements hold."
        parts = [p.step_section(self.project, skill, block, step, self.memory, held=note)]
        collected = p.collected_section(skill, block, self.memory)
        if collected:
            parts.append(collected)
        return parts

    async def ask_model(self, instructions: str, tools: list[ToolSpec]) -> ModelResponse:
        request = ModelRequest(
            system=p.system_prompt(self.project),
            instructions=instructions,
            messages=list(self.state.history),
            tools=tools,
            node=self.node_name(),
        )
        return await call_model(
            self.model, request, self.trace, iteration=self.llm_calls, stream=self.stream
        )

    # ------------------------------------------------------------------ tool calls (M5, M6)

    async def dispatch(self, response: ModelResponse) -> None:
        calls = response.tool_calls
        self.state.history.append(Message("assistant", response.text or "", tool_calls=list(calls)))
        for index, call in enumerate(calls):
            if index >= self.limits.max_tool_calls_per_step:
                result = self.refuse(
                    call, f"more than {self.limits.max_tool_calls_per_step} tool calls in one step"
                )
            elif self.stop:
                result = self.refuse(call, "not run: the turn already ended")
            else:
                result = await self.call_tool(call)
            self.state.history.append(
                Message(
                    "tool",
                    json.dumps(result, default=repr, ensure_ascii=False),
                    tool_call_id=call.id,
                    name=call.name,
                )
            )

    def refuse(self, call: ToolCall, reason: str) -> dict[str, Any]:
        self.trace.add(
            "REFUSED_STEP",
            name=call.name,
            reason=reason,
            arguments=call.arguments,
            source="llm",
            skill=self.node_name(),
        )
        return {"error": reason}

    async def call_tool(self, call: ToolCall) -> dict[str, Any]:
        if call.arguments is None:
            return self.refuse(
                call,
                f"the arguments of '{call.name}' are not a JSON object: {call.raw_arguments[:200]!r}",
            )
        args = call.arguments
        if call.name == p.ACTIVATE:
            skill, block = args.get("skill"), args.get("block")
            if not isinstance(skill, str) or (block is not None and not isinstance(block, str)):
                return self.refuse(
                    call, "activate_skill needs skill=<id> (and optionally block=<id>)"
                )
            result = self.activate(skill, block)
        elif call.name == p.COMPLETE:
            result = self.complete_skill()
        elif call.name == p.CANCEL:
            result = self.cancel_skill()
        elif call.name == p.SET_FIELDS:
            result = self.set_fields(args)
        elif call.name == p.RESOLVE:
            confirmed = args.get("confirmed")
            if self.stack.pending is None:
                result = {"error": "no tool call is waiting for a confirmation"}
            elif not isinstance(confirmed, bool):
                result = {"error": "resolve_tool_confirmation needs confirmed=true or false"}
            else:
                return await self.resolve(confirmed, via="llm")
        else:
            return await self.call_skill_tool(call, args)
        if "error" in result:
            return self.refuse(call, str(result["error"]))
        self.actions_run.append(call.name)
        return result

    def complete_skill(self) -> dict[str, Any]:
        frame = self.stack.active()
        if frame is None:
            return {"error": "no skill is active"}
        entry = SkillStack.block(frame)
        if entry is not None:
            return {
                "error": f"ordered block '{entry['block']}' is running (step {entry['step']}); "
                "it finishes at its END step, complete_skill is not available"
            }
        done = self.project.skills[frame["skill"]].complete_when
        if (
            done is not None
            and done.condition is not None
            and not holds(done.condition, self.memory)
        ):
            return {"error": f"the skill is not done: {done.condition.text} does not hold"}
        self.finish(frame, "completed", reason="complete_skill")
        return {"status": "completed", "skill": frame["skill"]}

    def cancel_skill(self) -> dict[str, Any]:
        frame = self.stack.active()
        if frame is not None:
            self.finish(frame, "cancelled", reason="cancel_skill")
            return {"status": "cancelled", "skill": frame["skill"]}
        paused = self.stack.paused()
        if not paused:
            return {"error": "no skill to cancel"}
        dropped = paused[0]
        self.stack.frames.remove(dropped)
        self.trace.add("SKILL_STEP", event="cancelled", skill=dropped["skill"], reason="dropped")
        return {"status": "cancelled", "skill": dropped["skill"]}

    def set_fields(self, args: dict[str, Any]) -> dict[str, Any]:
        frame = self.stack.active()
        if frame is None:
            return {"error": "no skill is active; start one with activate_skill"}
        skill = self.project.skills[frame["skill"]]
        settable = p.settable_entries(self.project, skill)
        if not args:
            return {"error": f"set_fields needs at least one field; settable: {sorted(settable)}"}
        writes: dict[str, Any] = {}
        for name, value in args.items():
            key = name.removeprefix("session.").removeprefix(f"{skill.id}.")
            entry = settable.get(key)
            if entry is None:
                return {"error": f"'{name}' cannot be set here; settable: {sorted(settable)}"}
            if value is None:
                return {"error": f"'{name}': a value is required"}
            try:
                writes[entry.qualified_name] = check_write(entry, self.memory, value)
            except MemoryWriteError as exc:
                return {"error": str(exc)}
        step = self.trace.add(
            "ACTION_STEP",
            name=p.SET_FIELDS,
            action=p.SET_FIELDS,
            source="llm",
            skill=skill.id,
            input=dict(args),
            output=None,
            error=None,
            preVars=self.snapshot(),
            postVars=None,
        )
        for key, value in writes.items():
            self.write(key, value)
        step["output"] = {"updated": sorted(writes)}
        step["postVars"] = self.snapshot()
        return {"status": "updated", "fields": sorted(writes)}

    async def call_skill_tool(self, call: ToolCall, args: dict[str, Any]) -> dict[str, Any]:
        frame = self.stack.active()
        if frame is None:
            return self.refuse(call, f"unknown tool '{call.name}': no skill is active")
        skill_id = frame["skill"]
        tool = self.project.tools_for(skill_id).get(call.name)
        if tool is None:
            return self.refuse(call, f"unknown tool '{call.name}' for skill '{skill_id}'")
        pending = self.stack.pending
        if pending is not None and pending["tool"] == call.name:
            return self.refuse(
                call,
                f"'{call.name}' waits for the user's confirmation; call resolve_tool_confirmation",
            )
        if not tool_allowed(self.project, skill_id, call.name, self.memory):
            return self.refuse(call, f"tool '{call.name}' is not available now")
        checked, problem = check_arguments(
            tool,
            args,
            max_chars=self.limits.max_argument_chars,
            max_depth=self.limits.max_argument_depth,
        )
        if problem is not None:
            return self.refuse(call, problem)
        if _needs_confirmation(tool_constraint(self.project, skill_id, call.name)):
            return self.hold_for_confirmation(skill_id, tool, checked, source="llm")
        result, _ = await self.run_tool(skill_id, tool, checked, "llm")
        return result

    async def run_tool(
        self,
        skill_id: str,
        tool: Tool,
        arguments: dict[str, Any],
        source: str,
        step_id: str | None = None,
    ) -> tuple[dict[str, Any], bool]:
        """Run through the ActionRunner (stubs first); failures are results, never raised."""
        self.actions_run.append(tool.name)
        record = self.trace.add(
            "ACTION_STEP",
            name=tool.name,
            action=tool.callable_ref,
            source=source,
            skill=skill_id,
            step=step_id,
            input=dict(arguments),
            output=None,
            error=None,
            preVars=self.snapshot(),
            postVars=None,
        )
        inputs = dict(arguments)
        if tool.takes_context:
            inputs["context"] = self.context(tool, skill_id)
        started = time.perf_counter()
        error: str | None = None
        try:
            result = await self.runner.run(
                ActionRequest(tool.name, tool_target(tool), inputs),
                timeout=self.project.agent.tool_timeout,
            )
        except ActionError as exc:
            error = str(exc)
            result = {"error": error}
        ok = error is None and not failed(result)
        record.update(
            output=result, error=error, postVars=self.snapshot(), durationMs=elapsed_ms(started)
        )
        constraint = tool_constraint(self.project, skill_id, tool.name)
        if constraint is not None:
            self.utter(constraint.on_success if ok else constraint.on_failure, "utter")
        return result, ok

    def context(self, tool: Tool, skill_id: str) -> ToolContext:
        namespaces = [ns for ns in (tool.owner, skill_id) if ns]

        def read(name: str) -> Any:
            entry = resolve_name(self.project, name, namespaces)
            return self.memory.get(entry.qualified_name) if entry else None

        def write(name: str, value: Any) -> None:
            entry = resolve_name(self.project, name, namespaces)
            if entry is None:
                raise MemoryWriteError(f"'{name}' is not a declared memory entry")
            self.write(entry.qualified_name, check_write(entry, self.memory, value))

        return ToolContext(MemoryView(read, write), lambda text: self.say(text, "tool"))

    # ------------------------------------------------------------------ confirmation (M5)

    def hold_for_confirmation(
        self,
        skill_id: str,
        tool: Tool,
        arguments: dict[str, Any],
        *,
        source: str,
        block: str | None = None,
        step: str | None = None,
    ) -> dict[str, Any]:
        constraint = tool_constraint(self.project, skill_id, tool.name)
        gate = constraint.requires_confirmation if constraint else None
        ask = gate.utter_for_confirmation if gate else None
        question = p.response_text(self.project, ask, self.memory) if ask else None
        if ask and not question:
            reason = f"the confirmation question for '{tool.name}' is empty; the call is not run"
            self.trace.add("REFUSED_STEP", name=tool.name, reason=reason, source=source)
            return {"error": reason}
        self.stack.pending = {
            "skill": skill_id,
            "tool": tool.name,
            "arguments": arguments,
            "source": source,
            "block": block,
            "step": step,
        }
        self.trace.add(
            "EVENT_STEP",
            event="confirmation_requested",
            skill=skill_id,
            tool=tool.name,
            arguments=arguments,
            source=source,
        )
        if question:
            self.say(question, "confirmation", response=ask)
            self.result.confirmation = question
            self.stop = True
            return {"status": "the user was asked to confirm"}
        return {"status": "ask the user to confirm, then call resolve_tool_confirmation"}

    async def resolve(self, confirmed: bool, *, via: str) -> dict[str, Any]:
        pending = self.stack.pending
        assert pending is not None
        self.stack.pending = None
        skill_id, name = pending["skill"], pending["tool"]
        self.trace.add(
            "EVENT_STEP",
            event="confirmation_resolved",
            skill=skill_id,
            tool=name,
            confirmed=confirmed,
            via=via,
        )
        frame = self.stack.find(skill_id)
        tool = self.project.tools_for(skill_id).get(name)
        entry = SkillStack.block(frame) if frame else None
        from_step = (
            pending["source"] == "step"
            and entry is not None
            and entry["block"] == pending["block"]
            and entry["step"] == pending["step"]
        )
        if via == "user":
            self._step_calls += 1
            call = ToolCall(
                f"confirm-{self.state.turn}-{self._step_calls}", name, pending["arguments"]
            )
            self.state.history.append(Message("assistant", "", tool_calls=[call]))
        result: dict[str, Any]
        if frame is None or tool is None:
            result = {"error": f"'{name}' cannot run: its skill is no longer on the stack"}
        elif not confirmed:
            result = {"status": f"the user declined; {name} was not run"}
            constraint = tool_constraint(self.project, skill_id, name)
            gate = constraint.requires_confirmation if constraint else None
            if from_step and entry is not None:
                entry["held"] = {"step": entry["step"], "memory": self.fingerprint()}
            denial = gate.utter_on_user_denial if gate else None
            if denial and p.response_text(self.project, denial, self.memory):
                self.utter(denial, "denial")
                self.stop = True
        elif not tool_allowed(self.project, skill_id, name, self.memory):
            result = {"error": f"tool '{name}' is not available now"}
            self.trace.add("REFUSED_STEP", name=name, reason=result["error"], source=via)
        else:
            source = "deterministic" if pending["source"] == "step" else "llm"
            result, ok = await self.run_tool(
                skill_id, tool, dict(pending["arguments"]), source, pending.get("step")
            )
            if from_step and entry is not None and frame is not None:
                skill = self.project.skills[skill_id]
                block = skill.blocks[entry["block"]]
                step = block.step(entry["step"])
                if ok and step is not None:
                    self.advance(skill, entry, block, step)
                else:
                    entry["held"] = {"step": entry["step"], "memory": self.fingerprint()}
        if via == "user":
            self.state.history.append(
                Message(
                    "tool",
                    json.dumps(result, default=repr, ensure_ascii=False),
                    tool_call_id=call.id,
                    name=name,
                )
            )
        return result


def _needs_confirmation(constraint: ToolConstraint | None) -> bool:
    gate = constraint.requires_confirmation if constraint else None
    return gate is not None and gate.enabled
