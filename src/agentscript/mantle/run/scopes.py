"""Memory scopes at run time: who may read or write which entry.

Mantle memory is public (any skill reads it), private (only the owning skill reads or
writes it) or project-wide (everyone reads it). The loader rejects every *written* name that
breaks these rules; this module enforces them for names only known at run time: a tool
reading or writing through ``context.memory`` (``"a" + "." + "size"``), a response's
placeholders and variant conditions. Every refusal fails closed (a read gives None, a write
fails, a condition does not hold) and is recorded as a ``REFUSED_STEP`` with
``source: "memory"``.

``reader`` is the skill on whose behalf the access happens (a tool's own skill, the active
skill for a shared tool, the skill that owns a response), or None for project-level code,
which reads only public and project entries.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agentscript.mantle.model import MemoryEntry, Project, ResponseVariant
from agentscript.trace import TurnTrace
from agentscript.trace_steps import Source, refused_step

_QUALIFIED = re.compile(r"(?:session\.)?([A-Za-z_][\w\-]*)\.([A-Za-z_][\w\-]*)")


def readable(entry: MemoryEntry, reader: str | None) -> bool:
    """Private entries belong to their skill; everything else is readable by anyone."""
    return entry.visibility != "private" or entry.namespace == reader


def scoped_view(project: Project, memory: Mapping[str, Any], reader: str | None) -> dict[str, Any]:
    """``memory`` without the private entries ``reader`` may not see (they read as unset)."""
    out: dict[str, Any] = {}
    for name, value in memory.items():
        entry = project.memory_entry(name)
        if entry is None or readable(entry, reader):
            out[name] = value
    return out


def denied_names(project: Project, text: str, reader: str | None) -> list[str]:
    """Qualified names in ``text`` (a condition or a response) that ``reader`` may not read."""
    out: list[str] = []
    for match in _QUALIFIED.finditer(text):
        entry = project.memory_entry(f"{match.group(1)}.{match.group(2)}")
        if entry is not None and not readable(entry, reader) and entry.qualified_name not in out:
            out.append(entry.qualified_name)
    return out


def variant_denials(project: Project, variant: ResponseVariant, reader: str | None) -> list[str]:
    texts = [variant.text or ""]
    if variant.condition is not None:
        texts.append(variant.condition.text)
    return [name for text in texts for name in denied_names(project, text, reader)]


def refuse_access(
    trace: TurnTrace,
    name: str,
    reader: str | None,
    access: str,
    via: str,
    *,
    node: str | None,
    tool: str | None = None,
    response: str | None = None,
) -> str:
    """Record a refused read or write; returns the reason (for an error result)."""
    owner = name.partition(".")[0]
    reason = (
        f"{name} is private to skill '{owner}'; "
        f"{'skill ' + repr(reader) if reader else 'project-level code'} cannot {access} it"
    )
    refused_step(
        trace,
        name=name,
        reason=reason,
        node=node,
        source=Source.MEMORY,
        access=access,
        via=via,
        reader=reader,
        tool=tool,
        response=response,
    )
    return reason
