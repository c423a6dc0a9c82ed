"""OpenTelemetry export: one trace per turn after the GenAI semantic conventions, checked with
the SDK's in-memory exporter for an Agent Script turn and a Mantle turn."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tests.integrations.usage_model import UsageModel

import agentscript
from agentscript.cli import main
from agentscript.integrations.otel import Telemetry, TelemetryConfigError, telemetry_from_env
from agentscript.models.scripted import Move

ROOT = Path(__file__).resolve().parents[2]
SECURITY_GATE = ROOT / "examples" / "security_gate" / "security_gate.agent"

AGENT = """\
system:
    instructions: "Be brief."
    messages:
        error: "Failed."
config:
    developer_name: "otel_agent"
variables:
    status: mutable string = ""
start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | Route.
        actions:
            go: @utils.transition to @subagent.orders
subagent orders:
    description: "orders"
    reasoning:
        instructions: ->
            | Look orders up. Secret-ish prompt text.
        actions:
            lookup: @actions.lookup
                set @variables.status = @outputs.status
            hidden: @actions.lookup
                available when @variables.status == "never"
    actions:
        lookup:
            description: "Look an order up"
            target: "flow://Lookup"
            outputs:
                status: string
"""


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


def telemetry(exporter: InMemorySpanExporter, *, content: bool = False) -> Telemetry:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Telemetry.for_provider(provider, capture_content=content)


def by_name(spans: tuple[ReadableSpan, ...], prefix: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


def agent_turn(tmp_path: Path, exporter: InMemorySpanExporter, *, content: bool) -> None:
    path = tmp_path / "otel.agent"
    path.write_text(AGENT)
    agent = agentscript.load(path, dialect="agentscript")
    agent.telemetry = telemetry(exporter, content=content)
    model = UsageModel(
        [
            Move(calls=[("go", {})]),
            Move(calls=[("lookup", {}), ("hidden", {})]),
            Move(text="Shipped."),
        ],
        input_tokens=120,
        output_tokens=9,
        name="openai:gpt-test",
    )
    stubs = agentscript.actions.StubBook.from_data({"lookup": {"outputs": {"status": "shipped"}}})
    reply = agent.session(model=model, stubs=stubs, session_id="s-1").send("where is it?")
    assert reply.error is None


def test_agent_script_turn_is_one_trace_with_genai_spans(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    agent_turn(tmp_path, exporter, content=False)
    spans = exporter.get_finished_spans()
    (root,) = by_name(spans, "invoke_agent")
    assert root.name == "invoke_agent otel_agent"
    assert root.parent is None
    assert {s.context.trace_id for s in spans} == {root.context.trace_id}
    attrs = root.attributes or {}
    assert attrs["gen_ai.operation.name"] == "invoke_agent"
    assert attrs["gen_ai.conversation.id"] == "s-1"
    assert attrs["gen_ai.usage.input_tokens"] == 360
    assert attrs["agentscript.llm_calls"] == 3

    chats = by_name(spans, "chat ")
    assert [s.name for s in chats] == ["chat openai:gpt-test"] * 3
    for span in chats:
        assert span.parent is not None and span.parent.span_id == root.context.span_id
        a = span.attributes or {}
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.provider.name"] == "openai"
        assert a["gen_ai.request.model"] == "openai:gpt-test"
        assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (120, 9)
    assert [tuple((s.attributes or {})["gen_ai.response.finish_reasons"]) for s in chats] == [
        ("tool_calls",),
        ("tool_calls",),
        ("stop",),
    ]

    (tool,) = by_name(spans, "execute_tool")
    assert tool.name == "execute_tool lookup"
    assert tool.parent is not None and tool.parent.span_id == root.context.span_id
    tool_attrs = tool.attributes or {}
    assert tool_attrs["gen_ai.tool.name"] == "lookup"
    assert tool_attrs["gen_ai.tool.call.id"] == "call_2"

    events = [e.name for e in root.events]
    assert "agentscript.transition" in events
    assert "agentscript.refused" in events
    assert "agentscript.resolution" in events
    transition = next(e for e in root.events if e.name == "agentscript.transition")
    assert (transition.attributes or {})["agentscript.to"] == "orders"


def test_content_is_recorded_only_when_enabled(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    agent_turn(tmp_path, exporter, content=False)
    dumped = json.dumps([dict(s.attributes or {}) for s in exporter.get_finished_spans()])
    events = json.dumps(
        [dict(e.attributes or {}) for s in exporter.get_finished_spans() for e in s.events]
    )
    assert "Secret-ish" not in dumped + events and "where is it?" not in dumped + events
    exporter.clear()
    agent_turn(tmp_path, exporter, content=True)
    chat = by_name(exporter.get_finished_spans(), "chat ")[1]
    assert "Secret-ish" in str((chat.attributes or {})["agentscript.instructions"])
    assert "gen_ai.input.messages" in (chat.attributes or {})


def test_mantle_turn_is_one_trace_with_genai_spans(exporter: InMemorySpanExporter) -> None:
    agent = agentscript.load(ROOT / "examples" / "card_bank")
    agent.telemetry = telemetry(exporter)
    model = UsageModel(
        [
            Move(calls=[("activate_skill", {"skill": "check_balance"})]),
            Move(calls=[("get_balance", {})]),
            Move(text="Your balance is 1250.75 EUR."),
        ]
    )
    session = agent.session(
        model=model,
        variables={"project.authenticated": True, "project.customer_id": "1001"},
    )
    reply = session.send("balance?")
    assert reply.error is None, reply.error
    spans = exporter.get_finished_spans()
    (root,) = by_name(spans, "invoke_agent")
    assert root.name == "invoke_agent card-bank"
    assert len(by_name(spans, "chat ")) == 3
    tools = {s.name: s for s in by_name(spans, "execute_tool")}
    assert "execute_tool get_balance" in tools
    span = tools["execute_tool get_balance"]
    assert span.parent is not None and span.parent.span_id == root.context.span_id
    assert (span.attributes or {})["gen_ai.tool.call.id"] == "call_2"
    assert any(e.name.startswith("agentscript.skill") for e in root.events)


def test_failed_turn_marks_the_turn_span_as_error(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    path = tmp_path / "otel.agent"
    path.write_text(AGENT)
    agent = agentscript.load(path, dialect="agentscript")
    agent.telemetry = telemetry(exporter)
    reply = agent.session(model=UsageModel([])).send("x")  # no move: the model fails
    assert reply.error is not None
    (root,) = by_name(exporter.get_finished_spans(), "invoke_agent")
    assert (root.attributes or {})["error.type"] == "TurnError"
    assert not root.status.is_ok


def test_env_configuration() -> None:
    assert telemetry_from_env({}) is None
    assert telemetry_from_env({"OTEL_TRACES_EXPORTER": "none"}) is None
    assert telemetry_from_env({"OTEL_TRACES_EXPORTER": "console"}) is not None
    with pytest.raises(TelemetryConfigError, match="otlp, console or none"):
        telemetry_from_env({"OTEL_TRACES_EXPORTER": "zipkin"})


def test_an_unreachable_collector_is_said_once_per_kind_of_failure_not_per_retry(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The OTLP exporter logged a warning per retry ("Transient error ... retrying in 2.08s")
    # and an error per batch lost, on stderr, between a chat's replies.
    import logging

    assert telemetry_from_env({"OTEL_TRACES_EXPORTER": "otlp"}) is not None
    exporter_log = logging.getLogger("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    retry = "Transient error %s encountered while exporting %s batch, retrying in %.2fs."
    lost = "Failed to export %s batch due to timeout, max retries or shutdown."
    with caplog.at_level(logging.WARNING):
        for backoff in (1.0, 2.08, 4.1):
            exporter_log.warning(retry, "connection refused", "traces", backoff)
        for _ in range(3):
            exporter_log.error(lost, "traces")
    shown = [r.getMessage() for r in caplog.records if r.name == exporter_log.name]
    assert shown == [
        "OpenTelemetry: Transient error connection refused encountered while exporting traces "
        "batch, retrying in 1.00s. (not shown again)",
        "OpenTelemetry: Failed to export traces batch due to timeout, max retries or shutdown. "
        "(not shown again)",
    ]


def test_run_otel_console_prints_spans_to_stderr_only() -> None:
    result = CliRunner().invoke(
        main,
        [
            "run",
            str(SECURITY_GATE),
            "--conversation",
            str(SECURITY_GATE.with_name("early_update_refused.yaml")),
            "--json",
            "--otel",
            "console",
        ],
    )
    json.loads(result.stdout)  # stdout is still the JSON report
    assert '"name": "invoke_agent' in result.stderr


def test_export_and_the_sessions_step_stream_both_see_every_step(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    """Session.on_step (the server's stream) and OpenTelemetry both watch the trace."""
    path = tmp_path / "otel.agent"
    path.write_text(AGENT)
    agent = agentscript.load(path, dialect="agentscript")
    agent.telemetry = telemetry(exporter)
    moves = [Move(calls=[("go", {})]), Move(text="Hello."), Move(text="Again.")]
    model = UsageModel(moves, name="openai:gpt-test")
    session = agent.session(model=model)
    seen: list[str] = []
    session.on_step = lambda step: seen.append(step["type"])
    reply = session.send("hi")
    assert reply.error is None
    assert seen == [step["type"] for step in reply.trace["planTrace"]["steps"]]
    assert len(by_name(exporter.get_finished_spans(), "chat ")) == 2
    second = session.send("again")  # the stream still works on the next turn
    assert second.error is None and len(seen) > len(reply.trace["planTrace"]["steps"])


def test_a_failed_actions_error_text_is_exported_only_with_content_capture(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    path = tmp_path / "otel.agent"
    path.write_text(AGENT)
    secret = "SSN 078-05-1120"

    def failing_turn(content: bool) -> ReadableSpan:
        exporter.clear()
        agent = agentscript.load(path, dialect="agentscript")
        agent.telemetry = telemetry(exporter, content=content)
        model = UsageModel([Move(calls=[("go", {})]), Move(calls=[("lookup", {})]), Move(text=".")])
        stubs = agentscript.actions.StubBook.from_data({"lookup": {"error": f"bad {secret}"}})
        agent.session(model=model, stubs=stubs).send("x")
        (span,) = by_name(exporter.get_finished_spans(), "execute_tool lookup")
        return span

    hidden = failing_turn(content=False)
    assert not hidden.status.is_ok and (hidden.attributes or {})["error.type"]
    assert secret not in str(hidden.status.description)
    shown = failing_turn(content=True)
    assert secret in str(shown.status.description)


def test_run_with_a_collector_that_never_answers_exits_after_a_short_flush(
    tmp_path: Path,
) -> None:
    import os
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as hung:  # accepts connections, never answers
        hung.bind(("127.0.0.1", 0))
        hung.listen(16)
        port = hung.getsockname()[1]
        env = {
            **os.environ,
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "120",  # without the bound, the exit waits this long
        }
        started = time.monotonic()
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "agentscript.cli",
                "run",
                str(SECURITY_GATE),
                "--conversation",
                str(SECURITY_GATE.with_name("early_update_refused.yaml")),
                "--json",
                "--otel",
                "otlp",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=100,
        )
        took = time.monotonic() - started
    json.loads(run.stdout)
    assert "Traceback" not in run.stderr
    assert took < 60  # the exporter's 120 s are not waited for


def test_a_chat_span_after_the_history_was_trimmed_says_where_its_messages_start(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    """Its LLM_STEP goes on from the previous call's messages from ``messagesDropped`` on (the
    oldest were trimmed): exported as ``agentscript.messages_dropped``, with content only."""
    from agentscript.limits import Limits
    from agentscript.models.scripted import ScriptedModel

    path = tmp_path / "otel.agent"
    path.write_text(AGENT)
    agent = agentscript.load(path, dialect="agentscript")
    agent.telemetry = telemetry(exporter, content=True)
    model = ScriptedModel([Move(text="ok " + "y" * 300) for _ in range(8)])
    session = agent.session(model=model, limits=Limits(max_history_chars=1500))
    for number in range(8):
        assert session.send(f"{number} " + "x" * 300).error is None
    chats = [dict(s.attributes or {}) for s in by_name(exporter.get_finished_spans(), "chat ")]
    dropped = [chat.get("agentscript.messages_dropped") for chat in chats]
    assert dropped[0] is None and all(isinstance(d, int) and d > 0 for d in dropped[4:])
    assert all(chat["agentscript.messages_from"] > 0 for chat in chats[1:])
