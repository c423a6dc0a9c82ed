"""Phase 1: walk the file against the schema, report shape errors, and build the outline.

Procedures, bindings and expressions are not checked here (their references need the whole
outline); they are queued as jobs for phase 2 (``procedures.py``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass, field

from agentscript.check import schema
from agentscript.check.context import Context, closest, suggest
from agentscript.check.exprs import Scope
from agentscript.check.outline import (
    ActionDef,
    ConnectedSubagentInfo,
    ModelConfigBlock,
    ParamInfo,
    SubagentInfo,
    ToolBinding,
    VariableInfo,
)
from agentscript.check.schema import BlockSpec, Field, Kind
from agentscript.check.types import compatible, static_type
from agentscript.check.values import (
    bool_of,
    is_empty,
    kind_matches,
    python_value,
    string_of,
)
from agentscript.diagnostics import Span
from agentscript.expr.nodes import Expr, Literal, reference_path
from agentscript.syntax.interpolation import literal_parts
from agentscript.syntax.tree import (
    Block,
    Document,
    EmptyValue,
    Entry,
    ErrorNode,
    ExprValue,
    SequenceItem,
    Template,
    TemplateStmt,
    TypeRef,
    VarDecl,
)

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(slots=True)
class Jobs:
    """Work for phase 2."""

    # (expression, scope): values of expression fields, defaults.
    exprs: list[tuple[Expr, Scope]] = field(default_factory=list)
    # (template, scope): `|` texts and their `{!expr}` interpolations.
    templates: list[tuple[Template, Scope]] = field(default_factory=list)
    # (node, binding entry): reasoning actions to resolve and check.
    bindings: list[tuple[SubagentInfo, Entry]] = field(default_factory=list)
    # (procedure block, mode, scope).
    procedures: list[tuple[Block, str, Scope]] = field(default_factory=list)
    # Nodes, for node-level rules (hyperclassifier, collect).
    node_entries: list[tuple[SubagentInfo, Entry]] = field(default_factory=list)
    # System messages (welcome, error) entries.
    messages: list[Entry] = field(default_factory=list)
    # Action definitions with the entry of their target (for the URI rules).
    action_targets: list[tuple[ActionDef, Entry]] = field(default_factory=list)
    connected_targets: list[tuple[ConnectedSubagentInfo, Entry]] = field(default_factory=list)
    variable_entries: dict[str, tuple[Entry, dict[str, Entry]]] = field(default_factory=dict)
    root_fields: dict[str, Entry] = field(default_factory=dict)
    config_fields: dict[str, Entry] = field(default_factory=dict)
    access_fields: dict[str, Entry] = field(default_factory=dict)
    system_fields: dict[str, Entry] = field(default_factory=dict)
    connections: list[tuple[str, Entry, dict[str, Entry]]] = field(default_factory=list)


class StructureChecker:
    """Phase 1 of one check run: shapes against the schema, the outline, the phase-2 jobs."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.outline = ctx.outline
        self.jobs = Jobs()
        self.global_scope = Scope()

    # ------------------------------------------------------------ generic field walking

    def _entries_in(self, block: Block, statement: str) -> Iterator[Entry]:
        """The entries of ``block``, in order; a statement among them is reported with the
        message ``statement`` (error nodes were already reported by the parser)."""
        for item in block.items:
            if isinstance(item, ErrorNode):
                continue
            if isinstance(item, Entry):
                yield item
            else:
                self.ctx.error("unexpected-statement", statement, item.span)

    def _new_names(
        self, block: Block, statement: str, taken: Container[str], duplicate: Callable[[str], str]
    ) -> Iterator[tuple[str, Entry]]:
        """Like :meth:`_entries_in`, with each entry's name; an entry whose name is already
        ``taken`` is reported with the message ``duplicate(name)`` and skipped."""
        for item in self._entries_in(block, statement):
            name = str(item.key)
            if name in taken:
                self.ctx.error("duplicate-name", duplicate(name), item.key.span)
                continue
            yield name, item

    def fields(
        self, block: Block | None, spec: BlockSpec, owner: Span, *, variant: bool = False
    ) -> dict[str, Entry]:
        """Check the entries of ``block`` against ``spec``; return the known ones by key.

        Scalar values get their kind checked here; nested plain blocks are walked; every other
        kind (collections, typed maps, procedures) is left to the caller.
        """
        found: dict[str, Entry] = {}
        ctx = self.ctx
        if block is None:
            self._required(found, spec, owner, variant)
            return found
        statement = (
            f"Statements are not allowed directly in {spec.name}; "
            "put them in a procedure such as reasoning.instructions."
        )
        for item in self._entries_in(block, statement):
            key = str(item.key)
            fld = spec.lookup(key, variant=variant)
            if fld is None:
                self._unknown(item, spec, variant)
                continue
            if key in found:
                # An error, not the official warning: the earlier value would be lost silently.
                ctx.error(
                    "duplicate-key",
                    f"'{key}' is set more than once in {spec.name} (first on line "
                    f"{found[key].key.span.line}); keep one.",
                    item.key.span,
                )
            found[key] = item
            if fld.deprecated:
                ctx.warning(
                    "deprecated-field", f"'{key}' is deprecated: {fld.deprecated}.", item.key.span
                )
            self.value(item, fld, key)
        self._required(found, spec, owner, variant)
        return found

    def _unknown(self, item: Entry, spec: BlockSpec, variant: bool) -> None:
        key = str(item.key)
        names = list(spec.fields)
        if variant:
            names += list(spec.variant_fields)
        hint = ""
        meant = closest(item.key.kind, names)
        if meant is not None:
            found = spec.lookup(meant, variant=variant)
            # A named block is written `connection <name>:`; suggesting the bare word would
            # lead to the next error.
            form = (
                f"`{meant} <name>:`" if found and found.kind is schema.Kind.NAMED else f"'{meant}'"
            )
            hint = f" Did you mean {form}?"
        allowed = ", ".join(names) if len(names) <= 12 else ""
        extra = f" Allowed here: {allowed}." if allowed and not hint else ""
        if spec is schema.ROOT:
            code, message = "unknown-block", f"Unknown top-level block '{key}'."
        else:
            code, message = "unknown-field", f"Unknown field '{key}' in {spec.name}."
        self.ctx.error(code, f"{message}{hint}{extra}", item.key.span)

    def _required(
        self, found: dict[str, Entry], spec: BlockSpec, owner: Span, variant: bool
    ) -> None:
        for name, fld in spec.fields.items():
            if fld.required and name not in found:
                self.ctx.error(
                    "missing-required-field",
                    f"{spec.name} is missing the required field '{name}'; add `{name}: ...`.",
                    owner,
                )

    def value(self, entry: Entry, fld: Field, key: str) -> None:
        """Check one entry's value shape against its field kind."""
        kind = fld.kind
        value = entry.value
        ctx = self.ctx
        if kind in (Kind.BLOCK, Kind.COLLECTION, Kind.TYPED_MAP, Kind.NAMED, Kind.FREE):
            if value is not None and not is_empty(value):
                if kind is Kind.FREE:
                    return
                ctx.error(
                    "type-mismatch",
                    f"'{key}' expects {kind.value} (indented entries below it), not a value.",
                    value.span,
                )
                return
            if kind is Kind.BLOCK and fld.block is not None and entry.block is not None:
                self.fields(entry.block, fld.block, entry.key.span)
            elif kind is Kind.BLOCK and fld.block is not None and entry.block is None:
                self._required({}, fld.block, entry.key.span, False)
            return
        if kind is Kind.PROCEDURE:
            if isinstance(value, Template):
                if not fld.templates:
                    ctx.error(
                        "template-in-deterministic-procedure",
                        f"'{key}' is deterministic: `|` text is only for reasoning.instructions. "
                        "Use set/run/if/transition here.",
                        value.span,
                    )
                else:
                    ctx.error(
                        "invalid-procedure-value",
                        f"'{key}' expects a procedure (`->` or indented statements).",
                        value.span,
                    )
            elif value is not None and not is_empty(value):
                ctx.error(
                    "invalid-procedure-value",
                    f"'{key}' expects a procedure (indented statements), not a value.",
                    value.span,
                )
            return
        if kind is Kind.INSTRUCTIONS:
            if value is not None and not kind_matches(kind, value) and not is_empty(value):
                ctx.error(
                    "type-mismatch",
                    f"'{key}' expects a procedure (`->`), `|` text or a string.",
                    value.span,
                )
            elif value is None and entry.block is not None and _blank_procedure(entry.block):
                ctx.error(
                    "empty-block",
                    f"'{key}' has no content: write the instructions after `|`, or remove it.",
                    entry.block.span,
                )
            return
        if kind is Kind.SEQUENCE and value is None:
            if entry.block is None:
                ctx.error("missing-value", f"'{key}' needs a list of `- ` items.", entry.key.span)
                return
            for item in entry.block.items:
                if not isinstance(item, SequenceItem | ErrorNode):
                    ctx.error(
                        "invalid-sequence-element",
                        f"'{key}' expects `- value` items.",
                        item.span,
                    )
            # Sequence items are free-form values (object names, prompts): not checked
            # as expressions.
            return
        if value is None or isinstance(value, EmptyValue):
            if entry.block is not None and kind is Kind.STRING:
                ctx.error(
                    "type-mismatch",
                    f"'{key}' expects {kind.value}; for several lines write `{key}: |` "
                    "and indent the text.",
                    entry.key.span,
                )
            else:
                ctx.error("missing-value", f"'{key}' needs a value ({kind.value}).", entry.key.span)
            return
        if not kind_matches(kind, value):
            ctx.error("type-mismatch", f"'{key}' expects {kind.value}.", value.span)
            return
        if fld.choices:
            text = string_of(entry)
            if text is not None and text.lower() not in fld.choices:
                ctx.error(
                    "constraint-enum",
                    f"'{key}' must be one of: {', '.join(fld.choices)}.",
                    value.span,
                )
        if entry.block is not None:
            ctx.error(
                "unexpected-block",
                f"'{key}' takes a single value; remove the indented lines below it.",
                entry.block.span,
            )

    # ------------------------------------------------------------ document

    def run(self, doc: Document) -> Jobs:
        """Walk ``doc``, filling ``ctx.outline``; return what phase 2 has to check."""
        outline = self.outline
        ctx = self.ctx
        named: dict[str, list[Entry]] = {}
        root = self._root_fields(doc.body, named)
        self.jobs.root_fields = root

        if "knowledge" in root:
            ctx.has_knowledge = True
            block = root["knowledge"].block
            if block is not None:
                outline.knowledge.update(_python_values(block))

        if "variables" in root:
            self._variables(root["variables"])
        if "system" in root:
            self._system(root["system"])
        if "config" in root:
            self._config(root["config"])
        if "language" in root and root["language"].block is not None:
            outline.language.update(_python_values(root["language"].block))
        if "access" in root:
            self.jobs.access_fields = self._entries(root["access"])
        if "model_config" in root:
            outline.model_config = self._model_config(root["model_config"])

        # Nodes first (all names known before bodies are checked in phase 2).
        seen_nodes: dict[str, Entry] = {}
        starts: list[Entry] = []
        for kind in schema.SUBAGENT_KINDS:
            for entry in named.get(kind, ()):
                name = entry.key.name or kind
                if name in seen_nodes:
                    ctx.error(
                        "duplicate-name",
                        f"A subagent named '{name}' is already defined (line "
                        f"{seen_nodes[name].span.line}); rename one of them.",
                        entry.key.span,
                    )
                    continue
                seen_nodes[name] = entry
                if kind == "start_agent":
                    starts.append(entry)
                outline.subagents[name] = self._node(entry, kind, name)
        if len(starts) != 1:
            span = starts[1].key.span if starts else doc.body.span
            ctx.error(
                "singular-collection",
                "An agent needs exactly one `start_agent` block (the entry point); "
                + ("remove the extra ones." if starts else "add `start_agent <name>:`."),
                span if starts else _first_line(doc.body.span),
            )
        if starts:
            outline.start_agent = starts[0].key.name or "start_agent"

        seen_connected: dict[str, Entry] = {}
        for entry in named.get("connected_subagent", ()):
            name = entry.key.name or "connected_subagent"
            if name in seen_connected or name in seen_nodes:
                ctx.error(
                    "duplicate-name",
                    f"'{name}' is already defined; rename this connected_subagent.",
                    entry.key.span,
                )
                continue
            seen_connected[name] = entry
            outline.connected_subagents[name] = self._connected(entry, name)

        seen_connections: set[str] = set()
        for entry in named.get("connection", ()):
            name = entry.key.name or "connection"
            if name in seen_connections:
                ctx.error(
                    "duplicate-name",
                    f"connection '{name}' is defined twice; merge them.",
                    entry.key.span,
                )
            seen_connections.add(name)
            found = self._connection(entry)
            self.jobs.connections.append((name, entry, found))
            message = found.get("escalation_message")
            if message is not None and isinstance(message.value, Template | ExprValue):
                value = message.value
                self.outline.escalation_messages[name] = (
                    value.expr if isinstance(value, ExprValue) else value
                )
        for entry in named.get("modality", ()):
            self.fields(entry.block, schema.BlockSpec("modality", {}), entry.key.span)
        return self.jobs

    def _root_fields(self, body: Block, named: dict[str, list[Entry]]) -> dict[str, Entry]:
        found: dict[str, Entry] = {}
        ctx = self.ctx
        root = schema.ROOT
        statement = "Statements must be inside a procedure (e.g. reasoning.instructions)."
        for item in self._entries_in(body, statement):
            parts = item.key.parts
            fld = root.fields.get(parts[0])
            if fld is None or (len(parts) > 2):
                self._unknown(item, root, False)
                continue
            if fld.kind is Kind.NAMED:
                if len(parts) == 1:
                    ctx.warning(
                        "anonymous-named-block",
                        f"'{parts[0]}' should have a name: `{parts[0]} my_name:`.",
                        item.key.span,
                    )
                elif not _IDENT.match(parts[1]):
                    ctx.error(
                        "invalid-key-pattern",
                        f"'{parts[1]}' is not a valid name (letters, digits, underscores).",
                        item.key.span,
                    )
                if fld.deprecated:
                    ctx.warning(
                        "deprecated-field",
                        f"'{parts[0]}' is deprecated: {fld.deprecated}.",
                        item.key.span,
                    )
                if item.value is not None and not is_empty(item.value):
                    ctx.error(
                        "type-mismatch",
                        f"'{item.key}' expects indented fields, not a value.",
                        item.value.span,
                    )
                named.setdefault(parts[0], []).append(item)
                continue
            if len(parts) == 2:
                ctx.error(
                    "unexpected-block-name",
                    f"'{parts[0]}' does not take a name; write `{parts[0]}:`.",
                    item.key.span,
                )
            if parts[0] in found:
                ctx.error(
                    "duplicate-key",
                    f"'{parts[0]}' is defined more than once; merge the blocks.",
                    item.key.span,
                )
            found[parts[0]] = item
            self.value(item, fld, parts[0])
        return found

    def _entries(self, entry: Entry) -> dict[str, Entry]:
        return {str(e.key): e for e in entry.block.entries()} if entry.block else {}

    # ------------------------------------------------------------ blocks

    def _system(self, entry: Entry) -> None:
        found = self._entries(entry)
        self.jobs.system_fields = found
        outline = self.outline
        if "instructions" in found:
            outline.system_instructions = self._text(found["instructions"], self.global_scope)
        outline.strip_salesforce_instructions = bool_of(found.get("strip_salesforce_instructions"))
        messages = found.get("messages")
        if messages is not None:
            msgs = self._entries(messages)
            for key in ("welcome", "error"):
                if key in msgs:
                    text = self._text(msgs[key], self.global_scope)
                    setattr(outline.messages, key, text)
                    self.jobs.messages.append(msgs[key])

    def _text(self, entry: Entry, scope: Scope) -> Template | Expr | None:
        value = entry.value
        if isinstance(value, Template):
            self.jobs.templates.append((value, scope))
            return value
        if isinstance(value, ExprValue):
            self.jobs.exprs.append((value.expr, scope))
            parts = literal_parts(value.expr) if isinstance(value.expr, Literal) else None
            if parts is not None:  # the engine fills these in: check their references too
                self.jobs.templates.append((Template(value.span, [], parts), scope))
            return value.expr
        return None

    def _config(self, entry: Entry) -> None:
        found = self._entries(entry)
        self.jobs.config_fields = found
        config = self.outline.config
        for key, item in found.items():
            if item.block is not None and item.value is None:
                config[key] = _python_values(item.block)
            else:
                config[key] = python_value(item.value)
                if isinstance(item.value, ExprValue):
                    self.jobs.exprs.append((item.value.expr, self.global_scope))

    def _model_config(self, entry: Entry) -> ModelConfigBlock:
        config = ModelConfigBlock()
        if isinstance(entry.value, ExprValue | Template):
            # `model_config: "model://x"` shorthand (seen in docs).
            text = string_of(entry)
            config.model = text
            return config
        found = self._entries(entry)
        config.model = string_of(found.get("model"))
        params = found.get("params")
        if params is not None and params.block is not None:
            config.params.update(_python_values(params.block))
        return config

    # ------------------------------------------------------------ typed maps

    def typed_map(
        self, entry: Entry, props: BlockSpec, what: str, *, bindable: bool = False
    ) -> list[tuple[str, Entry, VarDecl | None, dict[str, Entry]]]:
        """Declarations `name: [modifier] type [= default]` with their property blocks."""
        out: list[tuple[str, Entry, VarDecl | None, dict[str, Entry]]] = []
        if entry.block is None:
            return out
        seen: set[str] = set()
        ctx = self.ctx
        statement = f"{what} holds declarations like `name: string`, not statements."
        for item in self._entries_in(entry.block, statement):
            name = str(item.key)
            if len(item.key.parts) > 1:
                ctx.error(
                    "composite-key",
                    f"'{name}' is not a valid {what} name (one word, no spaces).",
                    item.key.span,
                )
            if name in seen:
                ctx.error(
                    "duplicate-name",
                    f"{what} '{name}' is declared more than once; remove one.",
                    item.key.span,
                )
                continue
            seen.add(name)
            decl = item.value if isinstance(item.value, VarDecl) else None
            if decl is None and bindable and isinstance(item.value, ExprValue):
                # Variant parameters bind a value instead of declaring a type.
                out.append((name, item, None, self.fields(item.block, props, item.key.span)))
                self.jobs.exprs.append((item.value.expr, self.global_scope))
                continue
            if decl is None:
                ctx.error(
                    "missing-type",
                    f"{what} '{name}' needs a type: `{name}: string` (or number, boolean, ...).",
                    item.key.span,
                )
            else:
                self._type(decl.type)
            found = self.fields(item.block, props, item.key.span)
            out.append((name, item, decl, found))
        return out

    def _type(self, ref: TypeRef) -> None:
        ctx = self.ctx
        if ref.name == "list":
            if ref.parameter is None:
                ctx.error(
                    "invalid-type-parameter",
                    "'list' needs an element type: list[string].",
                    ref.span,
                )
            elif ref.parameter.name == "list":
                ctx.error(
                    "nested-list-type",
                    "Lists of lists are not supported; use list[object].",
                    ref.parameter.span,
                )
            else:
                self._type(ref.parameter)
            return
        if ref.name not in schema.PRIMITIVE_TYPES:
            ctx.error(
                "unknown-type",
                f"Unknown type '{ref.name}'.{suggest(ref.name, schema.PRIMITIVE_TYPES)} "
                "Types: string, number, boolean, object, integer, long, currency, date, "
                "datetime, time, timestamp, list[T].",
                ref.span,
            )
        elif ref.parameter is not None:
            ctx.error(
                "unexpected-type-parameters",
                f"'{ref.name}' takes no type parameter; only list[T] does.",
                ref.span,
            )

    def _variables(self, entry: Entry) -> None:
        ctx = self.ctx
        for name, item, decl, props in self.typed_map(
            entry, schema.VARIABLE_PROPERTIES, "variable"
        ):
            if decl is None:
                continue
            self.jobs.variable_entries[name] = (item, props)
            source_entry = props.get("source")
            source: str | None = None
            if source_entry is not None and isinstance(source_entry.value, ExprValue):
                path = reference_path(source_entry.value.expr)
                source = ".".join(path) if path else None
            info = VariableInfo(
                name=name,
                modifier=decl.modifier,
                type=str(decl.type),
                default=decl.default,
                description=string_of(props.get("description")),
                span=item.key.span,
                label=string_of(props.get("label")),
                source=source,
                visibility=string_of(props.get("visibility")),
                properties={
                    k: (
                        v.value.expr
                        if k == "source" and isinstance(v.value, ExprValue)
                        else python_value(v.value)
                    )
                    for k, v in props.items()
                },
            )
            self.outline.variables[name] = info
            if name in schema.RESERVED_NAMES:
                ctx.error(
                    "reserved-name",
                    f"'{name}' is a reserved word (a type or modifier); rename the variable.",
                    item.key.span,
                )
            if decl.modifier is not None and decl.modifier not in schema.MODIFIERS:
                ctx.error(
                    "invalid-modifier",
                    f"Unknown modifier '{decl.modifier}'; use `mutable` or `linked`.",
                    decl.span,
                )
            if decl.default is not None:
                self.jobs.exprs.append((decl.default, self.global_scope))
                actual = static_type(decl.default, self.outline)
                if actual is not None and not compatible(info.type, actual):
                    ctx.warning(
                        "variable-default-type-mismatch",
                        f"Variable '{name}' is declared as '{info.type}' but its default is "
                        f"a {actual}.",
                        decl.default.span,
                    )

    def _params(self, entry: Entry | None, props: BlockSpec, what: str) -> dict[str, ParamInfo]:
        out: dict[str, ParamInfo] = {}
        if entry is None:
            return out
        for name, item, decl, found in self.typed_map(entry, props, what, bindable=True):
            values = {k: python_value(v.value) for k, v in found.items()}
            required = values.get("is_required")
            planner = values.get("is_used_by_planner")
            out[name] = ParamInfo(
                name=name,
                type=str(decl.type) if decl else "object",
                default=decl.default
                if decl
                else (item.value.expr if isinstance(item.value, ExprValue) else None),
                span=item.key.span,
                description=string_of(found.get("description")),
                label=string_of(found.get("label")),
                is_required=required if isinstance(required, bool) else None,
                filter_from_agent=values.get("filter_from_agent") is True,
                is_displayable=values.get("is_displayable") is True,
                is_user_input=values.get("is_user_input") is True,
                is_used_by_planner=planner if isinstance(planner, bool) else None,
                properties=values,
            )
            if decl is not None and decl.default is not None:
                self.jobs.exprs.append((decl.default, self.global_scope))
        return out

    # ------------------------------------------------------------ nodes

    def _node(self, entry: Entry, kind: str, name: str) -> SubagentInfo:
        variant = entry.block is not None and entry.block.get("schema") is not None
        found = self.fields(entry.block, schema.SUBAGENT, entry.key.span, variant=variant)
        node = SubagentInfo(name=name, kind=kind, span=entry.key.span)
        node.description = string_of(found.get("description"))
        node.label = string_of(found.get("label"))
        node.schema = string_of(found.get("schema"))
        scope = Scope(node=node)
        if "description" in found:
            self._text(found["description"], scope)
        system = found.get("system")
        if system is not None:
            sys_fields = self._entries(system)
            if "instructions" in sys_fields:
                node.system_instructions = self._text(sys_fields["instructions"], scope)
            node.strip_salesforce_instructions = bool_of(
                sys_fields.get("strip_salesforce_instructions")
            )
        for hook in ("before_reasoning", "after_reasoning"):
            hook_entry = found.get(hook)
            if hook_entry is not None and hook_entry.block is not None:
                setattr(node, hook, hook_entry.block)
                self.jobs.procedures.append((hook_entry.block, "deterministic", scope))
        for hook in ("on_init", "on_exit"):
            hook_entry = found.get(hook)
            if hook_entry is not None and hook_entry.block is not None:
                self.jobs.procedures.append((hook_entry.block, "deterministic", scope))
        actions = found.get("actions")
        if actions is not None:
            self._actions(actions, node)
        reasoning = found.get("reasoning")
        if reasoning is not None and reasoning.block is not None:
            rfound = self._entries(reasoning)
            instr = rfound.get("instructions")
            if instr is not None:
                if instr.block is not None and not isinstance(instr.value, Template):
                    node.instructions = instr.block
                    self.jobs.procedures.append((instr.block, "instructions", scope))
                else:
                    node.instructions = self._text(instr, scope)
            tools = rfound.get("actions")
            if tools is not None and tools.block is not None:
                self._bindings(tools.block, node)
        if "model_config" in found:
            node.model_config = self._model_config(found["model_config"])
        skills = found.get("skills")
        if skills is not None and skills.block is not None:
            for skill in skills.block.entries():
                sf = self.fields(skill.block, schema.SKILL, skill.key.span)
                node.skills[str(skill.key)] = string_of(sf.get("target")) or ""
        self.jobs.node_entries.append((node, entry))
        return node

    def _actions(self, entry: Entry, node: SubagentInfo) -> None:
        if entry.block is None:
            return
        ctx = self.ctx
        for name, item in self._new_names(
            entry.block,
            "'actions' holds action definitions (`Name:` with target, inputs, ...).",
            node.actions,
            lambda name: f"Action '{name}' is defined more than once in '{node.name}'.",
        ):
            if item.value is not None and not is_empty(item.value):
                ctx.error(
                    "type-mismatch",
                    f"Action '{name}' is a definition block (target, inputs, outputs); "
                    "to offer an action to the LLM, bind it under reasoning.actions.",
                    item.value.span,
                )
            found = self.fields(item.block, schema.ACTION, item.key.span)
            action = ActionDef(
                name=name,
                target=string_of(found.get("target")),
                span=item.key.span,
                description=string_of(found.get("description")),
                label=string_of(found.get("label")),
                inputs=self._params(found.get("inputs"), schema.INPUT_PROPERTIES, "input"),
                outputs=self._params(found.get("outputs"), schema.OUTPUT_PROPERTIES, "output"),
                require_user_confirmation=bool_of(found.get("require_user_confirmation")) is True,
                include_in_progress_indicator=bool_of(found.get("include_in_progress_indicator"))
                is True,
                progress_indicator_message=string_of(found.get("progress_indicator_message")),
                source=string_of(found.get("source")),
            )
            if "description" in found:
                self._text(found["description"], Scope(node=node))
            node.actions[name] = action
            if "target" in found:
                self.jobs.action_targets.append((action, found["target"]))

    def _bindings(self, block: Block, node: SubagentInfo) -> None:
        for name, item in self._new_names(
            block,
            "reasoning.actions holds bindings like `name: @actions.X`.",
            node.tools,
            lambda name: f"Reasoning action '{name}' is bound more than once in '{node.name}'.",
        ):
            # Registered now so `{!@actions.name}` resolves; filled in phase 2.
            node.tools[name] = ToolBinding(name=name, kind=None, span=item.key.span)
            self.jobs.bindings.append((node, item))

    def _connected(self, entry: Entry, name: str) -> ConnectedSubagentInfo:
        found = self.fields(entry.block, schema.CONNECTED_SUBAGENT, entry.key.span)
        info = ConnectedSubagentInfo(name=name, span=entry.key.span)
        info.target = string_of(found.get("target"))
        info.label = string_of(found.get("label"))
        info.description = string_of(found.get("description"))
        info.loading_text = string_of(found.get("loading_text"))
        info.inputs = self._params(found.get("inputs"), schema.INPUT_PROPERTIES, "input")
        delegate = bool_of(found.get("delegate_escalation"))
        info.delegate_escalation = delegate is not False
        after = found.get("after_response")
        if after is not None and after.block is not None:
            info.after_response = after.block
            self.jobs.procedures.append((after.block, "after_response", Scope()))
        if "target" in found:
            self.jobs.connected_targets.append((info, found["target"]))
        return info

    def _connection(self, entry: Entry) -> dict[str, Entry]:
        found = self.fields(entry.block, schema.CONNECTION, entry.key.span)
        inputs = found.get("inputs")
        names = self._params(inputs, schema.CONNECTION_INPUT_PROPERTIES, "connection input")
        scope = Scope(connection_inputs=frozenset(names), in_connection=True)
        for key in ("additional_system_instructions", "escalation_message", "description"):
            if key in found:
                self._text(found[key], scope)
        reasoning = found.get("reasoning")
        if reasoning is not None and reasoning.block is not None:
            rfields = self._entries(reasoning)
            if "instructions" in rfields:
                self._text(rfields["instructions"], scope)
            actions = rfields.get("response_actions")
            if actions is not None and actions.block is not None:
                for item in actions.block.entries():
                    if isinstance(item.value, ExprValue):
                        self.jobs.exprs.append((item.value.expr, scope))
        formats = found.get("response_formats")
        if formats is not None and formats.block is not None:
            for item in formats.block.entries():
                self.fields(item.block, schema.RESPONSE_FORMAT, item.key.span)
        return found


def _blank_procedure(block: Block) -> bool:
    """Only empty `|` lines (or nothing): instructions that can never say anything."""
    return all(
        isinstance(item, TemplateStmt) and not "".join(map(str, item.template.parts)).strip()
        for item in block.items
    )


def _python_values(block: Block) -> dict[str, object]:
    """The entries of ``block`` as Python values by key (a later duplicate wins)."""
    return {str(entry.key): python_value(entry.value) for entry in block.entries()}


def _first_line(span: Span) -> Span:
    return Span(span.line, span.column, span.line, span.column + 1)
