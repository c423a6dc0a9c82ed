"""Python tools of a Mantle project: the ``tool`` decorator, module import, schemas.

Tool modules are imported from their file path under a private module name. They are
registered in ``sys.modules`` only while they execute (dataclasses and postponed
annotations need that), and helper modules they import from the project folder are
dropped again afterwards, so loading two projects never mixes their code.

The source is read with :func:`agentscript.reading.read_file_bytes` (regular files only,
at most ``limits.MAX_FILE_BYTES``, never blocking on a FIFO) and compiled and executed here,
so a hostile ``tools.py`` is a diagnostic, not a hang. What the module prints while it is
imported goes to stderr: stdout carries ``--format json`` output and the LSP/MCP streams.
"""

from __future__ import annotations

import ast
import enum
import hashlib
import importlib.util
import inspect
import os
import re
import signal
import sys
import threading
import types
import typing
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stdout
from typing import Any, TypeVar

from agentscript.diagnostics import Diagnostic, Severity, Span
from agentscript.mantle.model import Tool, ToolWrite
from agentscript.reading import FileInputError, read_file_bytes

F = TypeVar("F", bound=Callable[..., Any])
MARKER = "__mantle_tool__"
HOOK_PREFIX = "run_after_setting_"
# What both model APIs accept as a tool name (OpenAI and Anthropic: ^[a-zA-Z0-9_-]{1,64}$).
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
# A tool module whose own code is still running after this many seconds is named on stderr,
# once: a module-level call that never returns (a database connect, an input()) otherwise
# stops `validate`, `run` or `serve` at start-up without a word.
SLOW_IMPORT_NOTICE_SECONDS = 10.0


def tool(description: str | None = None, *, writes: list[str] | None = None) -> Callable[[F], F]:
    """Mark a function as a tool; ``writes`` lists the memory entries it sets (bare names).

    Wrong argument types are a ``TypeError`` here, so at import (a ``mantle-tool-import``
    diagnostic), not a crash later."""
    if description is not None and not isinstance(description, str):
        raise TypeError(f"@tool description must be a string, not {type(description).__name__}")
    if writes is not None and (
        not isinstance(writes, list | tuple) or not all(isinstance(w, str) for w in writes)
    ):
        raise TypeError("@tool writes must be a list of memory entry names (strings)")

    def mark(func: F) -> F:
        if not callable(func):
            raise TypeError(f"@tool decorates a function, not {type(func).__name__}")
        setattr(func, MARKER, {"description": description, "writes": list(writes or [])})
        return func

    return mark


def tool_files(folder: str) -> list[str]:
    """``tools.py`` and ``tools/*.py`` (sorted) inside ``folder``: every name there but a
    directory, so a FIFO, a device or a link to nothing of that name reaches the bounded
    reader and is a ``mantle-file`` error (as for the project's other files), never skipped."""
    out: list[str] = []
    single = os.path.join(folder, "tools.py")
    if _named_file(single):
        out.append(single)
    package = os.path.join(folder, "tools")
    if os.path.isdir(package):
        try:
            names = sorted(os.listdir(package))
        except OSError:  # an unreadable folder holds no tools we can load
            names = []
        out.extend(
            os.path.join(package, name)
            for name in names
            if name.endswith(".py")
            and not name.startswith("_")
            and _named_file(os.path.join(package, name))
        )
    return out


def _named_file(path: str) -> bool:
    # lexists: a dangling or looping link is listed too (and then refused by name).
    return os.path.lexists(path) and not os.path.isdir(path)


def load_tool_file(
    path: str, project_root: str, owner: str | None
) -> tuple[list[Tool], list[Diagnostic]]:
    """Import one tool module and describe its tools; import failures become diagnostics."""
    module, tree, problem = _import(path, project_root)
    if module is None:
        assert problem is not None
        return [], [problem]
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
        if made is not None:
            tools.append(made)
        diagnostics.extend(problems)
    return tools, diagnostics


