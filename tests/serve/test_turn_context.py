"""The turn's Idempotency-Key reaches python:// functions that accept it, and only those."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentscript.actions.context import IDEMPOTENCY_KEY, with_turn_context
from agentscript.actions.registry import ActionRequest, ActionRunner
from agentscript.actions.settings import ActionSettings, Isolation


def takes_key(text: str, idempotency_key: str | None = None) -> dict[str, Any]:
    return {"text": text, "key": idempotency_key}


def no_key(text: str) -> dict[str, Any]:
    return {"text": text}


def test_key_given_only_to_functions_that_declare_it() -> None:
    token = IDEMPOTENCY_KEY.set("k-1")
    try:
        assert with_turn_context(takes_key, {"text": "a"}) == {
            "text": "a",
            "idempotency_key": "k-1",
        }
        assert with_turn_context(no_key, {"text": "a"}) == {"text": "a"}
    finally:
        IDEMPOTENCY_KEY.reset(token)
    assert with_turn_context(takes_key, {"text": "a"}) == {"text": "a"}  # no turn key


@pytest.mark.parametrize("mode", list(Isolation))
def test_key_reaches_a_python_action_in_every_isolation_mode(mode: Isolation) -> None:
    # thread: a pool thread (context copied); inline: the loop's thread; process: a worker
    # process (the key travels with the call).
    runner = ActionRunner(settings=ActionSettings(isolation=mode))

    async def main() -> dict[str, Any]:
        token = IDEMPOTENCY_KEY.set("k-2")
        try:
            request = ActionRequest("save", f"python://{__name__}:takes_key", {"text": "hello"})
            return await runner.run(request)
        finally:
            IDEMPOTENCY_KEY.reset(token)

    assert asyncio.run(main()) == {"text": "hello", "key": "k-2"}
