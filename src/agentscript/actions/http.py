"""An opt-in handler for ``http://`` and ``https://`` action targets.

Not registered by default: an agent file must not make the runtime call the network unless the
program embedding it says so::

    agent.register_handler("https", http_json_handler(headers={"Authorization": f"Bearer {token}"}))

The action's inputs are POSTed as a JSON object to the target URL; the response must be a JSON
object, which becomes the action's outputs. Any other outcome (status >= 400, not JSON, not an
object, a network error) fails the action with a message saying which.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from agentscript.actions.registry import ActionError, ActionRequest
from agentscript.limits import MAX_HTTP_RESPONSE_BYTES

MAX_RESPONSE_BYTES = MAX_HTTP_RESPONSE_BYTES


def http_json_handler(
    *, headers: Mapping[str, str] | None = None, timeout: float = 30.0
) -> Callable[[ActionRequest], dict[str, Any]]:
    """A handler for ``register_handler("http"|"https", ...)``; ``headers`` go with every call
    (keep secrets in the environment and pass them here, never in the agent file)."""
    fixed = {"Content-Type": "application/json", "Accept": "application/json", **(headers or {})}

    def handle(request: ActionRequest) -> dict[str, Any]:
        url = request.target or ""
        body = json.dumps(request.inputs, default=str).encode("utf-8")
        http_request = urllib.request.Request(url, data=body, headers=fixed, method="POST")
        try:
            with urllib.request.urlopen(http_request, timeout=timeout) as response:
                raw = response.read(MAX_RESPONSE_BYTES + 1)
        except urllib.error.HTTPError as exc:
            raise ActionError(f"action '{request.name}': {url} answered HTTP {exc.code}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ActionError(f"action '{request.name}': cannot reach {url}: {reason}") from None
        if len(raw) > MAX_RESPONSE_BYTES:
            raise ActionError(f"action '{request.name}': the response of {url} is too large")
        try:
            data = json.loads(raw.decode("utf-8")) if raw.strip() else {}
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            raise ActionError(f"action '{request.name}': {url} did not answer with JSON") from None
        if not isinstance(data, dict):
            raise ActionError(f"action '{request.name}': {url} must answer with a JSON object")
        return data

    return handle
