"""Every state a turn leaves is one ``restore`` accepts, in size too (``engine/room.py``).

An audit found one Mantle turn of 72 tool calls, each result 990,000 characters (under
``Limits.max_output_chars``), committing a state of 71 million characters: over
``MAX_SESSION_CHARS`` (64 million), so the worker keeping the session went on while every
other worker answered ``500 session_damaged`` for it. Now what a turn adds is held to a room
where it joins the history: a result past ``Limits.max_turn_chars`` or past what a saved
session may hold is replaced by an error result (``EVENT_STEP result_dropped``) and the turn
goes on; a Mantle ``context.send`` is refused inside the tool (``send_refused``); a model reply
with no room fails the turn; the user's message makes room by dropping older exchanges, or is
refused; what no check sees is settled at the end of the turn.

These tests lower ``MAX_SESSION_CHARS`` (restore reads it when called) so they stay small.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, target
from hypothesis import strategies as st

import agentscript
from agentscript.engine import restore
from agentscript.engine.session import AgentBase, Reply, Session
from agentscript.jsontext import dumps
from agentscript.limits import Limits
from agentscript.models.scripted import ScriptedModel, parse_move

CAP = 300_000  # MAX_SESSION_CHARS in these tests
# Small enough that one reply, or one result, is a small part of the cap.
LIMITS = Limits(max_output_chars=40_000, max_reply_chars=2_000)

KINDS = {
    "ascii": "x",
    "quotes": '"',  # 2 characters in JSON, 4 once the tool message is saved
    "control": "\x01",  # "\\u0001" in the tool message, 7 characters once saved
    "accents": "é",  # 6 characters in ASCII-escaped JSON
    "astral": "\U0001f600",  # 12 characters in ASCII-escaped JSON (a surrogate pair)
}


def text_of(size: int, kind: str) -> str:
    return KINDS[kind] * size


@pytest.fixture
def small_cap(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(restore, "MAX_SESSION_CHARS", CAP)
    return CAP


# --- Agent Script ----------------------------------------------------------------------------

AGENT = """\
system:
    instructions: "Use the tools."
    messages:
        welcome: "Hi."
        error: "ERR"
config:
    developer_name: "room"
variables:
{variables}
start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | Fetch pages.
        actions:
            fetch: @actions.fetch
                description: "Fetch a page"
                with size=...
                with kind=...
{keepers}
    actions:
        fetch:
            description: "Fetch a page"
            target: "flow://Fetch"
            inputs:
                size: number
                kind: string
            outputs:
                text: string