def describe(
    func: Callable[..., Any], path: str, tree: ast.Module | None, owner: str | None
) -> tuple[Tool | None, list[Diagnostic]]:
    """The tool ``func`` stands for; None (with an error) when its name cannot be offered."""
    diagnostics: list[Diagnostic] = []
    name = func.__name__
    code = getattr(func, "__code__", None)
    line = code.co_firstlineno if code else 1
    span = Span(line, 1, line, 1 + len(name))
    if not _usable_name(name):
        message = (
            f"tool name {name!r} is not usable: a tool name is 1 to 64 letters, digits, '_' "
            "or '-' (what the model APIs accept)"
        )
        return None, [Diagnostic("mantle-tool-name", message, span, Severity.ERROR, path)]
    marker = getattr(func, MARKER, None)
    if not isinstance(marker, dict):
        marker = {}
    doc = inspect.getdoc(func) or ""
    description = marker.get("description") or doc.split("\n\n")[0].strip()
    if not isinstance(description, str):
        description = ""
    try:
        signature = inspect.signature(func)
    except Exception as exc:  # a broken __signature__ or __wrapped__ set by the module
        signature = inspect.Signature()
        diagnostics.append(
            Diagnostic(
                "mantle-tool-signature",
                f"cannot read the signature of '{name}': {type(exc).__name__}: {exc}",
                span,
                Severity.ERROR,
                path,
            )
        )
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
    marked_writes = marker.get("writes")
    if not isinstance(marked_writes, list | tuple):
        marked_writes = []
    writes = [ToolWrite(w, path, span) for w in marked_writes if isinstance(w, str)]
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
    """JSON schema of the arguments the LLM fills; ``context`` is injected, so hidden. A
    ``**kwargs`` function takes any keyword, so its schema allows any argument
    (``additionalProperties``: offered so to the model, and checked so by
    ``tool_handler.check_arguments``); ``*args`` takes none (a tool is called by keyword)."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    takes_context = False
    any_keyword = False
    for param in signature.parameters.values():
        if param.name == "context":
            takes_context = True
            continue
        if param.kind is param.VAR_KEYWORD:
            any_keyword = True
            continue
        if param.kind is param.VAR_POSITIONAL:
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
    if any_keyword:
        schema["additionalProperties"] = True
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


def _usable_name(name: str) -> bool:
    """A tool offered to the model needs an API-safe name; a hook (never offered) an
    identifier, since its name spells the memory entry it follows."""
    if not isinstance(name, str):
        return False
    if name.startswith(HOOK_PREFIX):
        return name.isidentifier()
    return TOOL_NAME.fullmatch(name) is not None


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


def _import(
    path: str, project_root: str
) -> tuple[types.ModuleType | None, ast.Module | None, Diagnostic | None]:
    """The executed module and its syntax tree, or the diagnostic saying why not.

    The bytes are read once, parsed from bytes (so a ``# -*- coding: ... -*-`` line is
    honoured) and compiled from that tree; the module is set up as ``importlib`` would
    (``__name__``, ``__file__``, ``__spec__``, a ``sys.modules`` entry while it runs)."""
    digest = hashlib.sha1(os.path.abspath(path).encode()).hexdigest()[:12]
    module_name = f"_agentscript_mantle_tools_{digest}"
    try:
        if not os.path.exists(path):  # a link to nothing, or a loop of links
            raise FileInputError(path, "a link to nothing (dangling or a loop)")
        source = read_file_bytes(path)
    except FileInputError as exc:
        name = os.path.basename(path)
        return (
            None,
            None,
            Diagnostic(
                "mantle-file", f"cannot read {name}: {exc.reason}", Span(1, 1, 1, 1), file=path
            ),
        )
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None:
        return None, None, _import_failed(path, 1, f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    # Imported here: the contract module imports this one (its decorator marks tools).
    from agentscript.mantle.tool_contract import documented_names

    watch = _Sigint()
    try:
        tree = ast.parse(source, path)
        code = compile(tree, path, "exec", dont_inherit=True)
        with (
            _isolated(module_name, module, project_root),
            documented_names(),
            redirect_stdout(sys.stderr),
            _sigint_watch(watch),
            _slow_import_notice(path),
        ):
            # What importlib's loader does with a module's code: this is the project's own
            # Python, which the author asked us to run, never agent text or model output.
            exec(code, module.__dict__)
    except KeyboardInterrupt as exc:
        if watch.received is not False:
            raise  # Ctrl-C (a real SIGINT, or one we cannot tell apart): stop, as asked
        return None, None, _import_failed(path, _failing_line(exc, path), _failure(exc))
    except BaseException as exc:  # SystemExit, GeneratorExit, a custom BaseException...
        return None, None, _import_failed(path, _failing_line(exc, path), _failure(exc))
    return module, tree, None


def _failure(exc: BaseException) -> str:
    detail = str(exc)
    shown = f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
    return f"importing this tool module failed: {shown}"


def _import_failed(path: str, line: int, message: str) -> Diagnostic:
    return Diagnostic("mantle-tool-import", message, Span(line, 1, line, 2), file=path)


@contextmanager
def _slow_import_notice(path: str) -> Iterator[None]:
    """Say on stderr which module is still running, if it runs past the notice time. The
    code cannot be stopped from here (Python has no way to), but Ctrl-C can."""
    notice = threading.Timer(
        SLOW_IMPORT_NOTICE_SECONDS, _say_still_importing, (path, SLOW_IMPORT_NOTICE_SECONDS)
    )
    notice.daemon = True
    notice.start()
    try:
        yield
    finally:
        notice.cancel()


def _say_still_importing(path: str, seconds: float) -> None:
    print(
        f"agentscript: {path}: its module code is still running after {seconds:g} s "
        "(a call at import that does not return?); Ctrl-C stops",
        file=sys.__stderr__ or sys.stderr,
        flush=True,
    )


class _Sigint:
    """Whether a real SIGINT arrived while a tool module ran (None: cannot tell)."""

    def __init__(self) -> None:
        self.received: bool | None = None


@contextmanager
def _sigint_watch(watch: _Sigint) -> Iterator[None]:
    """Tell a real Ctrl-C from ``raise KeyboardInterrupt`` in tool code.

    On the main thread, the SIGINT handler in place (Python's default one, or the engine's)
    is wrapped for the block by one that records the signal and then calls it. Off the main
    thread no signal reaches this code, and with SIGINT ignored or left to the system none
    raises, so a KeyboardInterrupt is the module's own; a handler installed outside Python
    leaves it undecided (treated as real)."""
    if threading.current_thread() is not threading.main_thread():
        watch.received = False
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous in (signal.SIG_IGN, signal.SIG_DFL):
        watch.received = False
        yield
        return
    if not callable(previous):
        yield
        return
    handler = previous

    def record(signum: int, frame: types.FrameType | None) -> None:
        watch.received = True
        handler(signum, frame)

    signal.signal(signal.SIGINT, record)
    watch.received = False
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGINT) is record:
            signal.signal(signal.SIGINT, previous)


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
