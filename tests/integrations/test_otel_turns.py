"""OpenTelemetry export, from the audit of its spans: a failed model call's span lasts its wait;
a target URL's credentials stay out; every turn that starts ends its span (a failed, cancelled
or refused one as an error); attribute values are bounded, with a marker; a served turn's
span carries its request id."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import agentscript
import agentscript.engine.llm as llm_module
import agentscript.trace as trace_module
from agentscript.actions import StubBook
from agentscript.integrations.otel import (
    MAX_ATTRIBUTE_CHARS,
    Telemetry,
    TelemetryConfigError,
    telemetry_from_env,
)
from agentscript.models.base import ModelRequest, ModelResponse, TextSink
from agentscript.models.scripted import Move, ScriptedModel

SECRET = "sk-live-QUERYSECRET"
AGENT = """\
system:
    instructions: "Be brief."
    messages:
        error: "Failed."
config:
    developer_name: "spans"
start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | Help.
        actions:
            lookup: @actions.lookup
            bye: @utils.end_session
                description: "end"
    actions:
        lookup:
            description: "Look an order up"
            target: "https://bot:hunter22@api.example.com/orders?api_key=SECRET"
            outputs:
                status: string
""".replace("SECRET", SECRET)


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


def telemetry(exporter: InMemorySpanExporter, **options: Any) -> Telemetry:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Telemetry.for_provider(provider, **options)


def load(tmp_path: Path, exporter: InMemorySpanExporter, **options: Any) -> agentscript.AgentBase:
    path = tmp_path / "spans.agent"
    path.write_text(AGENT)
    agent = agentscript.load(path)
    agent.telemetry = telemetry(exporter, **options)
    return agent


def named(exporter: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith(prefix)]


def root(exporter: InMemorySpanExporter) -> ReadableSpan:
    (span,) = named(exporter, "invoke_agent")
    return span


# ---------------------------------------------------------------- a failed call's chat span


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def perf_counter(self) -> float:
        return self.now


class FailsAfterWaiting:
    name = "test:fails"

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    async def complete(
        self, request: ModelRequest, *, stream: TextSink | None = None
    ) -> ModelResponse:
        self.clock.now += 0.6
        raise RuntimeError("model exploded")


def test_a_failed_model_calls_chat_span_lasts_its_wait(
    tmp_path: Path, exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()  # the engine's timing clock; the model moves it 0.6 s
    monkeypatch.setattr(llm_module, "time", clock)
    monkeypatch.setattr(trace_module, "time", clock)
    reply = load(tmp_path, exporter).session(model=FailsAfterWaiting(clock)).send("hi")
    assert reply.error is not None
    (chat,) = named(exporter, "chat ")
    assert chat.status.status_code is StatusCode.ERROR
    assert chat.end_time is not None and chat.start_time is not None
    assert chat.end_time - chat.start_time == 600_000_000


# ---------------------------------------------------------------- the target


def test_an_execute_tool_spans_target_holds_no_url_credentials(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    model = ScriptedModel([Move(calls=[("lookup", {})]), Move(text="Done.")])
    stubs = StubBook.from_data({"lookup": {"outputs": {"status": "shipped"}}})
    agent = load(tmp_path, exporter, capture_content=True)
    assert agent.session(model=model, stubs=stubs).send("where?").error is None
    (tool,) = named(exporter, "execute_tool")
    assert (tool.attributes or {})["agentscript.target"] == "https://api.example.com/orders"
    exported = json.dumps([dict(s.attributes or {}) for s in exporter.get_finished_spans()])
    assert SECRET not in exported and "hunter22" not in exported


# ---------------------------------------------------------------- every turn ends its span


class Blocks:
    """Never answers: the turn waits on it until cancelled."""

    name = "test:blocks"

    def __init__(self) -> None:
        self.asked = asyncio.Event()

    async def complete(
        self, request: ModelRequest, *, stream: TextSink | None = None
    ) -> ModelResponse:
        self.asked.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


def test_a_cancelled_turn_ends_its_span_as_an_error(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    agent = load(tmp_path, exporter)

    async def cut() -> None:
        model = Blocks()
        session = agent.session(model=model)
        turn = asyncio.create_task(session.send_async("hi"))
        await model.asked.wait()
        turn.cancel()
        with pytest.raises(asyncio.CancelledError):
            await turn

    asyncio.run(cut())
    span = root(exporter)
    assert span.status.status_code is StatusCode.ERROR
    assert (span.attributes or {})["error.type"] == "CancelledError"
    assert len(named(exporter, "chat ")) == 1  # the call it was waiting on


def test_a_turn_that_raises_ends_its_span_as_an_error(
    tmp_path: Path, exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = load(tmp_path, exporter).session(model=ScriptedModel([Move(text="Hello.")]))

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the reply could not be built")

    monkeypatch.setattr(session, "_reply", broken)
    with pytest.raises(RuntimeError) as raised:
        session.send("hi")
    span = root(exporter)
    assert span.status.status_code is StatusCode.ERROR
    assert (span.attributes or {})["error.type"] == type(raised.value).__name__


def test_a_trace_file_that_cannot_be_written_does_not_fail_the_turns_span(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    session = load(tmp_path, exporter).session(
        model=ScriptedModel([Move(text="Hello.")]), trace_dir=not_a_folder
    )
    reply = session.send("hi")
    assert reply.error is None and reply.trace_file is None
    assert root(exporter).status.status_code is not StatusCode.ERROR


def test_a_message_to_an_ended_session_has_its_span_as_it_has_its_trace_file(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    model = ScriptedModel([Move(text="Bye.", calls=[("bye", {})])])
    session = load(tmp_path, exporter).session(model=model, trace_dir=tmp_path / "traces")
    assert session.send("bye").ended
    exporter.clear()
    refused = session.send("hello again?")
    assert refused.refused and refused.trace_file is not None
    span = root(exporter)
    attributes = span.attributes or {}
    assert span.status.status_code is StatusCode.ERROR
    assert attributes["agentscript.refused"] is True
    assert attributes["agentscript.turn"] == 2 == refused.trace["turn"]
    assert [e.name for e in span.events] == ["agentscript.error"]


# ---------------------------------------------------------------- attribute sizes


def all_values(spans: Iterator[ReadableSpan] | tuple[ReadableSpan, ...]) -> list[Any]:
    values: list[Any] = []
    for span in spans:
        values += list((span.attributes or {}).values())
        values += [v for e in span.events for v in (e.attributes or {}).values()]
        values.append(span.status.description or "")
    return values


def chars(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, tuple | list):
        return sum(len(v) for v in value if isinstance(v, str))
    return 0


def test_a_huge_user_message_becomes_an_attribute_cut_to_the_bound_with_a_marker(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    agent = load(tmp_path, exporter, capture_content=True)
    reply = agent.session(model=ScriptedModel([Move(text="Hello.")])).send("M" * 1_000_000)
    assert reply.error is None
    values = all_values(exporter.get_finished_spans())
    assert max(chars(v) for v in values) <= MAX_ATTRIBUTE_CHARS
    user_input = (root(exporter).attributes or {})["agentscript.user_input"]
    assert isinstance(user_input, str) and user_input.startswith("MMM")
    assert user_input.endswith("of 1000000 characters kept]")


def test_every_attribute_value_is_within_a_small_bound(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    agent = load(tmp_path, exporter, capture_content=True, max_attribute_chars=120)
    model = ScriptedModel([Move(calls=[("lookup", {"x": "y" * 500})]), Move(text="z" * 500)])
    stubs = StubBook.from_data({"lookup": {"outputs": {"status": "s" * 500}}})
    agent.session(model=model, stubs=stubs).send("w" * 500)
    values = all_values(exporter.get_finished_spans())
    assert max(chars(v) for v in values) <= 120
    assert any(isinstance(v, str) and v.endswith("characters kept]") for v in values)


def test_the_bound_follows_otel_attribute_value_length_limit() -> None:
    env = {"OTEL_TRACES_EXPORTER": "console", "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT": "500"}
    configured = telemetry_from_env(env)
    assert configured is not None and configured.max_attribute_chars == 500
    default = telemetry_from_env({"OTEL_TRACES_EXPORTER": "console"})
    assert default is not None and default.max_attribute_chars == MAX_ATTRIBUTE_CHARS
    with pytest.raises(TelemetryConfigError, match="OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT"):
        telemetry_from_env({**env, "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT": "lots"})


# ---------------------------------------------------------------- the request id


def served_app(tmp_path: Path, exporter: InMemorySpanExporter, **options: Any) -> Any:
    """The ``spans`` agent served, its spans in ``exporter`` (``options``: of the telemetry)."""
    from agentscript.server.agents import load_agents, serve_agents
    from agentscript.server.app import create_app
    from agentscript.server.auth import ApiKeys
    from agentscript.server.standin import StandInModel
    from agentscript.store import store_from_url

    (tmp_path / "spans.agent").write_text(AGENT)
    agents = load_agents([str(tmp_path / "spans.agent")])
    for served_agent in agents:
        served_agent.telemetry = telemetry(exporter, **options)
    served = serve_agents(agents, {a.name: StandInModel() for a in agents})
    store = store_from_url(f"sqlite:///{tmp_path / 'spans.db'}")
    return create_app(served, store, keys=ApiKeys.of(), purge_every=None)


@asynccontextmanager
async def served_session(app: Any) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    """A client of ``app`` (its lifespan running) and a new session of its ``spans`` agent."""
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://test") as client,
    ):
        created = await client.post("/v1/agents/spans/sessions", json={})
        yield client, created.json()["session_id"]


def send_served(
    tmp_path: Path, exporter: InMemorySpanExporter, headers: list[dict[str, str]]
) -> None:
    """One session of the served app, and a message with each of ``headers``, in order."""
    app = served_app(tmp_path, exporter)

    async def scenario() -> None:
        async with served_session(app) as (client, sid):
            for n, sent_with in enumerate(headers):
                sent = await client.post(
                    f"/v1/sessions/{sid}/messages", json={"text": f"m{n}"}, headers=sent_with
                )
                assert sent.status_code == 200, sent.text

    asyncio.run(scenario())


STREAM = {"Accept": "text/event-stream"}


def test_a_served_turns_span_carries_its_request_id(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    plain, streamed = {"X-Request-ID": "req-plain-1"}, {"X-Request-ID": "req-stream-2", **STREAM}
    send_served(tmp_path, exporter, [plain, streamed])
    ids = [(s.attributes or {}).get("agentscript.request_id") for s in named(exporter, "invoke")]
    assert ids == ["req-plain-1", "req-stream-2"]


CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


def test_a_served_turn_continues_the_callers_trace_and_a_bad_traceparent_starts_its_own(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    caller = {"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"}  # the caller's span, sampled
    malformed = {"traceparent": "00-not-a-trace-01", **STREAM}  # ignored; a streamed turn's task
    send_served(tmp_path, exporter, [caller, malformed, {}])
    roots = named(exporter, "invoke")
    assert len(roots) == 3
    first, bad, none = roots
    assert first.context is not None and first.parent is not None
    assert format(first.context.trace_id, "032x") == CALLER_TRACE
    assert format(first.parent.span_id, "016x") == CALLER_SPAN
    assert bad.parent is None and none.parent is None
    assert bad.context is not None and format(bad.context.trace_id, "032x") != CALLER_TRACE
    # The turn's own spans (its model call) are in the caller's trace too.
    chats = [s for s in named(exporter, "chat") if s.context is not None]
    assert [format(s.context.trace_id, "032x") == CALLER_TRACE for s in chats].count(True) == 1


def test_a_turn_outside_a_request_has_no_request_id(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    load(tmp_path, exporter).session(model=ScriptedModel([Move(text="Hi.")])).send("hi")
    assert "agentscript.request_id" not in (root(exporter).attributes or {})
