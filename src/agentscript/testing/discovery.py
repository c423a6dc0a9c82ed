"""Finding spec files and the agent each spec tests.

Specs: each PATH is a file or a folder searched recursively; with no PATH, ``specs/``,
``tests/`` and ``eval/`` beside the agent (``--agent``) or in the current folder. The agent:
``--agent`` wins; else the spec's ``x-agentscript.agent``; a Salesforce spec's ``subjectName``
is matched to ``config.developer_name`` of the ``.agent`` files in the spec's folder and up to
three folders above it; a Mantle scenario belongs to the project (``agent.yml``) above it; a
conversation file to the one agent beside it.
"""

from __future__ import annotations

from pathlib import Path

from agentscript.diagnostics import AgentScriptError
from agentscript.engine.session import AgentBase
from agentscript.loader import load
from agentscript.testing.errors import SpecError
from agentscript.testing.readers import is_spec_file
from agentscript.testing.spec import Suite

DEFAULT_FOLDERS = ("specs", "tests", "eval")
_SEARCH_UP = 3


def collect(paths: list[Path], base: Path) -> list[tuple[Path, bool]]:
    """Spec files, each with whether it was named explicitly (a named file must be a spec;
    a file found in a folder that is no spec at all is skipped)."""
    roots = paths or [base / name for name in DEFAULT_FOLDERS if (base / name).is_dir()]
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
            for level in range(_SEARCH_UP + 1):
                candidates = (
                    sorted(folder.rglob("*.agent")) if level else sorted(folder.glob("*.agent"))
                )
                for candidate in candidates:
                    if self.developer_name(candidate.resolve()) == suite.subject_name:
                        return self.load(candidate, suite.path)
                if folder.parent == folder:
                    break
                folder = folder.parent
            raise SpecError(
                suite.path,
                None,
                f"subjectName {suite.subject_name!r} matches no .agent file's "
                "config.developer_name near the spec; pass --agent PATH",
            )
        for _ in range(_SEARCH_UP + 1):
            if (folder / "agent.yml").is_file():
                return self.load(folder, suite.path)
            agents = sorted(folder.glob("*.agent"))
            if len(agents) == 1:
                return self.load(agents[0], suite.path)
            if len(agents) > 1:
                break
            folder = folder.parent
        raise SpecError(suite.path, None, "cannot tell which agent this spec tests; pass --agent")
