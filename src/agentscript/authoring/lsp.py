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

import json
import logging
import re
import sys
from functools import partial
from typing import IO, Any, BinaryIO, cast
from urllib.parse import unquote

import pygls.server
from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method
from pygls.workspace import TextDocument, Workspace

from agentscript.authoring.index import (
    DocumentIndex,
    LiveDocument,
    Range,
    Symbol,
    SymbolKind,
    completions,
    document_diagnostics,
)
from agentscript.authoring.lsp_positions import ClientColumns, replace_range
from agentscript.diagnostics import Diagnostic, Severity

SERVER_NAME = "agentscript"

# JSON-RPC's error codes for a body that is not JSON, one that is JSON but not a message
# (or a request the server's state refuses: after ``shutdown``, a second ``initialize``), and
# a message whose params are wrong; LSP's own for a request before ``initialize``.
_PARSE_ERROR = -32700
_INVALID_REQUEST = -32600
_INVALID_PARAMS = -32602
_SERVER_NOT_INITIALIZED = -32002

_log = logging.getLogger(__name__)


def _unparsable(error: BaseException | None) -> bool:
    """Whether ``json.loads`` failed on the body itself: not JSON text, or bytes that are not
    text in any encoding JSON allows."""
    return isinstance(error, json.JSONDecodeError | UnicodeDecodeError)


class _OneLineForUnparsable(logging.Filter):
    """pygls logs a body it cannot parse as "Unable to handle message" with a traceback. That
    is the client's mistake, answered with a parse error, not a fault of the server: one
    warning line says it without a traceback that reads like a crash."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if _unparsable(error):
            record.msg = "agentscript lsp: ignored a message body that is not JSON: %s"
            record.args = (str(error)[:200],)
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


_ONE_LINE_FOR_UNPARSABLE = _OneLineForUnparsable()


def _document_key(uri: str) -> str:
    """The key of an open document: pygls' workspace keys them by the percent-decoded URI,
    so ``file:///a%20b.agent`` and ``file:///a b.agent`` are one document."""
    return unquote(uri)


def _encoding(workspace: Workspace) -> str | None:
    """The position encoding negotiated at ``initialize``; None means LSP's UTF-16."""
    chosen = workspace.position_encoding
    return None if chosen is None else str(getattr(chosen, "value", chosen))


class _Rejected:
    """A message whose params did not match the protocol: answered (or dropped) already."""

    jsonrpc = ""


_REJECTED = _Rejected()


