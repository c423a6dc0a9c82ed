"""Wiring the integrations of ``agentscript.toml`` into a loaded agent.

:func:`configure_agent` is called by :func:`agentscript.load` for both formats: it reads the
configuration that applies to the agent's folder, registers the ``mcp`` scheme handler on a
process-wide :class:`McpHub` (one client session per server per process, whichever agents and
sessions use it) and attaches the budget settings. A malformed file raises
:class:`ConfigError`; nothing connects until an action runs.
"""

from __future__ import annotations

import atexit
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from agentscript.integrations.config import (
    ConfigError,
    IntegrationConfig,
    McpServerConfig,
    load_integration_config,
)
from agentscript.integrations.mcp_client import McpHub
from agentscript.integrations.openapi import OpenApiConfig, OpenApiHub, parse_openapi_configs

if TYPE_CHECKING:
    from agentscript.engine.budgets import Budget
    from agentscript.engine.session import AgentBase
    from agentscript.models.fallback import FallbackSettings

_hubs: dict[tuple[McpServerConfig, ...], McpHub] = {}
_hubs_guard = threading.Lock()


def shared_hub(config: IntegrationConfig) -> McpHub:
    """The process's hub for these server declarations (created on first use).

    Process-wide on purpose: a server's session is shared by every agent and session that
    declares the same server, which is the contract of ``[mcp.servers]``.
    """
    key = tuple(sorted(config.mcp_servers.values(), key=lambda s: s.name))
    with _hubs_guard:
        hub = _hubs.get(key)
        if hub is None:
            hub = _hubs[key] = McpHub(config.mcp_servers)
        return hub


_apis: dict[tuple[OpenApiConfig, ...], OpenApiHub] = {}


def openapi_hub(config: IntegrationConfig) -> OpenApiHub | None:
    """The process's OpenAPI hub for these declarations (documents read once), or None."""
    configs = parse_openapi_configs({"openapi": config.openapi}, path=config.path)
    if not configs:
        return None
    key = tuple(configs)
    with _hubs_guard:
        hub = _apis.get(key)
        if hub is None:
            hub = _apis[key] = OpenApiHub(configs)
        return hub


def close_shared_hubs() -> None:
    """End every MCP session of the process (also run at exit)."""
    with _hubs_guard:
        hubs = list(_hubs.values())
        _hubs.clear()
    for hub in hubs:
        hub.close()


atexit.register(close_shared_hubs)


def configure_agent(agent: AgentBase, *, config_path: Path | None = None) -> IntegrationConfig:
    """Register the integrations of the applicable ``agentscript.toml`` on ``agent``."""
    start = agent.path.parent if agent.path is not None and agent.path.is_file() else agent.path
    config = load_integration_config(config_path, start=start)
    hub = shared_hub(config)
    agent.register_handler("mcp", hub.handler())
    apis = openapi_hub(config)
    if apis is not None:
        for api in apis.configs:
            apis.document(api)  # a malformed document is a load error, not a turn error
        agent.register_handler("https", apis.handler())
        agent.register_handler("http", apis.handler())
    project = getattr(agent, "project", None)  # a Mantle agent
    if project is not None:
        from agentscript.integrations.mantle_mcp import add_mcp_tools, mcp_imports

        if mcp_imports(project):
            add_mcp_tools(project, hub)
    tables = check_tables(config)
    agent.budget = tables.budget
    agent.fallback = tables.fallback
    from agentscript.integrations.otel import telemetry_from_env

    agent.telemetry = telemetry_from_env()
    agent.integration_config = config
    return config


@dataclass(frozen=True)
class CheckedTables:
    """What ``[budgets]``, ``[prices]`` and ``[resilience]`` give an agent, once checked."""

    budget: Budget | None
    fallback: FallbackSettings | None


def check_tables(config: IntegrationConfig) -> CheckedTables:
    """The budget and resilience tables of ``config``, checked as :func:`configure_agent`
    and ``validate`` both need them (a malformed one raises ConfigError or
    BudgetConfigError); nothing connects."""
    from agentscript.engine.budgets import budget_from_config
    from agentscript.models.base import ModelError
    from agentscript.models.fallback import parse_resilience

    budget = budget_from_config(config)
    if budget is not None and budget.needs_prices and config.path is not None:
        check_prices(budget, config.path)
    try:
        fallback = parse_resilience(config.resilience, where=str(config.path or "agentscript.toml"))
    except ModelError as exc:
        raise ConfigError(str(exc)) from None
    return CheckedTables(budget, fallback)


def check_prices(budget: Budget, path: Path) -> None:
    """A cost cap needs a price for every model the same file configures ([models])."""
    from agentscript.engine.budgets import BudgetConfigError
    from agentscript.models.base import ModelError
    from agentscript.models.config import load_config

    try:
        models = load_config(path)
    except ModelError:
        return  # reported by whoever builds the model, with its own message
    entries = [*models.models.values(), *([models.default] if models.default else [])]
    missing = sorted({e.spec for e in entries if budget.price_of(e.spec) is None})
    if missing:
        raise BudgetConfigError(
            f"{path}: a cost cap is set but [prices] has no price for {', '.join(missing)}; "
            'add [prices."MODEL"] with input and output per million tokens'
        )
