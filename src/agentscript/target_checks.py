"""Warnings of ``agentscript validate`` on ``python://`` targets and on the ``[actions.targets]``
of ``agentscript.toml``, on the key's line of the toml (``target_warnings``) or on an action's
``target:`` line (``python_target_warnings``); ``runner_targets``, the targets an agent's
action runner may run, is the server's too (a restarted worker's digest, ``server/agents.py``).

* ``unmatched-action-target``: a key that no agent the toml applies to targets (a typo). The
  toml is judged once against all of them: the checked agent and the ``.agent`` files below
  the toml's folder whose toml it is (``find_config``), read and checked but never run, and
  cached by their size and modification time. A folder of migrated agents shares one toml,
  each agent using a few of its keys.
* ``unresolved-python-target``: a mapped ``python://module:function`` that cannot run for an
  agent using the key: no such module in the agent's folder nor installed, or a module of the
  folder that binds no such name at its top level. Found as ``actions/modules.py`` would
  import it, but without importing anything: the folder's files are looked at and parsed
  (``ast``), an installed package only looked up (``importlib.util.find_spec`` of the top
  name, then its ``__path__``). A ``python://`` target written in the agent gets the same
  warning, on its ``target:`` line.

Each toml warning is given with one agent only (the one whose target a typo is closest to,
else the first that loads, by path), so checking a folder of agents sharing a toml reports it
once, and checking one agent of it still judges the toml against its siblings. Targets are
named as a trace shows them (``redaction.shown_target``): the messages go to CI logs, and a
URL target may hold a password or an API key.
"""

from __future__ import annotations

import ast
import difflib
import functools
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from agentscript.diagnostics import Diagnostic, Span, warning

if TYPE_CHECKING:
    from agentscript.check.outline import AgentOutline
    from agentscript.syntax.tree import Block, Document


# Bounds of the look for the other agents a toml applies to: a toml high in a tree (a home
# folder) must not make `validate` walk the disk. Past them the agents found may not be all,
# so no key is called unmatched (the mappings of the agents found are still checked).
MAX_SCANNED_ENTRIES = 20_000
MAX_SHARING_AGENTS = 500
# Folders never searched for agents, besides hidden ones (.git, .venv) and virtual envs.
_SKIPPED_DIRS = frozenset({"node_modules", "__pycache__", "site-packages"})
SHOWN_AGENTS = 5  # agents a message names, then "and N more"
SHOWN_TARGETS = 10
# How alike (difflib ratio) a key and an agent's target are for the target to be named as
# the one the key likely meant: 'flow://Get_Delivry_Date' ~ 'flow://Get_Delivery_Date' is
# 0.98, two flows of one naming scheme ('Get_Return_Date', 'Get_Delivery_Date') 0.8.
CLOSE_TARGET = 0.85


@dataclass(frozen=True, slots=True)
class _Agent:
    """An agent a toml applies to, as the toml's warnings need it."""

    path: Path  # resolved
    targets: tuple[str, ...]  # runner_targets
    loads: bool  # no parse or check error, so validate_path reports its toml's warnings


def target_warnings(
    path: Path, outline: AgentOutline, dialect: str | None = None
) -> list[Diagnostic]:
    """The warnings on the ``[actions.targets]`` of the toml that applies to the agent at
    ``path`` (checked into ``outline``) that this agent reports (the module docstring says
    which), by line. A table that does not load is ``config_diagnostics``' to report, so it
    gives none here."""
    from agentscript.actions.settings import ActionConfigError, load_settings
    from agentscript.models.config import find_config

    try:
        targets = load_settings(path).targets
    except ActionConfigError:
        return []
    config = find_config(path)
    if not targets or config is None:
        return []
    config = config.resolve()
    me = _Agent(path.resolve(), tuple(runner_targets(outline)), loads=True)
    agents, complete = _agents_sharing(config, me, dialect)
    found = _toml_warnings(config, targets, agents, complete, me.path)
    return sorted(found, key=lambda d: (d.span.line, d.span.column))


