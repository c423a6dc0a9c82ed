"""``python://`` modules of an agent: imported under the agent's own package, never via ``sys.path``.

Each agent folder gets a package named ``agentscript_agents.a<hash of the folder>`` whose
``__path__`` is that folder alone. ``python://helpers:who`` of the agent in ``/x`` imports
``agentscript_agents.a<hash(/x)>.helpers``, so two agents that each ship a ``helpers.py`` each
run their own, and nothing of an agent is put on ``sys.path``: an agent's ``smtplib.py`` is
reachable only as that agent's module and never shadows the host's ``import smtplib``.

Contract: :func:`import_target` returns the module for a dotted name. A name whose first part
is a module or package in the agent folder resolves inside the agent's package; any other name
is imported from the host (installed packages). Modules of an agent import their siblings
relatively (``from . import utils``): a bare ``import utils`` looks at the host, by design.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import sys
import threading
import types
from pathlib import Path

ROOT = "agentscript_agents"
_lock = threading.Lock()


def package_for(folder: Path) -> str:
    """The package name that holds ``folder``'s modules (created on first use)."""
    resolved = folder.resolve()
    digest = hashlib.sha256(str(resolved).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    name = f"{ROOT}.a{digest}"
    if name in sys.modules:
        return name
    with _lock:
        if ROOT not in sys.modules:
            sys.modules[ROOT] = _package(ROOT, [])
        if name not in sys.modules:
            package = _package(name, [str(resolved)])
            sys.modules[name] = package
            setattr(sys.modules[ROOT], name.rsplit(".", 1)[1], package)
    return name


def _package(name: str, path: list[str]) -> types.ModuleType:
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = list(path)
    module = importlib.util.module_from_spec(spec)
    module.__path__ = list(path)
    return module


def folder_locations(folder: Path, dotted: str) -> tuple[Path, Path] | None:
    """Where ``dotted`` is looked for in ``folder``, whether or not it is there: the module
    file ``<head>.py`` and the package folder ``<head>/`` of its first part; None when that
    part cannot name a module (then ``dotted`` is only ever imported from the host)."""
    head = dotted.split(".", 1)[0]
    if not head.isidentifier():
        return None
    return folder / f"{head}.py", folder / head


def in_folder(folder: Path, dotted: str) -> bool:
    """True when ``dotted``'s first part is a module or package inside ``folder``."""
    where = folder_locations(folder, dotted)
    return where is not None and (where[0].is_file() or where[1].is_dir())


def import_target(folder: Path | None, dotted: str) -> types.ModuleType:
    """The module ``dotted`` as the agent in ``folder`` sees it (see the module docstring)."""
    if folder is not None and in_folder(folder, dotted):
        return importlib.import_module(f"{package_for(folder)}.{dotted}")
    return importlib.import_module(dotted)