class _Protocol(LanguageServerProtocol):
    """pygls' protocol, but a message with invalid params (a negative position, a string
    where a number goes) gets an "Invalid params" error response, or is dropped if it is a
    notification, instead of no answer and a traceback on stderr: a client waiting on that
    answer would otherwise wait forever. The lifecycle is LSP's: a request before
    ``initialize`` gets ServerNotInitialized, a second ``initialize`` and any request after
    ``shutdown`` get InvalidRequest, and ``exit`` without ``shutdown`` sets exit code 1."""

    # What ``exit`` asked the process to exit with (None until it comes): pygls computes it
    # but calls ``sys.exit`` inside its loop, where ``start_io`` swallows it.
    exit_code: int | None = None

    def structure_message(self, data: dict[str, Any]) -> Any:
        method = data.get("method") if "jsonrpc" in data else None
        message_type = self.get_message_type(method) if isinstance(method, str) else None
        if message_type is None and "jsonrpc" in data:
            if isinstance(method, str):
                # JSON-RPC leaves params optional; pygls' type for a method it does not know
                # requires them and fails with a traceback, leaving the request unanswered.
                data.setdefault("params", None)
            elif not ("id" in data and ("result" in data or "error" in data)):
                # Neither request, notification nor response: left plain, for handle_message
                # to refuse.
                return data
        if message_type is None:
            return super().structure_message(data)
        try:
            return self._converter.structure(data, message_type)
        except Exception as exc:
            if "id" in data:
                self._send_response(
                    data["id"],
                    error=types.ResponseError(
                        code=_INVALID_PARAMS, message=f"invalid params for {method}"
                    ),
                )
            self._server.window_log_message(
                types.LogMessageParams(
                    types.MessageType.Warning, f"agentscript: ignored {method}: {exc!r}"[:2000]
                )
            )
            return _REJECTED

    def send_error(self, msg_id: int | str | None, code: int, message: str) -> None:
        """An error response. Written as plain JSON: lsprotocol's message type leaves out a
        null id, and a response without an id is not one a client can read."""
        error = {"code": code, "message": message}
        self._send_data({"jsonrpc": self.VERSION, "id": msg_id, "error": error})

    def _send_response(
        self, msg_id: Any, result: Any | None = None, error: types.ResponseError | None = None
    ) -> None:
        if error is not None and msg_id is None:
            # JSON-RPC answers a request whose id is null with an id of null, but lsprotocol
            # leaves a null id out of an error: a message without an id answers nothing.
            self.send_error(None, error.code, error.message)
            return
        super()._send_response(msg_id, result, error)

    def handle_message(self, message: Any) -> None:
        if message is _REJECTED:
            return
        if not hasattr(message, "jsonrpc"):
            # Valid JSON that is not a JSON-RPC message (an array, a number, an object without
            # "jsonrpc" or without a method): pygls would fail on it with a traceback and leave
            # a request unanswered.
            msg_id = message.get("id") if isinstance(message, dict) else None
            if not isinstance(msg_id, int | str) or isinstance(msg_id, bool):
                msg_id = None
            self.send_error(msg_id, _INVALID_REQUEST, "invalid request: not a JSON-RPC message")
            _log.warning("agentscript lsp: ignored a body that is not a JSON-RPC message")
            return
        if self._refused_in_this_state(message):
            return
        before = set(self._request_futures)
        try:
            super().handle_message(message)
        finally:
            self._forget_finished_futures(before, message)

    def _refused_in_this_state(self, message: Any) -> bool:
        """Answer (or drop) a message the lifecycle does not allow now; True if it was."""
        method = getattr(message, "method", None)
        if method is None or method == types.EXIT:  # a response, or exit: always handled
            return False
        msg_id = getattr(message, "id", None)
        if self._workspace is None and method != types.INITIALIZE:
            # pygls would run the handler, whose first use of the workspace raises: -32603
            # with a traceback in the answer and on stderr.
            refusal = (
                _SERVER_NOT_INITIALIZED,
                f"server not initialized: {method} before initialize",
            )
        elif self._workspace is not None and method == types.INITIALIZE:
            refusal = (_INVALID_REQUEST, "invalid request: the server is already initialized")
        elif self._shutdown:
            # pygls drops it with a log line, leaving a request unanswered for good.
            refusal = (_INVALID_REQUEST, f"invalid request: {method} after shutdown")
        else:
            return False
        if msg_id is not None:
            self.send_error(msg_id, *refusal)
        else:
            _log.warning("agentscript lsp: ignored %s: %s", method, refusal[1])
        return True

    def _forget_finished_futures(self, before: set[Any], message: Any) -> None:
        """Drop the futures handling ``message`` left in ``_request_futures``.

        pygls 2.1.1 (``JsonRPCProtocol._execute_handler``) keeps the future of a generator,
        coroutine or thread handler under a fresh uuid for a notification, and for each step
        a generator handler yields to, and only a request's own answer removes its entry: every
        didOpen, didChange and didClose (generator handlers, ours included) left one behind,
        about 2 KB each (12,000 changes: RSS 52 to 75 MB; 52.2 to 52.4 MB with this). A
        request's own id stays: pygls removes it when it answers, and a ``$/cancelRequest``
        finds it there until then."""
        own = getattr(message, "id", None) if getattr(message, "method", None) else None
        for key in self._request_futures.keys() - before:
            if key == own:
                continue
            future = self._request_futures[key]
            if future.done():
                del self._request_futures[key]
            else:  # still running (or a request of ours awaiting the client's answer)
                future.add_done_callback(partial(self._forget_future, key))

    def _forget_future(self, key: Any, _done: Any) -> None:
        self._request_futures.pop(key, None)

    @lsp_method(types.EXIT)
    def lsp_exit(self, *args: Any) -> Any:
        self.exit_code = 0 if self._shutdown else 1  # LSP: 1 when shutdown did not come first
        yield from super().lsp_exit(*args)

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams) -> Any:
        # A change to a document never opened has nothing to apply to: pygls would fail on
        # it with a traceback, so it is ignored, as the protocol allows.
        document = self.workspace.text_documents.get(_document_key(params.text_document.uri))
        if document is None:
            return
        # Ranged changes are applied here, on the lines LSP counts: pygls splits with
        # ``str.splitlines``, so after a \u2028 or \f in a comment an edit landed on another
        # line than the editor's. pygls gets the result as one whole-document change.
        text = document.source
        encoding = _encoding(self.workspace)
        for change in params.content_changes:
            if isinstance(change, types.TextDocumentContentChangePartial):
                start, end = change.range.start, change.range.end
                text = replace_range(
                    text,
                    (start.line, start.character),
                    (end.line, end.character),
                    change.text,
                    encoding,
                )
            else:
                text = change.text
        whole = types.DidChangeTextDocumentParams(
            text_document=params.text_document,
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
        )
        yield from super().lsp_text_document__did_change(whole)


