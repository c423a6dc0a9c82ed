"""A call's arguments fit its tool whoever makes it (M5, restore): an ``execute_tool`` step's
arguments, read from memory, go through the checks of a model's call (``Limits`` size and
depth, the tool's declared parameters) before the call is held for confirmation or run. An
integral float for an ``int`` parameter is that int (JSON has one number type); anything else
that does not fit fails the step as a failing tool does (the model reads the error,
``on_failure`` is said, the step waits until memory changes), with a ``REFUSED_STEP``.

The invariant: after any turn the saved session restores, and the restored session answers the
next message as the live one does. Before, a step held ``{quantity: 2.0}`` for ``quantity:
int`` (or a 25,000-character card id) that the live worker ran on "yes" and the restore check
refused, so every other worker answered 500 ``session_damaged``.

Also: a call held without ``utter_for_confirmation`` (the model asks in its own words) has the
model's question as the turn's ``confirmation``; a ``**kwargs`` tool accepts any argument.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest
from mantle_helpers import EXAMPLE, make

import agentscript
from agentscript.engine.session import Reply, Session
from agentscript.mantle.run import tool_handler
from agentscript.mantle.runtime import MantleAgent
from agentscript.models.scripted import ScriptedModel, parse_move

# --- projects ---------------------------------------------------------------------------------


def order_project(tmp_path: Path, *, confirm: bool, question: bool = True) -> Path:
    """An order skill whose block collects a ``float`` quantity and a colour, then runs
    ``reserve(quantity: int, colour)`` (held for confirmation when ``confirm``; the question
    a response when ``question``, else the model's words). The tool reports the Python type
    it got."""
    gate = ""
    if confirm:
        gate = "      requires_confirmation:\n        enabled: true\n"
        if question:
            gate += "        utter_for_confirmation: utter_confirm\n"
    return make(
        tmp_path,
        {
            "skills/order/skill.md": f"""---
name: Order
description: Order widgets.
tool_constraints:
  - reserve:
      requires: session.order.quantity
{gate}      on_success: utter_done
      on_failure: utter_failed
---
Help the user order widgets. Run @block.main.

:::ordered_block id=main
steps:
  - id: ask_qty
    collect: quantity
    utterance: utter_ask_qty
  - id: ask_colour
    collect: colour
    utterance: utter_ask_colour
  - id: place
    execute_tool: reserve
    parameters:
      quantity: session.order.quantity
      colour: session.order.colour
:::
""",
            "skills/order/memory.yml": """schema:
  public:
    quantity:
      type: float
      description: How many widgets.
    colour:
      type: categorical
      enum_values: [red, blue]
""",
            "skills/order/responses.yml": """responses:
  utter_ask_qty:
    - text: How many widgets?
  utter_ask_colour:
    - text: Which colour?
  utter_confirm:
    - text: Reserve {quantity} {colour} widgets?
  utter_done:
    - text: Reserved.
  utter_failed:
    - text: The widgets could not be reserved.
""",
            "skills/order/tools.py": '''from typing import Literal


def reserve(quantity: int, colour: Literal["red", "blue"]) -> dict:
    """Reserve widgets.

    Args:
        quantity: how many
        colour: red or blue
    """
    return {"ok": True, "quantity": quantity, "got": type(quantity).__name__}
''',
        },
    )


GIFT = {
    "skills/gift/skill.md": """---
name: Gift
description: Send a gift card.
tool_constraints:
  - send_gift:
      requires_confirmation:
        enabled: true
---
Send a gift card with send_gift. Ask the user to confirm in your own words.
""",
    "skills/gift/tools.py": '''def send_gift(amount: int) -> dict:
    """Send a gift card.

    Args:
        amount: how much
    """
    return {"ok": True, "sent": amount}
''',
}

NOTES = {
    "skills/notes/skill.md": """---
name: Notes
description: Take notes.
---
Take notes with note or tag.
""",
    "skills/notes/tools.py": '''def note(context=None, **kwargs):
    """Take a note of anything."""
    return {"ok": True, "got": kwargs}


def tag(label: str, **extra: int):
    """Tag a note.

    Args:
        label: the tag
    """
    return {"ok": True, "label": label, "extra": extra}


def count(n: int):
    """Count.

    Args:
        n: how many
    """
    return {"ok": True, "got": type(n).__name__}
''',
}

# --- driving a live session and its restored twin ----------------------------------------------


def load(root: Path) -> MantleAgent:
    agent = agentscript.load(root)
    assert isinstance(agent, MantleAgent)
    return agent


def send(session: Session, text: str, *moves: dict[str, Any]) -> Reply:
    model = session.model
    assert isinstance(model, ScriptedModel)
    model.begin_turn([parse_move(m) for m in moves or ({"say": "ok"},)])
    return session.send(text)


def restored(agent: MantleAgent, session: Session) -> Session:
    """The session as another worker reads it: its saved JSON text, restored (and checked),
    with a model in the same state (a scripted model numbers its calls)."""
    saved = json.loads(json.dumps(session.to_json()))
    return agent.restore(saved, model=copy.deepcopy(session.model))


def observed(reply: Reply) -> dict[str, Any]:
    """What a client and the trace see of a turn (timings and ids aside)."""
    plan = reply.trace["planTrace"]["steps"]
    return {
        "text": reply.text,
        "actions": reply.actions,
        "confirmation": reply.confirmation,
        "error": reply.error,
        "variables": reply.variables,
        "ran": [(s["name"], s["input"], s["output"]) for s in plan if s["type"] == "ACTION_STEP"],
        "refused": [(s["name"], s["reason"]) for s in plan if s["type"] == "REFUSED_STEP"],
    }


def saved_state(session: Session) -> dict[str, Any]:
    state = copy.deepcopy(session.to_json())
    state.pop("signature", None)
    return state


class Twins:
    """A live session; before each turn its saved state is restored (that must succeed), and
    the same message with the same model moves goes to both: they must answer alike."""

    def __init__(self, agent: MantleAgent, variables: dict[str, Any] | None = None) -> None:
        self.agent = agent
        self.live = agent.session(model=ScriptedModel(), variables=variables or {})

    def send(self, text: str, *moves: dict[str, Any]) -> Reply:
        twin = restored(self.agent, self.live)
        reply = send(self.live, text, *moves)
        other = send(twin, text, *moves)
        assert observed(other) == observed(reply)
        assert saved_state(twin) == saved_state(self.live)
        restored(self.agent, self.live)  # the state after the turn restores as well
        return reply


def start_order(run: Twins, quantity: float) -> Reply:
    """The order skill with ``quantity`` recorded, at its colour question."""
    reply = run.send(
        "I want widgets",
        {"tool": "activate_skill", "args": {"skill": "order"}},
        {"tool": "activate_skill", "args": {"skill": "order", "block": "main"}},
    )
    assert reply.messages == ["How many widgets?"]
    reply = run.send(f"{quantity}", {"tool": "set_fields", "args": {"quantity": quantity}})
    assert reply.messages == ["Which colour?"]
    return reply


def steps_of(reply: Reply, kind: str) -> list[dict[str, Any]]:
    return [s for s in reply.trace["planTrace"]["steps"] if s["type"] == kind]


def pending(session: Session) -> dict[str, Any] | None:
    found: dict[str, Any] | None = session.state.extra["mantle"]["pending"]
    return found


# --- 1. an integral float is the int the tool declares -------------------------------------------


def test_a_step_holds_an_integral_float_as_the_int_its_tool_declares(tmp_path: Path) -> None:
    run = Twins(load(order_project(tmp_path, confirm=True)))
    start_order(run, 2)
    assert run.live.variables["order.quantity"] == 2.0  # a float entry
    reply = run.send("red", {"tool": "set_fields", "args": {"colour": "red"}})
    assert reply.confirmation == "Reserve 2.0 red widgets?"
    held = pending(run.live)
    assert held is not None and held["arguments"] == {"quantity": 2, "colour": "red"}
    assert type(held["arguments"]["quantity"]) is int
    reply = run.send("yes")  # the restored twin runs it too
    assert reply.actions == ["reserve"]
    assert steps_of(reply, "ACTION_STEP")[0]["output"] == {"ok": True, "quantity": 2, "got": "int"}


def test_a_step_run_without_confirmation_passes_the_int_its_tool_declares(tmp_path: Path) -> None:
    run = Twins(load(order_project(tmp_path, confirm=False)))
    start_order(run, 3)
    reply = run.send("blue", {"tool": "set_fields", "args": {"colour": "blue"}})
    assert reply.actions == ["set_fields", "reserve"]
    ran = steps_of(reply, "ACTION_STEP")[-1]
    assert ran["input"] == {"quantity": 3, "colour": "blue"}
    assert ran["output"] == {"ok": True, "quantity": 3, "got": "int"}


def test_a_call_held_with_an_integral_float_by_an_earlier_version_restores_and_runs_an_int(
    tmp_path: Path,
) -> None:
    """Sessions saved before this fix hold 2.0 for an int: they restore (JSON Schema's
    ``integer`` counts 2.0) and the tool still gets 2."""
    agent = load(order_project(tmp_path, confirm=True))
    run = Twins(agent)
    start_order(run, 2)
    run.send("red", {"tool": "set_fields", "args": {"colour": "red"}})
    saved = json.loads(json.dumps(run.live.to_json()))
    saved["extra"]["mantle"]["pending"]["arguments"]["quantity"] = 2.0
    saved.pop("signature", None)
    session = agent.restore(saved, model=ScriptedModel())
    reply = send(session, "yes")
    assert reply.actions == ["reserve"]
    assert steps_of(reply, "ACTION_STEP")[0]["output"]["got"] == "int"


# --- 1. a value that does not fit fails the step -------------------------------------------------


@pytest.mark.parametrize("confirm", [True, False], ids=["held", "run"])
def test_a_step_whose_value_does_not_fit_its_tool_fails_and_waits(
    tmp_path: Path, confirm: bool
) -> None:
    run = Twins(load(order_project(tmp_path, confirm=confirm)))
    start_order(run, 2.5)
    reply = run.send(
        "red", {"tool": "set_fields", "args": {"colour": "red"}}, {"say": "Sorry, that failed."}
    )
    assert pending(run.live) is None and reply.confirmation is None
    assert reply.actions == ["set_fields"]  # reserve was neither held nor run
    assert reply.error is None
    (refusal,) = steps_of(reply, "REFUSED_STEP")
    assert refusal["name"] == "reserve" and refusal["source"] == "deterministic"
    assert refusal["skill"] == "order" and refusal["step"] == "place"
    assert refusal["arguments"] == {"quantity": 2.5, "colour": "red"}
    assert refusal["reason"] == (
        "step place of order: argument 'quantity' of 'reserve': expected integer, got float"
    )
    # As when the tool fails: on_failure is said, the model reads the error.
    assert reply.messages == ["The widgets could not be reserved.", "Sorry, that failed."]
    call, answer, failed, said = run.live.state.history[-4:]
    assert [c.name for c in call.tool_calls] == ["reserve"]
    assert answer.role == "tool" and "expected integer, got float" in answer.content
    assert (failed.content, said.content) == tuple(reply.messages)
    # The step waits until memory changes...
    reply = run.send("hm?", {"say": "Anything else?"})
    assert steps_of(reply, "REFUSED_STEP") == [] and reply.actions == []
    # ...and runs once the answer fits.
    reply = run.send("make it 4", {"tool": "set_fields", "args": {"quantity": 4}})
    if confirm:
        assert reply.confirmation == "Reserve 4.0 red widgets?"
        reply = run.send("yes")
    assert reply.actions[-1] == "reserve"
    assert steps_of(reply, "ACTION_STEP")[-1]["output"] == {"ok": True, "quantity": 4, "got": "int"}


# --- 2. size bounds ------------------------------------------------------------------------------


def test_a_step_argument_over_max_argument_chars_fails_the_step(tmp_path: Path) -> None:
    """card_bank: a 25,000-character card id (max_variable_chars allows it in memory, but a
    call's arguments are bounded by max_argument_chars, 20,000)."""
    agent = agentscript.load(EXAMPLE, stub_missing_tools=True)
    assert isinstance(agent, MantleAgent)
    run = Twins(
        agent,
        {
            "project.authenticated": True,
            "project.customer_id": "1001",
            "card_replace.card_id": "C" * 25_000,
            "card_replace.reason": "damaged",
            "card_replace.shipping": "express",
        },
    )
    reply = run.send(
        "replace my card",
        {"tool": "activate_skill", "args": {"skill": "card_replace"}},
        {"tool": "activate_skill", "args": {"skill": "card_replace", "block": "order_card"}},
    )
    assert pending(run.live) is None and reply.confirmation is None
    assert "order_replacement" not in reply.actions
    (refusal,) = steps_of(reply, "REFUSED_STEP")
    assert refusal["name"] == "order_replacement" and refusal["step"] == "place_order"
    assert "arguments of 'order_replacement' are too large" in refusal["reason"]
    assert "Limits.max_argument_chars = 20000" in refusal["reason"]
    assert "I could not order the card just now. Please try again later." in reply.messages
    run.send("yes")  # nothing waits: the twins still agree


# --- 3. a question in the model's own words is the turn's confirmation ---------------------------


def test_a_question_the_model_words_is_the_turns_confirmation(tmp_path: Path) -> None:
    run = Twins(load(make(tmp_path, GIFT)))
    reply = run.send("a gift card", {"tool": "activate_skill", "args": {"skill": "gift"}})
    assert reply.confirmation is None
    reply = run.send(
        "send 50",
        {"tool": "send_gift", "args": {"amount": 50}},
        {"say": "Shall I send a 50 gift card? (yes/no)"},
    )
    assert pending(run.live) is not None
    assert reply.confirmation == "Shall I send a 50 gift card? (yes/no)" == reply.text
    reply = run.send("yes")
    assert reply.actions == ["send_gift"] and reply.confirmation is None


def test_a_step_held_for_a_question_in_the_models_words_has_it_as_confirmation(
    tmp_path: Path,
) -> None:
    run = Twins(load(order_project(tmp_path, confirm=True, question=False)))
    start_order(run, 2)
    reply = run.send(
        "red",
        {"tool": "set_fields", "args": {"colour": "red"}},
        {"say": "Reserve two red widgets?"},
    )
    held = pending(run.live)
    assert held is not None and held["source"] == "step"
    assert reply.confirmation == "Reserve two red widgets?"
    reply = run.send("yes")
    assert reply.actions == ["reserve"] and reply.confirmation is None


# --- 4. **kwargs --------------------------------------------------------------------------------


def test_a_kwargs_tool_accepts_any_argument_and_is_offered_so(tmp_path: Path) -> None:
    agent = load(make(tmp_path, NOTES))
    tools = agent.project.skills["notes"].tools
    assert tools["note"].parameters_schema == {
        "type": "object",
        "properties": {},
        "additionalProperties": True,
    }
    assert tools["tag"].parameters_schema["additionalProperties"] is True
    assert "additionalProperties" not in tools["count"].parameters_schema
    run = Twins(agent)
    run.send("notes", {"tool": "activate_skill", "args": {"skill": "notes"}})
    reply = run.send(
        "note it",
        {"tool": "note", "args": {"text": "hi", "n": 2}},
        {"tool": "tag", "args": {"label": "x", "weight": 3}},
        {"tool": "tag", "args": {"weight": 3}},
        {"tool": "count", "args": {"n": 2.0, "m": 1}},
        {"tool": "count", "args": {"n": 2.0}},
    )
    ran = [(s["name"], s["output"]) for s in steps_of(reply, "ACTION_STEP")]
    assert ran == [
        ("note", {"ok": True, "got": {"text": "hi", "n": 2}}),
        ("tag", {"ok": True, "label": "x", "extra": {"weight": 3}}),
        ("count", {"ok": True, "got": "int"}),  # a model's 2.0 is the int too
    ]
    reasons = [s["reason"] for s in steps_of(reply, "REFUSED_STEP")]
    assert reasons == [
        "missing required argument 'label' for 'tag'",
        "unknown argument(s) ['m'] for 'count'; allowed: ['n']",
    ]
    model = run.live.model
    assert isinstance(model, ScriptedModel)
    offered = {t.name: t.parameters for t in model.requests[-1].tools}
    assert offered["note"]["additionalProperties"] is True


# --- 5. a held call never outgrows the limits: bounded as held, no float beyond 2**53 -----------

# send_gift with a long note and three ints, run by the model or by a block step (held for
# confirmation either way): its arguments can come near Limits.max_argument_chars (20,000).
BULK_GIFT = {
    "skills/gift/skill.md": """---
name: Gift
description: Send a gift card.
tool_constraints:
  - send_gift:
      requires_confirmation:
        enabled: true
      on_failure: utter_failed
---
Send a gift card with send_gift. Ask the user to confirm in your own words. The block
@block.main sends the one memory describes.

:::ordered_block id=main
steps:
  - id: send
    execute_tool: send_gift
    parameters:
      note: session.gift.note
      a: session.gift.a
      b: session.gift.b
      c: session.gift.c
:::
""",
    "skills/gift/memory.yml": """schema:
  public:
    note:
      type: text
      description: The card's note.
    a:
      type: float
      description: x
    b:
      type: float
      description: y
    c:
      type: float
      description: z
""",
    "skills/gift/responses.yml": """responses:
  utter_failed:
    - text: The gift card could not be sent.
""",
    "skills/gift/tools.py": '''def send_gift(note: str, a: int, b: int, c: int) -> dict:
    """Send a gift card.

    Args:
        note: a note
        a: x
        b: y
        c: z
    """
    return {"ok": True}
''',
}
NOTE = "x" * 19_500  # with three numbers of up to 18 characters, under 20,000
EXACT = float(2**53)  # "9007199254740992.0" in JSON; the int is 2 characters shorter
HUGE = 1e308  # "1e+308" in JSON; as an int, 309 digits


def gift_held_or_refused(run: Twins, number: float, *, by_step: bool) -> Reply:
    """The model's send_gift call (or the block's step) with ``number`` for each int, after
    which Twins checks that the saved session restores."""
    if by_step:
        return run.send(
            "send it",
            {"tool": "activate_skill", "args": {"skill": "gift"}},
            {"tool": "activate_skill", "args": {"skill": "gift", "block": "main"}},
            {"say": "Shall I send it? (yes/no)"},
        )
    run.send("a gift", {"tool": "activate_skill", "args": {"skill": "gift"}})
    args = {"note": NOTE, "a": number, "b": number, "c": number}
    return run.send(
        "send it", {"tool": "send_gift", "args": args}, {"say": "Shall I send it? (yes/no)"}
    )


@pytest.mark.parametrize("by_step", [False, True], ids=["model", "step"])
def test_integral_floats_up_to_2_53_are_held_as_ints_within_the_limit(
    tmp_path: Path, by_step: bool
) -> None:
    variables = {"gift.note": NOTE, "gift.a": EXACT, "gift.b": EXACT, "gift.c": EXACT}
    run = Twins(load(make(tmp_path, BULK_GIFT)), variables)
    reply = gift_held_or_refused(run, EXACT, by_step=by_step)
    held = pending(run.live)
    assert held is not None and steps_of(reply, "REFUSED_STEP") == []
    assert held["arguments"] == {"note": NOTE, "a": 2**53, "b": 2**53, "c": 2**53}
    assert type(held["arguments"]["a"]) is int
    reply = run.send("yes")  # restored (by Twins) and run
    assert reply.actions == ["send_gift"]


@pytest.mark.parametrize("by_step", [False, True], ids=["model", "step"])
def test_a_float_beyond_2_53_is_no_int_and_is_refused(tmp_path: Path, by_step: bool) -> None:
    """1e308 is 6 characters as the model writes it and 309 digits as an int: held so, three
    of them took a call near the limit past it, and every other worker refused the saved
    session (500 session_damaged). Beyond 2**53 a float is no exact integer anyway."""
    variables = {"gift.note": NOTE, "gift.a": HUGE, "gift.b": HUGE, "gift.c": HUGE}
    run = Twins(load(make(tmp_path, BULK_GIFT)), variables)
    reply = gift_held_or_refused(run, HUGE, by_step=by_step)
    assert pending(run.live) is None
    (refusal,) = steps_of(reply, "REFUSED_STEP")
    where = "step send of gift: " if by_step else ""
    assert refusal["reason"] == f"{where}argument 'a' of 'send_gift': expected integer, got float"
    if by_step:
        assert refusal["step"] == "send"
        assert "The gift card could not be sent." in reply.messages
    run.send("yes")  # nothing waits: the twins still agree


def test_2_53_is_the_last_float_taken_for_an_int(tmp_path: Path) -> None:
    run = Twins(load(make(tmp_path, NOTES)))
    run.send("notes", {"tool": "activate_skill", "args": {"skill": "notes"}})
    reply = run.send(
        "count",
        {"tool": "count", "args": {"n": -EXACT}},
        {"tool": "count", "args": {"n": EXACT + 2}},
    )
    assert [s["input"] for s in steps_of(reply, "ACTION_STEP")] == [{"n": -(2**53)}]
    assert [s["reason"] for s in steps_of(reply, "REFUSED_STEP")] == [
        "argument 'n' of 'count': expected integer, got float"
    ]


@pytest.mark.parametrize("by_step", [False, True], ids=["model", "step"])
def test_arguments_are_bounded_as_converted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, by_step: bool
) -> None:
    """Whatever the conversion of an integral float to an int makes of an argument, the call
    held is within Limits.max_argument_chars, as the restore check holds it: here every
    integral float is taken for an int, and the three 309-digit ints refuse the call."""
    monkeypatch.setattr(tool_handler, "EXACT_FLOAT_INTS", math.inf)
    variables = {"gift.note": NOTE, "gift.a": HUGE, "gift.b": HUGE, "gift.c": HUGE}
    run = Twins(load(make(tmp_path, BULK_GIFT)), variables)
    reply = gift_held_or_refused(run, HUGE, by_step=by_step)
    assert pending(run.live) is None
    (refusal,) = steps_of(reply, "REFUSED_STEP")
    assert "arguments of 'send_gift' are too large" in refusal["reason"]
    if by_step:
        assert "(Limits.max_argument_chars = 20000)" in refusal["reason"]
        assert refusal["step"] == "send"
    else:
        assert refusal["limit"] == "max_argument_chars"
    run.send("yes")


# --- 6. a held step's arguments refused on "yes" fail the step as before it was held -------------


def test_a_held_steps_arguments_refused_on_yes_fail_the_step(tmp_path: Path) -> None:
    """As ``blocks.arguments_refused``: the refusal names the step, ``on_failure`` is said, the
    step waits until memory changes. Reached only by a held call that equals (Python's ==) the
    step's arguments now but does not fit the tool: ``True`` for ``1`` (the restore check
    refuses such a session, so the live one is altered)."""
    agent = load(order_project(tmp_path, confirm=True))
    session = agent.session(model=ScriptedModel())
    send(
        session,
        "I want widgets",
        {"tool": "activate_skill", "args": {"skill": "order"}},
        {"tool": "activate_skill", "args": {"skill": "order", "block": "main"}},
    )
    send(session, "1", {"tool": "set_fields", "args": {"quantity": 1}})
    reply = send(session, "red", {"tool": "set_fields", "args": {"colour": "red"}})
    assert reply.confirmation == "Reserve 1.0 red widgets?"
    held = pending(session)
    assert held is not None
    held["arguments"]["quantity"] = True
    reply = send(session, "yes", {"say": "Sorry."})
    assert pending(session) is None and "reserve" not in reply.actions
    (refusal,) = steps_of(reply, "REFUSED_STEP")
    assert refusal["name"] == "reserve" and refusal["source"] == "deterministic"
    assert refusal["skill"] == "order" and refusal["step"] == "place"
    assert refusal["reason"] == (
        "step place of order: argument 'quantity' of 'reserve': expected integer, got a boolean"
    )
    assert reply.messages == ["The widgets could not be reserved.", "Sorry."]
    # The confirming call has the error as its answer; no second call is recorded for it.
    call, answer = session.state.history[-4:-2]
    assert [c.name for c in call.tool_calls] == ["reserve"]
    assert answer.role == "tool" and "expected integer, got a boolean" in answer.content
    assert sum(len(m.tool_calls) for m in session.state.history if m.tool_calls) == len(
        [m for m in session.state.history if m.role == "tool"]
    )
    # The step waits until memory changes, then holds the call again.
    reply = send(session, "hm?", {"say": "Anything else?"})
    assert steps_of(reply, "REFUSED_STEP") == [] and pending(session) is None
    reply = send(session, "make it 3", {"tool": "set_fields", "args": {"quantity": 3}})
    assert reply.confirmation == "Reserve 3.0 red widgets?"
