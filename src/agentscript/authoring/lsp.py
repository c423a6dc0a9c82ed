"""``agentscript lsp``: a Language Server Protocol server for ``.agent`` files, on pygls.

Features: diagnostics as you type (the checker plus the lints), hover (a variable's type and
description, an action's signature, a node's resolved prompt cases), go to definition, find
references, completion after ``@`` and ``@namespace.``, document symbols, formatting (the same
canonical form as ``agentscript fmt``) and rename of a variable or subagent across the file.

Each request reads the document's :class:`~agentscript.authoring.index.DocumentIndex`, rebuilt
once per change (re-parsing only the top-level blocks the change touched, see
``agentscript.syntax.incremental``) and cached by version; nothing here raises on half-typed text (a failure of
ours becomes an empty answer and a log line, never a dead server). Needs the optional extra
``agentscript[lsp]`` (the CLI says so when it is missing).
"""

from __future__ import annotations

from typing import Any

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from agentscript.authoring.index import (
    DocumentIndex,
    LiveDocument,
    Range,
    SymbolKind,
    completions,
    document_diagnostics,
)
from agentscript.diagnostics import Diagnostic, Severity

SERVER_NAME = "agentscript"


def create_server() -> LanguageServer:
    """The server with every feature registered; ``start_io()`` runs it on stdin/stdout."""
    server = LanguageServer(SERVER_NAME, "v1")
    cache: dict[str, tuple[int | None, DocumentIndex]] = {}
    live: dict[str, LiveDocument] = {}

    def index_of(uri: str) -> DocumentIndex | None:
        document = server.workspace.get_text_document(uri)
        cached = cache.get(uri)
        if cached is not None and cached[0] == document.version:
            return cached[1]
        path = document.path or uri
        state = live.get(uri)
        if state is None or state.path != path:
            state = live[uri] = LiveDocument(path)
        try:
            index = state.update(document.source)
        except Exception as exc:  # a bug of ours must not kill the editor's server
            live.pop(uri, None)  # start again from a full parse next time
            server.window_log_message(
                types.LogMessageParams(types.MessageType.Error, f"agentscript: {exc!r}")
            )
            return None
        cache[uri] = (document.version, index)
        return index

    def to_range(where: Range) -> Any:
        return types.Range(
            types.Position(where.line, where.start), types.Position(where.line, where.end)
        )

    def publish(uri: str) -> None:
        index = index_of(uri)
        if index is None:
            return
        try:
            found = document_diagnostics(index)
        except Exception as exc:  # as above: log, keep serving
            server.window_log_message(
                types.LogMessageParams(types.MessageType.Error, f"agentscript: {exc!r}")
            )
            found = list(index.diagnostics)
        server.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, diagnostics=[_diagnostic(d) for d in found])
        )

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(params: Any) -> None:
        publish(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(params: Any) -> None:
        publish(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(params: Any) -> None:
        cache.pop(params.text_document.uri, None)
        live.pop(params.text_document.uri, None)

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    def hover(params: Any) -> Any:
        index = index_of(params.text_document.uri)
        if index is None:
            return None
        symbol = index.at(params.position.line, params.position.character)
        if symbol is None:
            return None
        text = f"**{symbol.kind} {symbol.name}**\n\n{symbol.detail}"
        if symbol.kind == SymbolKind.NODE and symbol.name in index.outline.subagents:
            text += "\n\n" + _prompt_cases(index, symbol.name)
        return types.Hover(
            contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=text),
            range=to_range(symbol.definition),
        )

    @server.feature(types.TEXT_DOCUMENT_DEFINITION)
    def definition(params: Any) -> Any:
        index = index_of(params.text_document.uri)
        symbol = index.at(params.position.line, params.position.character) if index else None
        if symbol is None:
            return None
        return types.Location(uri=params.text_document.uri, range=to_range(symbol.definition))

    @server.feature(types.TEXT_DOCUMENT_REFERENCES)
    def references(params: Any) -> Any:
        index = index_of(params.text_document.uri)
        symbol = index.at(params.position.line, params.position.character) if index else None
        if symbol is None:
            return []
        places = list(symbol.references)
        if params.context.include_declaration:
            places.insert(0, symbol.definition)
        return [types.Location(uri=params.text_document.uri, range=to_range(r)) for r in places]

    @server.feature(
        types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions(trigger_characters=["@", "."])
    )
    def completion(params: Any) -> Any:
        index = index_of(params.text_document.uri)
        if index is None:
            return types.CompletionList(is_incomplete=False, items=[])
        items = [
            types.CompletionItem(label=label, detail=detail)
            for label, detail in completions(index, params.position.line, params.position.character)
        ]
        return types.CompletionList(is_incomplete=False, items=items)

    @server.feature(types.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
    def document_symbols(params: Any) -> Any:
        index = index_of(params.text_document.uri)
        if index is None:
            return []
        kinds = {
            SymbolKind.VARIABLE: types.SymbolKind.Variable,
            SymbolKind.NODE: types.SymbolKind.Class,
            SymbolKind.ACTION: types.SymbolKind.Function,
            SymbolKind.TOOL: types.SymbolKind.Method,
        }
        out = []
        for symbol in index.symbols:
            if symbol.owner is not None:
                continue
            children = [
                types.DocumentSymbol(
                    name=child.name,
                    kind=kinds[child.kind],
                    range=to_range(child.definition),
                    selection_range=to_range(child.definition),
                    detail=child.detail,
                )
                for child in index.symbols
                if child.owner == symbol.name and symbol.kind == SymbolKind.NODE
            ]
            out.append(
                types.DocumentSymbol(
                    name=symbol.name,
                    kind=kinds[symbol.kind],
                    range=to_range(symbol.definition),
                    selection_range=to_range(symbol.definition),
                    detail=symbol.detail,
                    children=children or None,
                )
            )
        return out

    @server.feature(types.TEXT_DOCUMENT_FORMATTING)
    def formatting(params: Any) -> Any:
        from agentscript.syntax.formatter import format_text

        document = server.workspace.get_text_document(params.text_document.uri)
        formatted, diagnostics = format_text(document.source, document.path)
        if any(d.is_error for d in diagnostics) or formatted == document.source:
            return []
        lines = document.source.splitlines()
        end = types.Position(len(lines), 0)
        return [types.TextEdit(range=types.Range(types.Position(0, 0), end), new_text=formatted)]

    @server.feature(types.TEXT_DOCUMENT_RENAME)
    def rename(params: Any) -> Any:
        index = index_of(params.text_document.uri)
        symbol = index.at(params.position.line, params.position.character) if index else None
        if symbol is None or symbol.kind not in (SymbolKind.VARIABLE, SymbolKind.NODE):
            return None
        edits = [
            types.TextEdit(range=to_range(r), new_text=params.new_name)
            for r in [symbol.definition, *symbol.references]
        ]
        return types.WorkspaceEdit(changes={params.text_document.uri: edits})

    return server


def _prompt_cases(index: DocumentIndex, node: str) -> str:
    from agentscript.authoring.prompts import node_prompts

    try:
        results = [r for r in node_prompts(index.outline) if r.node == node]
    except Exception:  # hover must answer even if the walk meets something it cannot read
        return ""
    if not results:
        return ""
    lines = ["Prompt cases:"]
    for case in results[0].cases:
        tools = ", ".join(case.tools) or "no tools"
        lines.append(f"- `{case.label}`: {len(case.instructions.splitlines())} line(s), {tools}")
    return "\n".join(lines)


def _diagnostic(diag: Diagnostic) -> types.Diagnostic:
    severity = {
        Severity.ERROR: types.DiagnosticSeverity.Error,
        Severity.WARNING: types.DiagnosticSeverity.Warning,
    }.get(diag.severity, types.DiagnosticSeverity.Information)
    span = diag.span
    return types.Diagnostic(
        range=types.Range(
            types.Position(max(span.line - 1, 0), max(span.column - 1, 0)),
            types.Position(max(span.end_line - 1, 0), max(span.end_column - 1, 0)),
        ),
        message=diag.message,
        severity=severity,
        code=diag.code,
        source=SERVER_NAME,
    )


def run_lsp() -> int:
    """``agentscript lsp``: serve on stdin/stdout until the editor exits."""
    create_server().start_io()
    return 0
