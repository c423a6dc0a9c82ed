"""What the authoring tools cost, against ``validate`` itself, measured in one run.

* ``validate`` (parse + check) of every conformance file that checks without errors: the
  reference;
* the lints on the same files (what ``validate`` adds by default): the issue's target is under
  25 % of the reference;
* ``prompts`` (the symbolic walk of every node) and ``graph`` on the same files;
* a lint pass over the largest fixture (~100 KB), as an editor would after a change;
* what ``agentscript lsp`` does after a change of that file, until the diagnostics are ready
  to send: the full path (parse, check, index, lints: what it does when a file is opened) and
  the incremental path, the user's path while typing (one character typed in the middle of the
  file: re-parse the top-level block it touched, check, index, lints), with its parts; and what
  the protocol adds around it (pygls applying the ranged change to its copy of the text, the
  diagnostics turned into protocol objects and JSON), when the ``lsp`` extra is installed.

Usage: ``python bench/authoring.py [--repeat N] [--server-only]``. Prints a markdown table. Nothing here asserts
a timing.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

from agentscript.authoring.graph import agent_graph
from agentscript.authoring.index import (
    DocumentIndex,
    LiveDocument,
    _link_references,
    build_index,
    document_diagnostics,
)
from agentscript.authoring.lints import lint_agent
from agentscript.authoring.prompts import node_prompts
from agentscript.check import check
from agentscript.syntax import parse
from agentscript.syntax.incremental import reparse
from common import SHARED, best_of, best_of_each, machine

CORPUS = SHARED / "conformance" / "agentscript"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--server-only", action="store_true", help="only the language server's rows"
    )
    args = parser.parse_args()
    if args.server_only:
        largest_file = max(CORPUS.rglob("*.agent"), key=lambda p: p.stat().st_size)
        source = largest_file.read_text(encoding="utf-8-sig").replace("\r\n", "\n")
        print(machine())
        server(source, str(largest_file), args.repeat)
        return
    texts: list[tuple[str, str]] = []
    for path in sorted(CORPUS.rglob("*.agent")):
        text = path.read_text(encoding="utf-8-sig").replace("\r\n", "\n")
        doc = parse(text, str(path))
        result = check(doc)
        if not any(d.is_error for d in [*doc.diagnostics, *result.diagnostics]):
            texts.append((str(path), text))
    outlines = [(check(parse(t, p)).outline, t) for p, t in texts]

    def validate_all() -> None:
        for path, text in texts:
            check(parse(text, path))

    def lint_all() -> None:
        for outline, text in outlines:
            lint_agent(outline, text)

    def prompts_all() -> None:
        for outline, _text in outlines:
            node_prompts(outline)

    def graph_all() -> None:
        for outline, _text in outlines:
            agent_graph(outline)

    largest_path, largest = max(texts, key=lambda item: len(item[1]))
    largest_outline = check(parse(largest, largest_path)).outline

    def lint_largest() -> None:
        check(parse(largest, largest_path))
        lint_agent(largest_outline, largest)

    reference = best_of(validate_all, repeat=args.repeat, number=1)
    rows = [
        ("validate (parse + check), reference", reference),
        ("lints", best_of(lint_all, repeat=args.repeat, number=1)),
        ("prompts (every node)", best_of(prompts_all, repeat=args.repeat, number=1)),
        ("graph", best_of(graph_all, repeat=args.repeat, number=1)),
    ]
    print(f"{len(texts)} files without errors; {machine()}\n")
    print("| pass | ms for the corpus | ratio to validate |")
    print("|---|---:|---:|")
    for name, seconds in rows:
        print(f"| {name} | {seconds * 1000:.0f} | {seconds / reference:.2f} |")
    one = best_of(lint_largest, repeat=args.repeat, number=3)
    print(
        f"\nlargest file ({Path(largest_path).name}, {len(largest) // 1024} KB): "
        f"parse + check + lints {one * 1000:.1f} ms"
    )

    server(largest, largest_path, args.repeat)


def server(text: str, path: str, repeat: int) -> None:
    """The language server's work after a change of ``text``, full and incremental."""
    # The end of the first instruction line (`| ...`) after the middle of the file: prose
    # typed in a subagent's instructions, the file staying free of errors so the lints run.
    middle = text.index("\n", text.index("| ", len(text) // 2))
    typed = text[:middle] + "x" + text[middle:]
    entered = text[:middle] + "\n" + " " * 12 + text[middle:]
    live = LiveDocument(path)
    live.update(text)
    previous = live.state
    assert previous is not None
    document = parse(typed, path)
    outline = check(document).outline
    index = build_index(typed, path, document=document)

    def full() -> None:
        # The server before incremental parsing, and now on opening a file.
        document_diagnostics(build_index(typed, path))

    def incremental(new_text: str) -> Callable[[], None]:
        def run() -> None:
            live.state = previous  # each run starts from the parse before the change
            document_diagnostics(live.update(new_text))

        return run

    parts = [
        ("parse (full)", lambda: parse(typed, path)),
        ("re-parse (the one block typed in)", lambda: reparse(previous, typed)),
        ("check", lambda: check(document)),
        ("index (references, symbols; without parse and check)", lambda: _link_only(index)),
        ("lints", lambda: lint_agent(outline, typed)),
    ]
    reparsed = reparse(previous, typed)
    timed: dict[str, Callable[[], object]] = {
        "full: parse + check + index + lints": full,
        "incremental, a character typed mid-file": incremental(typed),
        "incremental, a new line mid-file (blocks below move)": incremental(entered),
    }
    timed.update((f"  part: {name}", fn) for name, fn in parts)
    timed.update(_protocol(text, path, typed, middle))
    times = best_of_each(timed, repeat=repeat)
    full_time = times["full: parse + check + index + lints"]
    print(
        f"\nlanguage server, diagnostics after a change of {Path(path).name} "
        f"({len(text) // 1024} KB, {len(previous.items)} top-level blocks, "
        f"{reparsed.reused} reused after the typed character), best of {repeat} rounds:\n"
    )
    print("| path | ms | ratio to full |")
    print("|---|---:|---:|")
    for name, seconds in times.items():
        print(f"| {name} | {seconds * 1000:.1f} | {seconds / full_time:.2f} |")


def _link_only(index: DocumentIndex) -> None:
    for symbol in index.symbols:
        symbol.references.clear()
    _link_references(index.text.splitlines(), index.symbols)


def _protocol(text: str, path: str, typed: str, middle: int) -> dict[str, Callable[[], object]]:
    """What pygls and lsprotocol add: applying the ranged change, building and encoding the
    published diagnostics. Empty without the ``lsp`` extra."""
    try:
        from lsprotocol import types
        from lsprotocol.converters import get_converter
        from pygls.workspace import TextDocument

        from agentscript.authoring.lsp import _diagnostic
    except ImportError:
        return {}
    line = text.count("\n", 0, middle)
    column = middle - (text.rfind("\n", 0, middle) + 1)
    at = types.Position(line, column)
    change = types.TextDocumentContentChangePartial(range=types.Range(at, at), text="x")

    def apply() -> None:
        document = TextDocument("file:///bench.agent", text, 1)
        document.apply_change(change)
        assert document.source == typed

    found = document_diagnostics(build_index(typed, path))
    converter = get_converter()

    def publish() -> None:
        params = types.PublishDiagnosticsParams(
            uri="file:///bench.agent", diagnostics=[_diagnostic(d) for d in found]
        )
        json.dumps(converter.unstructure(params))

    return {
        "  protocol: pygls applies the ranged change": apply,
        f"  protocol: {len(found)} diagnostics to JSON": publish,
    }


if __name__ == "__main__":
    main()