def _toml_warnings(
    config: Path, targets: Mapping[str, str], agents: Sequence[_Agent], complete: bool, me: Path
) -> list[Diagnostic]:
    """The warnings on ``config``'s ``targets`` that the agent at ``me`` (one of ``agents``)
    reports. Each warning has one reporting agent, the same whichever agent sharing the toml
    computes it (the same files, read through one cache), so each is reported once however
    many of them are checked."""
    from agentscript.actions.settings import unmatched_targets

    text = _text_or_empty(config)
    users: dict[str, list[_Agent]] = {}
    for agent in agents:
        for target in agent.targets:
            users.setdefault(target, []).append(agent)
    unmatched = set(unmatched_targets(targets, users))
    problems: dict[tuple[Path, str], str | None] = {}  # many keys map to a few functions
    found: list[tuple[Path, Diagnostic]] = []
    for key, value in targets.items():
        if key in unmatched:
            if complete:
                found += _unmatched_key(config, text, key, targets, agents)
        elif any(agent.path == me for agent in users[key]):  # only a user reports a mapping
            found += _unresolved_mapping(config, text, key, value, users[key], problems)
    mine = [diag for owner, diag in found if owner == me]
    for diag in mine:
        diag.file = str(config)
    return mine


def _unmatched_key(
    config: Path, text: str, key: str, targets: Mapping[str, str], agents: Sequence[_Agent]
) -> list[tuple[Path, Diagnostic]]:
    """``unmatched-action-target`` for ``key``, which no agent of ``agents`` targets: given
    with the agent whose target the key is closest to (the one it likely meant), else with
    the first that loads."""
    from agentscript.redaction import shown_target

    loading = [a for a in agents if a.loads]
    if not loading:
        return []  # none loads, so none reports its toml: each reports its errors instead
    close = _closest_target(key, agents)
    owner = close[1] if close is not None and close[1].loads else loading[0]
    head = f"[actions.targets] maps {shown_target(key)!r}, but no action or connected subagent"
    if len(agents) == 1:
        own = agents[0].targets
        named = _bounded([shown_target(t) for t in own[:SHOWN_TARGETS]], len(own))
        message = (
            f"{head} of {_name(agents[0].path, config.parent)} has that target, so the "
            f"mapping never runs (a typo?); its action targets: {named or 'none'}"
        )
    else:
        names = _agent_names(agents, config.parent)
        message = (
            f"{head} of the {len(agents)} agents this file applies to ({names}) has that "
            "target, so the mapping never runs (a typo?)"
        )
        if close is not None:
            also = ", mapped too" if close[0] in targets else ""
            message += (
                f"; the closest target is {shown_target(close[0])!r} "
                f"({_name(close[1].path, config.parent)}{also})"
            )
    return [(owner.path, warning("unmatched-action-target", message, _key_span(text, key)))]


def _closest_target(key: str, agents: Sequence[_Agent]) -> tuple[str, _Agent] | None:
    """The target of ``agents`` most like ``key``, if one is close, with its agent (one that
    loads when several have it)."""
    holders: dict[str, _Agent] = {}
    for agent in sorted(agents, key=lambda a: not a.loads):  # stable: else in their order
        for target in agent.targets:
            holders.setdefault(target, agent)
    match = _closest(key, tuple(holders))
    return (match, holders[match]) if match is not None else None


@functools.lru_cache(maxsize=256)
def _closest(key: str, targets: tuple[str, ...]) -> str | None:
    """The one of ``targets`` most like ``key``, if close; cached, as each agent sharing a
    toml asks it again."""
    match = difflib.get_close_matches(key, targets, n=1, cutoff=CLOSE_TARGET)
    return match[0] if match else None


