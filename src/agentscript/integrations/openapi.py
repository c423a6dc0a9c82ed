"""OpenAPI actions: a target ``https://HOST/BASE#operationId`` runs that operation of an
OpenAPI 3 document declared in ``agentscript.toml``.

```toml
[openapi.orders]
spec = "orders.openapi.yaml"             # JSON or YAML, relative to this file
base_url = "https://api.example.com/v1"  # optional: else the document's first server
headers = { Authorization = "Bearer ${ORDERS_TOKEN}" }   # values from the environment
timeout = 15
```

Contract. A target whose URL (before ``#``) is a declared API's base URL or a path below it
(``https://host/v1/...``, never ``https://host/v1evil``; the longest such base URL wins) names
one of its operations. The action's inputs fill the operation's ``path``, ``query`` and
``header`` parameters by name; the remaining inputs form the JSON request body (an input named
``body`` is sent as the whole body). A missing required parameter, a non-2xx answer, a body
that is not JSON or a JSON object whose fields contradict the documented 2xx response schema
are :class:`ActionError` with a message naming the action, the operation and the cause. A JSON
object answer becomes the outputs; any other JSON value becomes ``{"result": value}``.
Documents are read once per process; a malformed one is a :class:`ConfigError` naming the
file: among others, an ``operationId`` used twice (naming both operations), or a parameter,
request body or response schema whose ``properties`` is not a mapping or whose ``required``
is not a list of names (naming the operation).

What never happens: a configured header value, or the credential or ``${VAR}`` value inside
it, in a message or a trace (:mod:`agentscript.redaction`); a URL's user, password or
query string in a message (a base or spec URL holding a user or password is refused at load:
it would never be sent); a request whose path leaves the base URL's path (a path parameter
holding a ``.`` or ``..`` segment is refused before anything is sent); a header parameter
whose value HTTP cannot carry (a line break, another control character, a character beyond
Latin-1) sent at all (refused, naming the parameter, not the value).
"""

from __future__ import annotations

import json
import re
import threading
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agentscript.actions.outbound import (
    Fetched,
    FetchError,
    fetch,
    fetch_following,
    redirect_note,
)
from agentscript.actions.registry import ActionError, ActionRequest, Handler
from agentscript.integrations.config import ConfigError, expand_env
from agentscript.reading import load_yaml
from agentscript.redaction import secret_forms, shown_url, without_secrets

MAX_RESPONSE_BYTES = 5_000_000
MAX_REF_DEPTH = 32
MAX_RESOLVED_NODES = 100_000
_METHODS = ("get", "put", "post", "delete", "patch", "head", "options")
_API_KEYS = frozenset({"spec", "base_url", "headers", "timeout"})
_DOT_SEGMENTS = frozenset({".", ".."})


@dataclass(frozen=True, slots=True)
class OpenApiConfig:
    """One ``[openapi.NAME]`` table."""

    name: str
    spec: str  # a file path (absolute) or an http(s) URL the document is fetched from
    base_url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    timeout: float = 30.0


@dataclass(frozen=True, slots=True)
class Parameter:
    name: str
    location: str  # "path" | "query" | "header"
    required: bool
    schema: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Operation:
    operation_id: str
    method: str
    path: str
    parameters: tuple[Parameter, ...]
    body_schema: dict[str, Any] | None  # application/json request body
    body_required: bool
    response_schema: dict[str, Any] | None  # the first 2xx application/json response


@dataclass
class OpenApiDocument:
    """A loaded document: its base URL and operations by id."""

    name: str
    base_url: str
    operations: dict[str, Operation] = field(default_factory=dict)


