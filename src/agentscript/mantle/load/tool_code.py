"""Python tools of a Mantle project: the ``tool`` decorator, module import, schemas.

Tool modules are imported from their file path under a private module name. They are
registered in ``sys.modules`` only while they execute (dataclasses and postponed
annotations need that), and helper modules they import from the project folder are
dropped again afterwards, so loading two projects never mixes their code.
"""

from __future__ import annotations

import ast
import enum
import hashlib
import importlib.util
import inspect
import os
import sys
import types
import typing
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from agentscript.diagnostics import Diagnostic, Severity, Span
from agentscript.mantle.model import Tool, ToolWrite
from agentscript.reading import read_file_text

F = TypeVar("F", bound=Callable[..., Any])
MARKER = "__mantle_tool__"
HOOK_PREFIX = "run_after_setting_"


def tool(description: str | None = None, *, writes: list[str] | None = None) -> Callable[[F], F]:
    """Mark a function as a tool; ``writes`` lists the memory entries it sets (bare names)."""

    def mark(func: F) -> F:
        setattr(func, MARKER, {"description": description, "writes": list(writes or [])})
        return func

    return mark


def tool_files(folder: str) -> list[str]:
    """``tools.py`` and ``tools/*.py`` (sorted) inside ``folder``."""
    out: list[str] = []
    single = os.path.join(folder, "tools.py")
    if os.path.isfile(single):
        out.append(single)
    package = os.path.join(folder, "tools")
    if os.path.isdir(package):
        out.extend(
            os.path.join(package, name)
            for name in sorted(os.listdir(package))
            if name.endswith(".py") and not name.startswith("_")
        )
    return out


def load_tool_file(
    path: str, project_root: str, owner: str | None
) -> tuple[list[Tool], list[Diagnostic]]:
    """Import one tool module and describe its tools; import failures become diagnostics."""
    module, problem = _import(path, project_root)
    if module is None:
        assert problem is not None
        return [], [problem]
    tree = _syntax_tree(path)
    functions = [
        obj
        for name, obj in vars(module).items()
        if inspect.isfunction(obj)
        and obj.__module__ == module.__name__
        and not name.startswith("_")
    ]
    marked = [f for f in functions if hasattr(f, MARKER)]
    # With the decorator in use, undecorated functions are helpers, not tools.
    chosen = marked if marked else functions
    hooks = [f for f in functions if f.__name__.startswith(HOOK_PREFIX) and f not in chosen]
    tools: list[Tool] = []
    diagnostics: list[Diagnostic] = []
    for func in [*chosen, *hooks]:
        made, problems = describe(func, path, tree, owner)
        tools.append(made)
        diagnostics.extend(problems)
    return tools, diagnostics


def describe(
    func: Callable[..., Any], path: str, tree: ast.Module | None, owner: str | None
) -> tuple[Tool, list[Diagnostic]]:
    diagnostics: list[Diagnostic] = []
    name = func.__name__
    code = getattr(func, "__code__", None)
    line = code.co_firstlineno if code else 1
    span = Span(line, 1, line, 1 + len(name))
    marker: dict[str, Any] = getattr(func, MARKER, {}) or {}
    doc = inspect.getdoc(func) or ""
    description = marker.get("description") or doc.split("\n\n")[0].strip()
    signature = inspect.signature(func)
    try:
        hints = typing.get_type_hints(func)
    except Exception as exc:  # unresolvable annotations: fall back to "any"
        hints = {}
        diagnostics.append(
            Diagnostic(
                "mantle-tool-signature",
                f"cannot read the type hints of '{name}': {exc}",
                span,
                Severity.WARNING,
                path,
            )
        )
    schema, takes_context = parameters_schema(signature, hints, _arg_docs(doc))
    writes = [ToolWrite(w, path, span) for w in marker.get("writes", [])]
    writes.extend(_writes_in_source(tree, name, path))
    made = Tool(
        name=name,
        file=path,
        span=span,
        callable_ref=f"{path}:{name}",
        function=func,
        description=description,
        parameters_schema=schema,
        takes_context=takes_context,
        is_async=inspect.iscoroutinefunction(func),
        owner=owner,
        writes=writes,
        hook_for=name[len(HOOK_PREFIX) :] if name.startswith(HOOK_PREFIX) else None,
    )
    if not description and made.hook_for is None:
        diagnostics.append(
            Diagnostic(
                "mantle-tool-description",
                f"tool '{name}' has no description: add a docstring or @tool(description=...)",
                span,
                Severity.WARNING,
                path,
            )
        )
    return made, diagnostics


