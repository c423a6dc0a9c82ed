"""``agentscript chat``: talk to an agent with a real model, in a terminal or from a script.

Interactive when stdin is a terminal (line editing and history through ``readline``, the
welcome message, ``/commands``); otherwise one user message per input line and each reply on
stdout, so a chat can be scripted. A turn that fails prints the agent's error text and the
chat goes on; nothing here prints a traceback.

Everything printed goes through :class:`Console`, which writes control, bidi and format
characters as escapes (``\\x1b``, ``\\u202e``; newlines and tabs kept,
:func:`agentscript.printable.printable_text`): replies, streamed tokens, confirmations, errors
and ``--show`` details hold what a model, an MCP server or an API wrote. Only the display is
escaped: traces, ``--record`` files and the session keep the text as it came.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import yaml

from agentscript.actions.registry import StubBook
from agentscript.commands import SHOW_CHOICES, ExitCode
from agentscript.conversation import ConversationError, load_conversation
from agentscript.engine.given import bounded
from agentscript.engine.session import AgentBase, Reply, Session
from agentscript.engine.speech import SEPARATOR
from agentscript.models.base import Model, ModelError, ModelRequest, ModelResponse, TextSink
from agentscript.models.config import (
    ModelConfig,
    ModelEntry,
    load_config,
    model_from_spec,
    resolve_model,
    resolve_spec,
)
from agentscript.models.recording import ConversationRecorder, RecordingModel
from agentscript.models.routing import RoutedModel
from agentscript.playback import describe_changes, history_trimmed_note
from agentscript.printable import printable_text
from agentscript.reading import load_yaml

COMMANDS = {
    "/vars": "show the session's variables",
    "/trace": "summarise the steps of the last turn",
    "/reset": "start a new session",
    "/quit": "leave the chat",
    "/help": "list these commands",
}
# An Agent Script variable (``order_ID``) or a Mantle memory entry by qualified name
# (``project.customer_id``, ``card_replace.reason``; ids may hold ``-``, as Mantle's do).
_VAR_NAME = re.compile(r"[A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)*\Z", re.ASCII)
_COMMAND = re.compile(r"/[a-z]+\Z")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Files --record never overwrites: agents, action code, configuration.
_SOURCE_SUFFIXES = frozenset({".agent", ".py", ".toml"})


class ChatUsageError(Exception):
    """A mistake in how chat was called (bad --var, no model); the message is for the user."""


# ---------------------------------------------------------------------- options


def parse_var(text: str) -> tuple[str, Any]:
    """``name=value`` with the value read as YAML (``3`` a number, ``true`` a boolean,
    anything unparsable a string, nothing after ``=`` the empty string)."""
    if not _is_text(text):
        raise ChatUsageError(
            f"--var {readable(text)!r}: not valid UTF-8 text; give the name and value in UTF-8"
        )
    name, sep, raw = text.partition("=")
    name = name.strip()
    if not sep:
        raise ChatUsageError(f"--var {text!r}: write NAME=VALUE, e.g. --var order_ID=1234")
    if not _VAR_NAME.match(name):
        raise ChatUsageError(f"--var {text!r}: {name!r} is not a variable name")
    if not raw.strip():
        return name, ""
    try:
        value = load_yaml(raw)
    except yaml.YAMLError:
        return name, raw
    if value is None and raw.strip() not in ("null", "~"):
        return name, raw
    # Dates stay text (the engine's date type reads ISO text); a mapping or list only when
    # written in flow style, so "--var note=a: b" is the text it looks like.
    if isinstance(value, datetime.date):
        return name, raw.strip()
    if isinstance(value, dict | list) and not raw.lstrip().startswith(("[", "{")):
        return name, raw
    return name, value


def _is_text(text: str) -> bool:
    """Whether ``text`` can be encoded as UTF-8: Python decodes a command-line byte that is not
    UTF-8 as a lone surrogate (``surrogateescape``), which no session, trace or file can hold."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_vars(items: Iterable[str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for item in items:
        name, value = parse_var(item)
        values[name] = value
    return values


def agent_model_id(agent: AgentBase) -> str | None:
    """The model id the agent names (``model_config: model:``), if any."""
    config = getattr(getattr(agent, "outline", None), "model_config", None)
    model = getattr(config, "model", None)
    return model if isinstance(model, str) and model.strip() else None