def parse_openapi_configs(data: Mapping[str, Any], *, path: Path | None) -> list[OpenApiConfig]:
    """The ``[openapi.NAME]`` tables of a decoded ``agentscript.toml``."""
    where = str(path) if path else "agentscript.toml"
    table = data.get("openapi", {})
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: [openapi] must hold one [openapi.NAME] table per API")
    configs = []
    for name, spec in table.items():
        head = f"{where}: [openapi.{name}]"
        if not isinstance(spec, Mapping) or not isinstance(spec.get("spec"), str):
            raise ConfigError(f"{head} needs `spec`, the path of an OpenAPI 3 document")
        unknown = sorted(set(spec) - _API_KEYS)
        if unknown:
            raise ConfigError(f"{head} has unknown key(s) {unknown}; known: {sorted(_API_KEYS)}")
        base_url = spec.get("base_url")
        if base_url is not None and not (isinstance(base_url, str) and _is_url(base_url)):
            raise ConfigError(f"{head} `base_url` must be an http:// or https:// URL")
        for key in ("spec", "base_url"):
            if isinstance(spec.get(key), str) and _is_url(spec[key]):
                _refuse_url_credentials(spec[key], f"{head} `{key}`")
        headers = spec.get("headers", {})
        if not isinstance(headers, Mapping) or not all(
            isinstance(v, str) for v in headers.values()
        ):
            raise ConfigError(f"{head} `headers` must be a table of strings")
        timeout = spec.get("timeout", 30.0)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise ConfigError(f"{head} `timeout` must be a positive number of seconds")
        folder = path.parent if path is not None else Path.cwd()
        configs.append(
            OpenApiConfig(
                name=str(name),
                spec=spec["spec"] if _is_url(spec["spec"]) else str(folder / spec["spec"]),
                base_url=base_url,
                headers=tuple((str(k), v) for k, v in headers.items()),
                timeout=float(timeout),
            )
        )
    return configs


def _is_url(text: str) -> bool:
    return text.startswith(("http://", "https://"))


def _refuse_url_credentials(url: str, what: str) -> None:
    """A user or password written in a URL is never sent (requests connect to the host alone)
    and would show in messages: refused, pointing to the header that does send it."""
    try:
        netloc = urllib.parse.urlsplit(url).netloc
    except ValueError:
        raise ConfigError(f"{what} is not a valid URL") from None
    if "@" in netloc:
        raise ConfigError(
            f"{what} holds a user or password ({shown_url(url)}), which is never sent; "
            "remove it and send the credential as a header, e.g. headers = { Authorization = "
            '"Basic ${API_CREDENTIALS}" }'
        )


def _shown_spec(spec: str) -> str:
    return shown_url(spec) if _is_url(spec) else spec


# ---------------------------------------------------------------------- documents


def load_document(config: OpenApiConfig) -> OpenApiDocument:
    """Read and index one document; every problem is a ConfigError naming the file."""
    where = f"[openapi.{config.name}] {_shown_spec(config.spec)}"
    text = _read_spec(config, where)
    try:
        # Aliases are counted as the nodes they expand to (a 1 kB document of nested aliases
        # took 0.9 s and 264 MB to read, ten times more per level).
        data = json.loads(text) if config.spec.endswith(".json") else load_yaml(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"{where}: not valid JSON or YAML: {str(exc).splitlines()[0]}") from None
    except RecursionError:
        raise ConfigError(f"{where}: not valid JSON or YAML: nested too deeply") from None
    if not isinstance(data, dict) or not str(data.get("openapi", "")).startswith("3"):
        raise ConfigError(f"{where}: not an OpenAPI 3 document (no `openapi: 3.x` field)")
    base_url = config.base_url or _first_server(data)
    if not base_url:
        raise ConfigError(f"{where}: no `servers` URL; set base_url in [openapi.{config.name}]")
    _refuse_url_credentials(base_url, f"{where}: the base URL")
    document = OpenApiDocument(config.name, base_url.rstrip("/"))
    paths = data.get("paths")
    if not isinstance(paths, dict):
        raise ConfigError(f"{where}: `paths` must be a mapping")
    budget = _Budget()
    for route, item in paths.items():
        if not isinstance(item, dict):
            raise ConfigError(f"{where}: paths.{route} must be a mapping")
        if not str(route).startswith("/"):
            # Appended to the base URL: "1:9999/x" or ".evil.example/x" would move the call,
            # and its credentials, to another host.
            raise ConfigError(f"{where}: paths.{route} must start with '/'")
        shared = item.get("parameters", [])
        for method in _METHODS:
            operation = item.get(method)
            if not isinstance(operation, dict) or not operation.get("operationId"):
                continue
            try:
                parsed = _operation(data, str(route), method, operation, shared, budget)
            except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
                reason = (
                    f"a missing field or an unresolvable $ref ({exc})"
                    if isinstance(exc, KeyError)
                    else f"malformed ({exc})"
                )
                raise ConfigError(
                    f"{where}: operation {operation.get('operationId')}: {reason}"
                ) from None
            first = document.operations.get(parsed.operation_id)
            if first is not None:
                raise ConfigError(
                    f"{where}: operationId '{parsed.operation_id}' is used twice, by "
                    f"{first.method} {first.path} and {parsed.method} {parsed.path}; an "
                    "action names its operation by operationId: make each one unique"
                )
            document.operations[parsed.operation_id] = parsed
    return document


