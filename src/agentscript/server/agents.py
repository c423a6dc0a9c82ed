"""The agents a server serves: found from the command's paths, loaded once, described as JSON.

Each PATH is an ``.agent`` file, a Mantle project folder, or a folder holding several of them.
Each agent is served under its name (``config.agent_name`` / ``developer_name`` / the project's
id or folder name); two agents with one name are an error at start-up, as is an agent with
errors. An agent's *version* is the hash of what its saved sessions depend on (variables and
their types, subagents and their tools, or memory entries, skills, blocks, steps and tools):
the ``agent.hash`` every saved state carries and ``agent.restore`` compares, so a stored
session whose version differs is one the restore refuses, reported before it is tried.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from agentscript.actions.registry import StubBook
from agentscript.diagnostics import AgentScriptError
from agentscript.engine.given import some
from agentscript.engine.session import Agent, AgentBase
from agentscript.models.base import Model
from agentscript.server.digest_imports import imported_files


class SessionOverrides(Protocol):
    """Per-session choices of the playground: a conversation file's scripted model moves and
    stub results. ``None`` from either keeps the served model / the agent's own backends."""

    def model(self, session_id: str, turn: int) -> Model | None: ...

    def stubs(self, session_id: str) -> StubBook | None: ...


class AgentLoadError(Exception):
    """The agents cannot be served (errors in a file, a name clash, nothing found)."""


@dataclass
class ServedAgent:
    """One loaded agent, its description for the API, and the model its sessions use."""

    agent: AgentBase
    path: Path
    model: Model
    description: dict[str, Any]
    version: str
    overrides: SessionOverrides | None = None
    # The version an earlier agentscript recorded for a session of this agent
    # (:func:`former_version`): such a session is left to the restore's own check.
    former: str | None = None

    def knows(self, version: str) -> bool:
        """Whether a session recorded at ``version`` may be of this agent as served: exactly
        when it is :attr:`version`; when it is the former one, its state's ``agent.hash``
        decides (an earlier agentscript hashed less of the agent)."""
        return version == self.version or (self.former is not None and version == self.former)

    def model_for(self, session_id: str, turn: int) -> Model:
        """The model that runs turn ``turn`` of the session."""
        chosen = self.overrides.model(session_id, turn) if self.overrides else None
        return chosen if chosen is not None else self.model

    def stubs_for(self, session_id: str) -> StubBook | None:
        """A fresh stub book for the session (a restore consumes it), or None."""
        return self.overrides.stubs(session_id) if self.overrides else None

    @property
    def name(self) -> str:
        return self.agent.name

    def refused_variables(self, given: Iterable[str]) -> str | None:
        """Why a client cannot give a new session the variables ``given``: the message naming
        those the agent declares as neither linked nor mutable, as ``GET /v1/agents/{agent}``
        reports them (read from that description, so the two never disagree), and the ones it
        may give; None when it may give them all. Names the agent does not declare are left to
        its own check, which lists the declared ones."""
        variables = self.description["variables"]
        fixed = {v["name"] for v in variables if not settable(v)}
        refused = sorted(name for name in given if name in fixed)
        if not refused:
            return None
        allowed = sorted(v["name"] for v in variables if settable(v))
        return (
            f"variable(s) {some(refused)} of {self.name} are neither linked nor mutable: only "
            "the agent sets them. A new session takes its linked variables and the initial "
            f"value of its mutable ones (GET /v1/agents/{self.name} marks them): "
            f"{some(allowed) if allowed else 'it has none'}"
        )


def settable(variable: dict[str, Any]) -> bool:
    """Whether a client may give a new session this variable of an agent's description: a
    linked one (the host supplies it) or the initial value of a mutable one. Any other is the
    agent's own (a constant, or what its tools write once, such as a Mantle project entry
    without ``mutable: true``): letting a client set it would let it skip what sets it (a
    login, say)."""
    return bool(variable["linked"] or variable["mutable"])


def discover(paths: Sequence[str]) -> Iterator[Path]:
    """``.agent`` files and Mantle project folders named by, or found under, ``paths`` (the
    same expansion as every command: :func:`agentscript.discover.agent_files`)."""
    from agentscript.discover import agent_files

    for raw in paths:
        if not Path(raw).exists():
            raise AgentLoadError(f"{raw}: no such file or folder")
    # One agent reached twice (a folder and a file in it) comes once: agent_files says so.
    yield from agent_files(paths)


# An agent's name as the API's paths take it (/v1/agents/{agent}/...); a served name must
# also pass is_agent_name.
AGENT_NAME = r"^[A-Za-z0-9_.-]{1,128}$"


def is_agent_name(name: str) -> bool:
    """``name`` matches AGENT_NAME and is not dots only: ``.`` and ``..`` are relative
    references in a URL path and in ``--trace-dir``. (AGENT_NAME cannot say it: the routes'
    pattern runs on pydantic's regex engine, which has no look-ahead.)"""
    return re.fullmatch(AGENT_NAME, name) is not None and name.strip(".") != ""


