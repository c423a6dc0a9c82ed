"""Readers of outside input never raise anything but their clear error: ``agentscript.toml``
integration tables, budget tables, OpenAPI documents, response schema checks; and an OpenAPI
document that loads has the schema shapes the checks read."""

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
        "properties",
        "required",
        "type",
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


def _shapes_problem(schema: Any, where: str) -> str | None:
    """Where a loaded schema breaks the shapes the checks read, or None."""
    if not isinstance(schema, dict):
        return f"{where} is not a mapping"
    props, required = schema.get("properties"), schema.get("required")
    if props is not None and not isinstance(props, dict):
        return f"{where}: properties {props!r}"
    if required is not None and not (
        isinstance(required, list) and all(isinstance(n, str) for n in required)
    ):
        return f"{where}: required {required!r}"
    for name, sub in (props or {}).items():
        if problem := _shapes_problem(sub, f"{where}.{name}"):
            return problem
    return None


@settings(max_examples=200, deadline=None)
@given(documents, documents, documents)
def test_a_loaded_openapi_document_has_the_schema_shapes_the_checks_read(
    param: Any, body: Any, response: Any
) -> None:
    operation = {
        "operationId": "op",
        "parameters": [{"name": "p", "in": "query", "schema": param}],
        "requestBody": {"content": {"application/json": {"schema": body}}},
        "responses": {"200": {"content": {"application/json": {"schema": response}}}},
    }
    data = {"openapi": "3.0.0", "servers": [{"url": "http://127.0.0.1:9"}]}
    data["paths"] = {"/x": {"post": operation}}
    with tempfile.TemporaryDirectory() as folder:
        spec = Path(folder) / "api.json"
        spec.write_text(json.dumps(data, default=str))
        try:
            document = load_document(OpenApiConfig("api", str(spec)))
        except ConfigError:
            return
    (loaded,) = document.operations.values()
    schemas = [p.schema for p in loaded.parameters] + [loaded.body_schema, loaded.response_schema]
    for schema in schemas:
        assert _shapes_problem(schema or {}, "schema") is None
        schema_mismatch({"status": 1, "a": {"b": [1]}}, schema)


@settings(max_examples=200, deadline=None)
@given(values, documents)
def test_schema_check_never_raises(value: Any, schema: Any) -> None:
    if isinstance(schema, dict):
        result = schema_mismatch(value, schema)
        assert result is None or isinstance(result, str)