def _read_spec(config: OpenApiConfig, where: str) -> str:
    if not _is_url(config.spec):
        try:
            return Path(config.spec).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{where}: cannot read: {exc.strerror or exc}") from None
    try:
        answer = fetch_following(
            config.spec, timeout=config.timeout, total=config.timeout, max_bytes=MAX_RESPONSE_BYTES
        )
    except FetchError as exc:
        raise ConfigError(f"{where}: cannot fetch: {exc}") from None
    if answer.status >= 300:
        raise ConfigError(f"{where}: cannot fetch: HTTP {answer.status}")
    return answer.body.decode("utf-8", "replace")


def _first_server(data: Mapping[str, Any]) -> str | None:
    servers = data.get("servers")
    if isinstance(servers, list) and servers and isinstance(servers[0], dict):
        url = servers[0].get("url")
        return url if isinstance(url, str) and _is_url(url) else None
    return None


class _Budget:
    """The schema nodes a document's ``$ref``s may expand to in all: refs that each name two
    others expand exponentially (3.6 kB took 20 s and 2.4 GB)."""

    def __init__(self, nodes: int = MAX_RESOLVED_NODES) -> None:
        self.left = nodes

    def spend(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise ValueError(f"its $refs expand past {MAX_RESOLVED_NODES} schema nodes")


def _operation(
    doc: Mapping[str, Any],
    route: str,
    method: str,
    op: Mapping[str, Any],
    shared: Any,
    budget: _Budget,
) -> Operation:
    def resolve(node: Any, schema: str | None = None) -> dict[str, Any]:
        return _resolved(doc, node, budget, schema=schema)

    parameters: dict[tuple[str, str], Parameter] = {}
    for raw in [*(shared or []), *(op.get("parameters") or [])]:
        spec = resolve(raw)
        location = spec["in"]
        if location not in ("path", "query", "header"):
            continue  # cookies are not sent
        name = str(spec["name"])
        parameters[(name, location)] = Parameter(
            name,
            location,
            bool(spec.get("required", location == "path")),
            resolve(spec.get("schema") or {}, f"the schema of {location} parameter '{name}'"),
        )
    body_schema: dict[str, Any] | None = None
    body_required = False
    if "requestBody" in op:
        body = resolve(op["requestBody"])
        media = (body.get("content") or {}).get("application/json")
        if media is not None:
            body_schema = resolve(media.get("schema") or {}, "the request body schema")
            body_required = bool(body.get("required", False))
    response_schema = None
    for status, response in sorted((op.get("responses") or {}).items(), key=lambda kv: str(kv[0])):
        if str(status).startswith("2"):
            media = (resolve(response).get("content") or {}).get("application/json")
            if media is not None:
                response_schema = resolve(
                    media.get("schema") or {}, f"the schema of response {status}"
                )
            break
    return Operation(
        str(op["operationId"]),
        method.upper(),
        route,
        tuple(parameters.values()),
        body_schema,
        body_required,
        response_schema,
    )


def _resolved(
    doc: Mapping[str, Any], node: Any, budget: _Budget, depth: int = 0, *, schema: str | None = None
) -> dict[str, Any]:
    """``node`` with local ``$ref``s followed (``#/components/...``), top level and
    properties; remote refs are not fetched. ``schema`` says where a schema is (for its
    error): a schema's ``properties`` must be a mapping and its ``required`` a list of names,
    the shapes the request and response checks read (each schema down its properties)."""
    budget.spend()
    if depth > MAX_REF_DEPTH:
        raise ValueError("$ref nesting too deep (a cycle?)")
    if not isinstance(node, dict):
        at = f"{schema}: " if schema else ""
        raise TypeError(f"{at}expected a mapping, found {type(node).__name__}")
    ref = node.get("$ref")
    if isinstance(ref, str):
        if not ref.startswith("#/"):
            raise ValueError(f"only local $ref are supported, not {ref!r}")
        target: Any = doc
        for part in ref[2:].split("/"):
            target = target[part.replace("~1", "/").replace("~0", "~")]
        return _resolved(doc, target, budget, depth + 1, schema=schema)
    if isinstance(node.get("required"), bool):
        # Swagger 2's habit of marking a property ``required: true`` inside its own schema, in
        # many OpenAPI 3 documents: it says nothing a check reads (only the object's list
        # does), so it is dropped rather than refuse the document.
        node = {key: value for key, value in node.items() if key != "required"}
    if schema is not None:
        _check_schema_shape(node, schema)
    props = node.get("properties")
    if isinstance(props, dict):
        node = {
            **node,
            "properties": {
                str(k): _resolved(
                    doc, v, budget, depth + 1, schema=None if schema is None else f"{schema} > {k}"
                )
                for k, v in props.items()
            },
        }
    return dict(node)


def _check_schema_shape(node: Mapping[str, Any], where: str) -> None:
    """ValueError unless ``properties`` (when given) is a mapping and ``required`` a list of
    strings: a call's checks iterate both (``properties: [1, 2]`` or ``required: 5`` failed
    every call with a TypeError)."""
    props = node.get("properties")
    if props is not None and not isinstance(props, dict):
        raise ValueError(
            f"{where}: `properties` must be a mapping of names to schemas, "
            f"found {type(props).__name__}"
        )
    required = node.get("required")
    if required is not None and not (
        isinstance(required, list) and all(isinstance(name, str) for name in required)
    ):
        raise ValueError(
            f"{where}: `required` must be a list of property names, found {_json_kind(required)}"
        )


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "a list holding " + ", ".join(
            sorted({type(v).__name__ for v in value if not isinstance(v, str)})
        )
    return type(value).__name__


# ---------------------------------------------------------------------- calls


class OpenApiHub:
    """The declared APIs of a process; documents loaded on first use."""

    def __init__(self, configs: list[OpenApiConfig]) -> None:
        self.configs = configs
        self._documents: dict[str, OpenApiDocument] = {}
        self._guard = threading.Lock()

    def document(self, config: OpenApiConfig) -> OpenApiDocument:
        with self._guard:
            if config.name not in self._documents:
                self._documents[config.name] = load_document(config)
            return self._documents[config.name]

    def find(self, target: str) -> tuple[OpenApiConfig, OpenApiDocument, Operation]:
        """The API and operation a ``URL#operationId`` target names; ActionError otherwise."""
        url, sep, operation_id = target.partition("#")
        if not sep or not operation_id:
            shown = shown_url(url)
            raise ActionError(
                f"'{shown}' names no operation: write {shown}#operationId, or register "
                "http_json_handler for plain JSON POSTs"
            )
        matched: tuple[OpenApiConfig, OpenApiDocument] | None = None
        for config in self.configs:
            try:
                document = self.document(config)
            except ConfigError as exc:
                raise ActionError(str(exc)) from None
            # The longest base URL the target is at or below, path segment by segment:
            # https://host/v1evil is not below https://host/v1.
            if _below(url, document.base_url) and (
                matched is None or len(document.base_url) > len(matched[1].base_url)
            ):
                matched = config, document
        if matched is not None:
            config, document = matched
            operation = document.operations.get(operation_id)
            if operation is None:
                raise ActionError(
                    f"the OpenAPI document of [openapi.{config.name}] has no operation "
                    f"'{operation_id}'"
                )
            return config, document, operation
        known = ", ".join(f"{c.name}" for c in self.configs) or "none"
        raise ActionError(
            f"'{shown_url(url)}' is not the base URL of an API declared in agentscript.toml "
            f"([openapi.NAME], declared: {known})"
        )

    def handler(self) -> Handler:
        return self.handle

    def handle(self, request: ActionRequest) -> dict[str, Any]:
        try:
            config, document, operation = self.find(request.target or "")
        except ActionError as exc:
            raise ActionError(f"action '{request.name}': {exc}") from None
        return call_operation(config, document, operation, request)


def _below(url: str, base: str) -> bool:
    """Whether ``url`` is ``base`` (which has no trailing ``/``) or a path below it."""
    url = url.rstrip("/")
    return url == base or url.startswith(base + "/")


def call_operation(
    config: OpenApiConfig, document: OpenApiDocument, op: Operation, request: ActionRequest
) -> dict[str, Any]:
    """Send ``op`` built from ``request``'s inputs; its JSON answer as the action's outputs."""
    where = f"action '{request.name}' ({op.operation_id})"
    inputs = dict(request.inputs)
    path, query, headers = _parameters(op, inputs, where)
    configured, secrets = _configured_headers(config)
    headers.update(configured)
    body: bytes | None = None
    if op.body_schema is not None:
        payload = inputs.pop("body") if "body" in inputs else inputs
        if payload or op.body_required:
            body = json.dumps(payload, default=str).encode("utf-8")
            headers["Content-Type"] = "application/json"
    url = _operation_url(document, path, query, where)
    try:
        answer = fetch(
            url,
            method=op.method,
            headers=headers,
            body=body,
            timeout=config.timeout,
            total=config.timeout,
            max_bytes=MAX_RESPONSE_BYTES,
        )
    except FetchError as exc:
        shown = shown_url(document.base_url + op.path)
        raise ActionError(
            without_secrets(f"{where}: {op.method} {shown}: {exc}", secrets)
        ) from None
    if answer.status >= 300:
        detail = redirect_note(answer) if answer.status < 400 else _error_detail(answer, secrets)
        raise ActionError(
            without_secrets(
                f"{where}: {op.method} {op.path} answered HTTP {answer.status}{detail}", secrets
            )
        )
    raw = answer.body
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ActionError(f"{where}: the response is not JSON") from None
    problem = schema_mismatch(data, op.response_schema)
    if problem:
        raise ActionError(f"{where}: the response does not match the documented schema: {problem}")
    return data if isinstance(data, dict) else {"result": data}


def _parameters(
    op: Operation, inputs: dict[str, Any], where: str
) -> tuple[str, dict[str, str], dict[str, str]]:
    """The request's path, query and headers from the inputs named after the operation's
    parameters, which are taken out of ``inputs`` (the rest may form the body)."""
    path = op.path
    query: dict[str, str] = {}
    headers = {"Accept": "application/json"}
    for param in op.parameters:
        if param.name not in inputs or inputs[param.name] is None:
            inputs.pop(param.name, None)
            if param.required:
                raise ActionError(
                    f"{where}: the {param.location} parameter '{param.name}' is required"
                )
            continue
        value = inputs.pop(param.name)
        text = json.dumps(value) if isinstance(value, bool | dict | list) else str(value)
        if param.location == "path":
            path = path.replace("{" + param.name + "}", _path_segment(text, param.name, where))
        elif param.location == "query":
            query[param.name] = text
        else:
            headers[param.name] = _header_value(text, param.name, where)
    return path, query, headers


# What HTTP cannot carry in a header value: controls but the tab (a line break would end the
# header and could start another), and anything past Latin-1 (http.client encodes values so).
_NOT_IN_HEADER = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]|[^\x00-\xff]")


