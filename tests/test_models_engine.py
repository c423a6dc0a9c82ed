"""The engine against real providers over real HTTP: local stand-in OpenAI and Anthropic servers.

Each test runs an agent (tests/agents_models/shop.agent) through the Python API or through
``agentscript chat`` (scripted mode, click's CliRunner) and asserts on what the provider put
on the wire: the tools offered follow ``available when``, outputs marked ``filter_from_agent``
never reach the model, and the system text is the engine's system prompt plus the resolved
instructions of the RESOLUTION_STEP. No network, no real keys.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

import agentscript
from agentscript.cli import main
from agentscript.engine.session import Agent, Reply, Session
from agentscript.models.anthropic_provider import AnthropicModel
from agentscript.models.base import Model
from agentscript.models.openai_lean import LeanOpenAIModel
from agentscript.models.openai_provider import OpenAIModel
from agentscript.models.recording import RAW_ARGUMENTS_KEY
from fakes.llm_servers import AnthropicServer, FakeCall, OpenAIServer, Recorded
from fakes.llm_servers import Reply as Fake

AGENTS = Path(__file__).parent / "agents_models"
SHOP = AGENTS / "shop.agent"
SECRET = "tok-SECRET-42"
KEY = "sk-test-engine-0000"
SYSTEM = "You are a shop assistant. Be brief."


# ---------------------------------------------------------------------- protocols


@dataclass(frozen=True)
class Protocol:
    """What differs between the two wire formats, for assertions."""

    name: str
    server: type[OpenAIServer] | type[AnthropicServer]
    spec: str
    key_env: str
    lean: bool = False  # the OpenAI wire format through the lean client (openai-lean:)

    def model(self, server: OpenAIServer | AnthropicServer, **options: Any) -> Model:
        options.setdefault("api_key", KEY)
        options.setdefault("retry_base_delay", 0.0)
        if self.name == "openai":
            cls = LeanOpenAIModel if self.lean else OpenAIModel
            return cls("gpt-test", base_url=server.base_url, **options)
        return AnthropicModel("claude-test", base_url=server.base_url, **options)

    def tools(self, body: dict[str, Any]) -> list[str]:
        if self.name == "openai":
            return [t["function"]["name"] for t in body.get("tools", [])]
        return [t["name"] for t in body.get("tools", [])]

    def system(self, body: dict[str, Any]) -> str:
        if self.name == "openai":
            first = body["messages"][0]
            assert first["role"] == "system"
            return str(first["content"])
        return str(body.get("system", ""))

    def conversation(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        """The messages after the system text."""
        messages: list[dict[str, Any]] = body["messages"]
        return messages[1:] if self.name == "openai" else messages

    def tool_results(self, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """(call id, decoded result) of every tool result in the request, in order."""
        found: list[tuple[str, dict[str, Any]]] = []
        for message in self.conversation(body):
            if self.name == "openai":
                if message["role"] == "tool":
                    found.append((message["tool_call_id"], json.loads(message["content"])))
            elif message["role"] == "user" and isinstance(message["content"], list):
                for block in message["content"]:
                    if block.get("type") == "tool_result":
                        found.append((block["tool_use_id"], json.loads(block["content"])))
        return found

    def call_id(self, index: int) -> str:
        return f"call_{index}" if self.name == "openai" else f"toolu_{index}"


OPENAI = Protocol("openai", OpenAIServer, "openai:gpt-test", "OPENAI_API_KEY")
ANTHROPIC = Protocol("anthropic", AnthropicServer, "anthropic:claude-test", "ANTHROPIC_API_KEY")
OPENAI_LEAN = Protocol("openai", OpenAIServer, "openai-lean:gpt-test", "OPENAI_API_KEY", lean=True)
PROTOCOLS = [
    pytest.param(OPENAI, id="openai"),
    pytest.param(OPENAI_LEAN, id="openai-lean"),
    pytest.param(ANTHROPIC, id="anthropic"),
]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "OPENAI_ORG_ID",
        "OPENAI_PROJECT_ID",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_BASE_URL",
        "AGENTSCRIPT_MODEL",
        "AGENTSCRIPT_CONFIG",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path))


@pytest.fixture(scope="module")
def shop() -> Agent:
    return agentscript.load(SHOP)


@pytest.fixture(params=PROTOCOLS)
def protocol(request: pytest.FixtureRequest) -> Protocol:
    value: Protocol = request.param
    return value


@pytest.fixture
def serve(protocol: Protocol) -> Iterator[Callable[[list[Fake]], OpenAIServer | AnthropicServer]]:
    """Start the protocol's fake server with a script; stopped at the end of the test."""
    started: list[OpenAIServer | AnthropicServer] = []

    def start(script: list[Fake]) -> OpenAIServer | AnthropicServer:
        server = protocol.server(script)
        server.__enter__()
        started.append(server)
        return server

    yield start
    for server in started:
        server.__exit__(None, None, None)


