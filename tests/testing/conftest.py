"""Shared helpers for the `agentscript test` tests: the tests folder on the path (for the fake
LLM servers) and a copy of the order_status example to edit."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))


@pytest.fixture
def order_copy(tmp_path: Path) -> Path:
    """A private copy of examples/order_status (agent and specs)."""
    target = tmp_path / "order_status"
    shutil.copytree(ROOT / "examples" / "order_status", target)
    return target
