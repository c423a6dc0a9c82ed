"""Delivering a response by name: the variant chosen now, placeholders filled, buttons and
metadata carried along, all within the reader's memory scope (:mod:`.scopes`).

A response's reader is its own skill (it is declared in ``skills/<id>/responses.yml``), else
the skill active when it is delivered (a project-root or built-in response), else nobody
(project-level). The reader is the "skill-local" of Mantle's "bare ``{entry}``: skill-local
first, then project": a bare placeholder reads the reader's entry, then the project's.

A response is rendered against the memory its reader may see: another skill's private
entries read as unset, so a condition on them does not hold and a placeholder naming them
stays as written; each such name is recorded as a refused read. Nothing here raises for bad
data: a response that renders empty is not said.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentscript.mantle.model import Project, ResponseVariant
from agentscript.mantle.queries import render_response_text, select_variant
from agentscript.mantle.run.scopes import refuse_access, scoped_view, variant_denials
from agentscript.trace import TurnTrace


@dataclass(slots=True)
class Rendered:
    """A response ready to say: its text, buttons (``{title, payload}``) and metadata."""

    name: str
    text: str
    variant: ResponseVariant
    buttons: list[dict[str, Any]] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)


def render(
    project: Project,
    trace: TurnTrace | None,
    memory: Mapping[str, Any],
    name: str | None,
    active: str | None,
) -> Rendered | None:
    """The response ``name`` for delivery now, or None (unknown, or renders empty).
    ``active`` is the skill it is delivered for; ``trace`` None records no refused read."""
    if name is None:
        return None
    response = project.responses.get(name)
    if response is None:
        return None
    reader = response.owner or active
    if trace is not None:
        denied: list[str] = []
        for candidate in response.variants:
            denied.extend(n for n in variant_denials(project, candidate, reader) if n not in denied)
        for qualified in denied:
            refuse_access(
                trace,
                qualified,
                reader,
                "read",
                "response",
                node=active or "router",
                response=name,
            )
    view = scoped_view(project, memory, reader)
    variant = select_variant(response, view)
    if variant is None or variant.text is None:
        return None
    text = render_response_text(variant.text, view, reader).strip()
    if not text:
        return None
    buttons = [
        {"title": render_response_text(b.title, view, reader), "payload": b.payload}
        for b in variant.buttons
    ]
    return Rendered(name, text, variant, buttons, dict(variant.metadata))