def _header_value(text: str, name: str, where: str) -> str:
    """A header parameter's value, refused (not shown: the model wrote it) when HTTP cannot
    send it."""
    if _NOT_IN_HEADER.search(text):
        raise ActionError(
            f"{where}: the header parameter '{name}' holds a line break, a control character "
            "or a character beyond Latin-1, which an HTTP header cannot carry; nothing was sent: "
            "pass a single line of plain text"
        )
    return text


def _path_segment(text: str, name: str, where: str) -> str:
    """A path parameter's value, quoted. ``quote`` keeps dots: ``..`` would be a dot-segment,
    which a normalising proxy reads as the folder above, outside the API yet still sent with
    its credentials; ``../x`` too where a proxy decodes ``%2F``. The value is not shown: the
    model wrote it."""
    if any(part in _DOT_SEGMENTS for part in re.split(r"[/\\]", text)):
        raise ActionError(
            f"{where}: the path parameter '{name}' holds a '.' or '..' path segment, which "
            "could reach outside the API; nothing was sent: pass an identifier instead"
        )
    return urllib.parse.quote(text, safe="")


def _configured_headers(config: OpenApiConfig) -> tuple[dict[str, str], frozenset[str]]:
    """The headers of ``[openapi.NAME]`` with ``${VAR}`` expanded, and every form their values
    may take in a message."""
    headers = {
        name: expand_env(value, f"[openapi.{config.name}] header {name}")
        for name, value in config.headers
    }
    return headers, secret_forms(config.headers, headers.values())


