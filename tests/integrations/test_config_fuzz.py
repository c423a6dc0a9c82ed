"""Readers of outside input never raise anything but their clear error: ``agentscript.toml``
integration tables, budget tables, OpenAPI documents, response schema checks."""

from __future__ import annotations

import contextlib
import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentscript.engine.budgets import BudgetConfigError, parse_budget
from agentscript.integrations.config import ConfigError, parse_integration_config
from agentscript.integrations.openapi import OpenApiConfig, load_document, schema_mismatch

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8))
values: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
keys = st.sampled_from(
    [
        "mcp",
        "servers",
        "demo",
        "command",
        "url",
        "args",
        "env",
        "headers",
        "timeout",
        "budgets",
        "turn",
        "session",
        "llm_calls",
        "cost",
        "prices",
        "input",
        "output",
        "openapi",
        "spec",
        "resilience",
        "paths",
        "get",
        "operationId",
        "parameters",
        "requestBody",
        "responses",
        "200",
        "content",
        "application/json",
        "schema",
        "$ref",
    ]
)
documents: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(keys, inner, max_size=5)),
    max_leaves=30,
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(keys, documents, max_size=4))
def test_integration_config_errors_are_config_errors(data: dict[str, Any]) -> None:
    with contextlib.suppress(ConfigError):
        parse_integration_config(data)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(keys, documents, max_size=3),
    st.dictionaries(st.text(max_size=5), values, max_size=3),
)
def test_budget_errors_are_budget_config_errors(
    budgets: dict[str, Any], prices: dict[str, Any]
) -> None:
    with contextlib.suppress(BudgetConfigError):
        parse_budget(budgets, prices)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(keys, documents, max_size=5))
def test_openapi_document_errors_are_config_errors(data: dict[str, Any]) -> None:
    data = {"openapi": "3.0.0", "servers": [{"url": "http://127.0.0.1:9"}], **data}
    with tempfile.TemporaryDirectory() as folder:
        spec = Path(folder) / "api.json"
        spec.write_text(json.dumps(data, default=str))
        with contextlib.suppress(ConfigError):
            load_document(OpenApiConfig("api", str(spec)))


@settings(max_examples=200, deadline=None)
@given(values, documents)
def test_schema_check_never_raises(value: Any, schema: Any) -> None:
    if isinstance(schema, dict):
        result = schema_mismatch(value, schema)
        assert result is None or isinstance(result, str)
