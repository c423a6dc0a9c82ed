"""OpenTelemetry export of turns, after the GenAI semantic conventions (extra ``agentscript[otel]``).

One trace per turn:

- ``invoke_agent {agent}``: the turn (``gen_ai.operation.name``, ``gen_ai.agent.name``,
  ``gen_ai.conversation.id`` = the session id, usage totals, ``agentscript.request_id`` under
  ``agentscript serve``, ``error.type`` when it failed); every turn that starts ends its span:
  a failed, cancelled or refused one (a message to an ended session) with an error status;
- ``chat {model}``, a child per LLM call (``gen_ai.provider.name``, ``gen_ai.request.model``,
  ``gen_ai.response.model``, ``gen_ai.usage.input_tokens``/``output_tokens``,
  ``gen_ai.response.finish_reasons``);
- ``execute_tool {tool}``, a child per action or tool run (``gen_ai.tool.name``,
  ``gen_ai.tool.call.id`` for calls the LLM made, ``gen_ai.tool.type``);
- events on the turn span for every other decision (resolutions, refusals, transitions,
  hooks, budget hits, errors, Mantle skill and block steps), named ``agentscript.<step>``,
  with their attributes under the ``agentscript.`` prefix.

Prompts, completions, tool arguments and results are recorded only when content capture is
on (``capture_content=True``, or ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``).
No attribute value is longer than ``Telemetry.max_attribute_chars`` (:data:`MAX_ATTRIBUTE_CHARS`,
or ``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT``): a longer one is cut and ends with a marker saying so.
An action's target is shown without a URL's user, password and query string.

The spans are built from the turn's trace steps (the trace is the one record of what the
engine decided): :meth:`Telemetry.observe` notes when each step is added, and the spans are
emitted when the turn ends, with each step's start time and ``durationMs``.

Configuration (:func:`telemetry_from_env`): ``OTEL_TRACES_EXPORTER=console`` or ``otlp``, or
an ``OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT`` (the OTLP/HTTP exporter reads the other standard
``OTEL_*`` variables itself); ``--otel console`` on ``run`` and ``chat``.

A collector that cannot be reached is said once per kind of failure, not once per retry: the
OTLP exporter's own log lines (a warning per retry, "Transient error ... retrying in 2.08s",
and an error per batch lost) each show their first time only, marked ``OpenTelemetry:``
(:class:`OncePerKind`), where they interleaved with a chat's replies on stderr.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING, Any, cast

from agentscript.redaction import shown_target

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider

    from agentscript.trace import TurnTrace

EXTRA_HINT = "install the OpenTelemetry extra: pip install 'agentscript[otel]'"
CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
LENGTH_ENV = "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT"
# Characters in one attribute value (a string, or a list's strings together). With content
# capture on, a message or a tool result is as long as the user or a backend made it (a 1 MB
# message was a 1 MB attribute); collectors and backends refuse or cut far less than that.
MAX_ATTRIBUTE_CHARS = 16_000
PREFIX = "agentscript."
# Step types that become spans; every other step type becomes an event on the turn span.
_SPAN_STEPS = frozenset({"LLM_STEP", "ACTION_STEP"})
# Where the OTLP/HTTP exporter and the batch processor log what goes wrong with an export (a
# filter applies to the records of its own logger only, not to those of its children).
EXPORT_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.common.http",
    "opentelemetry.sdk._shared_internal",
)


class TelemetryConfigError(ValueError):
    """OpenTelemetry was asked for but cannot be set up; the message says how to fix it."""


class Telemetry:
    """Exports turns as OpenTelemetry traces through ``tracer``."""

    def __init__(
        self,
        tracer: Tracer,
        *,
        capture_content: bool = False,
        max_attribute_chars: int = MAX_ATTRIBUTE_CHARS,
    ) -> None:
        self.tracer = tracer
        self.capture_content = capture_content
        self.max_attribute_chars = max_attribute_chars

    @staticmethod
    def for_provider(
        provider: TracerProvider,
        *,
        capture_content: bool = False,
        max_attribute_chars: int = MAX_ATTRIBUTE_CHARS,
    ) -> Telemetry:
        return Telemetry(
            provider.get_tracer("agentscript"),
            capture_content=capture_content,
            max_attribute_chars=max_attribute_chars,
        )

    def observe(self, trace: TurnTrace) -> TurnObserver:
        """Start watching ``trace``; call :meth:`TurnObserver.finish` when the turn ends.
        An observer already on the trace (``Session.on_step``) is still told of each step."""
        observer = TurnObserver(self, trace)
        trace.observer = observer.on_step
        return observer


class TurnObserver:
    """Notes when each step of one turn starts; emits the turn's spans at the end."""

    def __init__(self, telemetry: Telemetry, trace: TurnTrace) -> None:
        self.telemetry = telemetry
        self.trace = trace
        self.started_ns = time.time_ns()
        self.starts: list[int] = []
        self.chained = trace.observer  # told after us (e.g. the server's step stream)

    def on_step(self, step: dict[str, Any]) -> None:
        self.starts.append(time.time_ns())
        if self.chained is not None:
            self.chained(step)

    def finish(
        self,
        *,
        error: str | None = None,
        escalated: bool = False,
        ended: bool = False,
        cost: float | None = None,
        refused: bool = False,
        error_type: str = "TurnError",
    ) -> None:
        """Emit the spans of the turn (never raises: telemetry must not break a turn).
        ``error_type``: the turn span's ``error.type`` when ``error`` is set (the exception's
        class for a turn that raised or was cancelled)."""
        self.trace.observer = self.chained
        try:
            self._emit(
                error=error,
                escalated=escalated,
                ended=ended,
                cost=cost,
                refused=refused,
                error_type=error_type,
            )
        except Exception:  # an exporter or attribute problem is not the user's turn's problem
            return

    def _emit(
        self,
        *,
        error: str | None,
        escalated: bool,
        ended: bool,
        cost: float | None,
        refused: bool,
        error_type: str,
    ) -> None:
        from opentelemetry import trace as otel_trace
        from opentelemetry.trace import SpanKind, Status, StatusCode

        trace = self.trace
        content = self.telemetry.capture_content
        tracer = self.telemetry.tracer
        most = self.telemetry.max_attribute_chars
        end_ns = time.time_ns()
        usage = trace.usage
        root = tracer.start_span(
            _cut(f"invoke_agent {trace.agent}", most),
            context=_caller_context(),
            kind=SpanKind.INTERNAL,
            start_time=self.started_ns,
            attributes=_clean(
                most,
                {
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": trace.agent,
                    "gen_ai.conversation.id": trace.session_id,
                    "gen_ai.usage.input_tokens": int(usage.get("input_tokens", 0)),
                    "gen_ai.usage.output_tokens": int(usage.get("output_tokens", 0)),
                    PREFIX + "turn": trace.turn,
                    PREFIX + "plan_id": trace.plan_id,
                    PREFIX + "llm_calls": int(usage.get("llm_calls", 0)),
                    PREFIX + "usage.cost": cost,
                    PREFIX + "escalated": escalated,
                    PREFIX + "ended": ended,
                    PREFIX + "refused": refused or None,
                    PREFIX + "request_id": _request_id(),
                    PREFIX + "user_input": trace.user_input if content else None,
                    PREFIX + "response": trace.response if content else None,
                },
            ),
        )
        context = otel_trace.set_span_in_context(root)
        pending_calls: list[dict[str, Any]] = []
        # Steps a host added after the engine ended the turn (``agentscript serve``'s
        # ``state_fitted``, the error of a turn it could not keep) were not seen starting:
        # they are stamped with the time the spans end.
        starts = self.starts + [end_ns] * (len(trace.steps) - len(self.starts))
        for step, start_ns in zip(trace.steps, starts, strict=False):
            kind = step.get("type", "")
            step_end = start_ns + int(float(step.get("durationMs") or 0) * 1_000_000)
            if kind == "LLM_STEP":
                span = tracer.start_span(
                    # The model a server says answered: as long as that server makes it.
                    _cut(f"chat {_model_name(step)}", most),
                    context=context,
                    kind=SpanKind.CLIENT,
                    start_time=start_ns,
                    attributes=_clean(most, _chat_attributes(step, content)),
                )
                pending_calls = list((step.get("output") or {}).get("tool_calls") or [])
                _finish(span, step.get("error"), max(step_end, start_ns), content, most)
            elif kind == "ACTION_STEP":
                call_id = _take_call_id(pending_calls, step)
                name = str(step.get("name") or step.get("action") or "")
                span = tracer.start_span(
                    _cut(f"execute_tool {name}", most),
                    context=context,
                    kind=SpanKind.INTERNAL,
                    start_time=start_ns,
                    attributes=_clean(most, _tool_attributes(step, call_id, content)),
                )
                _finish(span, step.get("error"), max(step_end, start_ns), content, most)
            else:
                root.add_event(
                    PREFIX + kind.lower().removesuffix("_step"),
                    attributes=_clean(most, _event_attributes(step, content)),
                    timestamp=start_ns,
                )
        if error:
            root.set_attribute("error.type", error_type)
            root.set_status(Status(StatusCode.ERROR, _cut(error, most) if content else None))
        root.end(end_time=end_ns)


