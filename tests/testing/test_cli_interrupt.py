"""Ctrl-C during `agentscript test` exits 130, as `run` and `chat` do, not click's
`Aborted!` with exit 1, which a CI script cannot tell from a failed test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import run_test


def test_test_ctrl_c_exits_130_without_aborted(
    order_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr("agentscript.testing.command.test_command", interrupted)
    code, out, err = run_test(str(order_copy / "specs"))
    assert code == 130
    assert "Aborted!" not in out + err and "interrupted" in err