"""
KEPT = "abcdefgh"  # variables a tool callback writes (keep_a sets @variables.a, ...)


def fetch(size: float, kind: str) -> dict[str, Any]:
    return {"text": text_of(int(size), kind)}


def script_agent(tmp_path: Path) -> AgentBase:
    variables = "\n".join(f'    {name}: mutable string = ""' for name in KEPT)
    keepers = "\n".join(
        f"            keep_{name}: @actions.fetch\n"
        f'                description: "Fetch and keep in {name}"\n'
        "                with size=...\n"
        '                with kind="ascii"\n'
        f"                set @variables.{name} = @outputs.text"
        for name in KEPT
    )
    path = tmp_path / "room.agent"
    path.write_text(AGENT.format(variables=variables, keepers=keepers))
    return agentscript.load(path)


class Run:
    """A session driven turn by turn with inline moves, restored from its saved JSON text
    (as another worker would) whenever asked."""

    def __init__(self, agent: AgentBase, limits: Limits = LIMITS) -> None:
        self.agent = agent
        self.limits = limits
        self.model = ScriptedModel()
        self.session: Session = agent.session(
            model=self.model, actions={"fetch": fetch}, limits=limits
        )

    def send(self, text: str, *moves: dict[str, Any]) -> Reply:
        self.model.begin_turn([parse_move(m) for m in moves])
        return self.session.send(text)

    def restored(self) -> Session:
        """The session as every form of its saved state reads back; goes on from the text."""
        saved = self.session.to_json()
        text = json.dumps(saved)  # the largest form: spaced, non-ASCII escaped
        self.largest = max(getattr(self, "largest", 0), len(text))
        assert len(text) <= restore.MAX_SESSION_CHARS
        assert len(dumps(saved)) <= restore.MAX_SESSION_CHARS  # the server's form
        self.agent.restore(saved, model=self.model, actions={"fetch": fetch}, limits=self.limits)
        self.session = self.agent.restore(
            text, model=self.model, actions={"fetch": fetch}, limits=self.limits
        )
        return self.session


def calls(name: str, count: int, **args: Any) -> dict[str, Any]:
    return {"tools": [{"tool": name, "args": args}] * count}


def events(reply: Reply, event: str) -> list[dict[str, Any]]:
    return [
        s
        for s in reply.trace["planTrace"]["steps"]
        if s["type"] == "EVENT_STEP" and s["event"] == event
    ]


def tool_errors(session: Session) -> list[str]:
    """The error texts of the tool messages in the history (what the model reads)."""
    found = []
    for message in session.state.history:
        if message.role == "tool":
            content = json.loads(message.content)
            if isinstance(content, dict) and "error" in content:
                found.append(content["error"])
    return found


def test_results_past_what_a_saved_session_holds_are_dropped_and_the_turn_goes_on(
    tmp_path: Path, small_cap: int
) -> None:
    run = Run(script_agent(tmp_path))
    page = calls("fetch", 4, size=30_000, kind="ascii")
    reply = run.send("fetch everything", page, page, page, {"say": "Here is what I found."})
    assert reply.error is None and reply.text == "Here is what I found."
    dropped = events(reply, "result_dropped")
    assert dropped and {d["limit"] for d in dropped} == {"MAX_SESSION_CHARS"}
    assert {d["tool"] for d in dropped} == {"fetch"} and dropped[0]["chars"] > 30_000
    # The model reads why, and that the tool ran (so it does not run it again blindly).
    errors = tool_errors(run.session)
    assert len(errors) == len(dropped)
    assert "'fetch' ran, but its result was dropped" in errors[0]
    assert "MAX_SESSION_CHARS" in errors[0]
    # The state restores, and the next turn runs from the restored session.
    run.restored()
    again = run.send("and now?", calls("fetch", 1, size=100, kind="ascii"), {"say": "Done."})
    assert again.error is None and again.text == "Done."
    run.restored()


def test_results_past_max_turn_chars_are_dropped_naming_the_limit(tmp_path: Path) -> None:
    run = Run(script_agent(tmp_path), Limits(max_turn_chars=50_000))
    reply = run.send("fetch", calls("fetch", 4, size=20_000, kind="ascii"), {"say": "Done."})
    assert reply.error is None and reply.text == "Done."
    dropped = events(reply, "result_dropped")
    assert [d["limit"] for d in dropped] == ["max_turn_chars", "max_turn_chars"]
    assert "Limits.max_turn_chars (50000)" in dropped[0]["reason"]
    assert len(tool_errors(run.session)) == 2
    assert "Limits.max_turn_chars" in tool_errors(run.session)[0]
    # The bound is per turn: the next turn has its own.
    second = run.send("more", calls("fetch", 2, size=20_000, kind="ascii"), {"say": "Done."})
    assert second.error is None and events(second, "result_dropped") == []


def test_a_model_reply_with_no_room_left_fails_the_turn_and_the_state_still_restores(
    tmp_path: Path, small_cap: int
) -> None:
    run = Run(script_agent(tmp_path))
    # Results fill the room they may take; the reply (2,000 characters, each 12 once saved)
    # does not fit in what is left.
    page = calls("fetch", 8, size=38_000, kind="ascii")
    reply = run.send("fetch", page, {"say": "\U0001f600" * 2_000})
    assert reply.error is not None and "MAX_SESSION_CHARS" in reply.error
    assert reply.text == "ERR"
    (failed,) = [s for s in reply.trace["planTrace"]["steps"] if s.get("error")][-1:]
    assert "MAX_SESSION_CHARS" in failed["error"]
    assert run.session.state.history[-1].content == "ERR"  # the failed-turn rule
    run.restored()
    assert run.send("still there?", {"say": "Yes."}).error is None


def test_a_user_message_makes_room_or_is_refused(tmp_path: Path, small_cap: int) -> None:
    run = Run(script_agent(tmp_path))
    run.send("first", calls("fetch", 4, size=30_000, kind="ascii"), {"say": "Done."})
    kept = len(run.session.state.history)
    # Room for this message and a reply: the older exchange goes (the usual trim keeps it).
    reply = run.send("y" * 200_000, {"say": "Read it."})
    assert reply.error is None and reply.text == "Read it."
    (trimmed,) = events(reply, "history_trimmed")
    assert trimmed["dropped"] == kept and trimmed["limit"] == "MAX_SESSION_CHARS"
    run.restored()
    # A message no saved session could hold is refused: nothing of it is kept.
    before = run.session.to_json()
    refused = run.send("z" * CAP)
    assert refused.refused and refused.error is not None and "MAX_SESSION_CHARS" in refused.error
    after = run.session.to_json()
    assert after["history"] == [] and after["variables"] == before["variables"]
    run.restored()
    assert run.send("short", {"say": "Fine."}).error is None


def test_what_no_check_sees_is_settled_at_the_end_of_the_turn(
    tmp_path: Path, small_cap: int
) -> None:
    """Variables a turn writes are no history: their total is settled when the turn ends
    (older exchanges first, then the turn's own exchange, then its writes)."""
    run = Run(script_agent(tmp_path), Limits(max_output_chars=40_000, max_reply_chars=2_000))
    run.send("hello", {"say": "Hi."})
    keep = {"tools": [{"tool": f"keep_{name}", "args": {"size": 39_000}} for name in KEPT]}
    reply = run.send("keep them all", keep, {"say": "Kept."})
    assert reply.error is not None and "MAX_SESSION_CHARS" in reply.error
    history = run.session.state.history
    assert [m.role for m in history[-2:]] == ["user", "assistant"]
    assert history[-2].content == "keep them all" and history[-1].content == "ERR"
    assert all(run.session.state.variables[name] == "" for name in KEPT)
    run.restored()
    assert run.send("next", {"say": "Fine."}).error is None


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    turns=st.lists(
        st.lists(
            st.lists(
                st.tuples(st.integers(0, 39_000), st.sampled_from(sorted(KINDS))),
                min_size=1,
                max_size=8,
            ),
            min_size=0,
            max_size=4,
        ),
        min_size=1,
        max_size=3,
    )
)
def test_no_sequence_of_tool_results_leaves_a_state_restore_refuses(
    tmp_path: Path, small_cap: int, turns: list[list[list[tuple[int, str]]]]
) -> None:
    run = Run(script_agent(tmp_path))
    for number, steps in enumerate(turns):
        moves = [
            {"tools": [{"tool": "fetch", "args": {"size": n, "kind": k}} for n, k in step]}
            for step in steps
        ]
        reply = run.send(f"turn {number}", *moves, {"say": "Done."})
        # Once the room is spent, the answers of the calls that follow (each an error naming
        # the limit) may leave no room for the reply: the turn then fails, cleanly.
        assert reply.error is None or "MAX_SESSION_CHARS" in reply.error, reply.error
        run.restored()  # every form of the saved state reads back; go on from it
    target(float(run.largest))  # toward states at the bound


