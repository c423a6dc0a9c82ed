"""The integration tables of ``agentscript.toml``: ``[mcp.servers.NAME]``, ``[budgets]``,
``[prices.MODEL]``.

In: the decoded TOML document (or the file that :func:`find_config` finds). Out: frozen
records. Every mistake becomes a :class:`ConfigError` whose message names the file, the table
and the fix; nothing here connects to anything or reads secrets (``${VAR}`` references are
kept as written and expanded only when a connection is made, see :func:`expand_env`).

```toml
[mcp.servers.weather]            # stdio: a command the runtime starts
command = "${PYTHON}"            # the Python running agentscript
args = ["weather_server.py"]     # may use ${VAR} too
env = { API_KEY = "${WEATHER_KEY}" }
timeout = 20                     # seconds per call (default 30)

[mcp.servers.crm]                # streamable HTTP
url = "https://crm.example.com/mcp"
headers = { Authorization = "Bearer ${CRM_TOKEN}" }
```
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentscript.models.config import find_config
from agentscript.redaction import ENV_REF, shown_url

DEFAULT_CALL_TIMEOUT = 30.0
DEFAULT_CONNECT_TIMEOUT = 20.0
_SERVER_KEYS = frozenset(
    {"command", "args", "env", "cwd", "url", "headers", "timeout", "connect_timeout"}
)


class ConfigError(Exception):
    """``agentscript.toml`` is wrong; the message names the file, the table and the fix."""


@dataclass(frozen=True, slots=True)
class McpServerConfig:
    """One ``[mcp.servers.NAME]`` table: a stdio command or a streamable HTTP URL."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    timeout: float = DEFAULT_CALL_TIMEOUT
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT

    @property
    def transport(self) -> str:
        return "stdio" if self.command else "http"

    def describe(self) -> str:
        """Where the server is, without header or environment values, nor the URL's user,
        password and query string (they may be secrets: a message reaches the model, the
        client and the trace); the command and its arguments as written, each ``${VAR}``
        unexpanded (an argument may carry a key: ``--api-key=${KEY}``)."""
        if self.command:
            return " ".join([self.command, *self.args])
        return shown_url(self.url) if self.url else ""


@dataclass(frozen=True, slots=True)
class IntegrationConfig:
    """Everything the integrations read from one ``agentscript.toml``."""

    path: Path | None = None
    mcp_servers: dict[str, McpServerConfig] = field(default_factory=dict)
    # The raw [budgets] and [prices] tables, validated by engine.budgets.
    budgets: dict[str, Any] = field(default_factory=dict)
    prices: dict[str, Any] = field(default_factory=dict)
    # The raw [resilience] table, validated by models.fallback.
    resilience: dict[str, Any] = field(default_factory=dict)
    # The raw [openapi] table, validated by integrations.openapi.
    openapi: dict[str, Any] = field(default_factory=dict)


def load_integration_config(
    path: Path | None = None, *, start: Path | None = None
) -> IntegrationConfig:
    """Read the file (or the one that applies to ``start``); no file is an empty config."""
    path = path or find_config(start)
    if path is None:
        return IntegrationConfig()
    from agentscript.models.config import read_toml

    if not path.exists():
        # $AGENTSCRIPT_CONFIG naming no file means "no configuration", as for [limits].
        return IntegrationConfig()
    try:
        data = read_toml(path)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    return parse_integration_config(data, path=path)


def parse_integration_config(
    data: Mapping[str, Any], *, path: Path | None = None
) -> IntegrationConfig:
    where = str(path) if path else "agentscript.toml"
    mcp = data.get("mcp", {})
    if not isinstance(mcp, Mapping):
        raise ConfigError(f"{where}: [mcp] must be a table with [mcp.servers.NAME] tables")
    servers_table = mcp.get("servers", {})
    if not isinstance(servers_table, Mapping):
        raise ConfigError(f"{where}: [mcp.servers] must hold one table per server")
    servers = {name: _server(name, spec, where, path) for name, spec in servers_table.items()}
    budgets = data.get("budgets", {})
    if not isinstance(budgets, Mapping):
        raise ConfigError(f"{where}: [budgets] must be a table")
    prices = data.get("prices", {})
    if not isinstance(prices, Mapping):
        raise ConfigError(f"{where}: [prices] must be a table of [prices.MODEL] tables")
    if "openapi" in data and not isinstance(data["openapi"], Mapping):
        raise ConfigError(f"{where}: [openapi] must hold one [openapi.NAME] table per API")
    resilience = data.get("resilience", {})
    if not isinstance(resilience, Mapping):
        raise ConfigError(f"{where}: [resilience] must be a table")
    return IntegrationConfig(
        path=path,
        mcp_servers=servers,
        budgets=dict(budgets),
        prices=dict(prices),
        resilience=dict(resilience),
        openapi=dict(data.get("openapi", {})) if isinstance(data.get("openapi"), Mapping) else {},
    )


def _server(name: str, spec: Any, where: str, path: Path | None) -> McpServerConfig:
    table = f"[mcp.servers.{name}]"
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{where}: {table} must be a table with `command` or `url`")
    unknown = sorted(set(spec) - _SERVER_KEYS)
    if unknown:
        raise ConfigError(
            f"{where}: {table} has unknown key(s) {unknown}; known: {sorted(_SERVER_KEYS)}"
        )
    command, url = spec.get("command"), spec.get("url")
    if (command is None) == (url is None):
        raise ConfigError(
            f"{where}: {table} needs exactly one of `command` (stdio) or `url` (streamable HTTP)"
        )
    if command is not None and not (isinstance(command, str) and command.strip()):
        raise ConfigError(f"{where}: {table} `command` must be a non-empty string")
    if url is not None and not (isinstance(url, str) and url.startswith(("http://", "https://"))):
        raise ConfigError(f"{where}: {table} `url` must be an http:// or https:// URL")
    args = spec.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ConfigError(f"{where}: {table} `args` must be a list of strings")
    cwd = spec.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise ConfigError(f"{where}: {table} `cwd` must be a string")
    if command is not None and path is not None:
        # Relative script paths, and a relative cwd, are relative to the config file's folder,
        # as [openapi] spec is: not to wherever the process happens to run.
        cwd = str(path.parent / cwd) if cwd is not None else str(path.parent)
    return McpServerConfig(
        name=name,
        command=command,
        args=tuple(args),
        env=_string_table(spec.get("env", {}), f"{table} `env`", where),
        cwd=cwd,
        url=url,
        headers=_string_table(spec.get("headers", {}), f"{table} `headers`", where),
        timeout=_seconds(spec.get("timeout", DEFAULT_CALL_TIMEOUT), f"{table} `timeout`", where),
        connect_timeout=_seconds(
            spec.get("connect_timeout", DEFAULT_CONNECT_TIMEOUT),
            f"{table} `connect_timeout`",
            where,
        ),
    )


def _string_table(value: Any, what: str, where: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
        raise ConfigError(f"{where}: {what} must be a table of strings")
    return tuple((str(k), v) for k, v in value.items())


def _seconds(value: Any, what: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(f"{where}: {what} must be a positive number of seconds")
    return float(value)


def expand_env(value: str, what: str, env: Mapping[str, str] | None = None) -> str:
    """``value`` with each ``${NAME}`` replaced by the environment variable; a missing one
    is a ConfigError naming it (the value itself is never shown: it may be a secret)."""
    source = os.environ if env is None else env

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in source:
            raise ConfigError(f"{what} names the environment variable {name}, which is not set")
        return source[name]

    return ENV_REF.sub(replace, value)
