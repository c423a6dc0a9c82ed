"""``memory.yml``: the flat project file and the ``schema: public/private`` skill file."""

from __future__ import annotations

import yaml

from agentscript.diagnostics import Severity
from agentscript.mantle.load import yamlsrc as y
from agentscript.mantle.memory import MemoryWriteError, coerce_value
from agentscript.mantle.model import PROJECT_NAMESPACE, MemoryEntry

MEMORY_TYPES = frozenset({"text", "bool", "int", "float", "list", "json", "categorical", "any"})
ENTRY_KEYS = frozenset(
    {
        "type",
        "description",
        "llm_settable",
        "initial_value",
        "enum_values",
        "mutable",
        "pii",
        "anonymization",
        "seed",
    }
)
PROJECT_ONLY_KEYS = frozenset({"mutable", "seed"})


def read_project_memory(text: str, ctx: y.Ctx) -> dict[str, MemoryEntry]:
    """The project file is a flat map; a ``schema:`` wrapper is tolerated (all public)."""
    root = y.compose_mapping(
        text, ctx, "mantle-memory", "memory.yml must be a mapping of entry names"
    )
    if root is None:
        return {}
    pairs = y.items(root, ctx)
    if len(pairs) == 1 and pairs[0][0] == "schema" and y.is_map(pairs[0][2]):
        schema = pairs[0][2]
        sections = {k: v for k, _, v in y.items(schema, ctx)}
        if set(sections) <= {"public", "private"} and sections:
            out: dict[str, MemoryEntry] = {}
            for node in sections.values():
                out.update(_entries(node, PROJECT_NAMESPACE, "public", ctx))
            return out
        return _entries(schema, PROJECT_NAMESPACE, "public", ctx)
    return _entries(root, PROJECT_NAMESPACE, "public", ctx)


def read_skill_memory(text: str, skill_id: str, ctx: y.Ctx) -> dict[str, MemoryEntry]:
    root = y.compose_mapping(
        text, ctx, "mantle-memory", "memory.yml must be a mapping with a 'schema:' key"
    )
    if root is None:
        return {}
    top = {k: (kn, v) for k, kn, v in y.items(root, ctx)}
    if "schema" not in top:
        # A flat file is the project shape; read it as public entries but say how to fix it.
        ctx.add(
            "mantle-memory-shape",
            "a skill memory.yml nests entries under 'schema:' with 'public:' and/or "
            "'private:'; reading these entries as public",
            ctx.span(root),
            Severity.WARNING,
        )
        return _entries(root, skill_id, "public", ctx)
    schema = top["schema"][1]
    if y.is_null(schema):
        return {}
    if not y.is_map(schema):
        ctx.add("mantle-memory", "'schema:' must be a mapping", ctx.span(schema))
        return {}
    out: dict[str, MemoryEntry] = {}
    for key, key_node, node in y.items(schema, ctx):
        if key not in ("public", "private"):
            ctx.add(
                "mantle-unknown-key",
                f"unknown section '{key}' in schema (use 'public:' or 'private:')",
                ctx.span(key_node),
            )
            continue
        for name, entry in _entries(node, skill_id, key, ctx).items():
            if name in out:
                ctx.add(
                    "mantle-duplicate-memory", f"memory entry '{name}' declared twice", entry.span
                )
            out[name] = entry
    return out


def _entries(
    node: yaml.Node, namespace: str, visibility: str, ctx: y.Ctx
) -> dict[str, MemoryEntry]:
    if y.is_null(node):
        return {}
    if not y.is_map(node):
        ctx.add("mantle-memory", "memory entries must be a mapping of names", ctx.span(node))
        return {}
    out: dict[str, MemoryEntry] = {}
    for name, key_node, attrs in y.items(node, ctx):
        entry = _entry(name, key_node, attrs, namespace, visibility, ctx)
        if entry is not None:
            out[name] = entry
    return out


def _entry(
    name: str,
    key_node: yaml.Node,
    node: yaml.Node,
    namespace: str,
    visibility: str,
    ctx: y.Ctx,
) -> MemoryEntry | None:
    span = ctx.span(key_node)
    if not y.is_map(node):
        ctx.add("mantle-memory", f"memory entry '{name}' must be a mapping with 'type:'", span)
        return None
    y.unknown_keys(node, set(ENTRY_KEYS), ctx, f"memory entry '{name}'")
    attrs = {k: (kn, v) for k, kn, v in y.items(node, ctx)}
    is_project = namespace == PROJECT_NAMESPACE
    for key in PROJECT_ONLY_KEYS & attrs.keys():
        if not is_project:
            ctx.add(
                "mantle-memory",
                f"'{key}' is only valid on project memory entries",
                ctx.span(attrs[key][0]),
            )
    type_node = attrs.get("type", (None, None))[1]
    type_name = y.string(type_node, ctx, "type")
    if type_name is None:
        ctx.add("mantle-memory", f"memory entry '{name}' needs a 'type:'", span)
        type_name = "any"
    elif type_name not in MEMORY_TYPES:
        assert type_node is not None
        ctx.add(
            "mantle-memory",
            f"unknown memory type '{type_name}' (one of {', '.join(sorted(MEMORY_TYPES))})",
            ctx.span(type_node),
        )
    enum_values: list[object] = []
    if "enum_values" in attrs:
        enum_node = attrs["enum_values"][1]
        raw = y.value(enum_node, ctx)
        if isinstance(raw, list):
            enum_values = raw
        elif raw is not None:
            ctx.add("mantle-memory", "'enum_values' must be a list", ctx.span(enum_node))
    if type_name == "categorical" and not enum_values:
        ctx.add(
            "mantle-memory",
            f"categorical entry '{name}' has no 'enum_values'",
            span,
            Severity.WARNING,
        )

    def flag(key: str) -> bool:
        return y.boolean(attrs.get(key, (None, None))[1], ctx, key)

    entry = MemoryEntry(
        namespace=namespace,
        name=name,
        type=type_name,
        file=ctx.file,
        span=span,
        description=y.string(attrs.get("description", (None, None))[1], ctx, "description"),
        llm_settable=flag("llm_settable"),
        enum_values=enum_values,
        visibility=visibility,
        write_once=is_project and not flag("mutable"),
        pii=flag("pii"),
        seed=flag("seed"),
    )
    if "initial_value" in attrs:
        _initial_value(entry, attrs["initial_value"][1], ctx)
    return entry


def _initial_value(entry: MemoryEntry, node: yaml.Node, ctx: y.Ctx) -> None:
    """``initial_value`` as a memory write would store it (timestamps as the text written);
    a value the entry's type or ``enum_values`` refuses, or one JSON cannot hold (``!!binary``,
    ``!!set``), is ``mantle-type`` and the entry starts unset."""
    ok, raw = y.try_value(node, ctx)
    if not ok:
        return
    try:
        value = coerce_value(entry, raw)
    except MemoryWriteError as exc:
        ctx.add(
            "mantle-type",
            f"'initial_value' of memory entry '{entry.name}' is refused: {exc}",
            ctx.span(node),
        )
        return
    entry.initial_value = value
    entry.has_initial_value = True
