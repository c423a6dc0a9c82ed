"""Running Mantle tool functions through the engine's :class:`ActionRunner`.

A tool call becomes an ``ActionRequest`` (:func:`tool_request`) named after the tool with the
target ``mantle://<owner>/<tool>`` (``_shared`` for root tools), so conversation-file stubs
(by tool name) and per-session callables win over the project's code, and timeouts and error
reporting are the engine's. The handlers call the function, injecting ``context`` when the
function declares it.

The runner picks a handler by the request's scheme and runs it on its thread pool unless the
handler itself is ``async def``, which it awaits on the event loop. One sync handler for
every tool made an async tool take a pool thread just to create its coroutine, so sync tools
that timed out (and go on holding their threads) made async tools time out too: an async
tool's request (:class:`AwaitedToolRequest`) is run by an async handler. Its target is still
``mantle://``: how a tool runs is not part of its name, which traces (and the OpenTelemetry
spans made from them) spell one way for every tool (``mantle-async://`` was an async tool's
before; no saved session names a target, so nothing reads that spelling back).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from typing import Any

from agentscript.actions.registry import ActionError, ActionRequest, Handler
from agentscript.mantle.model import Project, Tool

SHARED = "_shared"
SCHEME = "mantle"
# The handler key of async tools: the runner's pick of a handler only, never in a target.
ASYNC_SCHEME = "mantle-async"


def tool_target(tool: Tool) -> str:
    """The tool's target, the same whether it is ``async def`` or not."""
    if tool.callable_ref.startswith("mcp://"):  # imported from an MCP server (integrations/)
        return tool.callable_ref
    return f"{SCHEME}://{tool.owner or SHARED}/{tool.name}"


class AwaitedToolRequest(ActionRequest):
    """The request of an ``async def`` tool's call: its target is ``mantle://`` as every
    tool's, but the runner finds its handler under :data:`ASYNC_SCHEME`, the async handler
    it awaits on the event loop. A target run instead (``ran``) keeps its own scheme."""

    __slots__ = ()

    @property
    def scheme(self) -> str | None:
        return ASYNC_SCHEME if self.ran is None else super().scheme


def tool_request(tool: Tool, inputs: dict[str, Any]) -> ActionRequest:
    """The runner's request for one call of ``tool`` with ``inputs``."""
    target = tool_target(tool)
    if tool.is_async and target.startswith(f"{SCHEME}://"):
        return AwaitedToolRequest(tool.name, target, inputs)
    return ActionRequest(tool.name, target, inputs)


class _Done:
    """Awaitable that does nothing: ``await context.send(...)`` works in async tools, and a
    sync tool may call ``context.send(...)`` without awaiting (no "never awaited" warning)."""

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield


class MemoryView:
    """``context.memory``: ``get``/``set`` by bare or qualified name."""

    def __init__(self, read: Callable[[str], Any], write: Callable[[str, Any], None]) -> None:
        self._read = read
        self._write = write

    def get(self, name: str, default: Any = None) -> Any:
        value = self._read(name)
        return default if value is None else value

    def set(self, name: str, value: Any) -> None:
        self._write(name, value)


class ToolContext:
    """What a tool's ``context`` parameter receives."""

    def __init__(self, memory: MemoryView, send: Callable[[str], None]) -> None:
        self.memory = memory
        self._send = send
        self.is_cancelled = False

    def send(self, text: str) -> _Done:
        """Deliver ``text`` to the user verbatim (no LLM). A text or a number of sends past
        the turn's limits raises ``SendRefused`` (``tool_execution.send_refusal``)."""
        self._send(str(text))
        return _Done()


def mantle_handlers(project: Project) -> dict[str, Handler]:
    """The scheme handlers of one loaded project's tools (scheme -> handler)."""

    def handle(request: ActionRequest) -> Any:
        result = _function(project, request)(**request.inputs)
        if hasattr(result, "__await__"):  # a sync function that returned an awaitable
            return _awaited(result)
        return normalise_result(result)

    async def handle_async(request: ActionRequest) -> Any:
        # Awaited on the event loop (the runner's timeout applies): no pool thread needed.
        return await _awaited(_function(project, request)(**request.inputs))

    return {SCHEME: handle, ASYNC_SCHEME: handle_async}


