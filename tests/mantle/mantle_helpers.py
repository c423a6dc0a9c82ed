"""Shared helpers for the Mantle runtime tests: copy card_bank or write a small project, play
conversation text or drive a session turn by turn, read trace steps by kind."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import agentscript
from agentscript.conversation import parse_conversation
from agentscript.engine.session import Reply
from agentscript.limits import Limits
from agentscript.mantle.runtime import MantleAgent
from agentscript.models.scripted import parse_move
from agentscript.playback import Playback, play

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "card_bank"
SIGNED_IN = """
variables:
  project.authenticated: true
  project.customer_id: "1001"
  project.customer_name: Ada
"""
# The first turn of many scenarios: card_replace started for a lost card, in its order_card
# block (the turns that follow are appended to it).
LOST_CARD = (
    SIGNED_IN
    + """turns:
  - user: "I lost my card"
    model:
      - tool: activate_skill
        args: {skill: card_replace}
      - tool: set_fields
        args: {reason: lost}
      - tool: activate_skill
        args: {skill: card_replace, block: order_card}
"""
)


AGENT = "agent:\n  id: t\n  persona: You are a bot.\n"


def make(tmp_path: Path, files: dict[str, str]) -> Path:
    """A project of ``files`` (path -> text) with a minimal agent.yml unless one is given."""
    root = tmp_path / "project"
    for name, text in {"agent.yml": AGENT, **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


class Driver:
    """One session driven turn by turn: each ``send`` scripts the model's moves for it."""

    def __init__(self, root: Path, limits: Limits | None = None) -> None:
        self.model = agentscript.ScriptedModel()
        kwargs: dict[str, Any] = {} if limits is None else {"limits": limits}
        self.session = agentscript.load(root).session(model=self.model, **kwargs)

    def send(self, text: str, *moves: dict[str, Any]) -> Reply:
        self.model.begin_turn([parse_move(m) for m in moves])
        return self.session.send(text)

    def restore(self, limits: Limits) -> None:
        """Go on with the saved session under other limits (as after a configuration change)."""
        saved = self.session.to_json()
        self.session = self.session.agent.restore(saved, model=self.model, limits=limits)

    def stack(self) -> list[tuple[str, str]]:
        frames = self.session.state.extra["mantle"]["stack"]
        return [(f["skill"], f["status"]) for f in frames]


def reply_steps(reply: Reply, kind: str) -> list[dict[str, Any]]:
    """The trace steps of ``kind`` in one reply (``steps`` reads a playback's turn)."""
    found: list[dict[str, Any]] = reply.trace["planTrace"]["steps"]
    return [s for s in found if s["type"] == kind]


def reply_said(reply: Reply) -> list[str]:
    """What one reply said, in order (``said`` reads a playback's turn)."""
    return [s["text"] for s in reply_steps(reply, "RESPONSE_STEP")]


def reply_skill_events(reply: Reply) -> list[tuple[str, str]]:
    """``(event, skill)`` of one reply's ``SKILL_STEP`` events (``skill_events``: a playback's)."""
    return [(s["event"], s["skill"]) for s in reply_steps(reply, "SKILL_STEP")]


def start(skill: str) -> dict[str, Any]:
    return {"tool": "activate_skill", "args": {"skill": skill}}


def copy_bank(tmp_path: Path) -> Path:
    project = tmp_path / "bank"
    shutil.copytree(EXAMPLE, project)
    return project


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new))


def load(project: Path) -> MantleAgent:
    agent = agentscript.load(project)
    assert isinstance(agent, MantleAgent)
    return agent


def run_text(agent: MantleAgent, text: str) -> Playback:
    return play(agent, parse_conversation(text))


def clean(playback: Playback) -> Playback:
    for turn in playback.turns:
        assert turn.reply.error is None, turn.reply.error
        assert turn.unused_moves == [], turn.unused_moves
    return playback


def steps(playback: Playback, turn: int, kind: str | None = None) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = playback.turns[turn - 1].reply.trace["planTrace"]["steps"]
    return [s for s in found if kind is None or s["type"] == kind]


def said(playback: Playback, turn: int, kind: str | None = None) -> list[str]:
    return [
        s["text"]
        for s in steps(playback, turn, "RESPONSE_STEP")
        if kind is None or s["kind"] == kind
    ]


def skill_events(playback: Playback, turn: int) -> list[tuple[str, str]]:
    return [(s["event"], s["skill"]) for s in steps(playback, turn, "SKILL_STEP")]
