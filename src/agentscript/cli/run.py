"""``agentscript run AGENT --conversation FILE``: play a conversation file through an agent
with the scripted model, print the transcript (or one JSON object), exit ``FAILED`` when the
script, an expectation or a turn failed."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from agentscript.cli.common import (
    enable_otel,
    exit_with,
    interruptible,
    load_agent_or_exit,
    trace_dir_or_exit,
    writing_stdout,
)
from agentscript.cli.options import (
    dialect_option,
    otel_option,
    stub_missing_tools_option,
    trace_dir_option,
)
from agentscript.commands import ExitCode


@click.command()
@click.argument("agent")
@click.option(
    "--conversation", "conversation_path", required=True, help="Conversation file (YAML)."
)
@trace_dir_option
@click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON object instead of the transcript."
)
@stub_missing_tools_option
@dialect_option
@otel_option
@interruptible()
def run(
    agent: str,
    conversation_path: str,
    trace_dir: str | None,
    as_json: bool,
    stub_missing_tools: bool,
    dialect: str | None,
    otel: str | None,
) -> None:
    """Play a conversation file through AGENT with the scripted model."""
    from agentscript.conversation import ConversationError, load_conversation
    from agentscript.playback import play

    try:
        conversation = load_conversation(conversation_path)
    except ConversationError as exc:
        click.echo(str(exc), err=True)
        exit_with(ExitCode.USAGE)
    # An empty file, or turns: []: a regression file that checks nothing.
    if not conversation.turns:
        click.echo(f"warning: {conversation_path}: no turns to play", err=True)
    loaded = load_agent_or_exit(agent, dialect, stub_missing_tools=stub_missing_tools)
    enable_otel(loaded, otel)
    traces = trace_dir_or_exit(trace_dir)
    try:
        playback = play(loaded, conversation, trace_dir=traces)
    except ValueError as exc:  # e.g. unknown or ill-typed initial variables
        click.echo(f"{conversation_path}: {exc}", err=True)
        exit_with(ExitCode.USAGE)
    with writing_stdout():
        if as_json:
            _warn_unwritten_traces(playback)
            click.echo(json.dumps(playback.to_json(), indent=2, default=repr))
        else:
            print_transcript(playback)
    exit_with(ExitCode.FAILED if playback.failed else ExitCode.OK)


def _warn_unwritten_traces(playback: Any) -> None:
    """On stderr (stdout holds the JSON): why a turn's trace file was not written."""
    from agentscript.chat import trace_problem

    for turn in playback.turns:
        problem = trace_problem(turn.reply.trace)
        if problem is not None:
            click.echo(f"warning: {problem}", err=True)


def print_transcript(playback: Any) -> None:
    """The played conversation for people: each turn's user text, path, actions, changes,
    messages and failures (details dimmed on a terminal)."""
    from agentscript.chat import trace_problem
    from agentscript.playback import describe_changes, history_trimmed_note, refused_calls

    color = sys.stdout.isatty()

    def dim(text: str) -> str:
        return click.style(text, dim=True) if color else text

    def red(text: str) -> str:
        return click.style(text, fg="red") if color else text

    if playback.welcome:
        click.echo(f"agent: {playback.welcome}")
    for index, turn in enumerate(playback.turns, start=1):
        reply = turn.reply
        click.echo(dim(f"--- turn {index} " + "-" * 40))
        click.echo(f"user:  {turn.user}")
        if reply.path:
            click.echo(dim(f"  path:      {' -> '.join(reply.path)}"))
        if reply.delegated:
            click.echo(dim(f"  delegated: {', '.join(reply.delegated)}"))
        if reply.actions:
            click.echo(dim(f"  actions:   {', '.join(reply.actions)}"))
        for refusal in refused_calls(reply.trace):
            click.echo(dim(f"  refused:   {refusal['name']}: {refusal['reason']}"))
        for change in describe_changes(turn.before, reply.variables):
            click.echo(dim(f"  set        {change}"))
        for shown in reply.displayable:
            click.echo(
                dim(f"  shown:     {shown['action']}: {json.dumps(shown['outputs'], default=repr)}")
            )
        if reply.trace_file:
            click.echo(dim(f"  trace:     {reply.trace_file}"))
        problem = trace_problem(reply.trace)
        if problem is not None:
            click.echo(red(f"  warning:   {problem}"))
        if turn.unused_moves:
            click.echo(dim(f"  unused:    {len(turn.unused_moves)} scripted move(s) not needed"))
        if reply.history_trimmed:
            click.echo(dim(f"  history:   {history_trimmed_note(reply.history_trimmed)}"))
        for message in reply.messages:
            click.echo(f"agent: {message}")
        if reply.escalated:
            click.echo("  [escalated to a human agent]")
        if reply.ended:
            click.echo("  [session ended]")
        for failure in turn.failed_expectations:
            click.echo(red(f"  expect failed: {failure}"))
        if reply.error:
            click.echo(red(f"  error: {reply.error}"))


__all__ = ["print_transcript", "run"]