def _request_id() -> str | None:
    """The ``X-Request-ID`` of the request the turn answers, under ``agentscript serve``."""
    # Only the server sets one, and it has imported the module by then; importing it here
    # would load Starlette into every `run` and `chat` (and fail without the serve extra).
    if "agentscript.server.requestid" not in sys.modules:
        return None
    from agentscript.server.requestid import request_id

    return request_id()


def _caller_context() -> Any:
    """The trace context of the request the turn answers (its ``traceparent``, under
    ``agentscript serve``), so that the turn's trace is a part of the caller's; None (the
    current context: a span a host keeps open around the turn) without one. A malformed
    header gives an empty context: the turn starts a trace of its own."""
    if "agentscript.server.requestid" not in sys.modules:  # as _request_id
        return None
    from opentelemetry.propagate import extract

    from agentscript.server.requestid import trace_context

    headers = trace_context.get()
    return extract(headers) if headers is not None else None


def _finish(span: Span, error: Any, end_ns: int, content: bool, most: int) -> None:
    """End a step's span; a failed one says so, and why only with content capture on: an
    error quotes what it failed on (an action's inputs, a server's answer), user data
    included."""
    from opentelemetry.trace import Status, StatusCode

    if error:
        span.set_attribute("error.type", "AgentScriptError")
        span.set_status(Status(StatusCode.ERROR, _cut(str(error), most) if content else None))
    span.end(end_time=end_ns)


