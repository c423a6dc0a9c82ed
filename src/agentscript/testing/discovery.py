"""Finding spec files and the agent each spec tests.

Specs: each PATH is a file or a folder searched recursively; with no PATH, ``specs/``,
``tests/`` and ``eval/`` beside the agent (``--agent``) or in the current folder. The agent:
``--agent`` wins; else the spec's ``x-agentscript.agent``; a Salesforce spec's ``subjectName``
is matched to ``config.developer_name`` of the regular ``.agent`` files of the spec's project
(the nearest folder at most three above the spec's with ``sfdx-project.json``,
``agentscript.toml``, ``pyproject.toml`` or ``.git``; else the folder above the spec's), nearest
first; a Mantle scenario belongs to the project (``agent.yml``) above it; a
conversation file to the one agent beside it. :func:`bind_to_agent` then checks the names a
suite uses against that agent.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from agentscript.diagnostics import AgentScriptError
from agentscript.engine.session import AgentBase
from agentscript.loader import load
from agentscript.testing.errors import SpecError
from agentscript.testing.faults import bind_faults
from agentscript.testing.readers import is_spec_file
from agentscript.testing.readers.mantle_scenario import bind_names as bind_mantle_names
from agentscript.testing.readers.salesforce_yaml import bind_history
from agentscript.testing.spec import CheckKind, Suite
from agentscript.testing.whitebox import AgentNames, bind_names

DEFAULT_FOLDERS = ("specs", "tests", "eval")
# The project a spec belongs to: the nearest folder (at most _SEARCH_UP above the spec's) with
# one of these; `subjectName` is looked up in the `.agent` files under it.
PROJECT_MARKERS = ("sfdx-project.json", "agentscript.toml", "pyproject.toml", ".git")
_SEARCH_UP = 3
_MAX_DEPTH = 8  # folder levels searched under the project root
_MAX_FILES = 20_000  # entries visited at most: a search never walks a whole disk
_SKIP = {".git", ".venv", "venv", "node_modules", "__pycache__", ".sfdx", ".sf", ".tox"}


def project_root(folder: Path) -> Path | None:
    for candidate in [folder, *folder.parents][: _SEARCH_UP + 1]:
        if any((candidate / marker).exists() for marker in PROJECT_MARKERS):
            return candidate
    return None


def agent_files(root: Path, max_depth: int) -> list[Path]:
    """Regular ``*.agent`` files under ``root`` (never a FIFO or device: opening one blocks),
    skipping tool folders, at most ``max_depth`` levels down and ``_MAX_FILES`` entries."""
    found: list[Path] = []
    visited = 0
    for current, folders, files in os.walk(root):
        depth = len(Path(current).relative_to(root).parts)
        folders[:] = sorted(f for f in folders if f not in _SKIP and depth < max_depth)
        visited += len(files) + len(folders)
        for name in sorted(files):
            path = Path(current) / name
            if name.endswith(".agent") and stat.S_ISREG(_mode(path)):
                found.append(path)
        if visited > _MAX_FILES:
            break
    return found


def _distance(a: Path, b: Path) -> int:
    """Folder steps from ``a`` to ``b`` in the tree (up to the common folder, then down)."""
    left, right = a.resolve().parts, b.parts
    shared = 0
    for x, y in zip(left, right, strict=False):
        if x != y:
            break
        shared += 1
    return (len(left) - shared) + (len(right) - shared)


def _mode(path: Path) -> int:
    try:
        return os.stat(path).st_mode
    except OSError:
        return 0


def shown_path(path: Path) -> Path:
    """``path`` relative to the current folder when it is under it, as a PATH typed on the
    command line is shown (reports stay short and the same whether PATH was given or not)."""
    try:
        return path.absolute().relative_to(Path.cwd())
    except ValueError:
        return path


def collect(paths: list[Path], base: Path) -> list[tuple[Path, bool]]:
    """Spec files, each with whether it was named explicitly (a named file must be a spec;
    a file found in a folder that is no spec at all is skipped)."""
    roots = paths or [shown_path(base / name) for name in DEFAULT_FOLDERS if (base / name).is_dir()]
    found: list[tuple[Path, bool]] = []
    for root in roots:
        if root.is_file():
            found.append((root, True))
        elif root.is_dir():
            found += sorted((p, False) for p in root.rglob("*") if p.is_file() and is_spec_file(p))
        else:
            raise SpecError(root, None, "no such file or folder")
    return found


class AgentCache:
    """Loads each agent once; finds agents by developer name."""

    def __init__(self) -> None:
        self.loaded: dict[Path, AgentBase] = {}
        self._names: dict[Path, str | None] = {}

    def load(self, path: Path, spec: Path) -> AgentBase:
        path = path.resolve()
        if path not in self.loaded:
            try:
                self.loaded[path] = load(path)
            except AgentScriptError as exc:
                errors = "; ".join(
                    f"{d.span.line}:{d.span.column} {d.message}"
                    for d in exc.diagnostics
                    if d.is_error
                )[:600]
                raise SpecError(spec, None, f"the agent {path} has errors: {errors}") from None
        return self.loaded[path]

    def developer_name(self, path: Path) -> str | None:
        if path not in self._names:
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                text = ""
            if "developer_name" not in text and "agent_name" not in text:
                self._names[path] = None  # cheap test first: most files are not the one
                return None
            try:
                agent = load(path)
            except AgentScriptError:
                self._names[path] = None
            else:
                outline = getattr(agent, "outline", None)
                self._names[path] = outline.agent_name if outline is not None else None
        return self._names[path]

    def for_suite(self, suite: Suite, override: Path | None) -> AgentBase:
        if override is not None:
            return self.load(override, suite.path)
        if suite.agent_path is not None:
            return self.load(suite.agent_path, suite.path)
        folder = suite.path.resolve().parent
        if suite.subject_name:
            root = project_root(folder)
            found = agent_files(root or folder.parent, _MAX_DEPTH if root else 2)
            # Nearest first: an agent beside the spec wins over one elsewhere in the project.
            found.sort(key=lambda p: (_distance(p.parent, folder), str(p)))
            for candidate in found:
                if self.developer_name(candidate.resolve()) == suite.subject_name:
                    return self.load(candidate, suite.path)
            raise SpecError(
                suite.path,
                None,
                f"subjectName {suite.subject_name!r} matches no .agent file's "
                f"config.developer_name under {root or folder.parent}; pass --agent PATH",
            )
        for _ in range(_SEARCH_UP + 1):
            if (folder / "agent.yml").is_file():
                return self.load(folder, suite.path)
            agents = sorted(p for p in folder.glob("*.agent") if stat.S_ISREG(_mode(p)))
            if len(agents) == 1:
                return self.load(agents[0], suite.path)
            if len(agents) > 1:
                break
            folder = folder.parent
        raise SpecError(suite.path, None, "cannot tell which agent this spec tests; pass --agent")


def bind_to_agent(suite: Suite, agent: AgentBase) -> None:
    """Check the names ``suite`` uses against the agent it tests, before anything runs: a
    tool, action, variable or subagent the agent lacks is a spec error (:class:`AgentNames`).
    Faults are keyed by the action they replace (:func:`bind_faults`)."""
    names = AgentNames.of(agent)
    if names is None:
        return
    for case in suite.cases:
        bind_history(case, names, suite.path, agent.name)
        bind_faults(case, names, suite.path, agent.name)
        for check in case.all_checks:
            if check.kind is CheckKind.WHITEBOX:
                bind_names(check, names, suite.path, agent.name)
            elif check.kind is CheckKind.MANTLE:
                bind_mantle_names(check, names, suite.path, agent.name)
