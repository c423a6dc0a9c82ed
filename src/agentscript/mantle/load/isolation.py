"""``[actions]`` isolation a Mantle project cannot run under: ``"process"``.

A Mantle tool is called with a ``context`` (``memory.get/set``, ``send``) bound to the live
session, and the handler that calls it is a closure over the loaded project: neither can be
sent to a worker process. Under ``isolation = "process"`` (or ``isolation_by_action`` naming a
tool with ``"process"``) every such call failed at run time with a pickling error, while the
project loaded and ``validate`` said nothing. The table is refused when the project loads
instead, as a ``config-error`` on the ``agentscript.toml`` (the loader's own diagnostic), by
:func:`agentscript.load` and ``agentscript validate`` alike (both go through
:func:`isolation_diagnostics` in ``load_project``), and by
``MantleAgent.load_action_settings`` for an agent built from a project directly.
"""

from __future__ import annotations

from pathlib import Path

from agentscript.actions.settings import ActionConfigError, ActionSettings, Isolation, load_settings
from agentscript.diagnostics import Diagnostic
from agentscript.mantle.model import Project
from agentscript.models.config import find_config

_WHY = (
    "a Mantle tool's context (memory, send) lives in this process and cannot be sent to a "
    "worker process, so Mantle tools run in threads or inline"
)


def isolation_problem(project: Project, settings: ActionSettings) -> str | None:
    """Why ``settings`` cannot run ``project``'s tools (None: they can), naming the file."""
    where = _config_name(project)
    if settings.isolation is Isolation.PROCESS:
        return (
            f'{where}: [actions] isolation = "process" cannot run a Mantle project: {_WHY}; '
            'write isolation = "thread" (the default) or "inline"'
        )
    tools = _tool_names(project)
    for name, mode in settings.by_action.items():
        if mode is Isolation.PROCESS and name in tools:
            return (
                f'{where}: [actions.isolation_by_action] {name} = "process": {name!r} is a '
                f'tool of this Mantle project, and {_WHY}; write "thread" or "inline"'
            )
    return None


def check_isolation(project: Project, settings: ActionSettings) -> None:
    """Raise :class:`ActionConfigError` when ``settings`` cannot run ``project``'s tools."""
    problem = isolation_problem(project, settings)
    if problem is not None:
        raise ActionConfigError(problem)


def isolation_diagnostics(project: Project) -> list[Diagnostic]:
    """The ``config-error`` for an ``[actions]`` table the project's tools cannot run under.
    A table that does not parse is not reported here: the loader and ``validate`` report it
    already (``config_diagnostics``), once."""
    from agentscript.loader import config_error  # the loader imports the Mantle runtime

    root = Path(project.root)
    try:
        problem = isolation_problem(project, load_settings(root))
    except ActionConfigError:
        return []
    return [] if problem is None else [config_error(root, ActionConfigError(problem))]


def _tool_names(project: Project) -> set[str]:
    names = set(project.shared_tools)
    for skill in project.skills.values():
        names.update(skill.tools)
    return names


def _config_name(project: Project) -> str:
    config = find_config(Path(project.root))
    return str(config) if config is not None else "agentscript.toml"
