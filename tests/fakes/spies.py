"""Spies on a module's functions, for tests that bound the work a function is given (a long
text cut before it is scrubbed) without timing it."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest


def record_lengths(monkeypatch: pytest.MonkeyPatch, module: ModuleType, name: str) -> list[int]:
    """``module.name`` replaced, for the test, by a spy that calls it and notes the length of
    its first argument; the list the lengths are appended to, in order."""
    lengths: list[int] = []
    real = getattr(module, name)

    def spy(text: Any, *args: Any, **kwargs: Any) -> Any:
        lengths.append(len(text))
        return real(text, *args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    return lengths