def session_for(
    agent: Agent, model: Model, *, stream: list[str] | None = None, **options: Any
) -> Session:
    session = agent.session(model=model, **options)
    if stream is not None:
        session.on_text = stream.append
    return session


def steps(reply: Reply, kind: str) -> list[dict[str, Any]]:
    return [s for s in reply.trace["planTrace"]["steps"] if s["type"] == kind]


def resolutions(reply: Reply) -> list[dict[str, Any]]:
    """The RESOLUTION_STEPs that led to an LLM call (not those cut by a transition)."""
    return [s for s in steps(reply, "RESOLUTION_STEP") if "transition" not in s]


def assert_system_matches_trace(
    protocol: Protocol, requests: list[Recorded], replies: list[Reply]
) -> None:
    """Request i carries the system prompt + the instructions of the i-th resolution."""
    resolved = [r for reply in replies for r in resolutions(reply)]
    llm_steps = [s for reply in replies for s in steps(reply, "LLM_STEP")]
    assert len(requests) == len(resolved) == len(llm_steps)
    for request, resolution, llm in zip(requests, resolved, llm_steps, strict=True):
        assert llm["input"]["system"] == SYSTEM
        expected = SYSTEM + "\n\n" + resolution["instructions"]
        assert protocol.system(request.body) == expected
        assert protocol.tools(request.body) == resolution["tools"]


# ---------------------------------------------------------------------- Python API


@pytest.mark.parametrize("streaming", [False, True], ids=["plain", "stream"])
def test_gates_hidden_outputs_and_system_text(
    protocol: Protocol, serve: Any, shop: Agent, streaming: bool
) -> None:
    server = serve(
        [
            Fake(calls=[FakeCall.of("verify", {"email": "ann@example.com"}, id="c1")]),
            Fake(text="You are verified."),
            Fake(calls=[FakeCall.of("lookup", {"order_id": "7"}, id="c2")]),
            Fake(text="Order 7 has shipped."),
        ]
    )
    chunks: list[str] = []
    session = session_for(shop, protocol.model(server), stream=chunks if streaming else None)

    first = session.send("I am ann@example.com")
    second = session.send("Where is order 7?")

    assert (first.text, first.actions, first.error) == ("You are verified.", ["verify"], None)
    assert (second.text, second.actions) == ("Order 7 has shipped.", ["lookup"])
    assert second.variables["verified"] is True
    bodies = [r.body for r in server.requests]
    assert all(bool(b.get("stream")) is streaming for b in bodies)
    if streaming:
        assert "".join(chunks) == "You are verified.Order 7 has shipped."
    # The gated tool is offered only once @variables.verified is true.
    assert protocol.tools(bodies[0]) == ["verify", "remember"]
    assert protocol.tools(bodies[1]) == ["verify", "lookup", "remember"]
    assert protocol.tools(bodies[2]) == ["verify", "lookup", "remember"]
    assert "lookup" in first.trace["planTrace"]["steps"][1]["hiddenTools"]
    # The hidden output never reaches the model; the visible one does.
    assert protocol.tool_results(bodies[1]) == [("c1", {"verified": True})]
    for body in bodies:
        assert SECRET not in json.dumps(body)
    assert steps(first, "ACTION_STEP")[0]["output"]["secret_token"] == SECRET
    # The system text is exactly what the engine resolved for that call.
    assert_system_matches_trace(protocol, server.requests, [first, second])
    assert "use lookup to find orders" not in protocol.system(bodies[0])
    assert "use lookup to find orders" in protocol.system(bodies[1])