def _model_name(step: Mapping[str, Any]) -> str:
    return str(step.get("model") or step.get("requestModel") or "unknown")


def _provider(model: str) -> str:
    provider, sep, _ = model.partition(":")
    return provider if sep else model


def _chat_attributes(step: Mapping[str, Any], content: bool) -> dict[str, Any]:
    output = step.get("output") or {}
    usage = output.get("usage") or {}
    calls = output.get("tool_calls") or []
    model = _model_name(step)
    reason = "error" if step.get("error") else ("tool_calls" if calls else "stop")
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": _provider(str(step.get("provider") or model)),
        "gen_ai.request.model": model,
        "gen_ai.response.model": step.get("model"),
        "gen_ai.usage.input_tokens": usage.get("input_tokens"),
        "gen_ai.usage.output_tokens": usage.get("output_tokens"),
        "gen_ai.response.finish_reasons": [reason],
        PREFIX + "node": step.get("node"),
        PREFIX + "iteration": step.get("iteration"),
    }
    if content:
        given = step.get("input") or {}
        attributes["gen_ai.system_instructions"] = _json(
            [{"type": "text", "content": given.get("system", "")}]
        )
        attributes[PREFIX + "instructions"] = given.get("instructions")
        # The session's LLM_STEPs hold only the messages added since its previous call
        # (trace_inputs.py): messages_from says where in the history these start, and
        # messages_dropped (set only when the history's oldest messages were trimmed since)
        # where the ones before them start in the previous call's.
        attributes["gen_ai.input.messages"] = _json(given.get("messages") or [])
        attributes[PREFIX + "messages_from"] = given.get("messagesFrom")
        if given.get("messagesDropped"):
            attributes[PREFIX + "messages_dropped"] = given["messagesDropped"]
        attributes["gen_ai.output.messages"] = _json([output])
    return attributes