def _operation_url(document: OpenApiDocument, path: str, query: dict[str, str], where: str) -> str:
    """The request's URL, refused unless it stays at the base URL's origin and, read as a
    server that resolves dot-segments reads it, below its path."""
    url = document.base_url + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
    base, parts = urllib.parse.urlsplit(document.base_url), urllib.parse.urlsplit(url)
    folder = base.path.rstrip("/")
    resolved = _resolved_path(parts.path)
    if (parts.scheme, parts.netloc.lower()) != (base.scheme, base.netloc.lower()) or not (
        resolved == folder or resolved.startswith(folder + "/")
    ):
        raise ActionError(f"{where}: the operation's path leaves {shown_url(document.base_url)}")
    return url


def _resolved_path(path: str) -> str:
    """``path`` with its dot-segments resolved (RFC 3986 5.2.4), percent-encoded dots
    included, as a normalising proxy may resolve them."""
    kept: list[str] = []
    for segment in path.split("/")[1:]:
        dots = urllib.parse.unquote(segment)
        if dots == "..":
            if kept:
                kept.pop()
        elif dots != ".":
            kept.append(segment)
    return "/" + "/".join(kept)


def _error_detail(answer: Fetched, secrets: frozenset[str]) -> str:
    # Redacted whole, then cut: a cut through a credential leaves a part no form matches.
    text = without_secrets(answer.body.decode("utf-8", "replace"), secrets).strip()
    return f": {text[:200]}" if text else ""


