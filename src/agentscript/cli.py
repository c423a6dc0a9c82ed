"""The ``agentscript`` command: validate, fmt, run (and chat, when a model is configured).

Exit codes: 0 success, 1 the check or the run failed (errors found, script disagreed with the
engine, refused turn), 2 bad usage or unreadable input. No command prints a Python traceback:
an internal failure is reported as an ``internal-error`` diagnostic naming the file.
"""

from __future__ import annotations

import difflib
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import click

from agentscript.diagnostics import AgentScriptError, Diagnostic, Span, error

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
# Diagnostics that mean the input could not be read at all (exit 2, like a usage error).
UNREADABLE_CODES = frozenset({"file-not-found", "unreadable-file"})


# ---------------------------------------------------------------------- file discovery


def agent_files(paths: Sequence[str]) -> Iterator[Path]:
    """Each path as given; folders expand to Mantle projects and every ``.agent`` below them."""
    from agentscript.mantle import is_mantle_project

    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            if is_mantle_project(path):
                yield path
                continue
            found = sorted(p for p in path.rglob("*.agent") if p.is_file())
            projects = sorted(
                p.parent.parent for p in path.rglob("skill.md") if p.parent.parent.name == "skills"
            )
            yield from found
            yield from dict.fromkeys(p.parent for p in projects if is_mantle_project(p.parent))
        else:
            yield path


def internal_error(path: Path, exc: BaseException) -> Diagnostic:
    diag = error(
        "internal-error",
        f"agentscript failed on this file ({type(exc).__name__}: {exc}); please report it",
        Span(1, 1, 1, 1),
    )
    diag.file = str(path)
    return diag


def validate_path(path: Path, dialect: str | None) -> list[Diagnostic]:
    from agentscript.check import check
    from agentscript.loader import parse_file
    from agentscript.mantle import load_project

    try:
        if path.is_dir():
            _project, diagnostics = load_project(path)
            return diagnostics
        if not path.exists():
            diag = error("file-not-found", "no such file", Span(1, 1, 1, 1))
            diag.file = str(path)
            return [diag]
        doc, diagnostics = parse_file(path)
        if doc is None:
            return diagnostics
        return sorted(
            diagnostics + check(doc, dialect=dialect).diagnostics,
            key=lambda d: (d.span.line, d.span.column),
        )
    except Exception as exc:  # a bug of ours must not hide the rest of the report
        return [internal_error(path, exc)]


# ---------------------------------------------------------------------- output


def render_diagnostic(diag: Diagnostic, lines: list[str] | None, color: bool) -> str:
    head = diag.format()
    if color:
        colour = {"error": "red", "warning": "yellow", "info": "cyan"}[diag.severity.value]
        head = click.style(head, fg=colour, bold=diag.is_error)
    if not lines or not (1 <= diag.span.line <= len(lines)):
        return head
    source = lines[diag.span.line - 1].expandtabs(4)
    start = max(diag.span.column - 1, 0)
    width = (
        diag.span.end_column - diag.span.column
        if diag.span.end_line == diag.span.line
        else len(source) - start
    )
    caret = " " * start + "^" * max(1, min(width, max(1, len(source) - start)))
    if color:
        caret = click.style(caret, fg="green")
    return f"{head}\n    {source}\n    {caret}"


def source_lines(path: Path) -> list[str] | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if b"\x00" in data[:8192]:
        return None  # a binary file: its bytes are not echoed under the diagnostic
    return data.decode("utf-8-sig", errors="replace").splitlines()


# Options shared by `run` and `chat`.
trace_dir_option = click.option(
    "--trace-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Write one trace file per turn.",
)
stub_missing_tools_option = click.option(
    "--stub-missing-tools",
    is_flag=True,
    help="Mantle projects: run tools whose Python code is missing as stubs (results from the conversation file).",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="agentscript")
def main() -> None:
    """Parse, check, format and run Agent Script agents and Mantle skill projects."""


