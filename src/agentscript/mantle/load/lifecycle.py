"""Lifecycle skills, the loading side: the built-in wording a project may reference or
redeclare, and the checks of ``agent.yml``'s lifecycle settings. Running them is
:mod:`agentscript.mantle.run.lifecycle`.
"""

from __future__ import annotations

from collections.abc import Iterator

from agentscript.diagnostics import UNKNOWN_SPAN, Diagnostic, Severity
from agentscript.mantle.model import (
    ASK_ANYTHING_ELSE,
    ASK_TO_CONTINUE,
    CANNOT_HELP_RESPONSE,
    RESUME_OFFER_SKILL,
    UNSUPPORTED_SKILL,
    Project,
    Response,
    ResponseVariant,
)

# Built-in wording; a project response of the same name replaces it.
BUILTIN_RESPONSES = {
    ASK_ANYTHING_ELSE: "Is there anything else I can help you with?",
    ASK_TO_CONTINUE: "Would you like to continue with {skill_name}?",
    CANNOT_HELP_RESPONSE: "I'm sorry, I can't help with that.",
}
BUILTIN_FILE = "<agentscript built-in>"
SKIPPED = "it is skipped when the session ends"


def install_builtin_responses(project: Project) -> None:
    """Add the built-in lifecycle responses the project does not redeclare."""
    for name, text in BUILTIN_RESPONSES.items():
        if name not in project.responses:
            variant = ResponseVariant(text, BUILTIN_FILE, UNKNOWN_SPAN)
            project.responses[name] = Response(
                name, BUILTIN_FILE, UNKNOWN_SPAN, None, variants=[variant]
            )


def check_lifecycle(project: Project) -> Iterator[Diagnostic]:
    """The lifecycle settings and overrides a project may get wrong."""
    yield from _check_unsupported_handler(project)
    yield from _check_resume_offer(project)
    yield from _check_before_end(project)


def _check_unsupported_handler(project: Project) -> Iterator[Diagnostic]:
    """The unsupported-request handler stays engine-managed."""
    handler = project.skills.get(UNSUPPORTED_SKILL)
    if handler is not None and handler.engine_managed is False:
        yield Diagnostic(
            "mantle-lifecycle",
            f"'{UNSUPPORTED_SKILL}' must stay engine-managed; remove 'routing: "
            "{engine_managed: false}'",
            handler.span,
            Severity.ERROR,
            handler.file,
        )


def _check_resume_offer(project: Project) -> Iterator[Diagnostic]:
    """A skill named after the resume offer never runs: the research read no id or files of
    Rasa's resume-offer skill (only its response), so the engine runs the offer itself and
    only its wording is the project's to change."""
    skill = project.skills.get(RESUME_OFFER_SKILL)
    if skill is not None:
        yield Diagnostic(
            "mantle-lifecycle",
            f"{RESUME_OFFER_SKILL} cannot be overridden by a skill; redeclare {ASK_TO_CONTINUE} "
            "in responses.yml to change its wording",
            skill.span,
            Severity.WARNING,
            skill.file,
        )


def _check_before_end(project: Project) -> Iterator[Diagnostic]:
    """``conversation.before_end`` is a list of enabled skills of the project."""
    listed = project.agent.conversation.get("before_end")
    if listed is None:
        return
    if not isinstance(listed, list) or not all(isinstance(s, str) for s in listed):
        yield Diagnostic(
            "mantle-lifecycle",
            "conversation.before_end must be a list of skill ids",
            project.agent.span,
            Severity.ERROR,
            project.agent.file,
        )
        return
    for skill_id in listed:
        skill = project.skills.get(skill_id)
        if skill is None:
            problem = f"is not a skill of this project; {SKIPPED} (add skills/{skill_id}/skill.md"
        elif skill.disabled:
            problem = f"is disabled; {SKIPPED} (remove its 'disabled: true'"
        else:
            continue
        yield Diagnostic(
            "mantle-lifecycle",
            f"conversation.before_end names '{skill_id}', which {problem} to run it)",
            project.agent.span,
            Severity.WARNING,
            project.agent.file,
        )