@pytest.mark.parametrize("streaming", [False, True], ids=["plain", "stream"])
def test_parallel_tool_calls(protocol: Protocol, serve: Any, shop: Agent, streaming: bool) -> None:
    server = serve(
        [
            Fake(
                calls=[
                    FakeCall.of("verify", {"email": "bo@example.com"}, id="p1"),
                    FakeCall.of("remember", {"note": "prefers email"}, id="p2"),
                ],
                interleave=True,
            ),
            Fake(text="Done."),
        ]
    )
    session = session_for(shop, protocol.model(server), stream=[] if streaming else None)

    reply = session.send("Verify me and remember I like email")

    assert reply.text == "Done."
    assert reply.actions == ["verify", "remember"]
    assert reply.variables["verified"] is True
    assert reply.variables["note"] == "prefers email"
    results = protocol.tool_results(server.requests[1].body)
    assert [call_id for call_id, _ in results] == ["p1", "p2"]
    assert results[0][1] == {"verified": True}
    assert results[1][1]["status"] == "updated"
    assert_system_matches_trace(protocol, server.requests, [reply])


@pytest.mark.parametrize("streaming", [False, True], ids=["plain", "stream"])
def test_malformed_arguments_are_refused_and_reported_to_the_model(
    protocol: Protocol, serve: Any, shop: Agent, streaming: bool
) -> None:
    server = serve(
        [
            Fake(calls=[FakeCall("verify", '{"email": "x@example.com"', id="m1")]),
            Fake(text="Please give me your email again."),
        ]
    )
    session = session_for(shop, protocol.model(server), stream=[] if streaming else None)

    reply = session.send("I am x@example.com")

    assert reply.text == "Please give me your email again."
    assert reply.actions == []
    assert reply.variables["verified"] is False
    refused = steps(reply, "REFUSED_STEP")
    assert len(refused) == 1 and "not a JSON object" in refused[0]["reason"]
    [(call_id, result)] = protocol.tool_results(server.requests[1].body)
    assert call_id == "m1"
    assert "not a JSON object" in result["error"]


@pytest.mark.parametrize(
    ("status", "needle"), [(401, "401"), (429, "429"), (500, "500")], ids=["401", "429", "500"]
)
def test_http_errors_fail_the_turn_and_the_session_goes_on(
    protocol: Protocol, serve: Any, shop: Agent, status: int, needle: str
) -> None:
    failures = [Fake(status=status, error="scripted failure")] * 2
    server = serve([*failures, Fake(text="Back again.")])
    session = session_for(shop, protocol.model(server, max_retries=1))

    failed = session.send("hello")

    assert failed.error is not None and needle in failed.error
    assert failed.error.startswith("the model failed:")
    assert KEY not in failed.error
    assert failed.text == "Sorry, something went wrong."
    assert steps(failed, "LLM_STEP")[0]["error"]
    # 401 is not retried; 429 and 5xx are, once (max_retries=1).
    expected_requests = 1 if status == 401 else 2
    assert len(server.requests) == expected_requests
    if status == 401:
        server.script.pop(0)  # the unused second failure

    after = session.send("hello again")
    assert (after.text, after.error) == ("Back again.", None)


def test_transient_error_is_retried_within_the_turn(
    protocol: Protocol, serve: Any, shop: Agent
) -> None:
    server = serve([Fake(status=429), Fake(status=500), Fake(text="Hi!")])
    session = session_for(shop, protocol.model(server, max_retries=2))

    reply = session.send("hello")

    assert (reply.text, reply.error) == ("Hi!", None)
    assert len(server.requests) == 3
    assert server.requests[0].body == server.requests[2].body


def test_timeout_fails_the_turn(protocol: Protocol, serve: Any, shop: Agent) -> None:
    server = serve([Fake(text="too late", delay=30.0)])
    session = session_for(shop, protocol.model(server, timeout=0.2, max_retries=0))

    reply = session.send("hello")

    assert reply.error is not None and "did not answer within 0.2 s" in reply.error
    assert reply.text == "Sorry, something went wrong."