@main.command()
@click.argument("paths", nargs=-1, required=True)
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@click.option(
    "--dialect",
    type=click.Choice(["agentforce", "agentscript"]),
    default=None,
    help="Dialect to check against (default: the file's '# @dialect:' header, else agentforce).",
)
def validate(paths: tuple[str, ...], fmt: str, dialect: str | None) -> None:
    """Check .agent files, folders of them, or Mantle project folders."""
    results: list[tuple[Path, list[Diagnostic]]] = []
    for path in agent_files(paths):
        results.append((path, validate_path(path, dialect)))
    if not results:
        click.echo("no .agent files or Mantle projects found", err=True)
        sys.exit(EXIT_USAGE)
    all_diags = [d for _, diags in results for d in diags]
    if fmt == "json":
        click.echo(json.dumps([d.to_json() for d in all_diags], indent=2))
    else:
        color = sys.stdout.isatty()
        for path, diags in results:
            lines = source_lines(path) if path.is_file() else None
            for diag in diags:
                file_lines = (
                    lines if diag.file in (None, str(path)) else source_lines(Path(diag.file))
                )
                click.echo(render_diagnostic(diag, file_lines, color))
        errors = sum(d.is_error for d in all_diags)
        warnings = sum(d.severity.value == "warning" for d in all_diags)
        summary = f"{len(results)} file(s) checked: {errors} error(s), {warnings} warning(s)"
        click.echo(summary, err=True)
    if any(d.code in UNREADABLE_CODES for d in all_diags):
        sys.exit(EXIT_USAGE)  # a path that cannot be read is bad input, not a finding
    sys.exit(EXIT_FAILED if any(d.is_error for d in all_diags) else EXIT_OK)


@main.command()
@click.argument("paths", nargs=-1, required=True)
@click.option(
    "--check", "check_only", is_flag=True, help="Do not write; exit 1 if a file would change."
)
@click.option("--diff", "show_diff", is_flag=True, help="Print a unified diff instead of writing.")
def fmt(paths: tuple[str, ...], check_only: bool, show_diff: bool) -> None:
    """Format .agent files canonically (idempotent; the tree is preserved)."""
    from agentscript.loader import read_source
    from agentscript.syntax.formatter import format_text

    changed = 0
    failed = False
    files = [p for p in agent_files(paths) if not p.is_dir()]
    if not files:
        click.echo("no .agent files found", err=True)
        sys.exit(EXIT_USAGE)
    for path in files:
        text, problem = read_source(path)
        if text is None:
            assert problem is not None
            click.echo(problem.format(), err=True)
            failed = True
            continue
        try:
            formatted, diagnostics = format_text(text, str(path))
        except Exception as exc:
            click.echo(internal_error(path, exc).format(), err=True)
            failed = True
            continue
        errors = [d for d in diagnostics if d.is_error]
        if errors:
            for diag in errors:
                click.echo(diag.format(), err=True)
            click.echo(f"{path}: not formatted (fix the errors first)", err=True)
            failed = True
            continue
        if formatted == text.replace("\r\n", "\n"):
            continue
        changed += 1
        if show_diff:
            click.echo(
                "".join(
                    difflib.unified_diff(
                        text.replace("\r\n", "\n").splitlines(keepends=True),
                        formatted.splitlines(keepends=True),
                        f"{path} (original)",
                        f"{path} (formatted)",
                    )
                ),
                nl=False,
            )
        elif check_only:
            click.echo(f"would reformat {path}")
        else:
            # Line endings are not a formatting matter: a CRLF file stays CRLF.
            newline = "\r\n" if "\r\n" in text else None
            path.write_text(formatted, encoding="utf-8", newline=newline)
            click.echo(f"reformatted {path}")
    if failed:
        sys.exit(EXIT_USAGE if changed == 0 else EXIT_FAILED)
    if (check_only or show_diff) and changed:
        sys.exit(EXIT_FAILED)


# ---------------------------------------------------------------------- run