def _unresolved_mapping(
    config: Path,
    text: str,
    key: str,
    value: str,
    users: Sequence[_Agent],
    problems: dict[tuple[Path, str], str | None],
) -> list[tuple[Path, Diagnostic]]:
    """``unresolved-python-target`` when the ``value`` mapped to ``key`` cannot run for one of
    the ``users`` of the key (each importing it from its own folder); given with the first
    such agent that loads. ``problems`` keeps each folder's answer for each value."""
    from agentscript.redaction import shown_target

    failing: list[tuple[_Agent, str]] = []
    for agent in users:
        where = (agent.path.parent, value)
        if where not in problems:
            problems[where] = _python_problem(*where)
        problem = problems[where]
        if agent.loads and problem is not None:
            failing.append((agent, problem))
    if not failing:
        return []
    owner, problem = failing[0]
    names = _agent_names([agent for agent, _ in failing], config.parent)
    message = (
        f"[actions.targets] maps {shown_target(key)!r} to {shown_target(value)!r}, which "
        f"cannot run for {names}: {problem}"
    )
    return [(owner.path, warning("unresolved-python-target", message, _key_span(text, key)))]


def _agents_sharing(config: Path, me: _Agent, dialect: str | None) -> tuple[list[_Agent], bool]:
    """The agents ``config`` applies to, ``me`` among them, in an order all of them compute
    alike, and whether that is all of them: the ``.agent`` files below the toml's folder whose
    toml it is (below ``me``'s own folder when ``$AGENTSCRIPT_CONFIG`` names a toml outside
    it)."""
    from agentscript.models.config import find_config

    root = config.parent if me.path.is_relative_to(config.parent) else me.path.parent
    files, complete = _agent_files_below(root)
    agents = {me.path: me}
    configs: dict[Path, Path | None] = {}  # by folder: its agents share their toml
    for file, stat in files:
        if file.parent not in configs:
            configs[file.parent] = _resolved(find_config(file))
        if file not in agents and configs[file.parent] == config:
            targets, loads = _checked_targets(str(file), stat.st_mtime_ns, stat.st_size, dialect)
            agents[file] = _Agent(file, targets, loads)
    return [agents[path] for path in sorted(agents, key=str)], complete


def _agent_files_below(root: Path) -> tuple[list[tuple[Path, os.stat_result]], bool]:
    """The ``.agent`` files below ``root`` (resolved, when ``root`` is) with their stat, and
    whether the look was complete (within ``MAX_SCANNED_ENTRIES`` and
    ``MAX_SHARING_AGENTS``). A link to a folder is not followed, a link to a file is."""
    from agentscript.models.config import CONFIG_ENV

    # Without $AGENTSCRIPT_CONFIG, a folder with a toml of its own holds none of root's agents.
    nested_configs = not os.environ.get(CONFIG_ENV)
    found: list[tuple[Path, os.stat_result]] = []
    scanned = 0
    folders = [str(root)]
    while folders:
        try:
            with os.scandir(folders.pop()) as listing:
                entries = list(listing)
        except OSError:
            continue
        scanned += len(entries)
        if scanned > MAX_SCANNED_ENTRIES:
            return found, False
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                if not _skipped(entry, nested_configs):
                    folders.append(entry.path)
            elif entry.name.endswith(".agent"):
                try:
                    stat = entry.stat()
                except OSError:  # a dangling link
                    continue
                path = Path(entry.path)
                found.append((path.resolve() if entry.is_symlink() else path, stat))
        if len(found) > MAX_SHARING_AGENTS:
            return found, False
    return found, True


def _skipped(folder: os.DirEntry[str], nested_configs: bool) -> bool:
    from agentscript.models.config import CONFIG_FILE

    return (
        folder.name.startswith(".")
        or folder.name in _SKIPPED_DIRS
        or os.path.isfile(os.path.join(folder.path, "pyvenv.cfg"))
        or (nested_configs and os.path.isfile(os.path.join(folder.path, CONFIG_FILE)))
    )


