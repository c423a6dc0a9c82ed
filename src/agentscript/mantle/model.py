"""Typed model of a Mantle skill project.

The model is engine-independent: it records what the project files say (with a file and
span for every element) and nothing about a running conversation. Runtime questions
("which skills are offered now?") live in :mod:`agentscript.mantle.queries`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from agentscript.diagnostics import UNKNOWN_SPAN, Span
from agentscript.expr.nodes import Expr

if TYPE_CHECKING:
    from agentscript.mantle.knowledge import KnowledgeIndex

PROJECT_NAMESPACE = "project"

# Lifecycle skills the engine runs itself (see :mod:`agentscript.mantle.run.lifecycle`).
SESSION_START_SKILL = "default_session_start"
COMPLETED_SKILL = "default_completed"
RESUME_OFFER_SKILL = "default_resume_offer"
UNSUPPORTED_SKILL = "default_unsupported_request_handler"
LIFECYCLE_SKILLS = frozenset(
    {SESSION_START_SKILL, COMPLETED_SKILL, RESUME_OFFER_SKILL, UNSUPPORTED_SKILL}
)
# Their responses (built-in wording in :mod:`agentscript.mantle.load.lifecycle`).
ASK_ANYTHING_ELSE = "utter_can_do_something_else"
ASK_TO_CONTINUE = "utter_ask_wants_to_continue"
CANNOT_HELP_RESPONSE = "utter_cannot_help"


@dataclass(slots=True)
class Condition:
    """One condition or expression string, kept verbatim with where it came from.

    ``expr`` is the parsed tree when :func:`agentscript.expr.parse_expression` is available;
    ``None`` means only the raw text is known (or it failed to parse: see the diagnostics).
    """

    text: str
    file: str
    span: Span
    expr: Expr | None = None


@dataclass(slots=True)
class MemoryEntry:
    namespace: str  # "project" or the owning skill id
    name: str
    type: str
    file: str
    span: Span
    description: str | None = None
    llm_settable: bool = False
    enum_values: list[Any] = field(default_factory=list)
    initial_value: Any = None
    has_initial_value: bool = False
    visibility: str = "public"  # "public" | "private"; project entries are always public
    write_once: bool = False  # project entries are write-once unless ``mutable: true``
    pii: bool = False
    seed: bool = False

    @property
    def qualified_name(self) -> str:
        return f"{self.namespace}.{self.name}"


@dataclass(slots=True)
class Button:
    title: str
    payload: str | None
    span: Span


@dataclass(slots=True)
class ResponseVariant:
    text: str | None
    file: str
    span: Span
    condition: Condition | None = None
    buttons: list[Button] = field(default_factory=list)
    buttons_source: str | None = None  # a tool supplying the buttons at delivery time
    metadata: dict[str, Any] = field(default_factory=dict)
    placeholders: list[str] = field(default_factory=list)  # names inside ``{...}``


@dataclass(slots=True)
class Response:
    name: str
    file: str
    span: Span
    owner: str | None  # skill id, or None for the project-root file
    variants: list[ResponseVariant] = field(default_factory=list)

    @property
    def default_variant(self) -> ResponseVariant | None:
        """The variant without a condition (the first one when several exist)."""
        for variant in self.variants:
            if variant.condition is None:
                return variant
        return None


@dataclass(slots=True)
class ToolWrite:
    """A memory entry a tool writes: declared with ``@tool(writes=...)`` or seen in its code."""

    name: str  # as written: bare ("reason") or qualified ("project.x", rejected)
    file: str
    span: Span


@dataclass(slots=True)
class Tool:
    name: str
    file: str
    span: Span
    callable_ref: str  # "<module file>:<function>"
    function: Callable[..., Any] | None
    description: str = ""
    parameters_schema: dict[str, Any] = field(default_factory=dict)
    takes_context: bool = False
    is_async: bool = False
    is_stub: bool = False
    owner: str | None = None  # skill id for skill-local tools, None for shared ones
    writes: list[ToolWrite] = field(default_factory=list)
    hook_for: str | None = None  # ``run_after_setting_<entry>``: never offered to the LLM


@dataclass(slots=True)
class RequiresConfirmation:
    enabled: bool
    span: Span
    utter_for_confirmation: str | None = None
    utter_on_user_denial: str | None = None


@dataclass(slots=True)
class ToolConstraint:
    tool: str
    file: str
    span: Span
    requires: Condition | None = None
    requires_confirmation: RequiresConfirmation | None = None
    on_success: str | None = None
    on_failure: str | None = None


@dataclass(slots=True)
class CompleteWhen:
    span: Span
    condition: Condition | None = None
    criteria: list[str] = field(default_factory=list)


@dataclass(slots=True)
class UtterTrigger:
    response: str
    span: Span
    on: str | None = None  # "activate"
    when: Condition | None = None


class ReferenceKind(StrEnum):
    SKILL = "skill"
    BLOCK = "block"
    MEMORY = "memory"
    TOOL = "tool"


@dataclass(slots=True)
class Reference:
    """An ``@skill.x`` / ``@block.x`` / ``@memory.ns.entry`` / ``@tool.x`` token in prose."""

    kind: ReferenceKind
    target: str  # "x", or "ns.entry" for memory
    token: str  # the exact text, e.g. "@memory.project.name"
    span: Span


@dataclass(slots=True)
class Paragraph:
    """One prose paragraph of a skill body; ``block_id`` marks where a block fence sits."""

    text: str
    span: Span
    condition: Condition | None = None
    block_id: str | None = None
    references: list[Reference] = field(default_factory=list)


class StepKind(StrEnum):
    INSTRUCTIONS = "instructions"
    COLLECT = "collect"
    ACTION = "action"
    EXECUTE_TOOL = "execute_tool"
    NOOP = "noop"
    SET_MEMORY = "set_memory"
    CALL = "call"
    LINK = "link"
    END = "end"


END_STEP = "END"


@dataclass(slots=True)
class NextBranch:
    """One entry of a conditional ``next:`` list; ``condition is None`` is the ``else:``."""

    target: str
    span: Span
    condition: Condition | None = None


@dataclass(slots=True)
class Step:
    id: str
    kind: StepKind
    file: str
    span: Span
    # None: fall through to the following step (or END after the last one).
    next: str | list[NextBranch] | None = None
    next_span: Span | None = None
    instructions: str | None = None
    complete_when: Condition | None = None
    collect: str | None = None
    utterance: str | None = None
    ask_before_filling: bool = False
    description: str | None = None
    action: str | None = None
    execute_tool: str | None = None
    parameters: dict[str, Condition | Any] = field(default_factory=dict)
    set_memory: dict[str, Any] = field(default_factory=dict)
    call: str | None = None
    link: str | None = None
    references: list[Reference] = field(default_factory=list)

    @property
    def waits_for_user(self) -> bool:
        """Steps that can hand the turn back to the user (so a loop through them is fine)."""
        return self.kind in (StepKind.INSTRUCTIONS, StepKind.COLLECT)


@dataclass(slots=True)
class OrderedBlock:
    id: str
    file: str
    span: Span
    steps: list[Step] = field(default_factory=list)
    name: str | None = None
    description: str | None = None

    def step(self, step_id: str | None) -> Step | None:
        for step in self.steps:
            if step.id == step_id:
                return step
        return None


@dataclass(slots=True)
class ToolRef:
    """A place where a skill names a tool; ``via`` says how (used for diagnostics)."""

    name: str
    via: str  # "import_tools" | "tool_constraints" | "execute_tool" | "@tool" | "prose"
    file: str
    span: Span


@dataclass(slots=True)
class Skill:
    id: str
    folder: str
    file: str
    span: Span
    name: str = ""
    description: str = ""
    requires: Condition | None = None
    complete_when: CompleteWhen | None = None
    import_tools: list[str] = field(default_factory=list)
    tool_constraints: dict[str, ToolConstraint] = field(default_factory=dict)
    utter: list[UtterTrigger] = field(default_factory=list)
    disabled: bool = False
    engine_managed: bool | None = None
    memory: dict[str, MemoryEntry] = field(default_factory=dict)
    paragraphs: list[Paragraph] = field(default_factory=list)
    blocks: dict[str, OrderedBlock] = field(default_factory=dict)
    tools: dict[str, Tool] = field(default_factory=dict)  # skill-local tools
    tool_refs: list[ToolRef] = field(default_factory=list)
    references: list[Reference] = field(default_factory=list)

    @property
    def body_is_single_block(self) -> bool:
        """Fully controlled form: the body is one block and no prose."""
        return len(self.blocks) == 1 and all(p.block_id for p in self.paragraphs)


@dataclass(slots=True)
class AgentSettings:
    file: str
    span: Span = UNKNOWN_SPAN
    id: str = ""
    language: str = "en"
    name: str | None = None
    description: str | None = None
    persona: str = ""
    rules: list[str] = field(default_factory=list)
    prompts: dict[str, Any] = field(default_factory=dict)
    references: dict[str, Any] = field(default_factory=dict)
    conversation: dict[str, Any] = field(default_factory=dict)
    session_config: dict[str, Any] = field(default_factory=dict)
    tool_timeout: float | None = None
    voice: dict[str, Any] | None = None
    # The file nests ``rules``/``references`` under ``agent:`` (Maestro era, rasa-pro 3.19).
    maestro_layout: bool = False


@dataclass(slots=True)
class Project:
    root: str
    agent: AgentSettings
    memory: dict[str, MemoryEntry] = field(default_factory=dict)  # project namespace
    skills: dict[str, Skill] = field(default_factory=dict)
    shared_tools: dict[str, Tool] = field(default_factory=dict)  # root tools.py / tools/
    responses: dict[str, Response] = field(default_factory=dict)  # one global registry
    mcp_servers: list[str] = field(default_factory=list)
    knowledge: KnowledgeIndex | None = None  # references/ (see agentscript.mantle.knowledge)

    def tools_for(self, skill_id: str) -> dict[str, Tool]:
        """Tools a skill can use: its own plus the shared ones it imports (local wins)."""
        skill = self.skills[skill_id]
        out: dict[str, Tool] = {}
        for name in skill.import_tools:
            tool = self.shared_tools.get(name)
            if tool is not None:
                out[tool.name] = tool  # an MCP import ``mcp/S:T`` is offered as ``T``
        for name, tool in skill.tools.items():
            if tool.hook_for is None:
                out[name] = tool
        return out

    def memory_entry(self, qualified: str) -> MemoryEntry | None:
        """``project.x`` or ``<skill>.x`` -> its declaration."""
        namespace, _, name = qualified.partition(".")
        if namespace == PROJECT_NAMESPACE:
            return self.memory.get(name)
        skill = self.skills.get(namespace)
        return skill.memory.get(name) if skill else None

    def all_memory(self) -> list[MemoryEntry]:
        entries = list(self.memory.values())
        for skill in self.skills.values():
            entries.extend(skill.memory.values())
        return entries