def _function(project: Project, request: ActionRequest) -> Callable[..., Any]:
    """The function of the tool ``request`` names (``<owner>/<tool>``)."""
    owner, _, name = request.path.partition("/")
    tools = project.shared_tools if owner == SHARED else _skill_tools(project, owner)
    tool = tools.get(name)
    if tool is None or tool.function is None:
        raise ActionError(f"tool '{name}' has no code in this project")
    return tool.function


def _skill_tools(project: Project, skill_id: str) -> dict[str, Tool]:
    skill = project.skills.get(skill_id)
    return skill.tools if skill else {}


async def _awaited(pending: Any) -> dict[str, Any]:
    return normalise_result(await pending)


def normalise_result(result: Any) -> dict[str, Any]:
    """A dict for the model: Mantle's ``ToolResult(llm_response=...)`` is unwrapped."""
    if hasattr(result, "llm_response"):
        error = getattr(result, "error", None)
        body = normalise_result(result.llm_response)
        if error:
            body["error"] = str(error)
        return body
    if result is None:
        return {}
    if isinstance(result, Mapping):
        return dict(result)
    return {"result": result}


def failed(result: Mapping[str, Any]) -> bool:
    """A tool reports failure with a non-empty ``error`` or ``ok: false``."""
    return bool(result.get("error")) or result.get("ok") is False


# --- arguments --------------------------------------------------------------------------

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}


def check_arguments(tool: Tool, arguments: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """Arguments checked against the tool's JSON schema (shape, not semantics), as the tool is
    then called with them (:func:`as_declared`); the model's calls and ``execute_tool`` steps
    (``confirmation.checked_arguments``) alike. Size and depth are the kernel's
    ``bounds_problem``'s."""
    schema = tool.parameters_schema or {}
    properties: dict[str, Any] = schema.get("properties") or {}
    if schema.get("additionalProperties") is not True:
        unknown = sorted(set(arguments) - set(properties))
        if unknown:
            allowed = sorted(properties) or "none"
            return {}, f"unknown argument(s) {unknown} for '{tool.name}'; allowed: {allowed}"
    for name in schema.get("required") or []:
        if arguments.get(name) is None:
            return {}, f"missing required argument '{name}' for '{tool.name}'"
    checked: dict[str, Any] = {}
    for name, value in arguments.items():
        prop = properties.get(name) or {}
        problem = type_problem(prop, value)
        if problem is not None:
            return {}, f"argument '{name}' of '{tool.name}': {problem}"
        checked[name] = as_declared(prop, value)
    return checked, None


def type_problem(prop: Mapping[str, Any], value: Any) -> str | None:
    if value is None:
        return None
    if "enum" in prop and value not in prop["enum"]:
        return f"{value!r} is not one of {prop['enum']}"
    kind = prop.get("type")
    if not isinstance(kind, str) or kind not in _JSON_TYPES:
        return None
    if isinstance(value, bool) and kind in ("integer", "number"):
        return f"expected {kind}, got a boolean"
    if kind == "integer" and integral_float(value):
        return None  # see as_declared
    if not isinstance(value, _JSON_TYPES[kind]):
        return f"expected {kind}, got {type(value).__name__}"
    return None


def as_declared(prop: Mapping[str, Any], value: Any) -> Any:
    """``value`` (which fits ``prop``) as the tool's Python code expects it: JSON has one
    number type, so 2.0 is the integer 2 (JSON Schema's ``integer`` counts it, a model may
    write it, a ``float`` memory entry holds it), and a parameter declared ``int`` gets 2."""
    if prop.get("type") == "integer" and integral_float(value):
        return int(value)
    return value


# Beyond 2**53 a float is not an exact integer (its neighbours are 2 or more apart): 1e308
# stands for no one int, and as one it is 309 digits where the model wrote 6 characters.
EXACT_FLOAT_INTS = 2**53


def integral_float(value: Any) -> bool:
    """A float that is exactly an int, within the range where floats are exact integers."""
    return isinstance(value, float) and value.is_integer() and abs(value) <= EXACT_FLOAT_INTS