@functools.lru_cache(maxsize=1024)
def _checked_targets(
    file: str, mtime_ns: int, size: int, dialect: str | None
) -> tuple[tuple[str, ...], bool]:
    """The targets of the agent in ``file`` and whether it checks without errors. Cached by
    the file's time and size (the key, unused here): checking a folder of N agents that share
    a toml reads each once, not N times."""
    del mtime_ns, size
    from agentscript.check import check
    from agentscript.loader import parse_file

    try:
        doc, diagnostics = parse_file(file)
        if doc is None:
            return (), False
        result = check(doc, dialect=dialect)
    except Exception:  # a bug of ours on another agent must not hide this one's report
        return (), False
    loads = not any(d.is_error for d in [*diagnostics, *result.diagnostics])
    return tuple(runner_targets(result.outline)), loads


def python_target_warnings(path: Path, doc: Document, outline: AgentOutline) -> list[Diagnostic]:
    """``unresolved-python-target`` for each action of the agent at ``path`` (parsed into
    ``doc``, checked into ``outline``) whose ``python://`` target cannot run
    (:func:`_python_problem`), on its ``target:`` value. A target ``[actions.targets]`` maps
    to another is not the one that runs: its mapping is checked with the toml."""
    from agentscript.actions.settings import ActionConfigError, load_settings
    from agentscript.redaction import shown_target

    try:
        mapped = load_settings(path).targets
    except ActionConfigError:
        mapped = {}
    spans = _target_spans(doc.body)
    found: list[Diagnostic] = []
    seen: set[Span] = set()
    for node in outline.subagents.values():
        for action in node.actions.values():
            target = action.target
            if target is None or action.scheme != "python" or target in mapped:
                continue
            if action.span in seen:  # one definition seen from two nodes
                continue
            seen.add(action.span)
            problem = _python_problem(path.parent, target.strip())
            if problem is not None:
                diag = warning(
                    "unresolved-python-target",
                    f"Action {action.name!r} targets {shown_target(target)!r}, which "
                    f"cannot run: {problem}",
                    spans.get(action.span, action.span),
                )
                diag.file = doc.path or str(path)
                found.append(diag)
    return found


def _target_spans(body: Block) -> dict[Span, Span]:
    """The span of each ``target:`` value in ``body``, by the span of its block's key (an
    action's ``ActionDef.span``)."""
    from agentscript.syntax.tree import Entry

    spans: dict[Span, Span] = {}
    blocks = [body]
    while blocks:
        for item in blocks.pop().items:
            block = getattr(item, "block", None)
            if block is None:
                continue
            blocks.append(block)
            if isinstance(item, Entry):
                for entry in block.entries():
                    if entry.key.parts == ["target"] and entry.value is not None:
                        spans[item.key.span] = entry.value.span
    return spans


def _python_problem(folder: Path, target: str) -> str | None:
    """Why ``python://module:function`` cannot run for an agent in ``folder``, found as
    ``actions/registry.py`` imports it (``actions/modules.py``) but running none of its code;
    None when it can, or when that cannot be told without running code."""
    from agentscript.actions.modules import in_folder

    module, sep, function = target.partition("://")[2].partition(":")
    if not sep or not module or not function:
        return "it names no function; write python://module:function"
    if not function.isidentifier() or not all(p.isidentifier() for p in module.split(".")):
        return "its module or function, as written, is not a Python name"
    if in_folder(folder, module):
        return _folder_module_problem(folder, module, function)
    return _installed_problem(module)


class _Found(NamedTuple):
    """A module found in a folder, as the import system's file finder finds it."""

    package: Path | None  # a package's folder (where its submodules are), None for a module
    source: Path | None  # the file its import runs; None for a folder without __init__


