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

[actions.targets]  # a target as the agent writes it -> the python:// target that runs instead
"flow://Get_Delivery_Date" = "python://orders_backend:get_delivery_date"
```

* ``thread``: a long-lived pool of daemon threads; the turn never waits past the timeout, but a
  timed-out call goes on running on its thread until it returns (Python cannot stop a thread).
  The loop's thread waits for the call itself for up to ``loop_wait_ms`` (so a quick action
  costs one hand-off, not a trip through the event loop), then lets other tasks run until the
  call returns or times out; ``0`` always yields at once.
* ``inline``: called directly on the event loop's thread. Cheapest (no hand-over), but the
  call blocks the loop and its timeout cannot fire until it returns (a call that ended past it
  is then reported timed out, as the thread mode reports it): for quick, trusted code.
* ``process``: worker processes; a timed-out call is killed with its worker.

``async def`` actions always run on the event loop under ``asyncio.timeout``, whatever the mode.

``targets`` lets ``.agent`` files written for Salesforce (``flow://``, ``apex://``) run unchanged:
the mapped ``python://module:function`` is run exactly as that target written in the agent
would be (``actions/registry.py``), after stubs and ``actions=`` callables. Only Agent Script
agents apply it (a Mantle project's tools are Python already). A key must be a target
(``scheme://...``) and a value a ``python://module:function`` string; a key no action of the
agent targets is a warning of ``agentscript validate`` (:func:`unmatched_targets`), not an error.

The file is the one :func:`agentscript.models.config.find_config` picks for the agent's
folder. Contract: :func:`load_settings` returns the settings, or raises
:class:`ActionConfigError` naming the file and the key; a missing file or table gives defaults.
``agentscript.load`` reads the whole table through it when it loads the agent
(``AgentBase.load_action_settings``) and keeps it, so a malformed table stops the agent from
loading and a file edited later changes nothing; an embedding app may assign
``agent.action_settings`` before its first session. ``agentscript validate`` reads it the same
way.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
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
    # [actions.targets]: the agent's target as written -> the python:// target run instead.
    targets: Mapping[str, str] = field(default_factory=dict)

    def mode(self, action: str) -> Isolation:
        return self.by_action.get(action, self.isolation)


def _isolation(value: Any, where: str) -> Isolation:
    try:
        return Isolation(value)
    except ValueError:
        choices = ", ".join(repr(m.value) for m in Isolation)
        raise ActionConfigError(f"{where}: isolation {value!r} is not one of {choices}") from None


# A target as an agent names one: a scheme, "://", then at least one character, no whitespace
# (the runtime splits a target at its first "://": "flow:Name" names no scheme to it).
_TARGET = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://\S+")


def _toml_kind(value: Any) -> str:
    """What a TOML value is, in TOML's words, for a message."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return "a date or time"


def _mapped_target(key: str, value: Any, where: str) -> str:
    """``value`` checked as what runs instead of target ``key``: a ``python://module:function``."""
    table = f"{where}: [actions.targets] {key!r}"
    fix = (
        'write "python://module:function" '
        "(a function of a module in the agent's folder or installed)"
    )
    if not isinstance(value, str):
        raise ActionConfigError(f"{table} is {_toml_kind(value)}; {fix}")
    if not _TARGET.fullmatch(value):
        raise ActionConfigError(f"{table} = {value!r} is not a target; {fix}")
    scheme, _, path = value.partition("://")
    if scheme.lower() != "python":
        raise ActionConfigError(
            f"{table} = {value!r}: only a python:// target can run instead of another; {fix}"
        )
    module, _, function = path.partition(":")
    if not module or not function:
        raise ActionConfigError(f"{table} = {value!r} names no function; {fix}")
    return value


def parse_targets(table: Mapping[str, Any], *, where: str = "agentscript.toml") -> dict[str, str]:
    """The ``targets`` of an ``[actions]`` table, checked (empty without one)."""
    targets = table.get("targets", {})
    if not isinstance(targets, Mapping):
        raise ActionConfigError(
            f'{where}: [actions.targets] must be a table of "target" = "python://module:function"'
        )
    checked: dict[str, str] = {}
    for key, value in targets.items():
        if not _TARGET.fullmatch(key):
            raise ActionConfigError(
                f"{where}: [actions.targets] key {key!r} is not an action target; write the "
                'target as the agent does, in quotes: "flow://Get_Delivery_Date" = ...'
            )
        checked[key] = _mapped_target(key, value, where)
    return checked


def unmatched_targets(targets: Iterable[str], agent_targets: Iterable[str]) -> list[str]:
    """The keys of ``[actions.targets]`` that no action of the agent has as its target (most
    likely a typo: the mapping never applies), in the file's order."""
    used = set(agent_targets)
    return [target for target in targets if target not in used]


def _actions_table(data: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    table = data.get("actions", {})
    if not isinstance(table, Mapping):
        raise ActionConfigError(f"{where}: [actions] must be a table")
    return table


def parse_settings(data: Mapping[str, Any], *, where: str = "agentscript.toml") -> ActionSettings:
    """Validate a decoded TOML document's ``[actions]`` table."""
    table = _actions_table(data, where)
    known = {
        "isolation",
        "isolation_by_action",
        "workers",
        "output_limit",
        "loop_wait_ms",
        "targets",
    }
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
        targets=parse_targets(table, where=where),
    )


def _config(start: Path | None) -> tuple[Mapping[str, Any], str] | None:
    """The decoded ``agentscript.toml`` that applies to ``start`` and its path, or None."""
    from agentscript.models.config import find_config, read_toml

    if start is None:  # an agent made from text: no folder, no file
        return None
    path = find_config(start)
    if path is None or not path.is_file():
        return None
    try:
        return read_toml(path), str(path)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ActionConfigError(f"{path}: cannot read: {exc}") from None


def load_settings(start: Path | None) -> ActionSettings:
    """The settings for an agent in folder ``start`` (defaults without a config file)."""
    config = _config(start)
    if config is None:
        return ActionSettings()
    data, where = config
    return parse_settings(data, where=where)