def parameters_schema(
    signature: inspect.Signature, hints: dict[str, Any], docs: dict[str, str]
) -> tuple[dict[str, Any], bool]:
    """JSON schema of the arguments the LLM fills; ``context`` is injected, so hidden."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    takes_context = False
    for param in signature.parameters.values():
        if param.name == "context":
            takes_context = True
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        prop = json_type(hints.get(param.name, Any))
        if param.name in docs:
            prop["description"] = docs[param.name]
        properties[param.name] = prop
        if param.default is param.empty:
            required.append(param.name)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema, takes_context


_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def json_type(hint: Any) -> dict[str, Any]:
    """A JSON-schema fragment for a Python type hint (unknown types accept anything)."""
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    if hint is type(None):
        return {"type": "null"}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"enum": [member.value for member in hint]}
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        return (
            json_type(options[0])
            if len(options) == 1
            else {"anyOf": [json_type(a) for a in options]}
        )
    if hint in (list, tuple, set) or origin in (list, tuple, set):
        return {"type": "array", "items": json_type(args[0])} if args else {"type": "array"}
    if hint is dict or origin is dict:
        return {"type": "object"}
    return {}


def _arg_docs(doc: str) -> dict[str, str]:
    """Per-argument descriptions from a Google-style ``Args:`` section."""
    out: dict[str, str] = {}
    in_args = False
    current: str | None = None
    for raw in doc.splitlines():
        line = raw.strip()
        if line in ("Args:", "Arguments:"):
            in_args = True
            continue
        if not in_args:
            continue
        if not line or (line.endswith(":") and not raw.startswith(" ")):
            break
        name, sep, rest = line.partition(":")
        if (
            sep
            and name.split(" ")[0].isidentifier()
            and raw.startswith((" ", "\t"))
            and " " not in name.strip()
        ):
            current = name.strip()
            out[current] = rest.strip()
        elif current:
            out[current] = f"{out[current]} {line}".strip()
    return out


def _syntax_tree(path: str) -> ast.Module | None:
    try:
        return ast.parse(read_file_text(path, encoding="utf-8"), path)
    except (OSError, SyntaxError, ValueError):
        return None


def _writes_in_source(tree: ast.Module | None, name: str, path: str) -> list[ToolWrite]:
    """Literal ``<x>.memory.set("entry", ...)`` calls inside the function (read, never run)."""
    if tree is None:
        return []
    out: list[ToolWrite] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            for call in ast.walk(node):
                if (
                    isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Attribute)
                    and call.func.attr == "set"
                    and isinstance(call.func.value, ast.Attribute)
                    and call.func.value.attr == "memory"
                    and call.args
                    and isinstance(call.args[0], ast.Constant)
                    and isinstance(call.args[0].value, str)
                ):
                    arg = call.args[0]
                    entry = str(arg.value)
                    end = arg.col_offset + 1 + len(entry) + 2
                    out.append(
                        ToolWrite(
                            entry, path, Span(arg.lineno, arg.col_offset + 1, arg.lineno, end)
                        )
                    )
            break
    return out


def _import(path: str, project_root: str) -> tuple[types.ModuleType | None, Diagnostic | None]:
    digest = hashlib.sha1(os.path.abspath(path).encode()).hexdigest()[:12]
    module_name = f"_agentscript_mantle_tools_{digest}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        return None, Diagnostic(
            "mantle-tool-import", f"cannot import {path}", Span(1, 1, 1, 1), file=path
        )
    module = importlib.util.module_from_spec(spec)
    # Imported here: the contract module imports this one (its decorator marks tools).
    from agentscript.mantle.tool_contract import documented_names

    try:
        with _isolated(module_name, module, project_root), documented_names():
            spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:
        line = _failing_line(exc, path)
        message = f"importing this tool module failed: {type(exc).__name__}: {exc}"
        return None, Diagnostic("mantle-tool-import", message, Span(line, 1, line, 2), file=path)
    return module, None


@contextmanager
def _isolated(name: str, module: types.ModuleType, root: str) -> Iterator[None]:
    before = set(sys.modules)
    root = os.path.abspath(root)
    sys.modules[name] = module
    sys.path.insert(0, root)
    try:
        yield
    finally:
        sys.path.remove(root)
        sys.modules.pop(name, None)
        for added in set(sys.modules) - before:
            file = getattr(sys.modules.get(added), "__file__", None) or ""
            if os.path.abspath(file).startswith(root + os.sep):
                del sys.modules[added]


def _failing_line(exc: BaseException, path: str) -> int:
    if isinstance(exc, SyntaxError) and exc.lineno:
        return exc.lineno
    line = 1
    target = os.path.abspath(path)
    tb = exc.__traceback__
    while tb is not None:
        if os.path.abspath(tb.tb_frame.f_code.co_filename) == target:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def make_stub(name: str, owner: str | None, file: str, span: Span) -> Tool:
    """A stand-in for a tool whose code is missing, so a scripted conversation can run."""

    def stub(**kwargs: Any) -> dict[str, Any]:
        return {"ok": True, "stub": name, "arguments": kwargs}

    stub.__name__ = name
    return Tool(
        name=name,
        file=file,
        span=span,
        callable_ref=f"<stub>:{name}",
        function=stub,
        description=f"Stub for the missing tool '{name}'.",
        parameters_schema={"type": "object", "properties": {}, "additionalProperties": True},
        is_stub=True,
        owner=owner,
    )