# The file finder's order (importlib._bootstrap_external._get_supported_file_loaders).
_SUFFIXES = (
    *importlib.machinery.EXTENSION_SUFFIXES,
    *importlib.machinery.SOURCE_SUFFIXES,
    *importlib.machinery.BYTECODE_SUFFIXES,
)


def _find_in(place: Path, name: str) -> _Found | None:
    """Module ``name`` of folder ``place`` as the file finder picks it: a package with an
    ``__init__``, else a module file, else a folder without one (a namespace package)."""
    folder = place / name
    is_folder = folder.is_dir()
    if is_folder:
        for suffix in _SUFFIXES:
            if (folder / f"__init__{suffix}").is_file():
                return _Found(folder, folder / f"__init__{suffix}")
    for suffix in _SUFFIXES:
        if (place / f"{name}{suffix}").is_file():
            return _Found(None, place / f"{name}{suffix}")
    return _Found(folder, None) if is_folder else None


def _folder_module_problem(folder: Path, module: str, function: str) -> str | None:
    """Why ``module`` of the agent's ``folder`` has no ``function`` (None: it may have)."""
    parts = module.split(".")
    place: Path | None = folder
    found: _Found | None = None
    for depth, part in enumerate(parts, start=1):
        if place is None:  # the previous part is a module file
            parent = "/".join(parts[: depth - 1])
            return (
                f"{parent}.py of the agent's folder is a module, not a package: it has no {part!r}"
            )
        found = _find_in(place, part)
        if found is None:
            name = "/".join(parts[:depth])
            return f"the agent's folder has no {name}.py or {name}/, and so no module {module!r}"
        place = found.package
    assert found is not None  # a module name has at least one part
    return _function_problem(found, folder, function)


def _function_problem(found: _Found, folder: Path, function: str) -> str | None:
    """Why the module ``found`` in ``folder`` has no ``function``, read from its source (None:
    it binds the name, or its names cannot be read: compiled, unreadable, too large)."""
    if found.source is None:
        assert found.package is not None
        where = _name(found.package, folder)
        return f"{where}/ has no __init__.py, so it has no function {function!r}"
    where = _name(found.source, folder)
    if found.source.suffix not in importlib.machinery.SOURCE_SUFFIXES:
        return None
    try:
        stat = found.source.stat()
    except OSError:
        return None
    names = _source_names(str(found.source), stat.st_mtime_ns, stat.st_size)
    if isinstance(names, str):
        return f"{where} does not parse{names}, so importing it fails"
    if names is None or function in names or "*" in names or "__getattr__" in names:
        return None  # bound, or maybe: unread, a star import, a module __getattr__
    return f"{where} has no top-level function {function!r}"


@functools.lru_cache(maxsize=256)
def _source_names(file: str, mtime_ns: int, size: int) -> frozenset[str] | str | None:
    """The top-level names of the Python source ``file`` (:func:`_top_level_names`); where
    its syntax error is (`` (line N)``, maybe empty) when it does not parse; None when it
    cannot be read. Cached by the file's time and size (the key, unused here): every key
    mapped to one module of a folder of agents reads it once."""
    del mtime_ns, size
    from agentscript.reading import FileInputError, read_file_bytes

    try:
        return frozenset(_top_level_names(ast.parse(read_file_bytes(file), file)))
    except (FileInputError, RecursionError, MemoryError):
        return None
    except (SyntaxError, ValueError) as exc:  # ValueError: a null byte (before 3.12)
        return f" (line {exc.lineno})" if isinstance(exc, SyntaxError) and exc.lineno else ""


# The statement fields that hold statements still in the module's scope.
_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")


def _top_level_names(tree: ast.Module) -> set[str]:
    """The names ``tree`` binds at its top level, under ``if``, ``try``, ``with``, ``match``
    and loops too; ``*`` for a star import. Function and class bodies are other scopes, not
    looked into, nor are expressions (a walrus at the top level is missed)."""
    names: set[str] = set()
    nodes: list[ast.AST] = list(tree.body)
    while nodes:
        node = nodes.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
            continue
        if isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        for target in _assigned(node):
            names.update(
                n.id
                for n in ast.walk(target)
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
            )
        for field in _BODIES:
            nodes.extend(getattr(node, field, ()))
    return names