class _Snapshot:
    """One version of an open document: its index and its columns in the client's units."""

    __slots__ = ("columns", "index", "version")

    def __init__(self, version: int | None, index: DocumentIndex, columns: ClientColumns) -> None:
        self.version = version
        self.index = index
        self.columns = columns


class _Server(LanguageServer):
    """pygls' server, answering a message body that is not JSON as JSON-RPC says (a parse
    error, id null) instead of popping up "Error in server" in the editor."""

    protocol: _Protocol

    def report_server_error(self, error: Exception, source: Any) -> None:
        if _unparsable(error):
            self.protocol.send_error(None, _PARSE_ERROR, f"parse error: {str(error)[:200]}")
            return
        super().report_server_error(error, source)


def create_server() -> _Server:
    """The server with every feature registered; ``start_io()`` runs it on stdin/stdout."""
    # pygls reads and parses each body itself, before any hook of ours: its log record of a
    # failed parse is the only place left to make that failure one line.
    pygls.server.logger.addFilter(_ONE_LINE_FOR_UNPARSABLE)
    server = _Server(SERVER_NAME, "v1", protocol_cls=_Protocol)
    # Keyed by ``_document_key(uri)``, as the workspace keys its documents: keyed by the URI
    # as sent, a document opened as a%20b and reopened as "a b" found the old one's index.
    cache: dict[str, _Snapshot] = {}
    live: dict[str, LiveDocument] = {}
    formatted_cache: dict[str, tuple[int | None, list[types.TextEdit]]] = {}

    def opened(uri: str) -> TextDocument | None:
        # Never ``workspace.get_text_document``: for a URI the editor has not opened it reads
        # the file from disk, with no check, so a FIFO would block the server forever and
        # /dev/zero would eat the memory. Only what the editor sent us is served.
        document: TextDocument | None = server.workspace.text_documents.get(_document_key(uri))
        return document

    def encoding() -> str | None:
        return _encoding(server.workspace)

    def snapshot_of(uri: str) -> _Snapshot | None:
        document = opened(uri)
        if document is None:
            return None
        key = _document_key(uri)
        cached = cache.get(key)
        if cached is not None and cached.version == document.version:
            return cached
        path = document.path or uri
        state = live.get(key)
        if state is None or state.path != path:
            state = live[key] = LiveDocument(path)
        source = document.source
        try:
            index = state.update(source)
        except Exception as exc:  # a bug of ours must not kill the editor's server
            live.pop(key, None)  # start again from a full parse next time
            server.window_log_message(
                types.LogMessageParams(types.MessageType.Error, f"agentscript: {exc!r}")
            )
            return None
        snapshot = cache[key] = _Snapshot(
            document.version, index, ClientColumns(source, encoding())
        )
        return snapshot

    def index_of(uri: str) -> DocumentIndex | None:
        snapshot = snapshot_of(uri)
        return None if snapshot is None else snapshot.index

    def symbol_at(uri: str, position: types.Position) -> tuple[_Snapshot, Symbol] | None:
        snapshot = snapshot_of(uri)
        if snapshot is None:
            return None
        character = snapshot.columns.from_client(position.line, position.character)
        symbol = snapshot.index.at(position.line, character)
        return None if symbol is None else (snapshot, symbol)

    def to_range(columns: ClientColumns, where: Range) -> types.Range:
        return types.Range(
            types.Position(where.line, columns.to_client(where.line, where.start)),
            types.Position(where.line, columns.to_client(where.line, where.end)),
        )

    def publish(uri: str) -> None:
        snapshot = snapshot_of(uri)
        if snapshot is None:
            return
        try:
            found = document_diagnostics(snapshot.index)
        except Exception as exc:  # as above: log, keep serving
            server.window_log_message(
                types.LogMessageParams(types.MessageType.Error, f"agentscript: {exc!r}")
            )
            found = list(snapshot.index.diagnostics)
        server.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(
                uri=uri, diagnostics=[_diagnostic(d, snapshot.columns) for d in found]
            )
        )

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(params: Any) -> None:
        publish(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(params: Any) -> None:
        publish(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(params: Any) -> None:
        key = _document_key(params.text_document.uri)
        cache.pop(key, None)
        live.pop(key, None)
        formatted_cache.pop(key, None)

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    def hover(params: Any) -> Any:
        found = symbol_at(params.text_document.uri, params.position)
        if found is None:
            return None
        snapshot, symbol = found
        text = f"**{symbol.kind} {symbol.name}**\n\n{symbol.detail}"
        if symbol.kind == SymbolKind.NODE and symbol.name in snapshot.index.outline.subagents:
            text += "\n\n" + _prompt_cases(snapshot.index, symbol.name)
        return types.Hover(
            contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=text),
            range=to_range(snapshot.columns, symbol.definition),
        )

    @server.feature(types.TEXT_DOCUMENT_DEFINITION)
    def definition(params: Any) -> Any:
        found = symbol_at(params.text_document.uri, params.position)
        if found is None:
            return None
        snapshot, symbol = found
        return types.Location(
            uri=params.text_document.uri, range=to_range(snapshot.columns, symbol.definition)
        )

    @server.feature(types.TEXT_DOCUMENT_REFERENCES)
    def references(params: Any) -> Any:
        found = symbol_at(params.text_document.uri, params.position)
        if found is None:
            return []
        snapshot, symbol = found
        places = list(symbol.references)
        if params.context.include_declaration:
            places.insert(0, symbol.definition)
        return [
            types.Location(uri=params.text_document.uri, range=to_range(snapshot.columns, r))
            for r in places
        ]

    @server.feature(
        types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions(trigger_characters=["@", "."])
    )
    def completion(params: Any) -> Any:
        snapshot = snapshot_of(params.text_document.uri)
        if snapshot is None:
            return types.CompletionList(is_incomplete=False, items=[])
        line = params.position.line
        character = snapshot.columns.from_client(line, params.position.character)
        items = [
            types.CompletionItem(label=label, detail=detail)
            for label, detail in completions(snapshot.index, line, character)
        ]
        return types.CompletionList(is_incomplete=False, items=items)

    @server.feature(types.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
    def document_symbols(params: Any) -> Any:
        snapshot = snapshot_of(params.text_document.uri)
        if snapshot is None:
            return []
        columns = snapshot.columns
        kinds = {
            SymbolKind.VARIABLE: types.SymbolKind.Variable,
            SymbolKind.NODE: types.SymbolKind.Class,
            SymbolKind.ACTION: types.SymbolKind.Function,
            SymbolKind.TOOL: types.SymbolKind.Method,
        }

        def entry(symbol: Symbol, children: list[types.DocumentSymbol] | None) -> Any:
            where = to_range(columns, symbol.definition)
            return types.DocumentSymbol(
                name=symbol.name,
                kind=kinds[symbol.kind],
                range=where,
                selection_range=where,
                detail=symbol.detail,
                children=children,
            )

        # Grouped in one pass: scanning every symbol for each top-level one was quadratic
        # (30,000 variables took 17 s a request).
        owned: dict[str, list[Symbol]] = {}
        for symbol in snapshot.index.symbols:
            if symbol.owner is not None:
                owned.setdefault(symbol.owner, []).append(symbol)
        out = []
        for symbol in snapshot.index.symbols:
            if symbol.owner is not None:
                continue
            mine = owned.get(symbol.name, []) if symbol.kind == SymbolKind.NODE else []
            out.append(entry(symbol, [entry(child, None) for child in mine] or None))
        return out

    @server.feature(types.TEXT_DOCUMENT_FORMATTING)
    def formatting(params: Any) -> Any:
        from agentscript.syntax.formatter import format_text

        uri = params.text_document.uri
        document = opened(uri)
        if document is None:
            return []
        cached = formatted_cache.get(_document_key(uri))
        if cached is not None and cached[0] == document.version:
            return cached[1]
        source = document.source
        formatted, diagnostics = format_text(source, document.path)
        edits: list[types.TextEdit] = []
        if not any(d.is_error for d in diagnostics) and formatted != source:
            # The exact end of the document, in the client's units: a line count from
            # ``str.splitlines`` would disagree with the client on \f, \u2028 and the like.
            columns = ClientColumns(source, encoding())
            last = len(columns.lines) - 1
            end = types.Position(last, columns.to_client(last, len(columns.lines[last])))
            edits = [
                types.TextEdit(range=types.Range(types.Position(0, 0), end), new_text=formatted)
            ]
        formatted_cache[_document_key(uri)] = (document.version, edits)
        return edits

    @server.feature(types.TEXT_DOCUMENT_RENAME)
    def rename(params: Any) -> Any:
        found = symbol_at(params.text_document.uri, params.position)
        if found is None:
            return None
        snapshot, symbol = found
        if symbol.kind not in (SymbolKind.VARIABLE, SymbolKind.NODE):
            return None
        edits = [
            types.TextEdit(range=to_range(snapshot.columns, r), new_text=params.new_name)
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


def _diagnostic(diag: Diagnostic, columns: ClientColumns) -> types.Diagnostic:
    severity = {
        Severity.ERROR: types.DiagnosticSeverity.Error,
        Severity.WARNING: types.DiagnosticSeverity.Warning,
    }.get(diag.severity, types.DiagnosticSeverity.Information)
    span = diag.span
    line, end_line = max(span.line - 1, 0), max(span.end_line - 1, 0)
    return types.Diagnostic(
        range=types.Range(
            types.Position(line, columns.to_client(line, span.column - 1)),
            types.Position(end_line, columns.to_client(end_line, span.end_column - 1)),
        ),
        message=diag.message,
        severity=severity,
        code=diag.code,
        source=SERVER_NAME,
    )


# A header line as pygls accepts it, at the end of a longer line.
_HEADER_AT_END = re.compile(rb"Content-Length: \d+\r\n\Z")


class _ResyncingReader:
    """stdin for pygls' reader, finding the next header after a body of the wrong length.

    pygls reads a header only when its whole line is ``Content-Length: N``. After a body
    longer than its header said (``Content-Length: 4`` then ``[1,2]``), the rest of it begins
    the next header's line and, headers and bodies being unterminated, every later header's
    too: the server never answered again. A line that ends in such a header is cut to it."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream

    def readline(self) -> bytes:
        line = self._stream.readline()
        header = _HEADER_AT_END.search(line)
        if header is not None and header.start() > 0:
            _log.warning(
                "agentscript lsp: skipped %d bytes before a Content-Length header", header.start()
            )
            return line[header.start() :]
        return line

    def read(self, size: int) -> bytes:
        return self._stream.read(size)


def run_lsp(stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> int:
    """``agentscript lsp``: serve on stdin/stdout until the editor exits. The exit code is
    LSP's: 1 for ``exit`` without ``shutdown`` first, else 0 (and 0 at the end of stdin)."""
    server = create_server()
    # pygls' reader calls only ``readline`` and ``read`` on what it is given as stdin.
    reader = cast(BinaryIO, _ResyncingReader(stdin or sys.stdin.buffer))
    server.start_io(reader, stdout)
    return server.protocol.exit_code or 0
