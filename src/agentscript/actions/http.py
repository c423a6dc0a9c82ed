"""An opt-in handler for ``http://`` and ``https://`` action targets.

Not registered by default: an agent file must not make the runtime call the network unless the
program embedding it says so::

    agent.register_handler("https", http_json_handler(headers={"Authorization": f"Bearer {token}"}))

The action's inputs are POSTed as a JSON object to the target URL; the response must be a JSON
object, which becomes the action's outputs. Any other outcome (status >= 400, not JSON, not an
object, a network error, a redirect: never followed, so the headers never reach another host)
fails the action with a message saying which. ``timeout`` bounds the whole call.

A message never shows a header value nor the credential inside it (``Bearer sk-...`` and
``sk-...`` alike), nor the target URL's user, password or query string; a target URL holding
a user or password is refused (it would never be sent).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from agentscript.actions.outbound import FetchError, fetch, redirect_note
from agentscript.actions.registry import ActionError, ActionRequest
from agentscript.limits import MAX_HTTP_RESPONSE_BYTES
from agentscript.redaction import secret_forms, shown_url, without_secrets

MAX_RESPONSE_BYTES = MAX_HTTP_RESPONSE_BYTES


def http_json_handler(
    *, headers: Mapping[str, str] | None = None, timeout: float = 30.0
) -> Callable[[ActionRequest], dict[str, Any]]:
    """A handler for ``register_handler("http"|"https", ...)``; ``headers`` go with every call
    (keep secrets in the environment and pass them here, never in the agent file)."""
    fixed = {"Content-Type": "application/json", "Accept": "application/json", **(headers or {})}
    secrets = secret_forms((), (headers or {}).values())

    def handle(request: ActionRequest) -> dict[str, Any]:
        url = request.target or ""
        where = f"action '{request.name}': {shown_url(url)}"
        body = json.dumps(request.inputs, default=str).encode("utf-8")
        try:
            answer = fetch(
                url,
                method="POST",
                headers=fixed,
                body=body,
                timeout=timeout,
                total=timeout,
                max_bytes=MAX_RESPONSE_BYTES,
            )
        except FetchError as exc:
            raise ActionError(without_secrets(f"{where}: {exc}", secrets)) from None
        if answer.status >= 300:
            note = redirect_note(answer) if answer.status < 400 else ""
            raise ActionError(f"{where} answered HTTP {answer.status}{note}")
        raw = answer.body
        try:
            data = json.loads(raw.decode("utf-8")) if raw.strip() else {}
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            raise ActionError(f"{where} did not answer with JSON") from None
        if not isinstance(data, dict):
            raise ActionError(f"{where} must answer with a JSON object")
        return data

    return handle
