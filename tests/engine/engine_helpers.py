"""Shared helpers of the engine tests: load test agents, play conversation files, read traces."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import agentscript
from agentscript.conversation import load_conversation
from agentscript.engine.session import AgentBase, Reply, Session
from agentscript.engine.turn import Limits
from agentscript.models.scripted import ScriptedModel, parse_move
from agentscript.playback import Playback, play
from agentscript.trace_inputs import rebuild_messages

HERE = Path(__file__).parent
AGENTS = HERE / "agents"
CONVERSATIONS = HERE / "conversations"


# The top of a test agent written in a test: its system messages and its name.
HEADER = """\
system:
    instructions: "Help."
    messages:
        welcome: "Hi"
        error: "ERR"

config:
    developer_name: "{name}"
"""


def agent(tmp_path: Path, name: str, body: str) -> AgentBase:
    """An agent named ``name`` whose blocks after the header are ``body``, loaded."""
    path = tmp_path / f"{name}.agent"
    path.write_text(HEADER.format(name=name) + body)
    return agentscript.load(path)


def load_agent(name: str) -> AgentBase:
    return agentscript.load(AGENTS / f"{name}.agent")


def play_file(agent: str, conversation: str) -> Playback:
    """Play ``conversations/<conversation>.yaml`` against ``agents/<agent>.agent``."""
    return play(load_agent(agent), load_conversation(CONVERSATIONS / f"{conversation}.yaml"))


def steps(reply: Reply, kind: str | None = None) -> list[dict[str, Any]]:
    all_steps: list[dict[str, Any]] = reply.trace["planTrace"]["steps"]
    return [s for s in all_steps if kind is None or s["type"] == kind]


def types(reply: Reply) -> list[str]:
    return [s["type"] for s in steps(reply)]


class Scripted:
    """A session driven turn by turn with moves written inline (for limits and restore)."""

    def __init__(
        self,
        agent: str | AgentBase,
        *,
        variables: dict[str, Any] | None = None,
        stubs: dict[str, Any] | None = None,
        limits: Limits | None = None,
    ) -> None:
        from agentscript.actions.registry import StubBook

        self.agent = load_agent(agent) if isinstance(agent, str) else agent
        self.model = ScriptedModel()
        self.session: Session = self.agent.session(
            model=self.model,
            variables=variables or {},
            stubs=StubBook.from_data(stubs or {}),
            limits=limits,
        )

    def send(self, text: str, *moves: dict[str, Any]) -> Reply:
        self.model.begin_turn([parse_move(m) for m in moves])
        return self.session.send(text)


def assert_well_formed(messages: list[dict[str, Any]]) -> None:
    """Every assistant tool call is answered by its tool result before any other message.

    Provider APIs (OpenAI, Anthropic) reject a history that breaks this, so the engine
    must never produce one.
    """
    index = 0
    while index < len(messages):
        message = messages[index]
        index += 1
        calls = [c["id"] for c in message.get("tool_calls", [])]
        if message["role"] == "tool":
            raise AssertionError(f"tool result without a preceding call: {message}")
        if not calls:
            continue
        answered = []
        while index < len(messages) and messages[index]["role"] == "tool":
            answered.append(messages[index]["tool_call_id"])
            index += 1
        assert answered == calls, f"calls {calls} answered by {answered}"


def llm_inputs(*replies: Reply) -> list[list[dict[str, Any]]]:
    """The full messages of every LLM call of ``replies`` (one session's turns, from its first,
    in order), rebuilt from the traces' deltas (``input.messagesFrom``)."""
    return rebuild_messages(reply.trace for reply in replies)


def assert_histories_well_formed(*replies: Reply) -> None:
    """Every history the model was sent in these turns (one session's, from its first)."""
    for messages in llm_inputs(*replies):
        assert_well_formed(messages)