def _tool_attributes(step: Mapping[str, Any], call_id: str | None, content: bool) -> dict[str, Any]:
    target = step.get("target")
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": step.get("name"),
        "gen_ai.tool.call.id": call_id,
        "gen_ai.tool.type": "function",
        PREFIX + "action": step.get("action"),
        # Recorded without a URL's credentials already (trace_steps.action_step); shown
        # through the same masking in case a step came from elsewhere.
        PREFIX + "target": shown_target(target) if isinstance(target, str) else None,
        PREFIX + "source": step.get("source"),
        PREFIX + "node": step.get("node") or step.get("skill"),
    }
    if content:
        attributes["gen_ai.tool.call.arguments"] = _json(step.get("input"))
        attributes["gen_ai.tool.call.result"] = _json(step.get("output"))
    return attributes


def _take_call_id(pending: list[dict[str, Any]], step: Mapping[str, Any]) -> str | None:
    """The id of the LLM's call that ran this action (first unmatched call of that name)."""
    if step.get("source") != "llm":
        return None
    for index, call in enumerate(pending):
        if call.get("name") == step.get("name"):
            return str(pending.pop(index).get("id"))
    return None


# Fields that may hold prompt text or user data: recorded only with content capture on.
_CONTENT_FIELDS = frozenset(
    {"instructions", "text", "message", "input", "output", "preVars", "postVars", "arguments"}
)


def _event_attributes(step: Mapping[str, Any], content: bool) -> dict[str, Any]:
    attributes: dict[str, Any] = {}
    for key, value in step.items():
        if key == "type" or (key in _CONTENT_FIELDS and not content):
            continue
        if isinstance(value, str | bool | int | float):
            attributes[PREFIX + key] = value
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            attributes[PREFIX + key] = list(value)
        elif content and value is not None:
            attributes[PREFIX + key] = _json(value)
    return attributes


def _clean(most: int, attributes: Mapping[str, Any]) -> dict[str, Any]:
    """``attributes`` without the unset ones, each value within ``most`` characters."""
    return {k: _bounded(v, most) for k, v in attributes.items() if v is not None}


def _bounded(value: Any, most: int) -> Any:
    """``value`` within ``most`` characters: a string cut (:func:`_cut`); a list of strings
    cut item by item, and once its items hold ``most`` characters the rest dropped, a last
    item saying how many."""
    if isinstance(value, str):
        return _cut(value, most)
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        return value
    kept: list[str] = []
    room = most
    for item in value:
        if len(item) > room:
            if not kept:  # one item is as long as it gets: cut, the rest dropped
                kept.append(_cut(item, most))
            break
        kept.append(item)
        room -= len(item)
    if len(kept) < len(value):
        kept.append(f"…[{len(value) - len(kept)} more items cut]")
    return kept


def _cut(text: str, most: int) -> str:
    """``text``, or its start and a marker saying how much was cut, ``most`` characters in all
    (a collector shows a cut value as is: without the marker it would pass for the whole);
    under about 32, the marker alone, which is longer."""
    if len(text) <= most:
        return text
    # The marker with ``most`` in it is at least as long as the final one.
    keep = max(0, most - len(_marker(most, len(text))))
    return text[:keep] + _marker(keep, len(text))


def _marker(kept: int, total: int) -> str:
    return f"…[cut: {kept} of {total} characters kept]"


def _json(value: Any) -> str:
    return json.dumps(value, default=repr, ensure_ascii=False)


# ---------------------------------------------------------------------- configuration


def telemetry_from_env(env: Mapping[str, str] | None = None) -> Telemetry | None:
    """The Telemetry the standard ``OTEL_*`` variables ask for, or None when they ask for
    none. Raises TelemetryConfigError when asked for but the extra is missing."""
    env = os.environ if env is None else env
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if exporter in ("", "none") and not (endpoint and exporter == ""):
        return None
    mode = exporter or "otlp"
    if mode not in ("otlp", "console"):
        raise TelemetryConfigError(
            f"OTEL_TRACES_EXPORTER={exporter!r} is not supported here; use otlp, console or none"
        )
    capture = env.get(CONTENT_ENV, "").strip().lower() in ("1", "true", "yes")
    return telemetry_for(mode, capture_content=capture, max_attribute_chars=_length_limit(env))