def _assigned(node: ast.AST) -> list[ast.expr]:
    """The targets statement ``node`` assigns (``=``, ``+=``, ``for x``, ``with ... as x``)."""
    if isinstance(node, ast.Assign):
        return node.targets
    if isinstance(node, ast.AnnAssign | ast.AugAssign | ast.For | ast.AsyncFor):
        return [node.target]
    if isinstance(node, ast.With | ast.AsyncWith):
        return [item.optional_vars for item in node.items if item.optional_vars is not None]
    return []


def _installed_problem(module: str) -> str | None:
    """Why ``module``, which is not in the agent's folder, cannot be imported from the host
    (None: it can, or that cannot be told without importing). Nothing is imported: the top
    name is looked up by the import system's finders (``find_spec`` of a dotted name would
    import its parents), each next part in its parent's ``__path__``."""
    parts = module.split(".")
    try:
        spec = importlib.util.find_spec(parts[0])
    except Exception:  # imported without a spec, or a finder that fails: not ours to judge
        return None
    if spec is None:
        return (
            f"the agent's folder has no {parts[0]}.py or {parts[0]}/, and no module "
            f"{parts[0]!r} is installed"
        )
    for depth in range(2, len(parts) + 1):
        name = ".".join(parts[:depth])
        if name in sys.modules:  # imported already, maybe by its parent's code (os.path)
            return None
        if spec.submodule_search_locations is None:
            return None  # a plain module: its code may make submodules (os.path)
        try:
            spec = importlib.machinery.PathFinder.find_spec(
                name, list(spec.submodule_search_locations)
            )
        except Exception:
            return None
        if spec is None:
            parent = ".".join(parts[: depth - 1])
            return f"the installed package {parent!r} has no module {name!r}"
    return None


def runner_targets(outline: AgentOutline) -> list[str]:
    """Every target the action runner may be asked to run for the agent, sorted: its
    subagents' actions (``run`` and tool calls) and its connected subagents (``agent://...``,
    called like an action, ``engine/program.py``). A delegation (``@subagent.x``) runs a node
    of the agent, never the runner."""
    actions = {a.target for node in outline.subagents.values() for a in node.actions.values()}
    connected = {c.target for c in outline.connected_subagents.values()}
    return sorted(t for t in actions | connected if t)


def _name(path: Path, folder: Path) -> str:
    """``path`` as a message names it: from ``folder``, else its file name."""
    try:
        return path.relative_to(folder).as_posix()
    except ValueError:
        return path.name


def _bounded(items: Sequence[str], total: int) -> str:
    """``items``, the first of ``total``, as a message lists them."""
    shown = ", ".join(items)
    return shown if total <= len(items) else f"{shown} and {total - len(items)} more"


def _agent_names(agents: Sequence[_Agent], folder: Path) -> str:
    shown = [_name(agent.path, folder) for agent in agents[:SHOWN_AGENTS]]
    return _bounded(shown, len(agents))


def _resolved(path: Path | None) -> Path | None:
    return path.resolve() if path is not None else None


def _text_or_empty(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def _key_span(text: str, key: str) -> Span:
    """Where ``key`` is written, quoted, in the toml ``text`` (the file's start if not found:
    an escaped or multi-line key)."""
    for number, line in enumerate(text.splitlines(), start=1):
        for quote in ('"', "'"):
            column = line.find(f"{quote}{key}{quote}")
            if column >= 0:
                return Span(number, column + 1, number, column + len(key) + 3)
    return Span(1, 1, 1, 1)


__all__ = ["python_target_warnings", "runner_targets", "target_warnings"]
