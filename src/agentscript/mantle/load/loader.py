"""Load a Mantle (or Maestro-era) skill project folder into the typed model."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from agentscript.diagnostics import UNKNOWN_SPAN, Diagnostic, Severity, Span
from agentscript.mantle.knowledge import build_index
from agentscript.mantle.load import yamlsrc as y
from agentscript.mantle.load.agent_file import read_agent
from agentscript.mantle.load.isolation import isolation_diagnostics
from agentscript.mantle.load.lifecycle import check_lifecycle, install_builtin_responses
from agentscript.mantle.load.memory_file import read_project_memory, read_skill_memory
from agentscript.mantle.load.responses_file import read_responses
from agentscript.mantle.load.skill_file import read_skill
from agentscript.mantle.load.tool_code import load_tool_file, tool_files
from agentscript.mantle.load.validate import validate
from agentscript.mantle.model import AgentSettings, Project, Response, Skill, Tool
from agentscript.reading import FileInputError, read_file_text

_log = logging.getLogger(__name__)


def is_mantle_project(path: str | os.PathLike[str]) -> bool:
    """A folder holding ``skills/<id>/skill.md`` (Mantle and Maestro share this layout)."""
    skills = Path(path) / "skills"
    if not skills.is_dir():
        return False
    # lexists: a skill.md that is a FIFO, a device or a dangling link still makes this a
    # project, so loading reports it instead of calling the folder something else.
    return any(os.path.lexists(child / "skill.md") for child in skills.iterdir() if child.is_dir())


def load_project(
    path: str | os.PathLike[str], *, stub_missing_tools: bool = False
) -> tuple[Project | None, list[Diagnostic]]:
    """Read every project file, then validate across files. Never raises on bad input.

    Returns ``(None, diagnostics)`` when ``path`` is not a skill project at all, or when
    loading failed on a bug of ours: then the last diagnostic is an ``internal-error``
    naming the folder, never an exception.
    """
    diagnostics: list[Diagnostic] = []
    try:
        return _load_project(Path(path), diagnostics, stub_missing_tools)
    except Exception as exc:  # a bug of ours (or an exhausted resource) is a diagnostic
        from agentscript.validation import internal_error

        _log.debug("loading the Mantle project %s failed", path, exc_info=True)
        return None, [*diagnostics, internal_error(os.fspath(path), exc)]


def _load_project(
    root: Path, diagnostics: list[Diagnostic], stub_missing_tools: bool
) -> tuple[Project | None, list[Diagnostic]]:
    if root.is_file() and root.name in ("agent.yml", "agent.yaml"):
        root = root.parent
    if not root.is_dir():
        diagnostics.append(
            Diagnostic("mantle-project", f"{root} is not a folder", UNKNOWN_SPAN, file=str(root))
        )
        return None, diagnostics
    if not is_mantle_project(root):
        diagnostics.append(
            Diagnostic(
                "mantle-project",
                "not a Mantle project: expected skills/<skill_id>/skill.md under this folder",
                UNKNOWN_SPAN,
                file=str(root),
            )
        )
        return None, diagnostics

    agent_path = root / "agent.yml"
    agent_text = _read(agent_path, diagnostics)
    if agent_text is None:
        if not os.path.lexists(agent_path):
            diagnostics.append(
                Diagnostic(
                    "mantle-agent",
                    "the project has no agent.yml",
                    UNKNOWN_SPAN,
                    file=str(agent_path),
                )
            )
        agent = AgentSettings(file=str(agent_path))
    else:
        agent = read_agent(agent_text, _ctx(agent_path, diagnostics))
    project = Project(root=str(root), agent=agent)

    memory_text = _read(root / "memory.yml", diagnostics)
    if memory_text is not None:
        project.memory = read_project_memory(memory_text, _ctx(root / "memory.yml", diagnostics))
    project.mcp_servers = _mcp_servers(root, diagnostics)

    responses: list[dict[str, Response]] = []
    root_responses = _read(root / "responses.yml", diagnostics)
    if root_responses is not None:
        responses.append(
            read_responses(root_responses, None, _ctx(root / "responses.yml", diagnostics))
        )

    for folder in sorted((root / "skills").iterdir()):
        if not folder.is_dir():
            if folder.is_symlink() and not folder.exists():
                diagnostics.append(_file_problem(folder, "a link to nothing (dangling or a loop)"))
            continue
        skill = _load_skill(root, folder, diagnostics, responses)
        if skill is not None:
            project.skills[skill.id] = skill

    project.responses = _merge_responses(responses, diagnostics)
    install_builtin_responses(project)  # lifecycle wording a project may reference
    for file in tool_files(str(root)):
        for tool in _load_tools(file, root, None, diagnostics):
            _add_tool(project.shared_tools, tool, diagnostics)

    project.knowledge, problems = build_index(root, agent.references, agent.file)
    diagnostics.extend(problems)
    diagnostics.extend(validate(project, stub_missing_tools=stub_missing_tools))
    diagnostics.extend(check_lifecycle(project))
    diagnostics.extend(isolation_diagnostics(project))
    return project, diagnostics


def _load_skill(
    root: Path, folder: Path, diagnostics: list[Diagnostic], responses: list[dict[str, Response]]
) -> Skill | None:
    skill_md = folder / "skill.md"
    if not os.path.lexists(skill_md):
        if any((folder / name).exists() for name in ("memory.yml", "responses.yml", "tools.py")):
            diagnostics.append(
                Diagnostic(
                    "mantle-skill-missing",
                    f"skill folder '{folder.name}' has no skill.md",
                    UNKNOWN_SPAN,
                    Severity.WARNING,
                    str(folder),
                )
            )
        return None
    text = _read(skill_md, diagnostics)
    if text is None:
        return None
    skill = read_skill(text, folder.name, str(folder), _ctx(skill_md, diagnostics))
    memory_text = _read(folder / "memory.yml", diagnostics)
    if memory_text is not None:
        skill.memory = read_skill_memory(
            memory_text, skill.id, _ctx(folder / "memory.yml", diagnostics)
        )
    response_text = _read(folder / "responses.yml", diagnostics)
    if response_text is not None:
        responses.append(
            read_responses(response_text, skill.id, _ctx(folder / "responses.yml", diagnostics))
        )
    for file in tool_files(str(folder)):
        for tool in _load_tools(file, root, skill.id, diagnostics):
            _add_tool(skill.tools, tool, diagnostics)
    return skill


def _load_tools(
    file: str, root: Path, owner: str | None, diagnostics: list[Diagnostic]
) -> list[Tool]:
    tools, problems = load_tool_file(file, str(root), owner)
    diagnostics.extend(problems)
    return tools


def _add_tool(registry: dict[str, Tool], tool: Tool, diagnostics: list[Diagnostic]) -> None:
    if tool.name in registry:
        first = registry[tool.name]
        if _shadows(tool, first):
            message = f"tool '{tool.name}' in {tool.file} shadows the one in {first.file}"
            _log.info("%s", message)
            diagnostics.append(
                Diagnostic("mantle-tool-shadowed", message, tool.span, Severity.INFO, tool.file)
            )
            registry[tool.name] = tool
            return
        diagnostics.append(
            Diagnostic(
                "mantle-tool-collision",
                f"tool '{tool.name}' is defined twice (first in {first.file}:{first.span.line})",
                tool.span,
                Severity.ERROR,
                tool.file,
            )
        )
        return
    registry[tool.name] = tool


def _shadows(tool: Tool, first: Tool) -> bool:
    """A ``tools/*.py`` definition replaces a same-named one from the ``tools.py`` beside it."""
    package = os.path.basename(os.path.dirname(tool.file)) == "tools"
    single = os.path.basename(first.file) == "tools.py"
    same_folder = os.path.dirname(os.path.dirname(tool.file)) == os.path.dirname(first.file)
    return package and single and same_folder


def _merge_responses(
    files: list[dict[str, Response]], diagnostics: list[Diagnostic]
) -> dict[str, Response]:
    """One global registry; the project-root file overrides, skills must not collide."""
    merged: dict[str, Response] = {}
    for responses in files:
        for name, response in responses.items():
            first = merged.get(name)
            if first is None:
                merged[name] = response
            elif first.owner is not None and response.owner is not None:
                diagnostics.append(
                    Diagnostic(
                        "mantle-response-duplicate",
                        f"response '{name}' is also defined in {first.file}:{first.span.line}; "
                        "names are global, prefix them with the skill id",
                        response.span,
                        Severity.WARNING,
                        response.file,
                    )
                )
    return merged


def _mcp_servers(root: Path, diagnostics: list[Diagnostic]) -> list[str]:
    path = root / "integrations.yml"
    text = _read(path, diagnostics)
    if text is None:
        return []
    ctx = _ctx(path, diagnostics)
    node = y.compose(text, ctx)
    if node is None or not y.is_map(node):
        return []
    servers: list[str] = []
    for key, _, value in y.items(node, ctx):
        if key == "mcp_servers":
            raw = y.value(value, ctx)
            if isinstance(raw, list):
                servers.extend(str(s["id"]) for s in raw if isinstance(s, dict) and "id" in s)
    return servers


def _read(path: Path, diagnostics: list[Diagnostic]) -> str | None:
    """The text of ``path``; None when there is no such name, or (reported as ``mantle-file``)
    when it cannot be read: not a regular file (a FIFO, a device, a folder), a link to
    nothing, too large, not UTF-8. A name that exists is never skipped silently."""
    if not os.path.lexists(path):
        return None
    if path.is_symlink() and not path.exists():
        diagnostics.append(_file_problem(path, "a link to nothing (dangling or a loop)"))
        return None
    try:
        return read_file_text(path, encoding="utf-8")
    except FileInputError as exc:
        diagnostics.append(_file_problem(path, exc.reason))
    except (OSError, UnicodeDecodeError) as exc:
        diagnostics.append(_file_problem(path, str(exc)))
    return None


def _file_problem(path: Path, reason: str) -> Diagnostic:
    return Diagnostic(
        "mantle-file", f"cannot read {path.name}: {reason}", Span(1, 1, 1, 1), file=str(path)
    )


def _ctx(path: Path, diagnostics: list[Diagnostic]) -> y.Ctx:
    return y.Ctx(str(path), diagnostics=diagnostics)