def load_agents(paths: Sequence[str], dialect: str | None = None) -> list[AgentBase]:
    """Every agent under ``paths`` (AgentLoadError naming the file and its first errors);
    ``.agent`` files checked against ``dialect`` (None: each file's ``# @dialect:`` header,
    else agentforce), as ``run --dialect`` does."""
    from agentscript.loader import load

    agents: dict[str, tuple[AgentBase, Path]] = {}
    for path in discover(paths):
        try:
            agent = load(path, dialect=dialect)
        except AgentScriptError as exc:
            errors = [d.format() for d in exc.diagnostics if d.is_error][:5]
            if dialect != "agentscript" and str(path).endswith(".agent") and _about_the_source(exc):
                errors.append("hint: --dialect agentscript checks without the Salesforce-org rules")
            raise AgentLoadError(
                f"{path}: cannot serve an agent with errors\n" + "\n".join(errors)
            ) from None
        if not is_agent_name(agent.name):
            raise AgentLoadError(
                f"{path}: the agent's name {agent.name!r} cannot be part of a URL (letters, "
                "digits, '_', '.' and '-', not dots only, at most 128); rename it "
                "(config.developer_name, or the project's id)"
            )
        if agent.name in agents:
            other = agents[agent.name][1]
            raise AgentLoadError(
                f"two agents are named {agent.name!r}: {other} and {path}; rename one "
                "(config.developer_name, or the project's id)"
            )
        agents[agent.name] = (agent, path)
    if not agents:
        raise AgentLoadError(f"no .agent files or Mantle projects under {', '.join(paths)}")
    return [agent for agent, _ in agents.values()]


def _about_the_source(error: AgentScriptError) -> bool:
    """Whether one of ``error``'s errors is about the agent's own source, as ``run`` decides
    its ``--dialect`` hint (``cli/common.py``): another dialect cannot help with an
    ``agentscript.toml`` or a file that cannot be read. Warnings are not shown here, so they
    do not count."""
    from agentscript.cli.common import NOT_ABOUT_THE_SOURCE

    return any(d.is_error and d.code not in NOT_ABOUT_THE_SOURCE for d in error.diagnostics)


def describe(agent: AgentBase) -> dict[str, Any]:
    """``GET /v1/agents/{agent}``: name, format, variables, nodes or skills."""
    from agentscript.mantle.run.hooks import guarded_entries
    from agentscript.mantle.runtime import MantleAgent

    if isinstance(agent, Agent):
        outline = agent.outline
        return {
            "name": agent.name,
            "format": "agentscript",
            "variables": [
                {
                    "name": name,
                    "type": info.type,
                    "mutable": info.modifier == "mutable",
                    "linked": info.modifier == "linked",
                    "description": info.description,
                }
                for name, info in outline.variables.items()
            ],
            "nodes": sorted(agent.program.nodes),
            "start": outline.start_agent,
        }
    if isinstance(agent, MantleAgent):
        project = agent.project
        writable = model_writable(project)
        # A value given at creation skips the entry's post-write hook (its check): such an
        # entry is the conversation's to write (a hook refusing qty > 10 let a client set 999).
        guarded = guarded_entries(project)
        return {
            "name": agent.name,
            "format": "mantle",
            "variables": [
                {
                    "name": entry.qualified_name,
                    "type": entry.type,
                    # A project entry only with `mutable: true`: `llm_settable` means nothing
                    # there (the model never writes project memory), and opened a login's
                    # `authenticated` to any client.
                    "mutable": (
                        entry.qualified_name in writable
                        if entry.namespace in project.skills
                        else not entry.write_once
                    )
                    and entry.qualified_name not in guarded,
                    "linked": entry.seed,
                    "description": entry.description,
                }
                for entry in project.all_memory()
            ],
            "skills": sorted(project.skills),
        }
    raise TypeError(f"cannot describe a {type(agent).__name__}")


def model_writable(project: Any) -> set[str]:
    """The skill entries the conversation itself may fill (qualified names): ``llm_settable``
    ones and those a collect step owns, which the model writes with ``set_fields`` from what
    the user says. The others are written by the skill's tools (a count of failed logins, an
    order's reference) and are not a client's to preset: a session given
    ``authenticate.attempts = -100`` took 103 tries before the limit of 3."""
    from agentscript.mantle.run.prompt import settable_entries

    return {
        entry.qualified_name
        for skill in project.skills.values()
        for entry in settable_entries(project, skill).values()
    }


def former_version(description: dict[str, Any]) -> str:
    """The version agentscript recorded before it used the restore's hash: a hash of the
    agent's variables (names, types) and nodes or skills only, blind to a block's steps or a
    tool's parameters. Sessions stored then carry it; they still run where their state's
    ``agent.hash`` matches (:meth:`ServedAgent.knows`)."""
    shape = {
        "format": description["format"],
        "variables": sorted((v["name"], v["type"]) for v in description["variables"]),
        "parts": description.get("nodes") or description.get("skills") or [],
    }
    return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:16]