def test_streamed_failure_after_text_is_not_retried(
    protocol: Protocol, serve: Any, shop: Agent
) -> None:
    server = serve([Fake(text="Partial answer", stream_error="boom"), Fake(text="unused")])
    chunks: list[str] = []
    session = session_for(shop, protocol.model(server, max_retries=2), stream=chunks)

    reply = session.send("hello")

    assert reply.error is not None
    assert len(server.requests) == 1
    # What streamed before the failure, then the failed turn's message as its own piece.
    assert chunks[-2:] == ["\n\n", reply.text]
    assert "".join(chunks[:-2]) and "Partial answer".startswith("".join(chunks[:-2]))


def test_action_failure_goes_back_to_the_model(protocol: Protocol, serve: Any, shop: Agent) -> None:
    server = serve(
        [Fake(calls=[FakeCall.of("lookup", {"order_id": "0"}, id="f1")]), Fake(text="No.")]
    )
    session = session_for(shop, protocol.model(server), variables={"verified": True})

    reply = session.send("order 0?")

    assert (reply.text, reply.error) == ("No.", None)
    [(_, result)] = protocol.tool_results(server.requests[1].body)
    assert "no order 0" in result["error"]


# ---------------------------------------------------------------------- agentscript chat


def run_cli(args: list[str], lines: list[str], env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(main, args, input="".join(f"{line}\n" for line in lines), env=env)


def chat_args(protocol: Protocol, server: OpenAIServer | AnthropicServer, *extra: str) -> list[str]:
    return ["chat", str(SHOP), "--model", protocol.spec, "--base-url", server.base_url, *extra]


def test_chat_over_http(protocol: Protocol, serve: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    server = serve(
        [
            Fake(calls=[FakeCall.of("verify", {"email": "cy@example.com"})]),
            Fake(text="Verified, Cy."),
            Fake(text="Bye!"),
        ]
    )
    monkeypatch.setenv(protocol.key_env, KEY)

    result = run_cli(
        chat_args(protocol, server, "--var", "customer=Cy", "--show", "tools"),
        ["I am cy@example.com", "thanks"],
    )

    assert result.exit_code == 0, result.output
    assert result.stdout == "Verified, Cy.\n\nBye!\n\n"
    assert "tools: verify, remember; hidden: lookup" in result.stderr
    assert "Traceback" not in result.output
    bodies = [r.body for r in server.requests]
    assert all(b.get("stream") for b in bodies)  # chat streams
    assert "Help the customer Cy." in protocol.system(bodies[0])
    assert protocol.tools(bodies[2]) == ["verify", "lookup", "remember"]
    assert SECRET not in json.dumps(bodies)


def test_chat_model_error_is_a_message_and_the_chat_goes_on(
    protocol: Protocol, serve: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = serve([Fake(status=401, error="invalid key"), Fake(text="Hello there.")])
    monkeypatch.setenv(protocol.key_env, KEY)

    result = run_cli(
        chat_args(protocol, server),
        ["hi", "hi again"],
    )

    assert result.exit_code == 1  # a turn failed
    assert result.stdout == "Sorry, something went wrong.\n\nHello there.\n\n"
    assert "error: the model failed:" in result.stderr and "401" in result.stderr
    assert KEY not in result.output
    assert "Traceback" not in result.output


def test_chat_without_key_is_a_usage_error(protocol: Protocol) -> None:
    result = run_cli(["chat", str(SHOP), "--model", protocol.spec], ["hi"])

    assert result.exit_code == 2
    assert "API key" in result.stderr or "key" in result.stderr.lower()
    assert "Traceback" not in result.output


# ---------------------------------------------------------------------- record and replay


def replay(conversation: Path, trace_dir: Path) -> dict[str, Any]:
    result = CliRunner().invoke(
        main,
        [
            "run",
            str(SHOP),
            "--conversation",
            str(conversation),
            "--json",
            "--trace-dir",
            str(trace_dir),
        ],
    )
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


@pytest.mark.parametrize("protocol", [pytest.param(OPENAI, id="openai")])
def test_recorded_chat_replays_identically(
    protocol: Protocol, serve: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = serve(
        [
            # turn 1: a malformed call, then parallel calls, then text
            Fake(calls=[FakeCall("verify", "{oops", id="x")]),
            Fake(
                calls=[
                    FakeCall.of("verify", {"email": "di@example.com"}),
                    FakeCall.of("remember", {"note": "likes tea"}),
                ]
            ),
            Fake(text="Verified; noted."),
            # turn 2: an action that fails, then one that works
            Fake(calls=[FakeCall.of("lookup", {"order_id": "0"})]),
            Fake(calls=[FakeCall.of("lookup", {"order_id": "12"})]),
            Fake(text="Order 12 shipped."),
            # turn 3: text only
            Fake(text="Anything else?"),
        ]
    )
    monkeypatch.setenv(protocol.key_env, KEY)
    record = tmp_path / "chat.yaml"
    trace_dir = tmp_path / "traces"

    result = run_cli(
        chat_args(
            protocol,
            server,
            *("--var", "customer=Di", "--var", "count=3"),
            *("--record", str(record), "--trace-dir", str(trace_dir)),
        ),
        ["I am di@example.com, I like tea", "order 0 or 12?", "thanks"],
    )
    assert result.exit_code == 0, result.output
    live = result.stdout.split("\n\n")[:3]
    assert live == ["Verified; noted.", "Order 12 shipped.", "Anything else?"]

    data = yaml.safe_load(record.read_text(encoding="utf-8"))
    assert data["variables"] == {"customer": "Di", "count": 3}
    assert data["actions"]["verify_customer"] == [
        {"outputs": {"verified": True, "secret_token": SECRET}}
    ]
    lookups = data["actions"]["lookup_order"]
    assert "no order 0" in lookups[0]["error"]
    assert lookups[1] == {"outputs": {"status": "order 12 shipped"}}
    first_moves = data["turns"][0]["model"]
    assert first_moves[0] == {"tool": "verify", "args": {RAW_ARGUMENTS_KEY: "{oops"}}
    assert first_moves[1] == {
        "tools": [
            {"tool": "verify", "args": {"email": "di@example.com"}},
            {"tool": "remember", "args": {"note": "likes tea"}},
        ]
    }
    assert first_moves[2] == {"say": "Verified; noted."}
    assert data["turns"][2] == {"user": "thanks", "model": [{"say": "Anything else?"}]}

    played = replay(record, tmp_path / "replayed")
    live_turns = read_traces(trace_dir)
    played_traces = read_traces(tmp_path / "replayed")
    assert [t["response"] for t in played["turns"]] == [t["response"] for t in live_turns]
    assert [t["response"] for t in played["turns"]] == live
    assert [t["actions"] for t in played["turns"]] == [
        ["verify", "remember"],
        ["lookup", "lookup"],
        [],
    ]
    assert all(t["error"] is None and t["unused_moves"] == [] for t in played["turns"])
    assert played["variables"] == {
        "verified": True,
        "customer": "Di",
        "count": 3,
        "note": "likes tea",
    }
    # The replay took the same decisions: same steps, same tools offered, same action results.
    assert [decisions(t) for t in played_traces] == [decisions(t) for t in live_turns]
    refused = [
        s for t in live_turns for s in t["planTrace"]["steps"] if s["type"] == "REFUSED_STEP"
    ]
    assert [s["name"] for s in refused] == ["verify"]


def read_traces(folder: Path) -> list[dict[str, Any]]:
    paths = sorted(folder.rglob("*.json"), key=lambda p: int(p.stem.rsplit("-", 1)[1]))
    return [json.loads(p.read_text(encoding="utf-8")) for p in paths]


def decisions(trace: dict[str, Any]) -> list[tuple[Any, ...]]:
    """What a turn decided, without ids, timings and refusal wording."""
    out: list[tuple[Any, ...]] = []
    for step in trace["planTrace"]["steps"]:
        kind = step["type"]
        if kind == "RESOLUTION_STEP":
            out.append((kind, step["instructions"], tuple(step["tools"]), step["postVars"]))
        elif kind == "ACTION_STEP":
            out.append((kind, step["name"], json.dumps(step["output"]), step["error"]))
        elif kind == "RESPONSE_STEP":
            out.append((kind, step["text"]))
        else:
            out.append((kind, step.get("name") or step.get("node")))
    return out