# --- Mantle ----------------------------------------------------------------------------------

TOOLS = '''
from typing import Any


def page(n: int, kind: str = "ascii") -> dict:
    """A page of text.

    Args:
        n: characters
        kind: ascii or astral
    """
    return {"v": ("x" if kind == "ascii" else "\\U0001f600") * n}


def shout(n: int, context: Any = None) -> dict:
    """Say a long text, and report whether it was said.

    Args:
        n: characters
    """
    try:
        context.send("y" * n)
    except ValueError as exc:
        return {"sent": False, "why": str(exc)}
    return {"sent": True}


def shout_unguarded(n: int, context: Any = None) -> dict:
    """Say a long text.

    Args:
        n: characters
    """
    context.send("y" * n)
    return {"ok": True}
'''


def mantle_agent(tmp_path: Path) -> AgentBase:
    files = {
        "agent.yml": "agent:\n  id: t\n  persona: You are a bot.\n",
        "skills/s/skill.md": "---\nname: S\ndescription: Tools.\n---\nUse the tools.\n",
        "skills/s/tools.py": TOOLS,
    }
    root = tmp_path / "project"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return agentscript.load(root)


class MantleRun(Run):
    def __init__(self, agent: AgentBase, limits: Limits = LIMITS) -> None:
        self.agent = agent
        self.limits = limits
        self.model = ScriptedModel()
        self.session = agent.session(model=self.model, limits=limits)

    def restored(self) -> Session:
        saved = self.session.to_json()
        text = json.dumps(saved)
        self.largest = max(getattr(self, "largest", 0), len(text))
        assert len(text) <= restore.MAX_SESSION_CHARS
        self.agent.restore(saved, model=self.model, limits=self.limits)
        self.session = self.agent.restore(text, model=self.model, limits=self.limits)
        return self.session


