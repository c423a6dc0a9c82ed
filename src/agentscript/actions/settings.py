"""How an agent's synchronous actions run: the ``[actions]`` table of ``agentscript.toml``.

```toml
[actions]
isolation = "thread"          # "thread" (default) | "inline" | "process"
workers = 8                   # thread or process pool bound (optional)
loop_wait_ms = 1.0            # "thread": how long the loop waits for a call before it yields
output_limit = 16000          # characters of captured stdout/stderr kept per stream

[actions.isolation_by_action]  # per action name, overriding the default above
generate_report = "process"
format_date = "inline"
```

* ``thread``: a long-lived pool of daemon threads; the turn never waits past the timeout, but a
  timed-out call goes on running on its thread until it returns (Python cannot stop a thread).
  The loop's thread waits for the call itself for up to ``loop_wait_ms`` (so a quick action
  costs one hand-off, not a trip through the event loop), then lets other tasks run until the
  call returns or times out; ``0`` always yields at once.
* ``inline``: called directly on the event loop's thread. Cheapest (no hand-over), but the
  call blocks the loop and its timeout cannot fire until it returns: for quick, trusted code.
* ``process``: worker processes; a timed-out call is killed with its worker.

``async def`` actions always run on the event loop under ``asyncio.timeout``, whatever the mode.

The file is the one :func:`agentscript.models.config.find_config` picks for the agent's
folder. Contract: :func:`load_settings` returns the settings, or raises
:class:`ActionConfigError` naming the file and the key; a missing file or table gives defaults.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from agentscript.actions.capture import DEFAULT_LIMIT
from agentscript.actions.threads import DEFAULT_LOOP_WAIT


class Isolation(StrEnum):
    THREAD = "thread"
    INLINE = "inline"
    PROCESS = "process"


class ActionConfigError(ValueError):
    """The ``[actions]`` table is malformed; the message names the file and the fix."""


@dataclass(frozen=True)
class ActionSettings:
    isolation: Isolation = Isolation.THREAD
    by_action: Mapping[str, Isolation] = field(default_factory=dict)
    workers: int | None = None  # None: the shared pool's default
    output_limit: int = DEFAULT_LIMIT
    loop_wait: float = DEFAULT_LOOP_WAIT  # seconds; see ``loop_wait_ms`` above

    def mode(self, action: str) -> Isolation:
        return self.by_action.get(action, self.isolation)


def _isolation(value: Any, where: str) -> Isolation:
    try:
        return Isolation(value)
    except ValueError:
        choices = ", ".join(repr(m.value) for m in Isolation)
        raise ActionConfigError(f"{where}: isolation {value!r} is not one of {choices}") from None


def parse_settings(data: Mapping[str, Any], *, where: str = "agentscript.toml") -> ActionSettings:
    """Validate a decoded TOML document's ``[actions]`` table."""
    table = data.get("actions", {})
    if not isinstance(table, Mapping):
        raise ActionConfigError(f"{where}: [actions] must be a table")
    known = {"isolation", "isolation_by_action", "workers", "output_limit", "loop_wait_ms"}
    unknown = sorted(set(table) - known)
    if unknown:
        raise ActionConfigError(
            f"{where}: unknown key(s) {unknown} in [actions]; known: {sorted(known)}"
        )
    by_action = table.get("isolation_by_action", {})
    if not isinstance(by_action, Mapping):
        raise ActionConfigError(f"{where}: [actions.isolation_by_action] must be a table")
    workers = table.get("workers")
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise ActionConfigError(f"{where}: [actions] workers must be a positive integer")
    limit = table.get("output_limit", DEFAULT_LIMIT)
    if not isinstance(limit, int) or limit < 0:
        raise ActionConfigError(f"{where}: [actions] output_limit must be an integer >= 0")
    wait_ms = table.get("loop_wait_ms", DEFAULT_LOOP_WAIT * 1000)
    if (
        isinstance(wait_ms, bool)
        or not isinstance(wait_ms, int | float)
        or not 0 <= wait_ms <= 1000
    ):
        raise ActionConfigError(
            f"{where}: [actions] loop_wait_ms must be a number of milliseconds from 0 to 1000"
        )
    return ActionSettings(
        isolation=_isolation(table.get("isolation", "thread"), f"{where} [actions]"),
        by_action={
            str(name): _isolation(value, f"{where} [actions.isolation_by_action] {name}")
            for name, value in by_action.items()
        },
        workers=workers,
        output_limit=limit,
        loop_wait=wait_ms / 1000,
    )


def load_settings(start: Path | None) -> ActionSettings:
    """The settings for an agent in folder ``start`` (defaults without a config file)."""
    from agentscript.models.config import find_config, read_toml

    if start is None:  # an agent made from text: no folder, no file
        return ActionSettings()
    path = find_config(start)
    if path is None or not path.is_file():
        return ActionSettings()
    try:
        data = read_toml(path)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ActionConfigError(f"{path}: cannot read: {exc}") from None
    return parse_settings(data, where=str(path))