# The kinds of file an agent is written in (its .agent file; a Mantle project's YAML, Markdown
# and Python tools): a digest of these, never of what runs beside them (a SQLite store placed
# in the folder, logs, data its tools write).
SOURCE_SUFFIXES = frozenset({".agent", ".md", ".yml", ".yaml", ".py", ".toml"})


def source_digest(agent: AgentBase) -> str:
    """A hash of what an agent was loaded from: its ``.agent`` file, or the source files of its
    Mantle project folder (``SOURCE_SUFFIXES``, outside hidden folders and ``__pycache__``);
    the ``agentscript.toml`` that applies to it (``find_config``: maybe in a parent folder);
    and, for an ``.agent`` agent, the modules in its folder that its ``python://`` targets
    name, as written or as ``[actions.targets]`` maps them, and the modules of the folder that
    these import (``digest_imports.py``). A file that is not there counts as such, so one
    that appears later changes the digest. With ``--workers N`` a worker started again after a
    crash loads the files anew; this tells it whether they are still those the server started
    with."""
    path = agent.path or Path(agent.name)
    digest = hashlib.sha256()
    for name, found in _digested(agent, path):
        state = _file_state(found)
        # Length-prefixed: one file's name or bytes cannot pass for another's.
        digest.update(f"{len(name)}:{name}:{len(state)}:".encode("utf-8", "surrogateescape"))
        digest.update(state)
    return digest.hexdigest()[:16]


def _digested(agent: AgentBase, path: Path) -> Iterator[tuple[str, Path | None]]:
    """The files :func:`source_digest` hashes, each with the name it is hashed under (None:
    a file looked for and not found)."""
    from agentscript.models.config import find_config

    if path.is_file():
        yield path.name, path
    else:
        yield from ((str(found.relative_to(path)), found) for found in _tree(path, SOURCE_SUFFIXES))
    # Read by the loader (models, limits, [actions], integrations) from wherever it is found;
    # a Mantle project's own one is also among its files above, which is harmless.
    config = find_config(path)
    yield f"config:{config}", config
    if isinstance(agent, Agent):
        folder = path.parent
        loaded: dict[Path, None] = {}  # in order, once each
        for module in sorted(_python_modules(agent)):
            for name, found in _module_files(folder, module):
                if found is not None:
                    loaded[found] = None
                yield name, found
        yield from imported_files(folder, list(loaded))


def _python_modules(agent: Agent) -> set[str]:
    """The modules of the ``python://`` targets the action runner may run for ``agent``: its
    own, and those ``[actions.targets]`` runs instead of its other targets (read as the
    runner reads them, ``ActionRequest.scheme``/``path``)."""
    from agentscript.actions.registry import ActionRequest
    from agentscript.target_checks import runner_targets

    mapped = agent.action_settings.targets
    modules = set()
    for target in runner_targets(agent.outline):
        request = ActionRequest(name="", target=target, inputs={}, ran=mapped.get(target))
        if request.scheme == "python":
            modules.add(request.path.partition(":")[0])
    return modules


def _module_files(folder: Path, module: str) -> Iterator[tuple[str, Path | None]]:
    """The files ``module`` is imported from when it is in ``folder`` (``actions/modules.py``):
    its module file and every ``.py`` of its package folder, looked for whether or not they
    are there (one added later turns an installed module into the agent's own). A module
    installed in the environment is not hashed: upgrading a package is a deployment, not an
    edit of the agent's files."""
    from agentscript.actions.modules import folder_locations

    where = folder_locations(folder, module)
    if where is None:  # no module name: only ever imported from the host
        return
    file, package = where
    yield f"module:{file.name}", file if file.is_file() else None
    if not package.is_dir():
        yield f"package:{package.name}", None
        return
    for found in _tree(package, frozenset({".py"})):
        yield f"package:{package.name}/{found.relative_to(package)}", found


def _tree(folder: Path, suffixes: frozenset[str]) -> list[Path]:
    """The files of ``folder`` with one of ``suffixes``, outside hidden folders and
    ``__pycache__``, sorted."""
    return sorted(
        found
        for found in folder.rglob("*")
        if found.suffix in suffixes
        and found.is_file()
        and not any(
            part.startswith(".") or part == "__pycache__"
            for part in found.relative_to(folder).parts
        )
    )


def _file_state(found: Path | None) -> bytes:
    """What the digest takes of one file: its bytes, or that it is missing or unreadable."""
    if found is None:
        return b"missing"
    try:
        return b"file:" + found.read_bytes()
    except OSError as exc:
        return b"error:" + repr(exc).encode()


def serve_agents(agents: Iterable[AgentBase], models: dict[str, Model]) -> dict[str, ServedAgent]:
    """The served agents by name, each with its model (``models`` by agent name)."""
    served = {}
    for agent in agents:
        description = describe(agent)
        served[agent.name] = ServedAgent(
            agent,
            agent.path or Path(agent.name),
            models[agent.name],
            description,
            # The hash the restore compares: a version that matches is a session it runs.
            agent.state_hash,
            former=former_version(description),
        )
    return served
