"""Holes an audit found in held calls and block steps (M3, M5, S13): a yes runs only the call
the user was shown, a running block's ``execute_tool`` tools are the block's to run, and the
model's text sent with a call that ends the turn reaches the user.

- The confirmation question is a response rendered from memory, so a call the model makes is
  held only when its arguments agree with the memory entries of the same name; a yes checks
  again (a model's call against memory, a step's call against its parameters evaluated now).
- While a block runs, the tools of its ``execute_tool`` steps at or ahead of the pointer are
  hidden from the model (refused as ``cause: hidden``); a step already passed is not.
- Refusals say why in the trace (``reason``, ``skill``) and tell the model what it can do.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mantle_helpers import EXAMPLE, SIGNED_IN, clean, load, make, run_text, said, steps

import agentscript
from agentscript.engine.session import Reply, Session
from agentscript.mantle.runtime import MantleAgent
from agentscript.models.scripted import ScriptedModel, parse_move

# --- projects ---------------------------------------------------------------------------------

# A confirmation-gated tool the model calls from prose (no block runs it); the question reads
# memory, its wording chosen by a variant condition, as card_bank's does.
REPLACE = {
    "skills/replace/skill.md": """---
name: Replace
description: Replace a card.
tool_constraints:
  - order:
      requires: session.replace.card_id and session.replace.shipping
      requires_confirmation:
        enabled: true
        utter_for_confirmation: utter_replace_confirm
        utter_on_user_denial: utter_replace_cancelled
---
Ask which card and which shipping, record them with set_fields, then call order.
""",
    "skills/replace/memory.yml": """schema:
  public:
    card_id:
      type: text
      llm_settable: true
    shipping:
      type: categorical
      enum_values: [standard, express]
      llm_settable: true
""",
    "skills/replace/responses.yml": """responses:
  utter_replace_confirm:
    - text: Order an express replacement for card {card_id} for 5.00?
      condition: session.replace.shipping == "express"
    - text: Order a free standard replacement for card {card_id}?
  utter_replace_cancelled:
    - text: Okay, nothing was ordered.
""",
    "skills/replace/tools.py": '''def order(card_id: str, shipping: str) -> dict:
    """Order a replacement card.

    Args:
        card_id: the card
        shipping: standard or express
    """
    return {"ok": True, "reference": f"R-{card_id}-{shipping}"}
''',
}

# A fully controlled block: a search step, an instructions step that may search again, and a
# reserve step after it.
BOOK = {
    "skills/book/skill.md": """---
name: Book
description: Book a slot.
---
:::ordered_block id=flow
steps:
  - id: find
    execute_tool: search
  - id: choose
    instructions: Offer the slots; search again if none fits. Set slot to the chosen one.
    complete_when: session.book.slot
  - id: hold_slot
    execute_tool: reserve
    parameters:
      slot: session.book.slot
:::
""",
    "skills/book/memory.yml": """schema:
  public:
    slot:
      type: text
      llm_settable: true
""",
    "skills/book/tools.py": '''def search() -> dict:
    """Find free slots."""
    return {"slots": ["09:00", "10:00"]}


def reserve(slot: str) -> dict:
    """Reserve a slot.

    Args:
        slot: the slot
    """
    return {"ok": True, "reserved": slot}
''',
}

# A gated tool the model phrases the question for, and a second gated tool.
PAY = {
    "skills/pay/skill.md": """---
name: Pay
description: Send money.
tool_constraints:
  - send_money:
      requires_confirmation:
        enabled: true
  - close_account:
      requires_confirmation:
        enabled: true