START = {"tool": "activate_skill", "args": {"skill": "s"}}


def test_mantle_results_and_sends_past_the_room_are_refused_and_the_state_restores(
    tmp_path: Path, small_cap: int
) -> None:
    run = MantleRun(mantle_agent(tmp_path))
    pages = {"tools": [{"tool": "page", "args": {"n": 36_000}}] * 8}
    reply = run.send(
        "go",
        START,
        pages,
        {"tool": "shout", "args": {"n": 30_000}},
        {"tool": "shout_unguarded", "args": {"n": 30_000}},
        {"say": "Done."},
    )
    assert reply.error is None and reply.messages[-1] == "Done."
    dropped = events(reply, "result_dropped")
    assert dropped and {d["limit"] for d in dropped} == {"MAX_SESSION_CHARS"}
    sends = events(reply, "send_refused")
    assert [(s["tool"], s["limit"]) for s in sends] == [
        ("shout", "MAX_SESSION_CHARS"),
        ("shout_unguarded", "MAX_SESSION_CHARS"),
    ]
    actions = {
        s["name"]: s for s in reply.trace["planTrace"]["steps"] if s["type"] == "ACTION_STEP"
    }
    # The tool saw the refusal and could go on; one that does not catch it fails as a call.
    assert actions["shout"]["output"]["sent"] is False
    assert "context.send was refused" in actions["shout"]["output"]["why"]
    assert "context.send was refused" in actions["shout_unguarded"]["error"]
    assert "y" * 30_000 not in reply.messages
    run.restored()
    again = run.send("more", {"tool": "page", "args": {"n": 100}}, {"say": "Fine."})
    assert again.error is None
    run.restored()


def test_a_mantle_send_longer_than_max_output_chars_is_refused(tmp_path: Path) -> None:
    run = MantleRun(mantle_agent(tmp_path), Limits(max_output_chars=1_000))
    reply = run.send("go", START, {"tool": "shout", "args": {"n": 2_000}}, {"say": "Done."})
    assert reply.error is None
    (refused,) = events(reply, "send_refused")
    assert refused["limit"] == "max_output_chars" and refused["chars"] == 2_000
    assert "Limits.max_output_chars (1000)" in refused["reason"]
    (action,) = [s for s in reply.trace["planTrace"]["steps"] if s.get("name") == "shout"]
    assert action["output"]["sent"] is False
    short = run.send("again", {"tool": "shout", "args": {"n": 500}}, {"say": "Done."})
    assert "y" * 500 in short.messages