def _length_limit(env: Mapping[str, str]) -> int:
    """The attribute bound ``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT`` sets (the SDK cuts there too,
    silently), else :data:`MAX_ATTRIBUTE_CHARS`."""
    given = env.get(LENGTH_ENV, "").strip().lower()
    if given in ("", "unset"):
        return MAX_ATTRIBUTE_CHARS
    if not given.isdigit():
        raise TelemetryConfigError(
            f"{LENGTH_ENV}={given!r} is not a number of characters; "
            f"set a whole number (e.g. {MAX_ATTRIBUTE_CHARS}) or unset it"
        )
    return int(given)


class _Stderr:
    """Whatever ``sys.stderr`` is when a span is written (the exporter outlives redirections)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


_shared: dict[tuple[str, bool, int], Telemetry] = {}
_shared_guard = threading.Lock()


def telemetry_for(
    mode: str, *, capture_content: bool = False, max_attribute_chars: int = MAX_ATTRIBUTE_CHARS
) -> Telemetry:
    """A Telemetry exporting to the console or over OTLP/HTTP (batching in the background).

    One per mode and process: an exporter is a process-wide resource (one connection, one
    batch queue), shared by every agent loaded."""
    with _shared_guard:
        key = (mode, capture_content, max_attribute_chars)
        if key not in _shared:
            _shared[key] = _build(mode, capture_content, max_attribute_chars)
        return _shared[key]


EXIT_FLUSH_MS = 3000


def _build(mode: str, capture_content: bool, max_attribute_chars: int) -> Telemetry:
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SimpleSpanProcessor,
            SpanExporter,
        )
    except ImportError:
        raise TelemetryConfigError(
            f"OpenTelemetry export needs opentelemetry-sdk: {EXTRA_HINT}"
        ) from None
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "agentscript")})
    # Its own shutdown at exit waits for an export as long as the exporter's timeout (10 s by
    # default, and retries): a collector that hangs held every command's exit that long.
    provider = SdkTracerProvider(resource=resource, shutdown_on_exit=False)
    exporter: SpanExporter
    if mode == "console":
        # stderr: stdout carries `run --json` output and chat replies.
        provider.add_span_processor(
            SimpleSpanProcessor(ConsoleSpanExporter(out=cast(IO[str], _Stderr())))
        )
    else:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise TelemetryConfigError(
                f"OTLP export needs opentelemetry-exporter-otlp-proto-http: {EXTRA_HINT}"
            ) from None
        exporter = OTLPSpanExporter()
        provider.add_span_processor(BatchSpanProcessor(exporter))
        OncePerKind.install()
    import atexit

    atexit.register(_flush_at_exit, provider)
    return Telemetry.for_provider(
        provider, capture_content=capture_content, max_attribute_chars=max_attribute_chars
    )


class OncePerKind(logging.Filter):
    """Lets through the first record of each message (its text before the arguments: one
    kind of failure) of the exporter's loggers, marked as OpenTelemetry's and as not shown
    again; drops the repeats. The loggers are the process's, as the exporter is (one per
    process, :func:`telemetry_for`), so it is installed on them once per process."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: set[tuple[str, str]] = set()
        self._guard = threading.Lock()  # records come from the exporter's thread and others

    @classmethod
    def install(cls) -> None:
        once = cls()
        for name in EXPORT_LOGGERS:
            logger = logging.getLogger(name)
            if not any(isinstance(f, cls) for f in logger.filters):
                logger.addFilter(once)

    def filter(self, record: logging.LogRecord) -> bool:
        kind = (record.name, str(record.msg))
        with self._guard:
            if kind in self._seen:
                return False
            self._seen.add(kind)
        record.msg = f"OpenTelemetry: {record.msg} (not shown again)"
        return True


def _flush_at_exit(provider: Any) -> None:
    """Send what is batched when the process ends, waiting EXIT_FLUSH_MS at most: the SDK's
    flush exports in the calling thread with the exporter's own timeout, so it runs in a
    daemon thread, which an export still hanging then does not keep alive."""
    flusher = threading.Thread(
        target=provider.force_flush, name="agentscript-otel-exit-flush", daemon=True
    )
    flusher.start()
    flusher.join(EXIT_FLUSH_MS / 1000)