---
Ask how much, then call send_money.
""",
    "skills/pay/tools.py": '''def send_money(amount: int) -> dict:
    """Send money.

    Args:
        amount: how much
    """
    return {"ok": True, "sent": amount}


def close_account() -> dict:
    """Close the account."""
    return {"ok": True}
''',
}


def agent_of(tmp_path: Path, files: dict[str, str]) -> MantleAgent:
    agent = agentscript.load(make(tmp_path, files))
    assert isinstance(agent, MantleAgent)
    return agent


def session_of(agent: MantleAgent, variables: dict[str, Any] | None = None) -> Session:
    return agent.session(model=ScriptedModel(), variables=variables)


def bank_session() -> Session:
    agent = agentscript.load(EXAMPLE)
    return agent.session(
        model=ScriptedModel(),
        variables={
            "project.authenticated": True,
            "project.customer_id": "1001",
            "project.customer_name": "Ada",
        },
    )


def send(session: Session, text: str, *moves: dict[str, Any]) -> Reply:
    model = session.model
    assert isinstance(model, ScriptedModel)
    model.begin_turn([parse_move(m) for m in moves])
    reply = session.send(text)
    assert reply.error is None, reply.error
    return reply


def kinds(reply: Reply, kind: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = reply.trace["planTrace"]["steps"]
    return [s for s in found if s["type"] == kind]


def events(reply: Reply, name: str) -> list[dict[str, Any]]:
    return [s for s in kinds(reply, "EVENT_STEP") if s["event"] == name]


def ran(reply: Reply, name: str) -> list[dict[str, Any]]:
    return [s for s in kinds(reply, "ACTION_STEP") if s["name"] == name]


def spoken(reply: Reply) -> list[tuple[str, str]]:
    return [(s["kind"], s["text"]) for s in kinds(reply, "RESPONSE_STEP")]


def tool_answer(session: Session, name: str, which: int = -1) -> Any:
    """What the model was told for a call of ``name`` (the tool message; the last by default)."""
    history = session.state.history
    ids = [c.id for m in history for c in m.tool_calls if c.name == name]
    answers = [m for m in history if m.role == "tool" and m.tool_call_id == ids[which]]
    return json.loads(answers[-1].content)


def pending(session: Session) -> Any:
    return session.state.extra["mantle"]["pending"]


def start_replace(session: Session, card: str, shipping: str) -> None:
    send(
        session,
        "replace my card",
        {"tool": "activate_skill", "args": {"skill": "replace"}},
        {"tool": "set_fields", "args": {"card_id": card, "shipping": shipping}},
        {"say": "Noted."},
    )


ORDER = "order"
STANDARD_C11 = "Order a free standard replacement for card C-11?"
EXPRESS_C11 = "Order an express replacement for card C-11 for 5.00?"


# --- H1: the question describes the held call -------------------------------------------------


def test_M5_a_model_call_unlike_what_its_question_would_show_is_not_held(tmp_path: Path) -> None:
    session = session_of(agent_of(tmp_path, REPLACE))
    reply = send(
        session,
        "replace C-11, standard please",
        {"tool": "activate_skill", "args": {"skill": "replace"}},
        {
            "tools": [
                {"tool": "set_fields", "args": {"card_id": "C-11", "shipping": "standard"}},
                {"tool": ORDER, "args": {"card_id": "C-12", "shipping": "express"}},
            ]
        },
        {"say": "Which card did you mean?"},
    )
    refused = [s for s in kinds(reply, "REFUSED_STEP") if s["name"] == ORDER]
    assert len(refused) == 1
    assert refused[0]["skill"] == "replace" and refused[0]["source"] == "llm"
    assert "card_id='C-12'" in refused[0]["reason"]
    assert "session.replace.card_id" in refused[0]["reason"]
    assert events(reply, "confirmation_requested") == []
    assert pending(session) is None
    assert reply.confirmation is None and reply.text == "Which card did you mean?"
    assert "set_fields" in tool_answer(session, ORDER)["error"]
    # The memory the question would have read is what the user gave.
    assert session.state.variables["replace.card_id"] == "C-11"
    # A later "yes" has nothing to run.
    after = send(session, "yes", {"say": "What should I do?"})
    assert ran(after, ORDER) == []


MODEL_ASKS = {
    "skills/pay/skill.md": """---
name: Pay
description: Send money.
tool_constraints:
  - send_money:
      requires_confirmation:
        enabled: true
---
Ask how much, then call send_money. Remember the amount sent in `amount` afterwards.
""",
    "skills/pay/memory.yml": """schema:
  public:
    amount:
      type: int
      llm_settable: true