def test_mantle_astral_results_are_counted_as_a_saved_session_spells_them(
    tmp_path: Path, small_cap: int
) -> None:
    """A character outside the Basic Multilingual Plane is one character of the tool's
    output but twelve of the saved session's JSON text: the room counts the saved form."""
    run = MantleRun(mantle_agent(tmp_path))
    pages = {"tools": [{"tool": "page", "args": {"n": 6_000, "kind": "astral"}}] * 8}
    reply = run.send("go", START, pages, {"say": "Done."})
    assert reply.error is None
    assert events(reply, "result_dropped")
    run.restored()


_PROJECTS: dict[str, AgentBase] = {}


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    steps=st.lists(
        st.lists(
            st.tuples(st.sampled_from(["page", "astral", "shout"]), st.integers(0, 39_000)),
            min_size=1,
            max_size=8,
        ),
        min_size=1,
        max_size=5,
    )
)
def test_no_mix_of_mantle_results_and_sends_leaves_a_state_restore_refuses(
    tmp_path: Path, small_cap: int, steps: list[list[tuple[str, int]]]
) -> None:
    if "agent" not in _PROJECTS:  # one project for every example: loading imports its tools
        _PROJECTS["agent"] = mantle_agent(tmp_path)
    run = MantleRun(_PROJECTS["agent"])

    def move(kind: str, n: int) -> dict[str, Any]:
        if kind == "shout":
            return {"tool": "shout", "args": {"n": n}}
        return {"tool": "page", "args": {"n": n, "kind": "ascii" if kind == "page" else "astral"}}

    moves = [{"tools": [move(kind, n) for kind, n in step]} for step in steps]
    reply = run.send("go", START, *moves, {"say": "Done."})
    assert reply.error is None or "MAX_SESSION_CHARS" in reply.error, reply.error
    run.restored()
    assert run.send("next", {"say": "Fine."}).error is None
    run.restored()
    target(float(run.largest))


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(codec=None)),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=20,
)
TEXT = st.text(st.characters(exclude_categories=[], codec=None))  # lone surrogates too


@settings(max_examples=300, deadline=None)
@given(
    content=TEXT,
    ids=st.lists(st.tuples(TEXT, TEXT, st.dictionaries(st.text(), JSON, max_size=4)), max_size=3),
    answer=st.none() | st.tuples(TEXT, TEXT),
)
def test_the_cheap_ceiling_and_the_exact_count_bound_every_saved_form(
    content: str,
    ids: list[tuple[str, str, dict[str, Any]]],
    answer: tuple[str, str] | None,
) -> None:
    """What the room counts is at least what restore measures, whatever the characters: the
    saved JSON text in each form a host may write, and the walk of a saved mapping."""
    from agentscript.engine.history import message_ceiling, stored_chars
    from agentscript.jsonsafe import json_size
    from agentscript.models.base import Message, ToolCall

    calls = [ToolCall(i, n, a) for i, n, a in ids]
    call_id, name = answer if answer is not None else (None, None)
    message = Message("assistant" if calls else "tool", content, calls, call_id, name)
    data = message.to_json()
    exact = stored_chars(message)
    forms = [
        len(json.dumps(data)),
        len(json.dumps(data, separators=(",", ":"))),
        len(json.dumps(data, ensure_ascii=False)),
        len(dumps(data)),
        json_size(data),
    ]
    assert exact == max(forms[0], forms[-1]) >= max(forms)
    assert message_ceiling(message) >= exact


@settings(max_examples=200, deadline=None)
@given(
    variables=st.dictionaries(st.text(), JSON, max_size=6), extra=st.dictionaries(st.text(), JSON)
)
def test_the_rest_of_the_state_is_bounded_the_same_way(
    variables: dict[str, Any], extra: dict[str, Any]
) -> None:
    from agentscript.engine.room import rest_ceiling, rest_stored
    from agentscript.engine.state import SessionState
    from agentscript.jsonsafe import json_size

    state = SessionState("s1", variables, extra=extra)
    data = state.to_json()
    del data["history"]
    exact = rest_stored(state)
    assert exact >= max(len(json.dumps(data)), len(dumps(data)), json_size(data))
    assert rest_ceiling(state) >= exact
