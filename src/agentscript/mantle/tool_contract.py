"""The documented Mantle tool contract, our own implementation of it.

Mantle's tools reference writes tools like this::

    from rasa.mantle.tools.decorator import ToolContext, tool
    from rasa.mantle.tools.result import ToolResult

    @tool(description="Look up the balance")
    async def check_balance(account_id: str, context: ToolContext = None) -> ToolResult:
        context.memory.set("balance", 12.0)
        return ToolResult(llm_response={"balance": 12.0})

This module provides that surface: :func:`tool` (``description=`` is a required keyword; a
bare ``@tool`` is an error, as documented), :class:`ToolContext` (``memory.get/set``,
``send``, ``is_cancelled``) and :class:`ToolResult` (``llm_response`` for the model,
``error`` for a failure). :func:`documented_names` makes them importable under the
documented module names *only while a project's tool modules are imported*: the names are
put into ``sys.modules`` and removed again (earlier entries restored) in ``finally``.
Nothing of Rasa's is shipped or imported.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from agentscript.mantle.load.tool_code import tool as _mark
from agentscript.mantle.run.tool_handler import ToolContext

__all__ = ["DOCUMENTED_MODULES", "ToolContext", "ToolResult", "documented_names", "tool"]

F = TypeVar("F", bound=Callable[..., Any])

DECORATOR_MODULE = "rasa.mantle.tools.decorator"
RESULT_MODULE = "rasa.mantle.tools.result"
DOCUMENTED_MODULES = ("rasa", "rasa.mantle", "rasa.mantle.tools", DECORATOR_MODULE, RESULT_MODULE)


@dataclass(slots=True)
class ToolResult:
    """What a tool returns: ``llm_response`` is what the model reads; a non-empty ``error``
    marks a failure (``on_failure`` is said; a post-write hook's error rolls the write back)."""

    llm_response: Any = None
    error: str | None = None


def tool(*args: Any, description: str | None = None, writes: list[str] | None = None) -> Any:
    """``@tool(description=...)``: mark an (async) function as a tool."""
    if args or not isinstance(description, str) or not description.strip():
        raise TypeError("@tool needs a description keyword: @tool(description='...')")
    return _mark(description, writes=writes)


def _modules() -> dict[str, types.ModuleType]:
    made = {name: types.ModuleType(name) for name in DOCUMENTED_MODULES}
    for name, module in made.items():
        module.__path__ = []  # a package, so the submodules import
        module.__doc__ = f"agentscript's implementation of the documented {name} names"
    made[DECORATOR_MODULE].tool = tool  # type: ignore[attr-defined]
    made[DECORATOR_MODULE].ToolContext = ToolContext  # type: ignore[attr-defined]
    made[RESULT_MODULE].ToolResult = ToolResult  # type: ignore[attr-defined]
    made["rasa"].mantle = made["rasa.mantle"]  # type: ignore[attr-defined]
    made["rasa.mantle"].tools = made["rasa.mantle.tools"]  # type: ignore[attr-defined]
    made["rasa.mantle.tools"].decorator = made[DECORATOR_MODULE]  # type: ignore[attr-defined]
    made["rasa.mantle.tools"].result = made[RESULT_MODULE]  # type: ignore[attr-defined]
    return made


@contextmanager
def documented_names() -> Iterator[None]:
    """Make the documented module names importable for the duration of the block."""
    saved = {name: sys.modules[name] for name in DOCUMENTED_MODULES if name in sys.modules}
    made = _modules()
    sys.modules.update(made)
    try:
        yield
    finally:
        for name, module in made.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]
        sys.modules.update(saved)
