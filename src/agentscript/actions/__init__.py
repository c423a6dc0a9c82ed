"""Action targets: stubs, callables, scheme handlers (``python://`` built in, HTTP opt-in)."""

from agentscript.actions.http import http_json_handler
from agentscript.actions.registry import (
    ActionError,
    ActionRequest,
    ActionRunner,
    StubBook,
    python_handler,
)

__all__ = [
    "ActionError",
    "ActionRequest",
    "ActionRunner",
    "StubBook",
    "http_json_handler",
    "python_handler",
]
