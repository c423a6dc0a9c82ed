"""The skill stack and block pointers, kept as JSON data in ``SessionState.extra``.

``extra["mantle"]`` holds::

    {"stack": [frame, ...],          # bottom first; the last frame is the top
     "pending": {...} | None,        # a tool call waiting for the user's yes/no
     "fired": ["skill:utter", ...],  # ``utter: when:`` triggers already delivered
     "written": {"ns.entry": turn},  # the turn of each entry's last write
     "activations": {"skill": n},
     "started": bool,                # the session-start skill has run
     "offer": {"skill": id} | None,  # a resume offer waiting for the user's yes/no
     "ending": [skill, ...] | None,  # ``before_end`` skills still to run (session end)
     "offered": [payload, ...]}      # ``set:`` payloads of the buttons the last turn offered

A frame is ``{"skill", "status", "kind", "via_call", "blocks": [entry, ...]}`` where
``status`` is ``active`` (the top frame being worked on), ``parked`` (waiting for a skill it
invoked; resumes automatically) or ``paused`` (interrupted by the user; resumed only when
activated again) and ``kind`` says how the skill started (``routed``, ``invoked``,
``interrupt``, ``engine``). A block entry is ``{"block", "step", "call", "asked", "held"}``:
``step`` is the pointer (None before the first step runs), ``call`` marks a block started by
a ``call:`` step, ``asked`` maps ``ask_before_filling`` steps to the turn they were asked in,
``held`` remembers a step that must not run again until memory changes, ``spoken`` (absent
until set) the collect step whose question the framework said for the current wait.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

ACTIVE, PARKED, PAUSED = "active", "parked", "paused"


class HeldStep(TypedDict):
    """A block step that must not run again until memory changes."""

    step: str | None
    memory: str  # the memory fingerprint when the step was held


class BlockEntry(TypedDict):
    """One ordered block being stepped through in a frame."""

    block: str
    step: str | None  # the pointer; None before the first step runs
    call: bool  # started by a `call:` step
    asked: dict[str, int]  # ask_before_filling steps -> the turn they were asked in
    held: HeldStep | None
    spoken: NotRequired[str | None]  # the collect step whose question was said (see collect)


class Frame(TypedDict):
    """One skill on the stack."""

    skill: str
    status: str  # ACTIVE | PARKED | PAUSED
    kind: str  # routed | invoked | interrupt | engine
    via_call: bool
    blocks: list[BlockEntry]


class PendingCall(TypedDict):
    """A tool call waiting for the user's yes/no."""

    skill: str
    tool: str
    arguments: dict[str, Any]
    source: str  # "llm" (the model called it) or "step" (an execute_tool block step)
    block: str | None
    step: str | None
    # The turn that held the call: only a later turn's user message may resolve it (absent
    # in sessions saved before it was recorded; those were held in an earlier turn).
    turn: NotRequired[int]


class ResumeOffer(TypedDict):
    """A paused skill the user was asked to continue (lifecycle resume offer)."""

    skill: str


class MantleState(TypedDict):
    """``SessionState.extra["mantle"]``: the module docstring describes each key."""

    stack: list[Frame]
    pending: PendingCall | None
    fired: list[str]
    written: dict[str, int]
    activations: dict[str, int]
    started: bool
    offer: ResumeOffer | None
    ending: list[str] | None
    offered: list[str]


class SkillStack:
    """Typed access to the Mantle part of ``SessionState.extra``."""

    def __init__(self, extra: dict[str, Any]) -> None:
        data = extra.setdefault("mantle", {})
        data.setdefault("stack", [])
        data.setdefault("pending", None)
        data.setdefault("fired", [])
        data.setdefault("written", {})
        data.setdefault("activations", {})
        data.setdefault("started", False)
        data.setdefault("offer", None)
        data.setdefault("ending", None)
        data.setdefault("offered", [])  # absent in sessions saved before it was recorded
        # The same dict object: the session saves what the turn changes.
        self.data: MantleState = data

    @property
    def frames(self) -> list[Frame]:
        frames: list[Frame] = self.data["stack"]
        return frames

    @property
    def pending(self) -> PendingCall | None:
        pending: PendingCall | None = self.data["pending"]
        return pending

    @pending.setter
    def pending(self, value: PendingCall | None) -> None:
        self.data["pending"] = value

    def take_offered(self) -> list[str]:
        """The button payloads the last turn offered, cleared: a tap answers only the
        response just before it."""
        offered, self.data["offered"] = list(self.data["offered"]), []
        return offered

    def offer(self, payloads: list[str]) -> None:
        """Record the button payloads this turn's responses offered (see :meth:`take_offered`)."""
        self.data["offered"] = list(payloads)

    def active(self) -> Frame | None:
        """The top frame when it is being worked on (not paused or parked)."""
        if self.frames and self.frames[-1]["status"] == ACTIVE:
            return self.frames[-1]
        return None

    def find(self, skill: str) -> Frame | None:
        for frame in reversed(self.frames):
            if frame["skill"] == skill:
                return frame
        return None

    def paused(self) -> list[Frame]:
        return [f for f in reversed(self.frames) if f["status"] == PAUSED]

    def push(self, skill: str, kind: str, *, via_call: bool = False) -> Frame:
        frame: Frame = {
            "skill": skill,
            "status": ACTIVE,
            "kind": kind,
            "via_call": via_call,
            "blocks": [],
        }
        self.frames.append(frame)
        return frame

    def pop(self) -> Frame:
        return self.frames.pop()

    def move_to_top(self, frame: Frame) -> None:
        """Put ``frame`` on top with the parked callers right below it (each waits for the
        frame above it, so they move together)."""
        frames = self.frames
        end = frames.index(frame) + 1
        start = end - 1
        while (
            start > 0
            and frames[start]["kind"] == "invoked"
            and frames[start - 1]["status"] == PARKED
        ):
            start -= 1
        chain = frames[start:end]
        del frames[start:end]
        frames.extend(chain)

    @staticmethod
    def block(frame: Frame) -> BlockEntry | None:
        blocks: list[BlockEntry] = frame["blocks"]
        return blocks[-1] if blocks else None

    @staticmethod
    def enter_block(frame: Frame, block: str, *, call: bool = False) -> BlockEntry:
        entry: BlockEntry = {"block": block, "step": None, "call": call, "asked": {}, "held": None}
        frame["blocks"].append(entry)
        return entry

    def fired(self, key: str) -> bool:
        return key in self.data["fired"]

    def mark_fired(self, key: str) -> None:
        self.data["fired"].append(key)

    def clear_fired(self, skill: str) -> None:
        self.data["fired"] = [k for k in self.data["fired"] if not k.startswith(f"{skill}:")]

    def note_write(self, key: str, turn: int) -> None:
        self.data["written"][key] = turn

    def written_turn(self, key: str) -> int:
        return int(self.data["written"].get(key, -1))

    def count_activation(self, skill: str) -> int:
        """Record one more activation of ``skill``; returns how many came before."""
        before = int(self.data["activations"].get(skill, 0))
        self.data["activations"][skill] = before + 1
        return before