""",
    "skills/pay/tools.py": '''def send_money(amount: int) -> dict:
    """Send money.

    Args:
        amount: how much
    """
    return {"sent": amount}
''',
}


def test_M5_a_call_whose_question_the_model_asks_is_held_whatever_memory_holds(
    tmp_path: Path,
) -> None:
    # Without utter_for_confirmation no question is rendered from memory: the model asks in
    # its own words, so its arguments have nothing to agree with. It was refused whenever an
    # argument was named like an unset entry, while the model went on to ask.
    session = session_of(agent_of(tmp_path, MODEL_ASKS))
    reply = send(
        session,
        "send 50",
        {"tool": "activate_skill", "args": {"skill": "pay"}},
        {"tool": "send_money", "args": {"amount": 50}},
        {"say": "Send 50 now?"},
    )
    assert kinds(reply, "REFUSED_STEP") == []
    assert pending(session)["arguments"] == {"amount": 50}
    reply = send(session, "yes", {"say": "Sent."})
    assert [s["input"] for s in ran(reply, "send_money")] == [{"amount": 50}]


def test_M5_a_model_call_that_agrees_with_memory_is_held_and_a_yes_runs_it(
    tmp_path: Path,
) -> None:
    session = session_of(agent_of(tmp_path, REPLACE))
    start_replace(session, "C-11", "standard")
    reply = send(
        session, "go on", {"tool": ORDER, "args": {"card_id": "C-11", "shipping": "standard"}}
    )
    assert reply.confirmation == STANDARD_C11
    assert events(reply, "confirmation_requested")[0]["arguments"] == {
        "card_id": "C-11",
        "shipping": "standard",
    }
    yes = send(session, "yes", {"say": "Ordered."})
    [run] = ran(yes, ORDER)
    assert run["input"] == {"card_id": "C-11", "shipping": "standard"}
    assert run["output"]["reference"] == "R-C-11-standard"


def test_M5_a_yes_after_memory_changed_does_not_run_the_model_held_call(tmp_path: Path) -> None:
    session = session_of(agent_of(tmp_path, REPLACE))
    start_replace(session, "C-11", "standard")
    send(session, "go on", {"tool": ORDER, "args": {"card_id": "C-11", "shipping": "standard"}})
    changed = send(
        session,
        "actually make it express",
        {"tool": "set_fields", "args": {"shipping": "express"}},
        {"say": "Switched to express. Shall I order it?"},
    )
    assert changed.confirmation is None
    # The user's "yes" answers the model's words (express); the held call was standard.
    yes = send(
        session,
        "yes",
        {"tool": ORDER, "args": {"card_id": "C-11", "shipping": "express"}},
    )
    assert ran(yes, ORDER) == []
    [dropped] = events(yes, "confirmation_dropped")
    assert dropped["tool"] == ORDER and dropped["confirmed"] is True and dropped["via"] == "user"
    assert "session.replace.shipping" in dropped["reason"]
    assert events(yes, "confirmation_resolved") == []
    # The model made the call again: held with the question memory gives now.
    assert yes.confirmation == EXPRESS_C11
    assert pending(session)["arguments"] == {"card_id": "C-11", "shipping": "express"}
    again = send(session, "yes", {"say": "Ordered."})
    [run] = ran(again, ORDER)
    assert run["input"] == {"card_id": "C-11", "shipping": "express"}


# --- H2: a running block's execute_tool tools are the block's ---------------------------------


def test_M3_the_model_cannot_run_a_block_step_tool_before_the_block_does(tmp_path: Path) -> None:
    session = session_of(agent_of(tmp_path, BOOK))
    reply = send(
        session,
        "book me a slot",
        {"tool": "activate_skill", "args": {"skill": "book"}},
        {
            "tools": [
                {"tool": "reserve", "args": {"slot": "09:00"}},
                {"tool": "search"},
            ]
        },
        {"tool": "set_fields", "args": {"slot": "09:00"}},
        {"say": "Booked for 09:00."},
    )
    resolution = kinds(reply, "RESOLUTION_STEP")[1]  # [0] is the routing prompt
    assert "reserve" in resolution["hiddenTools"] and "reserve" not in resolution["tools"]
    # The search step is behind the pointer: searching again is the model's to do.
    assert "search" in resolution["tools"]
    [refused] = [s for s in kinds(reply, "REFUSED_STEP") if s["name"] == "reserve"]
    assert refused["cause"] == "hidden" and "hold_slot" in refused["reason"]
    assert tool_answer(session, "reserve", 0) == {"error": "tool 'reserve' is not available now"}
    assert [s["source"] for s in ran(reply, "search")] == ["deterministic", "llm"]
    # Reserved once, by its step, with the slot the user chose.
    [reserved] = ran(reply, "reserve")
    assert reserved["source"] == "deterministic" and reserved["input"] == {"slot": "09:00"}
    assert reply.text.startswith("Booked for 09:00.")


def test_M3_a_model_call_of_the_block_confirmation_tool_does_not_order_twice() -> None:
    session = bank_session()
    send(
        session,
        "I lost my card",
        {"tool": "activate_skill", "args": {"skill": "card_replace"}},
        {"tool": "set_fields", "args": {"reason": "lost"}},
        {"tool": "activate_skill", "args": {"skill": "card_replace", "block": "order_card"}},
    )
    reply = send(
        session,
        "C-11 express",
        {
            "tools": [
                {"tool": "set_fields", "args": {"card_id": "C-11", "shipping": "express"}},
                {"tool": "order_replacement", "args": {"card_id": "C-11", "shipping": "express"}},
            ]
        },
    )
    [refused] = [s for s in kinds(reply, "REFUSED_STEP") if s["name"] == "order_replacement"]
    assert refused["cause"] == "hidden" and "place_order" in refused["reason"]
    # The block reaches its step and asks; the held call is the step's.
    assert reply.confirmation == EXPRESS_C11
    assert pending(session)["source"] == "step"
    yes = send(session, "yes", {"say": "Done."})
    assert [s["source"] for s in ran(yes, "order_replacement")] == ["deterministic"]
    assert session.state.variables["card_replace.replacement_ordered"] is True
    again = send(session, "yes", {"say": "Anything else?"})
    assert ran(again, "order_replacement") == []


def test_M3_a_model_call_held_before_the_rule_is_dropped_on_yes() -> None:
    """A session saved while a model-held call of a block step's tool waited (possible before
    the block hid it): the yes runs nothing, and the block asks for its own call."""
    session = bank_session()
    send(
        session,
        "I lost my card C-11",
        {"tool": "activate_skill", "args": {"skill": "card_replace"}},
        {"tool": "set_fields", "args": {"reason": "lost", "card_id": "C-11"}},
        {"tool": "activate_skill", "args": {"skill": "card_replace", "block": "order_card"}},
    )
    saved = session.to_json()
    saved["variables"]["card_replace.shipping"] = "express"
    saved["extra"]["mantle"]["pending"] = {
        "skill": "card_replace",
        "tool": "order_replacement",
        "arguments": {"card_id": "C-11", "shipping": "express"},
        "source": "llm",
        "block": None,
        "step": None,
        "turn": 1,
    }
    restored = session.agent.restore(saved, model=ScriptedModel())
    yes = send(restored, "yes")
    assert ran(yes, "order_replacement") == []
    [dropped] = events(yes, "confirmation_dropped")
    assert "place_order" in dropped["reason"]
    assert yes.confirmation == EXPRESS_C11 and pending(restored)["source"] == "step"


def test_M3_a_called_block_past_a_step_lets_the_model_call_its_tool(tmp_path: Path) -> None:
    # The block entered by the caller's call: step is running at `choose`, past `find`: its
    # own pointer says so. It was walked again from its start, so `search` stayed hidden
    # ("search again" refused) until the called block ended.
    files = dict(BOOK)
    files["skills/book/skill.md"] = files["skills/book/skill.md"].replace(
        ":::ordered_block id=flow",
        "Start with @block.main.\n\n:::ordered_block id=main\nsteps:\n  - id: run_flow\n"
        "    call: flow\n  - id: bye\n    noop: true\n:::\n\n:::ordered_block id=flow",
    )
    session = session_of(agent_of(tmp_path, files))
    reply = send(
        session,
        "book me a slot",
        {"tool": "activate_skill", "args": {"skill": "book"}},
        {"tool": "activate_skill", "args": {"skill": "book", "block": "main"}},
        {"tool": "search"},
        {"say": "09:00 or 10:00?"},
    )
    assert [s["source"] for s in ran(reply, "search")] == ["deterministic", "llm"]
    assert kinds(reply, "REFUSED_STEP") == []
    [*_, last] = kinds(reply, "RESOLUTION_STEP")
    assert "search" in [t["name"] if isinstance(t, dict) else t for t in last["tools"]]
    assert last["hiddenTools"] == ["reserve"]


# --- H3: a held step's call is the one its question shows ---------------------------------------


def held_standard() -> Session:
    """card_replace at place_order, its call held with standard shipping."""
    session = bank_session()
    send(
        session,
        "I lost my card C-11",
        {"tool": "activate_skill", "args": {"skill": "card_replace"}},
        {"tool": "set_fields", "args": {"reason": "lost", "card_id": "C-11"}},
        {"tool": "activate_skill", "args": {"skill": "card_replace", "block": "order_card"}},
    )
    reply = send(session, "standard", {"tool": "set_fields", "args": {"shipping": "standard"}})
    assert reply.confirmation == STANDARD_C11
    return session


def test_M5_a_held_step_asks_again_when_memory_changes_its_arguments() -> None:
    session = held_standard()
    reply = send(
        session,
        "actually make it express",
        {"tool": "set_fields", "args": {"shipping": "express"}},
        {"say": "Switched to express. Shall I order it?"},  # never asked for: the step asks
    )
    [dropped] = events(reply, "confirmation_dropped")
    assert dropped["tool"] == "order_replacement" and "shipping" in dropped["reason"]
    [asked] = events(reply, "confirmation_requested")
    assert asked["source"] == "step"
    assert asked["arguments"] == {"card_id": "C-11", "shipping": "express"}
    assert reply.confirmation == EXPRESS_C11 and reply.text == EXPRESS_C11
    assert pending(session)["arguments"]["shipping"] == "express"
    yes = send(session, "yes", {"say": "Done."})
    [run] = ran(yes, "order_replacement")
    assert run["input"] == {"card_id": "C-11", "shipping": "express"}
    assert session.state.variables["card_replace.order_reference"] == "R-C-11-E"


def test_M5_a_yes_with_a_change_in_the_same_answer_does_not_run_the_stale_step_call() -> None:
    session = held_standard()
    reply = send(
        session,
        "express, go ahead",  # not a plain yes: the model reads it
        {
            "tools": [
                {"tool": "set_fields", "args": {"shipping": "express"}},
                {"tool": "resolve_tool_confirmation", "args": {"confirmed": True}},
            ]
        },
    )
    assert ran(reply, "order_replacement") == []
    [dropped] = events(reply, "confirmation_dropped")
    assert dropped["confirmed"] is True and dropped["via"] == "llm"
    assert "asked again" in tool_answer(session, "resolve_tool_confirmation")["error"]
    assert reply.confirmation == EXPRESS_C11
    assert session.state.variables["card_replace.replacement_ordered"] is None


def test_M5_a_host_restoring_other_memory_under_a_held_step_gets_a_fresh_question() -> None:
    session = held_standard()
    restored = session.agent.restore(
        session.to_json(),
        model=ScriptedModel(),
        variables={"card_replace.shipping": "express"},
    )
    yes = send(restored, "yes")
    assert ran(yes, "order_replacement") == []
    assert events(yes, "confirmation_dropped")[0]["via"] == "user"
    assert yes.confirmation == EXPRESS_C11


def test_M5_a_restored_session_gives_the_same_next_turn_after_a_fresh_question() -> None:
    live = held_standard()
    send(live, "actually express", {"tool": "set_fields", "args": {"shipping": "express"}})
    copy = live.agent.restore(live.to_json(), model=ScriptedModel())
    answers = [send(s, "yes", {"say": "Done."}) for s in (live, copy)]
    assert answers[0].text == answers[1].text
    assert [s["input"] for s in ran(answers[0], "order_replacement")] == [
        s["input"] for s in ran(answers[1], "order_replacement")
    ]
    assert live.state.variables == copy.state.variables


# --- M3 (S13): the model's text with a call that ends the turn is said ------------------------


def test_S13_text_sent_with_a_held_call_is_said_before_the_question(tmp_path: Path) -> None:
    session = session_of(agent_of(tmp_path, REPLACE))
    start_replace(session, "C-11", "standard")
    reply = send(
        session,
        "go on",
        {
            "say": "Standard delivery is free.",
            "tool": ORDER,
            "args": {"card_id": "C-11", "shipping": "standard"},
        },
    )
    assert spoken(reply) == [("llm", "Standard delivery is free."), ("confirmation", STANDARD_C11)]
    assert reply.messages == ["Standard delivery is free.", STANDARD_C11]
    assert reply.confirmation == STANDARD_C11
    # Once in the history: in the message making the call, the question after its answer.
    texts = [m.content for m in session.state.history if m.role == "assistant"]
    assert texts.count("Standard delivery is free.") == 1
    assert texts[-1] == STANDARD_C11


def test_S13_text_sent_with_a_declining_resolution_is_said_before_the_denial(
    tmp_path: Path,
) -> None:
    session = session_of(agent_of(tmp_path, REPLACE))
    start_replace(session, "C-11", "standard")
    send(session, "go on", {"tool": ORDER, "args": {"card_id": "C-11", "shipping": "standard"}})
    reply = send(
        session,
        "hmm, rather not",
        {
            "say": "No problem.",
            "tool": "resolve_tool_confirmation",
            "args": {"confirmed": False},
        },
    )
    assert spoken(reply) == [("llm", "No problem."), ("denial", "Okay, nothing was ordered.")]
    assert ran(reply, ORDER) == []


def test_S13_text_sent_with_a_call_that_does_not_end_the_turn_is_not_said(
    tmp_path: Path,
) -> None:
    session = session_of(agent_of(tmp_path, REPLACE))
    reply = send(
        session,
        "replace C-11",
        {"say": "Let me start.", "tool": "activate_skill", "args": {"skill": "replace"}},
        {"say": "Which shipping?"},
    )
    assert spoken(reply) == [("llm", "Which shipping?")]


def test_S13_text_sent_with_calls_is_said_before_a_block_steps_question() -> None:
    # The calls let the block go on, and its step asks (a collect question, then a held
    # step's confirmation): the model's text is said first, as with a question it caused
    # directly. It was only in the history.
    session = bank_session()
    reply = send(
        session,
        "I lost my card C-11",
        {"tool": "activate_skill", "args": {"skill": "card_replace"}},
        {"tool": "set_fields", "args": {"reason": "lost", "card_id": "C-11"}},
        {
            "say": "Sorry to hear that.",
            "tool": "activate_skill",
            "args": {"skill": "card_replace", "block": "order_card"},
        },
    )
    [_activated, (kind, text), (asked, _)] = spoken(reply)
    assert (kind, text, asked) == ("llm", "Sorry to hear that.", "collect")
    reply = send(
        session,
        "standard",
        {"say": "Standard it is.", "tool": "set_fields", "args": {"shipping": "standard"}},
    )
    assert spoken(reply) == [("llm", "Standard it is."), ("confirmation", STANDARD_C11)]
    texts = [m.content for m in session.state.history if m.role == "assistant"]
    assert texts.count("Standard it is.") == 1


# --- L3: refusals say why, and what the model can do -------------------------------------------


def test_M6_a_tool_hidden_by_requires_is_refused_with_the_gate_in_the_trace() -> None:
    playback = clean(
        run_text(
            load(EXAMPLE),
            SIGNED_IN
            + """
