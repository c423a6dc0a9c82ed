"""Schema tables of the ``agentscript`` and ``agentforce`` dialects.

One table describes both dialects: the runtime accepts every Agentforce block so that the public
corpus runs under either name; the dialect only switches the Salesforce-org rules (see
``rules.py``). Tables are plain data, built once at import time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from agentscript.expr.evaluate import BUILTINS
from agentscript.expr.values import KNOWN_TYPES


class Kind(Enum):
    STRING = "a string"
    NULLABLE_STRING = "a string or None"
    BOOL = "True or False"
    NUMBER = "a number"
    EXPR = "an expression"
    REFERENCE = "an @namespace.member reference"
    BLOCK = "a block"
    NAMED = "a named block"  # top level: `subagent name:`
    COLLECTION = "a collection of named blocks"  # children keyed by a user-chosen name
    TYPED_MAP = "typed declarations"  # `name: [modifier] type [= default]`
    PROCEDURE = "a procedure"
    INSTRUCTIONS = "a procedure or text"  # reasoning.instructions
    SEQUENCE = "a list of `- ` items"
    FREE = "anything"  # structure defined elsewhere (model params, voice settings)


@dataclass(frozen=True, slots=True)
class Field:
    kind: Kind
    block: BlockSpec | None = None
    required: bool = False
    deprecated: str | None = None
    # For procedures: whether `|` template lines are allowed.
    templates: bool = True
    # For STRING fields with a closed set of values (compared case-insensitively).
    choices: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class BlockSpec:
    name: str
    fields: Mapping[str, Field] = field(default_factory=dict)
    # `additional_parameter__<anything>` style keys.
    wildcard_prefixes: tuple[tuple[str, Field], ...] = ()
    # Fields only valid when the block declares `schema:` (custom subagent variants).
    variant_fields: Mapping[str, Field] = field(default_factory=dict)

    def lookup(self, key: str, *, variant: bool = False) -> Field | None:
        found = self.fields.get(key)
        if found is not None:
            return found
        if variant:
            found = self.variant_fields.get(key)
            if found is not None:
                return found
        for prefix, wildcard in self.wildcard_prefixes:
            if key.startswith(prefix) and len(key) > len(prefix):
                return wildcard
        return None


S = Field(Kind.STRING)
NS = Field(Kind.NULLABLE_STRING)
B = Field(Kind.BOOL)
N = Field(Kind.NUMBER)
E = Field(Kind.EXPR)
SEQ = Field(Kind.SEQUENCE)
FREE = Field(Kind.FREE)


def block(name: str, **fields: Field) -> Field:
    return Field(Kind.BLOCK, BlockSpec(name, fields))


NO_TEMPLATES = "before_reasoning, after_reasoning and other deterministic procedures"

# The declared types the runtime knows (expr/values.py), without the `list[...]` constructor.
PRIMITIVE_TYPES = KNOWN_TYPES - {"list"}
MODIFIERS = frozenset({"mutable", "linked"})
RESERVED_NAMES = PRIMITIVE_TYPES | MODIFIERS | {"list"}

VARIABLE_PROPERTIES = BlockSpec(
    "variable properties",
    {
        "description": S,
        "label": S,
        "is_required": B,
        "source": Field(Kind.REFERENCE),
        "visibility": Field(Kind.STRING, choices=("internal", "external")),
        "is_displayable": B,
        "is_used_by_planner": B,
    },
)
INPUT_PROPERTIES = BlockSpec(
    "input properties",
    {
        "label": S,
        "description": S,
        "is_required": B,
        "complex_data_type_name": S,
        "schema": S,
        "is_user_input": B,
        "filter_from_agent": B,
        "is_displayable": B,
        "is_used_by_planner": B,
    },
)
OUTPUT_PROPERTIES = BlockSpec(
    "output properties",
    {
        "label": S,
        "description": S,
        "developer_name": S,
        "is_displayable": B,
        "is_used_by_planner": B,
        "complex_data_type_name": S,
        "filter_from_agent": B,
    },
)
CONNECTION_INPUT_PROPERTIES = BlockSpec("connection input properties", {"description": S})

MODEL_CONFIG = block("model_config", model=S, params=FREE)

ACTION = BlockSpec(
    "action",
    {
        "description": S,
        "label": S,
        "inputs": Field(Kind.TYPED_MAP, INPUT_PROPERTIES),
        "outputs": Field(Kind.TYPED_MAP, OUTPUT_PROPERTIES),
        "target": Field(Kind.STRING, required=True),
        "source": S,
        "require_user_confirmation": B,
        "include_in_progress_indicator": B,
        "progress_indicator_message": S,
    },
)

# A reasoning action binding: `name: @target [to @x]` with these entries plus statements.
BINDING = BlockSpec("reasoning action", {"description": S, "label": S})

REASONING = BlockSpec(
    "reasoning",
    {
        "instructions": Field(Kind.INSTRUCTIONS),
        "actions": Field(Kind.COLLECTION, BINDING),
    },
)

SKILL = BlockSpec("skill", {"target": Field(Kind.STRING, required=True)})

DETERMINISTIC = Field(Kind.PROCEDURE, templates=False)

SUBAGENT = BlockSpec(
    "subagent",
    {
        "label": S,
        "description": Field(Kind.STRING, required=True),
        "system": block("system", instructions=S, strip_salesforce_instructions=B),
        "actions": Field(Kind.COLLECTION, ACTION),
        "reasoning": Field(Kind.BLOCK, REASONING),
        "schema": S,
        "before_reasoning": DETERMINISTIC,
        "after_reasoning": DETERMINISTIC,
        "model_config": MODEL_CONFIG,
        "skills": Field(Kind.COLLECTION, SKILL),
    },
    variant_fields={"parameters": FREE, "on_init": DETERMINISTIC, "on_exit": DETERMINISTIC},
)

CONNECTED_SUBAGENT = BlockSpec(
    "connected_subagent",
    {
        "target": Field(Kind.STRING, required=True),
        "label": S,
        "description": S,
        "loading_text": S,
        "inputs": Field(Kind.TYPED_MAP, INPUT_PROPERTIES),
        "after_response": DETERMINISTIC,
        "delegate_escalation": B,
    },
)

RESPONSE_FORMAT = BlockSpec(
    "response format",
    {
        "label": S,
        "description": Field(Kind.STRING, required=True),
        "source": S,
        "target": S,
        "inputs": FREE,
    },
)

CONNECTION = BlockSpec(
    "connection",
    {
        "label": S,
        "description": S,
        "source": S,
        "inputs": Field(Kind.TYPED_MAP, CONNECTION_INPUT_PROPERTIES),
        "additional_system_instructions": S,
        "reasoning": block(
            "connection reasoning",
            instructions=S,
            response_actions=Field(Kind.COLLECTION, BlockSpec("response action")),
        ),
        "response_formats": Field(Kind.COLLECTION, RESPONSE_FORMAT),
        "adaptive_response_allowed": B,
        "escalation_message": S,
        "outbound_route_type": S,
        "outbound_route_name": S,
    },
)

CONFIG = BlockSpec(
    "config",
    {
        "description": S,
        "developer_name": S,
        "agent_label": S,
        "agent_description": S,
        "agent_type": S,
        "agent_id": S,
        "agent_name": S,
        "default_agent_user": Field(
            Kind.NULLABLE_STRING,
            deprecated="'config.default_agent_user' moved to 'access.default_agent_user'",
        ),
        "agent_version": S,
        "enable_enhanced_event_logs": B,
        "company": S,
        "role": S,
        "planner_type": S,
        "debug": B,
        "max_tokens": N,
        "temperature": N,
        "agent_template": S,
        "outbound_flow": S,
        "user_locale": Field(Kind.STRING, deprecated="use the 'language' block instead"),
        "runtime": block(
            "runtime",
            streaming=B,
            thought_chunks=B,
            citation=B,
            groundedness=B,
            reset_to_initial_node=B,
        ),
        "file_upload": Field(
            Kind.BLOCK,
            BlockSpec(
                "file_upload",
                {
                    "mode": Field(Kind.STRING, choices=("auto", "managed", "disabled", "error")),
                    "message": NS,
                },
            ),
        ),
    },
    wildcard_prefixes=(("additional_parameter__", E),),
)

SYSTEM = BlockSpec(
    "system",
    {
        "instructions": S,
        "messages": block("messages", welcome=S, error=Field(Kind.STRING, required=True)),
        "strip_salesforce_instructions": B,
        "recommended_prompts": block(
            "recommended_prompts", in_conversation=B, welcome_screen=B, starter_prompts=SEQ
        ),
    },
)

ROOT = BlockSpec(
    "file",
    {
        "system": Field(Kind.BLOCK, SYSTEM),
        "config": Field(Kind.BLOCK, CONFIG),
        "variables": Field(Kind.TYPED_MAP, VARIABLE_PROPERTIES),
        "language": block(
            "language",
            adaptive=B,
            default_locale=S,
            additional_locales=S,
            all_additional_locales=B,
        ),
        "connected_subagent": Field(Kind.NAMED, CONNECTED_SUBAGENT),
        "start_agent": Field(Kind.NAMED, SUBAGENT),
        "subagent": Field(Kind.NAMED, SUBAGENT),
        "topic": Field(Kind.NAMED, SUBAGENT, deprecated="replace 'topic' with 'subagent'"),
        "model_config": MODEL_CONFIG,
        "knowledge": block(
            "knowledge", citations_url=S, rag_feature_config_id=S, citations_enabled=B
        ),
        "connection": Field(Kind.NAMED, CONNECTION),
        "modality": Field(Kind.NAMED, BlockSpec("modality")),
        "access": block(
            "access",
            default_agent_user=NS,
            sharing_policy=block(
                "sharing_policy", use_default_sharing_entities=B, custom_sharing_entities=SEQ
            ),
            verified_customer_record_access=block(
                "verified_customer_record_access", use_default_objects=B, additional_objects=SEQ
            ),
        ),
        "context": block(
            "context",
            memory=block("memory", enabled=B),
            user_profile=block("user_profile", enabled=B),
            past_conversations=block("past_conversations", enabled=B),
        ),
    },
)

# Node kinds that share the subagent namespace.
SUBAGENT_KINDS = ("start_agent", "subagent", "topic")

UTILS = frozenset({"transition", "setVariables", "escalate", "end_session"})
SYSTEM_VARIABLES: Mapping[str, frozenset[str] | None] = {
    "user_input": None,
    "current_modality": None,
    "current_connection": None,
    "last_reply": frozenset({"interrupted", "interrupted_heard_text"}),
}
# Salesforce context objects, valid only as a linked variable's `source`.
CONTEXT_SOURCES: Mapping[str, frozenset[str]] = {
    "MessagingSession": frozenset({"MessagingEndUserId", "Id", "EndUserLanguage"}),
    "MessagingEndUser": frozenset({"ContactId"}),
    "VoiceCall": frozenset({"Id"}),
}
NODE_NAMESPACES = frozenset({"subagent", "topic", "start_agent"})
TRANSITION_NAMESPACES = NODE_NAMESPACES | {"connected_subagent"}
# The functions expressions may call: the evaluator's own list.
FUNCTIONS = BUILTINS

# Action target schemes accepted by the Agentforce linter (compared case-insensitively)
# plus the schemes this runtime implements itself.
AGENTFORCE_SCHEMES = frozenset(
    s.lower()
    for s in [
        "api",
        "apex",
        "apexRest",
        "auraEnabled",
        "cdpMlPrediction",
        "createCatalogItemRequest",
        "decisionTableAction",
        "executeIntegrationProcedure",
        "expressionSet",
        "externalConnector",
        "externalService",
        "flow",
        "generatePromptResponse",
        "integrationProcedureAction",
        "mcpTool",
        "platformMcpTool",
        "namedQuery",
        "placeholder",
        "prompt",
        "quickAction",
        "retriever",
        "runExpressionSet",
        "serviceCatalog",
        "slack",
        "standardInvocableAction",
    ]
)
RUNTIME_SCHEMES = frozenset({"python", "http", "https", "mcp"})

HYPERCLASSIFIER_MODEL = "model://sfdc_ai__DefaultEinsteinHyperClassifier"

ALLOWED_AGENT_TYPES = frozenset(
    t.lower()
    for t in [
        "AgentforceServiceAgent",
        "EinsteinSDR",
        "SalesEinsteinCoach",
        "BankingServiceAgent",
        "ServicePlanner",
        "AppDevAgent",
        "AgentforceEmployeeAgent",
        "CustomAgent",
        "LightningAppBuilder",
        "SalesCanvasAgent",
        "ScaleAgent",
        "ThirdPartyA2AAgent",
    ]
)
