"""Parser (and checker) speed on the conformance fixtures, against CPython's ``ast.parse``.

Measured in one run, best of N, with the files already in memory:

* ``parse`` of the 270 fixtures (~3.6 MB), one call per file;
* ``parse`` + ``check`` of the same files, when ``agentscript.check.check`` is importable;
* ``ast.parse`` of standard-library Python sources of the same total size, one call per file:
  the reference a pure-Python parser is read against (a C parser, so ~1.5x is the goal);
* parse (+ check) of the largest fixture (~100 KB): what an editor or ``validate`` of one big
  file costs.

Usage: ``python bench/parse.py [--repeat N] [--profile]``. Prints a markdown table. Nothing here
asserts a timing.
"""

from __future__ import annotations

import argparse
import ast
import cProfile
import io
import pstats
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path

from agentscript.syntax import Document, parse
from common import REPO, best_of, machine

FIXTURES = REPO.parent / "shared" / "conformance" / "agentscript" / "fixtures"

Check = Callable[[Document], object]


def load_checker() -> Check | None:
    try:
        from agentscript.check import check
    except ImportError:
        return None
    return check


def agent_sources() -> list[tuple[str, str]]:
    return [
        (str(path), path.read_text(encoding="utf-8")) for path in sorted(FIXTURES.glob("*.agent"))
    ]


def python_sources(size: int) -> list[str]:
    """Standard-library modules (each valid alone) until their total reaches ``size``."""
    chosen: list[str] = []
    total = 0
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(stdlib.glob("*.py")) + sorted(stdlib.glob("*/*.py")):
        try:
            text = path.read_text(encoding="utf-8")
            ast.parse(text)
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
            continue
        chosen.append(text)
        total += len(text)
        if total >= size:
            break
    return chosen


def parse_all(sources: list[tuple[str, str]]) -> None:
    for path, text in sources:
        parse(text, path)


def parse_and_check_all(sources: list[tuple[str, str]], check: Check) -> None:
    for path, text in sources:
        check(parse(text, path))


def ast_all(sources: list[str]) -> None:
    for text in sources:
        ast.parse(text)


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f} ms"


def main(argv: list[str] | None = None) -> int:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--repeat", type=int, default=5, help="runs per measurement (best kept)")
    options.add_argument("--profile", action="store_true", help="cProfile the fixture parse")
    args = options.parse_args(argv)

    sources = agent_sources()
    if not sources:
        print(f"no fixtures under {FIXTURES}", file=sys.stderr)
        return 1
    agent_size = sum(len(text) for _, text in sources)
    python = python_sources(agent_size)
    python_size = sum(len(text) for text in python)
    largest = max(sources, key=lambda source: len(source[1]))
    check = load_checker()
    repeat = args.repeat

    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(parse_all, sources)
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(25)
        print(out.getvalue())

    t_parse = best_of(lambda: parse_all(sources), repeat=repeat, number=1)
    t_ast = best_of(lambda: ast_all(python), repeat=repeat, number=1)
    t_one = best_of(lambda: parse(largest[1], largest[0]), repeat=repeat, number=5)
    rows = [
        (f"parse {len(sources)} fixtures", agent_size, t_parse, t_parse / t_ast),
        (f"ast.parse {len(python)} stdlib modules", python_size, t_ast, 1.0),
    ]
    one_rows = [(f"parse {Path(largest[0]).name}", len(largest[1]), t_one)]
    if check is not None:
        checker = check
        t_check = best_of(lambda: parse_and_check_all(sources, checker), repeat=repeat, number=1)
        rows.insert(
            1, (f"parse + check {len(sources)} fixtures", agent_size, t_check, t_check / t_ast)
        )
        t_one_check = best_of(
            lambda: checker(parse(largest[1], largest[0])), repeat=repeat, number=5
        )
        one_rows.append((f"parse + check {Path(largest[0]).name}", len(largest[1]), t_one_check))

    print(f"# Parser benchmark\n\n{machine()}, best of {repeat}\n")
    if check is None:
        print("`agentscript.check.check` is not importable: parse only.\n")
    print("| what | size | time | MB/s | x ast.parse |")
    print("|---|---:|---:|---:|---:|")
    for name, size, seconds, ratio in rows:
        print(
            f"| {name} | {size / 1e6:.2f} MB | {ms(seconds)} | {size / 1e6 / seconds:.1f} "
            f"| {ratio:.2f} |"
        )
    for name, size, seconds in one_rows:
        print(f"| {name} | {size / 1e3:.0f} KB | {ms(seconds)} | {size / 1e6 / seconds:.1f} | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
