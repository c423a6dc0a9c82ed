"""Jump and substitution tokens in prose: ``@skill.x``, ``@block.x``, ``@tool.x``, ``@memory.ns.e``."""

from __future__ import annotations

import re

from agentscript.diagnostics import Span
from agentscript.mantle.load import yamlsrc as y
from agentscript.mantle.model import Reference, ReferenceKind

_TOKEN = re.compile(r"@(skill|block|tool|memory)((?:\.[A-Za-z0-9_\-]+)*)")


def find_references(lines: list[tuple[int, str]], ctx: y.Ctx) -> list[Reference]:
    """``@skill.x``, ``@block.x``, ``@tool.x`` and ``@memory.ns.entry`` tokens in prose."""
    out: list[Reference] = []
    for line_no, text in lines:
        for match in _TOKEN.finditer(text):
            kind = ReferenceKind(match.group(1))
            parts = [p for p in match.group(2).split(".") if p]
            span = Span(line_no, match.start() + 1, line_no, match.end() + 1)
            want = 2 if kind is ReferenceKind.MEMORY else 1
            if len(parts) < want:
                example = "@memory.<namespace>.<entry>" if want == 2 else f"@{kind.value}.<id>"
                ctx.add(
                    "mantle-token", f"incomplete token '{match.group(0)}': write {example}", span
                )
                continue
            # Trailing sentence punctuation is not part of the id ("see @skill.handoff.").
            parts = parts[:want]
            token = "@" + kind.value + "." + ".".join(parts)
            span = Span(line_no, match.start() + 1, line_no, match.start() + 1 + len(token))
            out.append(Reference(kind, ".".join(parts), token, span))
    return out