def load_agent_or_exit(
    path: str, dialect: str | None = None, *, stub_missing_tools: bool = False
) -> Any:
    from agentscript.loader import load

    try:
        return load(path, dialect=dialect, stub_missing_tools=stub_missing_tools)
    except AgentScriptError as exc:
        lines = source_lines(Path(path))
        for diag in exc.diagnostics:
            if diag.is_error:
                click.echo(render_diagnostic(diag, lines, sys.stderr.isatty()), err=True)
        click.echo(f"{path}: cannot run an agent with errors", err=True)
        if any(d.code == "mantle-unresolved-tool" for d in exc.diagnostics):
            click.echo(
                "hint: pass --stub-missing-tools to run the missing tools as stubs "
                "(give their results under 'actions:' in the conversation file)",
                err=True,
            )
        sys.exit(EXIT_USAGE)


@main.command()
@click.argument("agent")
@click.option(
    "--conversation", "conversation_path", required=True, help="Conversation file (YAML)."
)
@trace_dir_option
@click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON object instead of the transcript."
)
@stub_missing_tools_option
def run(
    agent: str,
    conversation_path: str,
    trace_dir: str | None,
    as_json: bool,
    stub_missing_tools: bool,
) -> None:
    """Play a conversation file through AGENT with the scripted model."""
    from agentscript.conversation import ConversationError, load_conversation
    from agentscript.playback import play

    try:
        conversation = load_conversation(conversation_path)
    except ConversationError as exc:
        click.echo(str(exc), err=True)
        sys.exit(EXIT_USAGE)
    loaded = load_agent_or_exit(agent, stub_missing_tools=stub_missing_tools)
    try:
        playback = play(loaded, conversation, trace_dir=Path(trace_dir) if trace_dir else None)
    except ValueError as exc:  # e.g. unknown or ill-typed initial variables
        click.echo(f"{conversation_path}: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    if as_json:
        click.echo(json.dumps(playback.to_json(), indent=2, default=repr))
    else:
        print_transcript(playback)
    sys.exit(EXIT_FAILED if playback.failed else EXIT_OK)


def print_transcript(playback: Any) -> None:
    from agentscript.playback import describe_changes

    color = sys.stdout.isatty()

    def dim(text: str) -> str:
        return click.style(text, dim=True) if color else text

    if playback.welcome:
        click.echo(f"agent: {playback.welcome}")
    for index, turn in enumerate(playback.turns, start=1):
        reply = turn.reply
        click.echo(dim(f"--- turn {index} " + "-" * 40))
        click.echo(f"user:  {turn.user}")
        if reply.path:
            click.echo(dim(f"  path:      {' -> '.join(reply.path)}"))
        if reply.actions:
            click.echo(dim(f"  actions:   {', '.join(reply.actions)}"))
        for change in describe_changes(turn.before, reply.variables):
            click.echo(dim(f"  set        {change}"))
        for shown in reply.displayable:
            click.echo(
                dim(f"  shown:     {shown['action']}: {json.dumps(shown['outputs'], default=repr)}")
            )
        if reply.trace_file:
            click.echo(dim(f"  trace:     {reply.trace_file}"))
        if turn.unused_moves:
            click.echo(dim(f"  unused:    {len(turn.unused_moves)} scripted move(s) not needed"))
        for message in reply.messages:
            click.echo(f"agent: {message}")
        if reply.escalated:
            click.echo("  [escalated to a human agent]")
        if reply.ended:
            click.echo("  [session ended]")
        for failure in turn.failed_expectations:
            line = f"  expect failed: {failure}"
            click.echo(click.style(line, fg="red") if color else line)
        if reply.error:
            click.echo(
                click.style(f"  error: {reply.error}", fg="red")
                if color
                else f"  error: {reply.error}"
            )


# ---------------------------------------------------------------------- chat


@main.command()
@click.argument("agent")
@click.option("--model", "model_spec", default=None, help="Model spec, e.g. openai:gpt-4o-mini.")
@click.option("--base-url", default=None, help="Server URL (Ollama, vLLM, a gateway, ...).")
@click.option(
    "--var", "variables", multiple=True, metavar="NAME=VALUE", help="Initial variable (YAML value)."
)
@trace_dir_option
@click.option(
    "--show",
    multiple=True,
    type=click.Choice(["prompt", "tools", "trace"]),
    help="After each reply, show the resolved prompt, the tools offered, or the turn's steps.",
)
@click.option(
    "--record",
    type=click.Path(dir_okay=False),
    default=None,
    help="Save the chat as a conversation file that `agentscript run` replays.",
)
@click.option("--no-stream", is_flag=True, help="Print each reply whole instead of streaming it.")
@click.option(
    "--stubs",
    type=click.Path(dir_okay=False),
    default=None,
    help="A conversation file whose 'actions:' answer actions that have no local backend "
    "(flow://, apex://, ...) and whose 'variables:' are initial values.",
)
@stub_missing_tools_option
def chat(
    agent: str,
    model_spec: str | None,
    base_url: str | None,
    variables: tuple[str, ...],
    trace_dir: str | None,
    show: tuple[str, ...],
    record: str | None,
    no_stream: bool,
    stubs: str | None,
    stub_missing_tools: bool,
) -> None:
    """Chat with AGENT using a real model (one message per line when stdin is not a terminal)."""
    from agentscript.chat import run_chat

    loaded = load_agent_or_exit(agent, stub_missing_tools=stub_missing_tools)
    sys.exit(
        run_chat(
            loaded,
            model_spec=model_spec,
            base_url=base_url,
            variables=variables,
            show=show,
            trace_dir=trace_dir,
            record=record,
            stream=not no_stream,
            stubs=stubs,
        )
    )


# ---------------------------------------------------------------------- serve


@main.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, type=int, help="Port to listen on.")
@click.option(
    "--store",
    default=None,
    help="sqlite:///PATH (default .agentscript/sessions.db), postgresql://... or memory://",
)
@click.option("--workers", default=1, show_default=True, type=int, help="Worker processes.")
@click.option("--model", "model", default=None, help="Model spec, e.g. openai:gpt-4o-mini.")
@click.option("--base-url", default=None, help="Server URL (Ollama, vLLM, a gateway, ...).")
@click.option(
    "--session-ttl", default=None, help="Expire sessions idle this long (e.g. 3600, 12h)."
)
@click.option(
    "--lock-wait",
    default=30.0,
    show_default=True,
    type=float,
    help="Seconds a message waits for another turn of its session before 409.",
)
@click.option(
    "--rate-limit",
    default=20.0,
    show_default=True,
    type=float,
    help="Requests per second per API key (0: no limit).",
)
@click.option("--cors-origin", "cors_origins", multiple=True, help="Allow this browser origin.")
@click.option("--playground", is_flag=True, help="Also serve the playground page at /playground/.")
def serve(paths: tuple[str, ...], **options: Any) -> None:
    """Serve agents over HTTP with durable sessions (needs agentscript[serve])."""
    from agentscript.server.command import serve_cli

    options["cors_origins"] = list(options["cors_origins"])
    sys.exit(serve_cli(paths, echo=lambda line: click.echo(line, err=True), **options))


# ---------------------------------------------------------------------- playground


@main.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--port", default=8000, show_default=True, type=int, help="Port on 127.0.0.1.")
@click.option("--model", "model", default=None, help="Model spec (default: the stand-in model).")
@click.option("--base-url", default=None, help="Server URL (Ollama, vLLM, a gateway, ...).")
@click.option(
    "--stubs",
    type=click.Path(dir_okay=False),
    default=None,
    help="A conversation file whose 'actions:' answer flow://, apex://, ... actions.",
)
@click.option("--var", "variables", multiple=True, help="Initial variable NAME=VALUE.")
def playground(paths: tuple[str, ...], **options: Any) -> None:
    """Chat with agents in the browser and watch every decision (needs agentscript[serve])."""
    from agentscript.server.playground.command import playground_cli

    sys.exit(playground_cli(paths, echo=lambda line: click.echo(line, err=True), **options))


if __name__ == "__main__":  # pragma: no cover
    main()
