"""The modules of an agent's folder that its ``python://`` modules import, found by reading them.

``server/agents.py:source_digest`` hashes what a restarted worker loads; for an ``.agent``
agent that includes the folder's modules its targets' modules import, and those these import:
a sibling the mapped backend imports, edited while a server of several workers runs, made a
worker started again after a crash serve another version than the others, and nothing said so.

:func:`imported_files` takes the folder and the module files to start from and yields the
files they import, breadth first, each once, with the name the digest hashes it under (None
for a file looked for and not there). The modules are read with ``ast``, never imported: no
code of the agent runs. The walk is bounded (``DIGEST_IMPORT_DEPTH``,
``DIGEST_IMPORT_LOOKUPS``); what lies beyond is not yielded.
"""

from __future__ import annotations

import ast
import warnings
from collections.abc import Iterator
from pathlib import Path

# How far the walk follows imports from a target's module to the folder's other modules
# (import hops), and how many files it may parse and paths it may look up on the way: a folder
# of thousands of modules must not stall a worker's start-up. What lies beyond is not hashed.
DIGEST_IMPORT_DEPTH = 8
DIGEST_IMPORT_LOOKUPS = 2048


def imported_files(folder: Path, start: list[Path]) -> Iterator[tuple[str, Path | None]]:
    """The files of ``folder`` that the modules ``start`` import, then those that these
    import, breadth first, each once (``import x``, ``from x import y``, ``from . import y``:
    :func:`_imports`, :func:`_module_paths`). They are read with ``ast``, never imported. A
    relative import can only ever be resolved in the folder, so a file it names that is not
    there counts as missing (one written later changes the digest); an absolute one is the
    host's unless the folder's file is there (the folder on ``sys.path``: ``python -m`` run in
    it), and one whose first name is no module of the folder is skipped (``import json``).
    Bounded by ``DIGEST_IMPORT_DEPTH`` and ``DIGEST_IMPORT_LOOKUPS``."""
    from agentscript.actions.modules import in_folder

    exists: dict[Path, bool] = dict.fromkeys(start, True)
    heads: dict[str, bool] = {}  # whether a first name is a module of the folder
    hashed = set(start)
    level, lookups = start, 0
    for _ in range(DIGEST_IMPORT_DEPTH):
        found: list[Path] = []
        for file in level:
            lookups += 1  # its parse
            for parts, names, relative in _imports(folder, file):
                if not relative and parts[0] not in heads:
                    lookups += 1
                    heads[parts[0]] = in_folder(folder, parts[0])
                if not (relative or heads[parts[0]]):
                    continue
                for candidate in _module_paths(folder, parts, names):
                    if candidate not in exists:
                        lookups += 1
                        exists[candidate] = candidate.is_file()
                    if lookups > DIGEST_IMPORT_LOOKUPS:
                        return
                    if candidate in hashed or not (exists[candidate] or relative):
                        continue
                    hashed.add(candidate)
                    name = f"import:{candidate.relative_to(folder).as_posix()}"
                    if exists[candidate]:
                        found.append(candidate)
                        yield name, candidate
                    else:
                        yield name, None
        level = found


def _imports(folder: Path, file: Path) -> Iterator[tuple[list[str], list[str], bool]]:
    """The imports of ``file`` (a module of ``folder``), each as the dotted name it imports
    from the folder's root, the names it takes from it (``from m import a``: ``a`` may be a
    submodule) and whether it is relative. The folder is imported as one package
    (``actions/modules.py``), so a relative import climbing above it is none of the folder's.
    An unreadable file has none."""
    try:
        with warnings.catch_warnings():  # a SyntaxWarning is the module's own business
            warnings.simplefilter("ignore")
            tree = ast.parse(file.read_bytes(), filename=str(file))
    except (OSError, SyntaxError, ValueError, RecursionError):
        return
    package = file.relative_to(folder).parts[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name.split("."), [], False
        elif isinstance(node, ast.ImportFrom):
            names = [alias.name for alias in node.names if alias.name != "*"]
            module = node.module.split(".") if node.module else []
            if node.level == 0:
                yield module, names, False
            elif node.level - 1 <= len(package):
                base = list(package[: len(package) - (node.level - 1)])
                yield base + module, names, True


def _module_paths(folder: Path, parts: list[str], names: list[str]) -> Iterator[Path]:
    """The files of ``folder`` that importing ``parts`` (then ``names`` from it) may run,
    whether or not they are there: the ``__init__.py`` of each package on the way, the module
    file or package of ``parts``, and each of ``names`` as a submodule. The folder's own
    ``__init__.py`` never runs (its package is made, not imported). None when a part cannot
    name a module."""
    if not all(part.isidentifier() for part in (*parts, *names)):
        return
    for end in range(1, len(parts)):
        yield folder.joinpath(*parts[:end], "__init__.py")
    if parts:
        yield folder.joinpath(*parts[:-1], f"{parts[-1]}.py")
        yield folder.joinpath(*parts, "__init__.py")
    for name in names:
        yield folder.joinpath(*parts, f"{name}.py")
        yield folder.joinpath(*parts, name, "__init__.py")