turns:
  - user: "I lost my card C-11"
    model:
      - tool: activate_skill
        args: {skill: card_replace}
      - tool: order_replacement
        args: {card_id: C-11, shipping: express}
      - say: "Why do you need a new card?"
""",
        )
    )
    [refused] = steps(playback, 1, "REFUSED_STEP")
    assert refused["cause"] == "hidden" and refused["name"] == "order_replacement"
    assert refused["reason"] == (
        "the requires of 'order_replacement' does not hold (or cannot be evaluated): "
        "session.card_replace.card_id and session.card_replace.shipping"
    )
    answers = [
        m["content"]
        for m in steps(playback, 1, "LLM_STEP")[-1]["input"]["messages"]
        if m.get("role") == "tool"
    ]
    assert json.loads(answers[-1]) == {"error": "tool 'order_replacement' is not available now"}
    assert said(playback, 1) == ["I can help you replace your card.", "Why do you need a new card?"]


def test_M5_calling_the_held_tool_again_is_told_what_it_can_do_now(tmp_path: Path) -> None:
    session = session_of(agent_of(tmp_path, PAY))
    send(
        session,
        "send 100",
        {"tool": "activate_skill", "args": {"skill": "pay"}},
        {
            "tools": [
                {"tool": "send_money", "args": {"amount": 100}},
                {"tool": "send_money", "args": {"amount": 100}},
            ]
        },
        {"say": "Send 100?"},
    )
    same_turn = tool_answer(session, "send_money")["error"]
    assert "resolve_tool_confirmation" not in same_turn
    assert "their next message" in same_turn
    send(
        session,
        "how long does it take?",
        {"tool": "send_money", "args": {"amount": 100}},
        {"say": "A day. Shall I send it?"},
    )
    later = tool_answer(session, "send_money")["error"]
    assert "call resolve_tool_confirmation with their answer" in later


def test_M5_the_refusal_of_a_second_gated_call_names_its_skill(tmp_path: Path) -> None:
    session = session_of(agent_of(tmp_path, PAY))
    reply = send(
        session,
        "send 100 and close my account",
        {"tool": "activate_skill", "args": {"skill": "pay"}},
        {
            "tools": [
                {"tool": "send_money", "args": {"amount": 100}},
                {"tool": "close_account"},
            ]
        },
        {"say": "Send 100 first?"},
    )
    [refused] = [s for s in kinds(reply, "REFUSED_STEP") if s["name"] == "close_account"]
    assert refused["skill"] == "pay" and refused["source"] == "llm"
    assert "send_money" in refused["reason"]
