"""Response buttons, what both loading and running need: the ``set:`` payload grammar and
the tool that supplies a response's buttons.

A payload ``set:session.<skill | project>.<entry>=<value>`` is what a channel sends back when
the user taps the button; the engine applies it without the model
(:mod:`agentscript.mantle.run.buttons`). The loader checks every listed payload and button
source tool (:mod:`agentscript.mantle.load.validate`).
"""

from __future__ import annotations

import re
from typing import Any

from agentscript.mantle.model import Project, Tool

PAYLOAD = re.compile(r"^set:session\.([A-Za-z_][\w\-]*)\.([A-Za-z_][\w\-]*)=(.*)$", re.DOTALL)


def parse_payload(text: str) -> tuple[str, str] | None:
    """``(qualified name, raw value)`` of a ``set:`` payload, or None."""
    match = PAYLOAD.match(text.strip())
    if match is None:
        return None
    return f"{match.group(1)}.{match.group(2)}", match.group(3).strip()


def payload_value(raw: str) -> Any:
    """The payload value: quotes stripped; type coercion is the entry's (``"true"``, ``"3"``)."""
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
        return raw[1:-1]
    return raw


def source_tool(project: Project, name: str, skill_id: str | None) -> tuple[str, Tool] | None:
    """The tool ``name`` that supplies buttons (``buttons: {source: <tool>}``) and the skill
    it runs for: the reader's own tools, then any skill's, then the shared tools."""
    if skill_id is not None and name in project.tools_for(skill_id):
        return skill_id, project.tools_for(skill_id)[name]
    for skill in project.skills.values():
        if name in skill.tools:
            return skill.id, skill.tools[name]
    if name in project.shared_tools:
        return skill_id or "", project.shared_tools[name]
    return None
