"""What the authoring tools cost, against ``validate`` itself, measured in one run.

* ``validate`` (parse + check) of every conformance file that checks without errors: the
  reference;
* the lints on the same files (what ``validate`` adds by default): the issue's target is under
  25 % of the reference;
* ``prompts`` (the symbolic walk of every node) and ``graph`` on the same files;
* a lint pass over the largest fixture (~100 KB), as an editor would after a change.

Usage: ``python bench/authoring.py [--repeat N]``. Prints a markdown table. Nothing here asserts
a timing.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from agentscript.authoring.graph import agent_graph
from agentscript.authoring.index import build_index
from agentscript.authoring.lints import lint_agent
from agentscript.authoring.prompts import node_prompts
from agentscript.check import check
from agentscript.syntax import parse
from common import SHARED, best_of, machine

CORPUS = SHARED / "conformance" / "agentscript"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
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

    def server_change() -> None:
        # What `agentscript lsp` does after a change: index (parse + check) and lint.
        index = build_index(largest, largest_path)
        lint_agent(index.outline, index.text)

    change = best_of(server_change, repeat=args.repeat, number=3)
    print(f"language server, diagnostics after a change of that file: {change * 1000:.1f} ms")


if __name__ == "__main__":
    main()
