"""`agentscript lsp` over its real protocol: a pygls client drives the server in a subprocess."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

types = pytest.importorskip("lsprotocol.types")
client_module = pytest.importorskip("pygls.lsp.client")

ROOT = Path(__file__).resolve().parents[2]
SECURITY_GATE = ROOT / "examples" / "security_gate" / "security_gate.agent"
URI = SECURITY_GATE.as_uri()


class Session:
    def __init__(self) -> None:
        self.client: Any = client_module.LanguageClient("test-client", "v1")
        self.diagnostics: asyncio.Queue[Any] = asyncio.Queue()

        @self.client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def published(params: Any) -> None:
            self.diagnostics.put_nowait(params)

    async def start(self) -> None:
        await self.client.start_io(
            sys.executable, "-c", "from agentscript.cli import main; main()", "lsp"
        )
        self.initialized = await self.client.initialize_async(
            types.InitializeParams(capabilities=types.ClientCapabilities(), process_id=None)
        )
        self.client.initialized(types.InitializedParams())

    async def stop(self) -> None:
        await self.client.shutdown_async(None)
        self.client.exit(None)
        await self.client.stop()

    def open(self, text: str, uri: str = URI) -> None:
        self.client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(
                    uri=uri, language_id="agentscript", version=1, text=text
                )
            )
        )

    def change(self, text: str, version: int, uri: str = URI) -> None:
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
            )
        )

    def edit(self, start: Any, end: Any, text: str, version: int, uri: str = URI) -> None:
        """An incremental change: ``text`` replaces the range from ``start`` to ``end``."""
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[
                    types.TextDocumentContentChangePartial(range=types.Range(start, end), text=text)
                ],
            )
        )

    async def next_diagnostics(self) -> Any:
        return await asyncio.wait_for(self.diagnostics.get(), timeout=30)


def position_of(text: str, needle: str, offset: int = 1) -> Any:
    for number, line in enumerate(text.splitlines()):
        column = line.find(needle)
        if column >= 0:
            return types.Position(number, column + offset)
    raise AssertionError(needle)


def doc() -> Any:
    return types.TextDocumentIdentifier(uri=URI)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_lsp_open_change_and_diagnostics() -> None:
    async def scenario() -> None:
        session = Session()
        await session.start()
        try:
            text = SECURITY_GATE.read_text()
            session.open(text)
            first = await session.next_diagnostics()
            assert list(first.diagnostics) == []  # the example is clean, lints included
            linted = text.replace("then use {!@actions.verify}", "then use @variables.email")
            session.change(linted, 2)
            warned = await session.next_diagnostics()
            assert [d.code for d in warned.diagnostics] == ["bare-reference-in-prose"]
            broken = text.replace(
                'description: "Account changes behind identity verification"', "description: ["
            )
            session.change(broken, 3)
            second = await session.next_diagnostics()
            assert any(d.severity == types.DiagnosticSeverity.Error for d in second.diagnostics)
        finally:
            await session.stop()

    run(scenario())


def test_lsp_hover_definition_references_completion_formatting_rename() -> None:
    async def scenario() -> None:
        session = Session()
        await session.start()
        try:
            text = SECURITY_GATE.read_text()
            session.open(text)
            await session.next_diagnostics()
            use = position_of(text, "@variables.is_verified == False", len("@variables.") + 1)

            hover = await session.client.text_document_hover_async(
                types.HoverParams(text_document=doc(), position=use)
            )
            assert "mutable boolean" in hover.contents.value
            assert "identity was verified" in hover.contents.value

            node = position_of(text, "subagent account", len("subagent ") + 1)
            node_hover = await session.client.text_document_hover_async(
                types.HoverParams(text_document=doc(), position=node)
            )
            assert "Prompt cases:" in node_hover.contents.value
            assert "`is_verified == True`" in node_hover.contents.value

            found = await session.client.text_document_definition_async(
                types.DefinitionParams(text_document=doc(), position=use)
            )
            declared = position_of(text, "is_verified: mutable boolean", 0)
            assert found.range.start.line == declared.line

            refs = await session.client.text_document_references_async(
                types.ReferenceParams(
                    text_document=doc(),
                    position=use,
                    context=types.ReferenceContext(include_declaration=True),
                )
            )
            assert len(refs) == 1 + text.count("@variables.is_verified")

            line = text.splitlines()[use.line]
            at = types.Position(use.line, line.index("@variables.") + len("@variables."))
            items = await session.client.text_document_completion_async(
                types.CompletionParams(text_document=doc(), position=at)
            )
            assert {i.label for i in items.items} == {"is_verified", "email"}

            edits = await session.client.text_document_formatting_async(
                types.DocumentFormattingParams(
                    text_document=doc(),
                    options=types.FormattingOptions(tab_size=4, insert_spaces=True),
                )
            )
            assert not edits  # the example is already in canonical form
            messy_uri = URI.replace("security_gate.agent", "messy.agent")
            session.open(
                text.replace(
                    'developer_name: "Security_Gate"', 'developer_name:    "Security_Gate"'
                ),
                messy_uri,
            )
            await session.next_diagnostics()
            (edit,) = await session.client.text_document_formatting_async(
                types.DocumentFormattingParams(
                    text_document=types.TextDocumentIdentifier(uri=messy_uri),
                    options=types.FormattingOptions(tab_size=4, insert_spaces=True),
                )
            )
            assert edit.new_text == text

            renamed = await session.client.text_document_rename_async(
                types.RenameParams(text_document=doc(), position=use, new_name="verified_ok")
            )
            changes = renamed.changes[URI]
            assert len(changes) == 1 + text.count("@variables.is_verified")
            assert all(c.new_text == "verified_ok" for c in changes)

            symbols = await session.client.text_document_document_symbol_async(
                types.DocumentSymbolParams(text_document=doc())
            )
            names = {s.name for s in symbols}
            assert {"is_verified", "email", "router", "account"} <= names
        finally:
            await session.stop()

    run(scenario())


def position_at(text: str, offset: int) -> Any:
    line = text.count("\n", 0, offset)
    return types.Position(line, offset - (text.rfind("\n", 0, offset) + 1))


def expected(text: str) -> list[tuple[int, int, int, int, str]]:
    """What a full parse, check and lint of ``text`` reports, as the protocol shows it."""
    from agentscript.authoring.index import build_index, document_diagnostics

    found = document_diagnostics(build_index(text, str(SECURITY_GATE)))
    return [
        (d.span.line - 1, d.span.column - 1, d.span.end_line - 1, d.span.end_column - 1, d.code)
        for d in found
    ]


def published(params: Any) -> list[tuple[int, int, int, int, str]]:
    return [
        (r.start.line, r.start.character, r.end.line, r.end.character, str(d.code))
        for d in params.diagnostics
        for r in [d.range]
    ]


def test_lsp_incremental_edits_publish_what_a_full_check_finds() -> None:
    # A sequence of ranged edits, as an editor sends them while the author types: each
    # published set must be what parsing and checking the whole text finds, at the same
    # positions, appearing and clearing as the text goes from broken to clean.
    async def scenario() -> None:
        session = Session()
        await session.start()
        sync = session.initialized.capabilities.text_document_sync
        kind = getattr(sync, "change", sync)
        assert kind == types.TextDocumentSyncKind.Incremental
        try:
            text = SECURITY_GATE.read_text()
            session.open(text)
            assert published(await session.next_diagnostics()) == []
            version = 1

            async def change(at: int, remove: int, new: str) -> list[Any]:
                nonlocal text, version
                start = position_at(text, at)
                end = position_at(text, at + remove)
                text = text[:at] + new + text[at + remove :]
                version += 1
                session.edit(start, end, new, version)
                found = published(await session.next_diagnostics())
                assert found == expected(text), (at, remove, new)
                return found

            async def replace(old: str, new: str) -> list[Any]:
                return await change(text.index(old), len(old), new)

            # Backspacing over the end of a condition, then typing it again, a key at a time.
            typed = " False:"
            end = text.index("== False:") + len("== False:")
            for count in range(len(typed)):
                found = await change(end - count - 1, 1, "")
            assert any(d[4] == "syntax-error" for d in found)
            for count, key in enumerate(typed):
                found = await change(end - len(typed) + count, 0, key)
            assert found == []

            # An error in a subagent, then lines inserted above it: it moves down with them.
            errors = await replace(
                'description: "Account changes behind identity verification"', "description: ["
            )
            line = next(d[0] for d in errors if d[4] in ("syntax-error", "unterminated-list"))
            moved = await replace("config:\n", "# two new lines\n\nconfig:\n")
            assert any(d[0] == line + 2 for d in moved)
            # Fixing it clears every diagnostic.
            assert (
                await replace(
                    "description: [", 'description: "Account changes behind identity verification"'
                )
                == []
            )

            # A lint appears and clears with the text that causes it.
            warned = await replace("then use {!@actions.verify}", "then use @variables.email")
            assert [d[4] for d in warned] == ["bare-reference-in-prose"]
            assert await replace("then use @variables.email", "then use {!@actions.verify}") == []

            # Joining two top-level blocks and splitting them again.
            joined = await replace("\n\nvariables:", " variables:")
            assert joined  # the second head is now text after the first block's value
            assert await replace(" variables:", "\n\nvariables:") == []
        finally:
            await session.stop()

    run(scenario())