_JSON_CHECKS: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "object": dict,
    "array": list,
}


def schema_mismatch(value: Any, schema: Mapping[str, Any] | None, where: str = "") -> str | None:
    """The first place ``value`` contradicts ``schema`` (types, required fields), or None.
    A shallow check, two levels deep: enough to catch an API that changed shape."""
    if not schema:
        return None
    expected = schema.get("type")
    label = where or "the body"
    if isinstance(expected, str) and expected in _JSON_CHECKS:
        ok = isinstance(value, _JSON_CHECKS[expected])
        if expected in ("integer", "number") and isinstance(value, bool):
            ok = False
        if not ok and not (value is None and schema.get("nullable")):
            return f"{label} should be {expected}, found {type(value).__name__}"
    if isinstance(value, dict) and where.count(".") < 2:
        # A loaded document's shapes were checked (_check_schema_shape); any other is skipped.
        required = schema.get("required")
        for name in required if isinstance(required, list) else []:
            if isinstance(name, str) and name not in value:
                return f"{label} lacks required field '{name}'"
        props = schema.get("properties")
        for name, sub in (props if isinstance(props, dict) else {}).items():
            if name in value and isinstance(sub, dict):
                problem = schema_mismatch(value[name], sub, f"{where}.{name}" if where else name)
                if problem:
                    return problem
    return None
