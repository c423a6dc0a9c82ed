"""Shared helpers for the `agentscript test` tests: the tests folder on the path (for the fake
LLM servers) and copies of the order_status and card_bank examples to edit."""

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


@pytest.fixture
def card_bank_copy(tmp_path: Path) -> Path:
    """A private copy of examples/card_bank (a Mantle project)."""
    target = tmp_path / "card_bank"
    shutil.copytree(ROOT / "examples" / "card_bank", target)
    return target


def write_scenario(project: Path, name: str, text: str) -> Path:
    """``text`` as the Mantle scenario ``eval/scenarios/<name>`` of ``project``; its path."""
    scenario = project / "eval" / "scenarios" / name
    scenario.parent.mkdir(parents=True, exist_ok=True)
    scenario.write_text(text, encoding="utf-8")
    return scenario
