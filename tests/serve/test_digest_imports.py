"""``source_digest`` hashes the modules of an agent's folder that its ``python://`` targets'
modules import, read with ``ast`` and never imported, within bounds: a sibling the mapped
backend imports, edited while a server of several workers runs, made a worker started again
after a crash serve another version than the others, and nothing said so (docs/serve.md,
"Several workers")."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from agentscript.loader import load
from agentscript.models.config import CONFIG_ENV
from agentscript.server import digest_imports
from agentscript.server.agents import source_digest

EXAMPLE = Path(__file__).parents[2] / "examples" / "order_status"


@pytest.fixture(autouse=True)
def no_config_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The toml that applies is the one found from the agent's folder."""
    monkeypatch.delenv(CONFIG_ENV, raising=False)


def orders(tmp_path: Path, backend_imports: str, files: dict[str, str]) -> Path:
    """examples/order_status (its toml maps its flow:// targets to ``orders_backend``), the
    backend starting with ``backend_imports``, ``files`` written beside it; the agent file is
    returned."""
    folder = tmp_path / "order_status"
    folder.mkdir()
    for name in ("order_status.agent", "agentscript.toml", "orders_backend.py"):
        shutil.copy(EXAMPLE / name, folder / name)
    backend = folder / "orders_backend.py"
    backend.write_text(backend_imports + backend.read_text())
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder / "order_status.agent"


def digest(agent: Path) -> str:
    """The digest of the agent as a restarted worker finds it: loaded anew."""
    return source_digest(load(agent))


def append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


DB = "def fetch(order_ID):\n    return {}\n"

# Each: the backend's imports, the files beside it, and the edit that must change the digest.
IMPORTED: dict[str, tuple[str, dict[str, str], Callable[[Path], None]]] = {
    "from a sibling, absolutely": (
        "from orders_db import fetch\n",
        {"orders_db.py": DB},
        lambda folder: append(folder / "orders_db.py", "VERSION = 2\n"),
    ),
    "a sibling, relatively": (
        "from . import orders_db\n",
        {"orders_db.py": DB},
        lambda folder: append(folder / "orders_db.py", "VERSION = 2\n"),
    ),
    "a sibling, with import": (
        "import orders_db\n",
        {"orders_db.py": DB},
        lambda folder: append(folder / "orders_db.py", "VERSION = 2\n"),
    ),
    "a package's submodule a sibling imports": (
        "from . import orders_db\n",
        {
            "orders_db.py": "from .db import pool\n" + DB,
            "db/__init__.py": "",
            "db/pool.py": "SIZE = 4\n",
        },
        lambda folder: append(folder / "db" / "pool.py", "SIZE = 8\n"),
    ),
    "a package's __init__ on the way": (
        "from db.pool import SIZE\n",
        {"db/__init__.py": "", "db/pool.py": "SIZE = 4\n"},
        lambda folder: append(folder / "db" / "__init__.py", "READY = True\n"),
    ),
    "inside a function": (
        "def _late():\n    from . import orders_db\n    return orders_db\n",
        {"orders_db.py": DB},
        lambda folder: append(folder / "orders_db.py", "VERSION = 2\n"),
    ),
    "a relative import's module that was missing written": (
        "try:\n    from . import orders_db\nexcept ImportError:\n    orders_db = None\n",
        {},
        lambda folder: (folder / "orders_db.py").write_text(DB),
    ),
}


@pytest.mark.parametrize("imported", IMPORTED)
def test_an_edit_of_a_module_the_backend_imports_changes_the_digest(
    imported: str, tmp_path: Path
) -> None:
    imports, files, edit = IMPORTED[imported]
    agent = orders(tmp_path, imports, files)
    before = digest(agent)
    # A module nobody imports is no part of the agent.
    (agent.parent / "scratch.py").write_text("print('notes')\n")
    assert digest(agent) == before
    edit(agent.parent)
    assert digest(agent) != before


def test_the_modules_are_read_never_imported(tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    side_effect = f"open({str(ran)!r}, 'w').close()\n"
    agent = orders(tmp_path, "from . import orders_db\n", {"orders_db.py": side_effect + DB})
    before = digest(agent)
    append(agent.parent / "orders_db.py", "VERSION = 2\n")
    assert digest(agent) != before
    assert not ran.exists()


def test_imports_are_followed_no_further_than_the_bound(tmp_path: Path) -> None:
    """A chain of modules, each importing the next: the one ``DIGEST_IMPORT_DEPTH`` imports
    away from the backend is hashed, the one after it is not (a folder of thousands of modules
    cannot stall a worker's start-up)."""
    depth = digest_imports.DIGEST_IMPORT_DEPTH
    chain = {f"m{n}.py": f"from . import m{n + 1}\n" for n in range(1, depth + 2)}
    agent = orders(tmp_path, "from . import m1\n", chain)
    before = digest(agent)
    append(agent.parent / f"m{depth + 1}.py", "VERSION = 2\n")
    assert digest(agent) == before
    append(agent.parent / f"m{depth}.py", "VERSION = 2\n")
    assert digest(agent) != before


def test_no_more_files_are_looked_up_than_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = [f"part{n:02}" for n in range(40)]
    files = {f"{name}.py": "X = 1\n" for name in names}
    agent = orders(tmp_path, f"from . import {', '.join(names)}\n", files)
    monkeypatch.setattr(digest_imports, "DIGEST_IMPORT_LOOKUPS", 20)
    before = digest(agent)
    append(agent.parent / f"{names[-1]}.py", "X = 2\n")
    assert digest(agent) == before
    append(agent.parent / f"{names[0]}.py", "X = 2\n")
    assert digest(agent) != before