def choose_model(
    agent: AgentBase,
    *,
    spec: str | None = None,
    base_url: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Model:
    """``--model`` wins; else the agent's model id through ``agentscript.toml`` (looked up from
    the agent's folder), ``AGENTSCRIPT_MODEL`` and the configured default. Raises ModelError
    (with the configuration help when nothing is configured)."""
    start = agent.path.parent if agent.path is not None else None
    config = load_config(start=start)
    if spec:
        default = model_from_spec(spec, base_url=base_url)
    else:
        default = resolve_model(agent_model_id(agent), config, base_url=base_url, env=env)
    settings = getattr(agent, "fallback", None)
    if settings is not None:  # [resilience] fallback = "spec" (models/fallback.py)
        from agentscript.models.fallback import FallbackModel

        default = FallbackModel(
            default,
            model_from_spec(settings.fallback),
            open_after=settings.open_after,
            cooldown=settings.cooldown,
        )
    routes = subagent_routes(agent, config, base_url=base_url)
    return RoutedModel(default, routes) if routes else default


def subagent_routes(
    agent: AgentBase, config: ModelConfig, *, base_url: str | None = None
) -> dict[str, Callable[[], Model]]:
    """Subagents whose ``model_config`` names a model other than the agent's, mapped to the
    model ``agentscript.toml`` (or a provider spec used as the id) configures for it."""
    program = getattr(agent, "program", None)
    nodes = getattr(program, "nodes", {})
    main_id = agent_model_id(agent)
    routes: dict[str, Callable[[], Model]] = {}
    for node in nodes.values():
        model_id = getattr(node, "model", None)
        if not model_id or model_id == main_id or model_id in routes:
            continue
        entry = resolve_spec(model_id, ModelConfig(models=config.models), env={})
        if entry is None:
            continue  # not configured: that subagent uses the default model

        def build(entry: ModelEntry = entry) -> Model:
            return model_from_spec(
                entry.spec, base_url=base_url or entry.base_url, params=entry.params or None
            )

        routes[model_id] = build
    return routes


@dataclass
class ChatOptions:
    variables: dict[str, Any] = field(default_factory=dict)
    # The `actions:` of a conversation file: stub results for actions with no local backend.
    stubs: dict[str, Any] = field(default_factory=dict)
    show: frozenset[str] = frozenset()
    trace_dir: Path | None = None
    record: Path | None = None
    stream: bool = True


def readable(line: str) -> str:
    """``line`` with any byte that was not UTF-8 replaced by U+FFFD.

    Python reads a terminal or pipe with ``surrogateescape``, so a stray byte arrives as a
    lone surrogate; kept in the history, it would make every later request fail to encode.
    """
    return line.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def stdin_lines() -> Iterator[str]:
    """Standard input, line by line, never failing on a byte that is not valid text."""
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:  # replaced by a text-only stream (tests, embedding)
        yield from sys.stdin
        return
    encoding = getattr(sys.stdin, "encoding", None) or "utf-8"
    for raw in buffer:
        yield raw.decode(encoding, "replace")


def refuse_overwriting_inputs(record: Path, agent: AgentBase, stubs: str | Path | None) -> None:
    """ChatUsageError when ``--record`` names one of the chat's inputs: the agent file, a file
    of the agent's project folder, the stubs file, or any existing source file (``.agent``,
    ``.py``, ``.toml``: never a recording). The recording is written at once, so this runs
    before the chat starts."""
    target = record.resolve()
    if target.is_file() and target.suffix.lower() in _SOURCE_SUFFIXES:
        raise ChatUsageError(
            f"--record {record}: that is a source file, not a recording; record to a new file"
        )
    inputs: list[Path] = [Path(stubs)] if stubs is not None else []
    if agent.path is not None:
        inputs.append(agent.path)
    for source in inputs:
        source = source.resolve()
        if source.is_dir():
            if target.is_relative_to(source) and target.exists():
                raise ChatUsageError(
                    f"--record {record}: that file belongs to the agent's project {source}; "
                    "record to a new file"
                )
        elif target == source:
            raise ChatUsageError(
                f"--record {record}: that is one of the chat's inputs; record to a new file"
            )


# ---------------------------------------------------------------------- output


class Console:
    """Where chat output goes. Replies on stdout; details go to stdout in a terminal and to
    stderr when scripted (so stdout holds only replies); errors always to stderr. Every text
    given is printed escaped (``printable_text``), its own styling added after."""

    def __init__(self, *, interactive: bool, color: bool = False) -> None:
        self.interactive = interactive
        self.color = color

    def style(self, text: str, **style: Any) -> str:
        """``text`` styled with click's ``style`` arguments, when colour is on."""
        return click.style(text, **style) if self.color else text

    def write(self, text: str) -> None:
        self._raw(printable_text(text))

    def _raw(self, text: str) -> None:
        click.echo(text, nl=False)
        sys.stdout.flush()

    def line(self, text: str = "") -> None:
        click.echo(printable_text(text))

    def begin_reply(self) -> None:
        if self.interactive:
            self._raw(self.style("agent> ", fg="green", bold=True))

    def reply(self, text: str) -> None:
        self.begin_reply()
        self.line(text)

    def detail(self, text: str) -> None:
        click.echo(self.style(f"  {printable_text(text)}", dim=True), err=not self.interactive)

    def notice(self, text: str) -> None:
        click.echo(self.style(printable_text(text), fg="yellow"), err=not self.interactive)

    def error(self, text: str) -> None:
        click.echo(self.style(printable_text(text), fg="red"), err=True)


# ---------------------------------------------------------------------- the chat


class _Answering:
    """``inner``, telling the chat when each answer starts (``begin``) and ends (``end``, also
    on a failure): the session's text sink gets the whole reply (engine/speech.py), the
    framework's own messages included, and the chat shows only the model's answers live."""

    def __init__(self, inner: Model, begin: Callable[[], None], end: Callable[[], None]) -> None:
        self.inner = inner
        self.name = inner.name
        self._begin = begin
        self._end = end

    def __repr__(self) -> str:
        return repr(self.inner)

    async def complete(
        self, request: ModelRequest, *, stream: TextSink | None = None
    ) -> ModelResponse:
        self._begin()
        try:
            return await self.inner.complete(request, stream=stream)
        finally:
            self._end()


class Chat:
    """One chat: an agent, a model, the current session, and the display of each turn."""

    def __init__(
        self, agent: AgentBase, model: Model, options: ChatOptions, console: Console
    ) -> None:
        self.agent = agent
        self.options = options
        self.console = console
        self.model = RecordingModel(
            _Answering(model, self._answer_begins, self._answer_ends),
            on_response=self._on_response,
        )
        self.recorder: ConversationRecorder | None = None
        self.failed_turns = 0
        self.last_reply: Reply | None = None
        self._segment_open = False  # streamed text is on screen, its line not yet ended
        self._streamed: list[str] = []  # final answers of this turn already shown live
        self._answering = False  # the model is answering: what the sink gets is its text
        self._answer_fed = False  # the running answer gave the sink something
        self._fed = False  # the sink got something in this turn
        # One event loop for the whole chat: an SDK client's connection pool belongs to the
        # loop that opened it, and a fresh loop per turn left the previous client to close its
        # connections on a dead loop ("Task exception was never retrieved ... Event loop is
        # closed" on stderr after every streamed turn).
        self._runner = asyncio.Runner()
        self.session = self._new_session()

    def _new_session(self) -> Session:
        """Raises ValueError for unknown or ill-typed variables."""
        session = self.agent.session(
            model=self.model,
            variables=self.options.variables,
            stubs=StubBook.from_data(self.options.stubs),
            trace_dir=self.options.trace_dir,
        )
        if self.options.stream:
            session.on_text = self._on_text
        if self.options.record is not None:
            self.recorder = ConversationRecorder(self.options.variables)
            self.save_recording()
        self.last_reply = None
        return session

    def close(self) -> None:
        """Close the chat's event loop (the model's connections with it)."""
        self._runner.close()

    def reset(self) -> None:
        self.session = self._new_session()
        self.console.notice("new session" + (" (recording restarted)" if self.recorder else ""))
        self.welcome()

    def welcome(self) -> None:
        if self.session.welcome:
            self.console.reply(self.session.welcome)

    # ------------------------------------------------------------------ streaming

    def _answer_begins(self) -> None:
        self._answering = True
        self._answer_fed = False

    def _answer_ends(self) -> None:
        self._answering = False

    def _on_text(self, chunk: str) -> None:
        if not chunk:
            return
        fed_before, self._fed = self._fed, True
        if not self._answering:
            return  # the framework's own message: show_reply prints it after the turn
        first, self._answer_fed = not self._answer_fed, True
        if first and fed_before and chunk == SEPARATOR:
            return  # the separator the session gives, as its own piece, before this answer
        if not self._segment_open:
            self._segment_open = True
            self.console.begin_reply()
        self.console.write(chunk)

    def _on_response(self, request: ModelRequest, response: ModelResponse) -> None:
        if not self._segment_open:
            # Not streamed (--no-stream, or a model that does not stream): text the model sent
            # along with tool calls is never one of the turn's messages, so show it here or
            # it is lost.
            if response.tool_calls and response.text and response.text.strip():
                self.console.reply(response.text)
            return
        self._close_segment()
        if not response.tool_calls:
            self._streamed.append(response.text or "")

    def _close_segment(self) -> None:
        if self._segment_open:
            self._segment_open = False
            self.console.line()

    # ------------------------------------------------------------------ one turn

    def send(self, text: str) -> Reply | None:
        """Run one turn and show it; None when the engine itself failed."""
        before = self.session.variables
        self.model.begin_turn()
        self._streamed = []
        self._fed = False
        try:
            reply = self._runner.run(self.session.send_async(text))
        except KeyboardInterrupt:
            self._close_segment()
            self.console.error("interrupted; the turn was abandoned")
            self.failed_turns += 1
            return None
        except Exception as exc:  # a bug must not end the chat or print a traceback
            self._close_segment()
            self.console.error(f"internal error: {type(exc).__name__}: {exc}; please report it")
            self.failed_turns += 1
            return None
        self._close_segment()
        self.last_reply = reply
        self.show_reply(reply)
        quiet = reply.error is None and not reply.escalated and not reply.ended
        if quiet and not any(m.strip() for m in reply.messages):
            self.console.notice("(the agent's reply was empty)")
        if reply.error is not None:
            self.failed_turns += 1
            self.console.error(f"error: {reply.error}")
        problem = trace_problem(reply.trace)
        if problem is not None:
            self.console.notice(f"warning: {problem}; the chat goes on")
        if reply.history_trimmed:
            self.console.notice(f"({history_trimmed_note(reply.history_trimmed)})")
        if reply.escalated:
            self.console.notice("[escalated to a human agent]")
        if reply.ended:
            self.console.notice(
                "[session ended"
                + ("; /reset starts a new one]" if self.console.interactive else "]")
            )
        for line in describe_turn(reply, before, self.options.show):
            self.console.detail(line)
        if self.recorder is not None and not reply.refused:
            self.recorder.add_turn(text, self.model.moves, reply.trace)
            self.save_recording()
        return reply

    def show_reply(self, reply: Reply) -> None:
        """Print the turn's messages that were not already streamed, in order."""
        pending = list(self._streamed)
        for message in reply.messages:
            if message in pending:
                del pending[: pending.index(message) + 1]
                continue
            if message:
                self.console.reply(message)

    def save_recording(self) -> None:
        if self.recorder is None or self.options.record is None:
            return
        try:
            self.options.record.write_text(self.recorder.dump(), encoding="utf-8")
        except OSError as exc:
            raise ChatUsageError(
                f"cannot write the recording {self.options.record}: {exc.strerror or exc}"
            ) from None

    # ------------------------------------------------------------------ commands

    def command(self, line: str) -> bool:
        """Run a ``/command``; False when the chat should stop."""
        name = line.strip().split()[0].lower()
        if name in ("/quit", "/exit"):
            return False
        if name == "/vars":
            for var, value in self.session.variables.items():
                self.console.line(f"{var} = {json.dumps(value, default=repr, ensure_ascii=False)}")
        elif name == "/trace":
            if self.last_reply is None:
                self.console.notice("no turn yet")
            else:
                for summary in summarize_steps(self.last_reply.trace):
                    self.console.line(summary)
        elif name == "/reset":
            self.reset()
        else:
            if name != "/help":
                self.console.error(f"unknown command {name}")
            for command, meaning in COMMANDS.items():
                self.console.line(f"{command:8} {meaning}")
        return True

    def handle(self, line: str) -> bool:
        """One line of input: a command or a user message. False when the chat should stop."""
        line = readable(line)
        text = line.strip()
        if not text:
            return True
        head = text.split()[0].lower()
        if head in COMMANDS or head == "/exit" or (_COMMAND.match(head) and " " not in text):
            return self.command(text)
        self.send(line.rstrip("\r\n"))
        return True

    # ------------------------------------------------------------------ loops

    def run_lines(self, lines: Iterable[str]) -> int:
        """Scripted mode: one message per line, each reply followed by a blank line."""
        for line in lines:
            if not line.strip():
                continue
            if not self.handle(line):
                break
            self.console.line()
        return ExitCode.FAILED if self.failed_turns else ExitCode.OK

    def run_interactive(self, read_line: Callable[[str], str]) -> int:
        self.console.notice(
            f"Chatting with {self.agent.name} ({self.model.name}). /help lists commands, /quit leaves."
        )
        self.welcome()
        prompt = self.console.style("you> ", fg="cyan", bold=True)
        while True:
            try:
                line = read_line(prompt)
            except EOFError:
                self.console.line()
                return ExitCode.OK
            except KeyboardInterrupt:
                self.console.line()
                continue
            except UnicodeDecodeError:  # a terminal whose input is not UTF-8
                self.console.error("that line was not valid text; type it again")
                continue
            if not self.handle(line):
                return ExitCode.OK


# ---------------------------------------------------------------------- turn details


def describe_turn(reply: Reply, before: Mapping[str, Any], show: frozenset[str]) -> list[str]:
    """The ``--show`` lines of a turn, from its trace."""
    if not show:
        return []
    lines: list[str] = []
    steps: list[dict[str, Any]] = reply.trace.get("planTrace", {}).get("steps", [])
    if "trace" in show and reply.path:
        lines.append(f"path: {' -> '.join(reply.path)}")
    system_shown: str | None = None
    for step in steps:
        kind = step.get("type")
        if kind == "RESOLUTION_STEP" and "tools" in show and "transition" not in step:
            offered = ", ".join(step.get("tools") or []) or "(none)"
            hidden = ", ".join(step.get("hiddenTools") or []) or "(none)"
            lines.append(
                f"[{step.get('node')} #{step.get('iteration')}] tools: {offered}; hidden: {hidden}"
            )
        elif kind == "LLM_STEP" and "prompt" in show:
            data = step.get("input") or {}
            system = str(data.get("system") or "")
            if system != system_shown:
                system_shown = system
                lines.extend(_block(f"[{step.get('node')}] system:", system))
            lines.extend(
                _block(
                    f"[{step.get('node')} #{step.get('iteration')}] instructions:",
                    str(data.get("instructions") or ""),
                )
            )
        elif kind == "ACTION_STEP" and "trace" in show:
            result = (
                f"error: {step['error']}"
                if step.get("error")
                else json.dumps(step.get("output"), default=repr, ensure_ascii=False)
            )
            arguments = json.dumps(step.get("input"), default=repr, ensure_ascii=False)
            lines.append(f"action {step.get('name')}({arguments}){_answered_by(step)} -> {result}")
        elif kind == "REFUSED_STEP" and "trace" in show:
            lines.append(f"refused {step.get('name')}: {step.get('reason')}")
        elif kind == "TRANSITION_STEP" and "trace" in show:
            lines.append(
                f"transition {step.get('from')} -> {step.get('to')} (via {step.get('via')})"
            )
    if "trace" in show:
        lines.extend(f"set {change}" for change in describe_changes(before, reply.variables))
        if reply.trace_file:
            lines.append(f"trace file: {reply.trace_file}")
    return lines


def trace_problem(trace: Mapping[str, Any]) -> str | None:
    """Why the turn's trace file was not written (its ``EVENT_STEP`` ``trace_not_written``,
    which the session adds once when ``--trace-dir`` stops being writable), or None."""
    for step in reversed(trace.get("planTrace", {}).get("steps", [])):
        if step.get("type") == "EVENT_STEP" and step.get("event") == "trace_not_written":
            return str(step.get("reason"))
    return None


def _block(title: str, text: str) -> list[str]:
    body = text.splitlines() or ["(empty)"]
    return [title, *(f"  | {line}" for line in body)]


def summarize_steps(trace: Mapping[str, Any]) -> list[str]:
    """One line per step of a turn's trace (``/trace``)."""
    lines: list[str] = []
    for index, step in enumerate(trace.get("planTrace", {}).get("steps", []), start=1):
        kind = str(step.get("type"))
        detail = _step_detail(step)
        lines.append(f"{index:3}. {kind:16} {detail}".rstrip())
    return lines or ["(no steps)"]


def _step_detail(step: Mapping[str, Any]) -> str:
    kind = step.get("type")
    node = step.get("node")
    at = f"[{node}] " if node else ""
    if kind == "NODE_ENTER":
        return f"{at}{step.get('reason', '')}"
    if kind == "RESOLUTION_STEP":
        tools = ", ".join(step.get("tools") or []) or "-"
        return f"{at}tools: {tools}" + (
            f"; transition to {step['transition']}" if step.get("transition") else ""
        )
    if kind == "LLM_STEP":
        if step.get("error"):
            return f"{at}failed: {step['error']}"
        output = step.get("output") or {}
        calls = [c.get("name") for c in output.get("tool_calls") or []]
        return f"{at}tool calls: {', '.join(map(str, calls))}" if calls else f"{at}text"
    if kind == "ACTION_STEP":
        outcome = f"error: {step['error']}" if step.get("error") else "ok"
        return f"{at}{step.get('name')}: {outcome}"
    if kind == "TRANSITION_STEP":
        return f"{step.get('from')} -> {step.get('to')}"
    if kind == "REFUSED_STEP":
        return f"{step.get('name')}: {step.get('reason')}"
    if kind == "RESPONSE_STEP":
        return f"{at}{_short(str(step.get('text', '')))}"
    if kind == "ERROR_STEP":
        return str(step.get("message", ""))
    if kind == "EVENT_STEP":
        return f"{at}{step.get('event')}"
    if kind == "HOOK_STEP":
        return f"{at}{step.get('hook')}"
    return ""


def _answered_by(step: dict[str, Any]) -> str:
    """What answered an ACTION_STEP's call when not the action's own target: a stub, or the
    function ``[actions.targets]`` mapped it to (the trace's ``stubbed``, ``ranTarget``)."""
    if step.get("stubbed"):
        return " [stub]"
    if step.get("ranTarget"):
        return f" [ran {step['ranTarget']}]"
    return ""


def _short(text: str, limit: int = 60) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


# ---------------------------------------------------------------------- entry point


def run_chat(
    agent: AgentBase,
    *,
    model: Model | None = None,
    model_spec: str | None = None,
    base_url: str | None = None,
    variables: Iterable[str] = (),
    show: Iterable[str] = (),
    trace_dir: str | Path | None = None,
    record: str | Path | None = None,
    stream: bool = True,
    stubs: str | Path | None = None,
    overwrite: bool = False,
    interactive: bool | None = None,
    lines: Iterable[str] | None = None,
    read_line: Callable[[str], str] | None = None,
) -> int:
    """Run a chat and return the exit code (0 ok, 1 a turn failed when scripted, 2 usage,
    130 interrupted by Ctrl-C outside a turn; the recording keeps the turns run).

    ``model`` skips model selection (tests, embedding). ``stubs`` names a conversation file
    whose `actions:` answer actions with no local backend and whose `variables:` are initial
    values (``--var`` wins). ``record`` must not exist unless ``overwrite``. ``interactive``
    defaults to whether stdin is a terminal; ``lines`` / ``read_line`` replace stdin.
    """
    if interactive is None:
        interactive = sys.stdin.isatty()
    console = Console(interactive=interactive, color=interactive and sys.stdout.isatty())
    try:
        return _run_chat(
            agent,
            console,
            model=model,
            model_spec=model_spec,
            base_url=base_url,
            variables=variables,
            show=show,
            trace_dir=trace_dir,
            record=record,
            stream=stream,
            stubs=stubs,
            overwrite=overwrite,
            lines=lines,
            read_line=read_line,
        )
    except KeyboardInterrupt:  # Ctrl-C while waiting for input (a turn catches its own)
        console.error("\ninterrupted" if console.interactive else "interrupted")
        return ExitCode.INTERRUPTED


def _run_chat(
    agent: AgentBase,
    console: Console,
    *,
    model: Model | None,
    model_spec: str | None,
    base_url: str | None,
    variables: Iterable[str],
    show: Iterable[str],
    trace_dir: str | Path | None,
    record: str | Path | None,
    stream: bool,
    stubs: str | Path | None,
    overwrite: bool,
    lines: Iterable[str] | None,
    read_line: Callable[[str], str] | None,
) -> int:
    try:
        values = parse_vars(variables)
        stub_data: dict[str, Any] = {}
        stub_values: dict[str, Any] = {}
        if stubs is not None:
            try:
                canned = load_conversation(stubs)
            except ConversationError as exc:
                raise ChatUsageError(f"--stubs: {exc}") from None
            stub_data = canned.stubs
            stub_values = canned.variables
            values = {**stub_values, **values}
        unknown_show = sorted(set(show) - set(SHOW_CHOICES))
        if unknown_show:
            raise ChatUsageError(
                f"--show: unknown {unknown_show}; choose from {list(SHOW_CHOICES)}"
            )
        if record is not None:
            refuse_overwriting_inputs(Path(record), agent, stubs)
            if not overwrite and Path(record).exists():
                raise ChatUsageError(
                    f"--record {record}: the file exists; pass --overwrite to replace it"
                )
        chosen = (
            model if model is not None else choose_model(agent, spec=model_spec, base_url=base_url)
        )
        options = ChatOptions(
            variables=values,
            stubs=stub_data,
            show=frozenset(show),
            trace_dir=Path(trace_dir) if trace_dir is not None else None,
            record=Path(record) if record is not None else None,
            stream=stream,
        )
        try:
            chat = Chat(agent, chosen, options, console)
        except ValueError as exc:  # unknown or ill-typed --var or stub file variables
            raise ChatUsageError(_variables_problem(agent, exc, stubs, stub_values)) from None
    except (ChatUsageError, ModelError) as exc:
        console.error(str(exc))
        return ExitCode.USAGE
    try:
        if console.interactive:
            return chat.run_interactive(read_line or _terminal_reader())
        return chat.run_lines(lines if lines is not None else stdin_lines())
    except ChatUsageError as exc:  # e.g. the recording became unwritable
        console.error(str(exc))
        return ExitCode.USAGE
    finally:
        chat.close()


def _variables_problem(
    agent: AgentBase, exc: ValueError, stubs: str | Path | None, stub_values: dict[str, Any]
) -> str:
    """The message for initial variables the session refused (``exc``): about the stub file
    when its own ``variables:`` are refused, else about ``--var``."""
    if stubs is not None and stub_values:
        try:
            agent.initial_variables(bounded(stub_values))
        except ValueError as stub_exc:
            return f"--stubs {stubs}: variables: {stub_exc}"
    return f"--var: {exc}"


def _terminal_reader() -> Callable[[str], str]:
    """``input`` with line editing and in-session history (readline, where available)."""
    # Importing readline is what gives input() editing and history; without it (Windows),
    # plain input still works.
    with contextlib.suppress(ImportError):
        import readline  # noqa: F401

    def read(prompt: str) -> str:
        # readline counts escape codes as visible unless marked, and then mis-wraps long lines.
        return input(_ANSI.sub(lambda m: f"\x01{m.group(0)}\x02", prompt))

    return read


__all__ = [
    "SHOW_CHOICES",
    "Chat",
    "ChatOptions",
    "ChatUsageError",
    "Console",
    "agent_model_id",
    "choose_model",
    "describe_turn",
    "parse_var",
    "parse_vars",
    "readable",
    "refuse_overwriting_inputs",
    "run_chat",
    "summarize_steps",
    "trace_problem",
]
