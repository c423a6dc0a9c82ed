"""Boundary rules 1-7 (seed 003) and M1-M8 on the card_bank example, driven by the
conversation files in examples/card_bank/conversations/ and asserting on traces and memory."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

import agentscript
from agentscript.conversation import load_conversation, parse_conversation
from agentscript.mantle.runtime import MantleAgent, load_mantle_agent
from agentscript.playback import Playback, play

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "card_bank"
CONVERSATIONS = EXAMPLE / "conversations"
SIGNED_IN = """
variables:
  project.authenticated: true
  project.customer_id: "1001"
  project.customer_name: Ada
"""


@pytest.fixture(scope="module")
def agent() -> MantleAgent:
    loaded = agentscript.load(EXAMPLE)
    assert isinstance(loaded, MantleAgent)
    return loaded


def in_card_replace(user: str) -> str:
    """A signed-in conversation whose first turn starts card_replace (moves follow)."""
    return (
        SIGNED_IN
        + f"""
turns:
  - user: "{user}"
    model:
      - tool: activate_skill
        args: {{skill: card_replace}}"""
    )


def run_file(agent: MantleAgent, name: str) -> Playback:
    playback = play(agent, load_conversation(CONVERSATIONS / name))
    assert not playback.failed, [t.reply.error for t in playback.turns]
    for turn in playback.turns:
        assert turn.reply.error is None and turn.unused_moves == []
    return playback


def run_text(agent: MantleAgent, text: str) -> Playback:
    return play(agent, parse_conversation(text))


def steps(playback: Playback, turn: int, kind: str | None = None) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = playback.turns[turn - 1].reply.trace["planTrace"]["steps"]
    return [s for s in found if kind is None or s["type"] == kind]


def events(playback: Playback, turn: int, kind: str) -> list[tuple[str, str]]:
    return [(s["event"], s["skill"]) for s in steps(playback, turn, kind)]


def last_instructions(playback: Playback, turn: int) -> str:
    text: str = steps(playback, turn, "LLM_STEP")[-1]["input"]["instructions"]
    return text


def offered_tools(playback: Playback, turn: int, index: int = -1) -> list[str]:
    return [t["name"] for t in steps(playback, turn, "LLM_STEP")[index]["input"]["tools"]]


# --- boundary rules ---------------------------------------------------------------------


def test_rule1_interrupt_pauses_the_block_and_resumes_at_the_same_step(agent: MantleAgent) -> None:
    playback = run_file(agent, "rule1_interrupt_resume.yml")
    paused = [s for s in steps(playback, 2, "BLOCK_STEP") if s["event"] == "paused"]
    assert [(s["block"], s["step"]) for s in paused] == [("order_card", "pick_card")]
    interrupted = [s for s in steps(playback, 2, "SKILL_STEP") if s["event"] == "interrupted"]
    assert interrupted[0]["skill"] == "card_replace" and interrupted[0]["by"] == "check_balance"
    # The interrupt finished; nothing resumed by itself (rule 2's contrast).
    assert ("resumed", "card_replace") not in events(playback, 2, "SKILL_STEP")
    resumed = [s for s in steps(playback, 3, "SKILL_STEP") if s["event"] == "resumed"]
    assert [(s["skill"], s["step"]) for s in resumed] == [("card_replace", "pick_card")]
    asked = [s for s in steps(playback, 3, "RESPONSE_STEP") if s["kind"] == "collect"]
    assert [(s["step"], s["text"]) for s in asked] == [
        ("pick_card", "Which card should we replace?")
    ]
    # The interrupt ended: the engine offered to resume; "yes" resumed without the model.
    offer = [s for s in steps(playback, 2, "RESPONSE_STEP") if s["kind"] == "lifecycle"]
    assert [s["text"] for s in offer] == ["Would you like to continue with Card Replace?"]
    assert steps(playback, 3, "LLM_STEP") == []
    assert "step pick_card: collect card_id" in last_instructions(playback, 4)
    advanced = [s for s in steps(playback, 4, "BLOCK_STEP") if s["event"] == "advanced"]
    assert [(s["step"], s["next"]) for s in advanced] == [("pick_card", "pick_shipping")]
    assert playback.variables["card_replace.card_id"] == "C-11"


def test_rule2_skill_invocation_returns_to_the_caller(agent: MantleAgent) -> None:
    playback = run_file(agent, "rule2_skill_invocation.yml")
    assert events(playback, 3, "SKILL_STEP") == [
        ("activated", "check_balance"),
        ("completed", "check_balance"),
        ("resumed", "card_replace"),
    ]
    activated = steps(playback, 3, "SKILL_STEP")[0]
    assert activated["kind"] == "invoked" and activated["invokedBy"] == "card_replace"
    assert playback.turns[2].reply.node == "card_replace"
    assert "Active skill: Card Replace" in last_instructions(playback, 3)
    assert events(playback, 4, "SKILL_STEP") == [
        ("completed", "card_replace"),
        ("activated", "default_completed"),  # the stack is empty: the completion follow-up
        ("completed", "default_completed"),
    ]


def test_rule3_prose_enters_the_block_and_returns_to_prose_in_the_same_turn(
    agent: MantleAgent,
) -> None:
    playback = run_file(agent, "rule3_prose_and_block.yml")
    entered = [s for s in steps(playback, 2, "BLOCK_STEP") if s["event"] == "entered"]
    assert entered[0]["block"] == "order_card" and entered[0]["step"] == "load_cards"
    load = steps(playback, 2, "ACTION_STEP")[-1]
    assert load["name"] == "list_cards" and load["source"] == "deterministic"
    final = steps(playback, 5)
    kinds = [s["type"] for s in final]
    completed = next(
        i for i, s in enumerate(final) if s["type"] == "BLOCK_STEP" and s["event"] == "completed"
    )
    assert "LLM_STEP" in kinds[completed:]
    assert "After the order, tell the customer the fee" in last_instructions(playback, 5)
    assert playback.variables["card_replace.card_blocked"] is True


def test_rule4_if_markers_change_the_prompt_not_the_orchestration(agent: MantleAgent) -> None:
    damaged = run_file(agent, "rule4_if_markers.yml")
    text = last_instructions(damaged, 1)
    assert "do not block it" in text and "must be blocked first" not in text
    lost = run_text(
        agent,
        in_card_replace("I lost my card")
        + """
      - tool: set_fields
        args: {reason: lost}
      - tool: activate_skill
        args: {skill: card_replace, block: order_card}
      - say: "Which card?"
""",
    )
    text = last_instructions(lost, 1)
    assert "must be blocked first" in text and "do not block it" not in text
    # Same block steps and the same tools offered: only the prose differs.
    assert [s["event"] for s in steps(lost, 1, "BLOCK_STEP")] == [
        s["event"] for s in steps(damaged, 1, "BLOCK_STEP")
    ]
    assert offered_tools(lost, 1) == offered_tools(damaged, 1)


def test_rule5_constraints_apply_to_llm_calls_and_execute_tool_steps(agent: MantleAgent) -> None:
    playback = run_file(agent, "rule5_tool_constraints.yml")
    refused = steps(playback, 1, "REFUSED_STEP")
    assert [r["name"] for r in refused] == ["order_replacement"]
    assert "order_replacement" not in [s["name"] for s in steps(playback, 1, "ACTION_STEP")]
    asked = steps(playback, 2, "EVENT_STEP")
    assert asked[0]["event"] == "confirmation_requested" and asked[0]["source"] == "step"
    assert playback.turns[1].reply.confirmation == (
        "Order an express replacement for card C-11 for 5.00?"
    )
    assert steps(playback, 2, "LLM_STEP")[-1]["output"]["tool_calls"][0]["name"] == "set_fields"
    # "no": the denial is said, nothing runs, the model is not called.
    assert steps(playback, 3, "LLM_STEP") == []
    assert playback.turns[2].reply.text == "Okay, I have not ordered a new card."
    assert steps(playback, 3, "ACTION_STEP") == []
    # A change of memory lets the held step ask again; "yes" runs it.
    assert (
        playback.turns[3].reply.confirmation == "Order a free standard replacement for card C-11?"
    )
    ran = [s for s in steps(playback, 5, "ACTION_STEP") if s["name"] == "order_replacement"]
    assert ran[0]["source"] == "deterministic" and ran[0]["input"] == {
        "card_id": "C-11",
        "shipping": "standard",
    }
    assert ran[0]["preVars"]["card_replace.replacement_ordered"] is None
    assert ran[0]["postVars"]["card_replace.replacement_ordered"] is True


def test_rule6_gates_fail_closed(agent: MantleAgent) -> None:
    playback = run_file(agent, "rule6_fail_closed.yml")
    refused = steps(playback, 1, "REFUSED_STEP")
    assert refused[0]["name"] == "activate_skill" and "card_replace" in refused[0]["reason"]
    routing = steps(playback, 1, "LLM_STEP")[0]["input"]
    assert routing["tools"][0]["parameters"]["properties"]["skill"]["enum"] == ["authenticate"]
    # attempts is unset: `attempts >= 3` cannot be evaluated, so the paragraph is withheld.
    assert "failed three times" not in last_instructions(playback, 1)
    assert "Never repeat" in last_instructions(playback, 1)
    refused = steps(playback, 2, "REFUSED_STEP")
    assert [r["name"] for r in refused] == ["block_card"]
    assert "block_card" in steps(playback, 2, "RESOLUTION_STEP")[-1]["hiddenTools"]
    assert "block_card" not in [s["name"] for s in steps(playback, 2, "ACTION_STEP")]


def test_rule7_one_message_fills_several_collect_steps(agent: MantleAgent) -> None:
    playback = run_file(agent, "rule7_early_values.yml")
    advanced = [
        (s["step"], s["next"]) for s in steps(playback, 1, "BLOCK_STEP") if s["event"] == "advanced"
    ]
    assert advanced == [
        ("load_cards", "pick_card"),
        ("pick_card", "pick_shipping"),
        ("pick_shipping", "place_order"),
    ]
    assert playback.turns[0].reply.confirmation is not None
    assert playback.variables["card_replace.replacement_ordered"] is True


# --- M rules ----------------------------------------------------------------------------


def test_M1_routing_offers_only_skills_whose_requires_holds(agent: MantleAgent) -> None:
    signed_in = run_text(
        agent,
        SIGNED_IN
        + """
turns:
  - user: "hello"
    model:
      - tool: activate_skill
        args: {skill: authenticate}
      - say: "How can I help?"
""",
    )
    enum = steps(signed_in, 1, "LLM_STEP")[0]["input"]["tools"][0]["parameters"]["properties"]
    assert enum["skill"]["enum"] == ["card_replace", "check_balance"]
    refused = steps(signed_in, 1, "REFUSED_STEP")
    assert refused[0]["name"] == "activate_skill" and "authenticate" in refused[0]["reason"]
    assert signed_in.turns[0].reply.node is None


def test_M2_interrupt_and_invocation_use_the_stack(agent: MantleAgent) -> None:
    # After turn 2 of rule 1 the interrupt has completed: card_replace stays paused.
    saved = _play_and_save(agent, "rule1_interrupt_resume.yml", turns=2)
    stack = saved["extra"]["mantle"]["stack"]
    assert [(f["skill"], f["status"]) for f in stack] == [("card_replace", "paused")]
    assert stack[0]["blocks"][0]["step"] == "pick_card"
    # During an invocation the caller is parked under the callee.
    saved = _play_and_save(agent, "rule2_skill_invocation.yml", turns=2)
    assert [f["skill"] for f in saved["extra"]["mantle"]["stack"]] == ["card_replace"]


def _play_and_save(agent: MantleAgent, name: str, *, turns: int) -> dict[str, Any]:
    conversation = load_conversation(CONVERSATIONS / name)
    model = agentscript.ScriptedModel()
    session = agent.session(
        model=model, variables=conversation.variables, stubs=conversation.stub_book()
    )
    for turn in conversation.turns[:turns]:
        model.begin_turn(turn.moves)
        session.send(turn.user)
    return session.to_json()


def test_M3_pointer_never_moves_past_an_unsatisfied_step(agent: MantleAgent) -> None:
    playback = run_text(
        agent,
        in_card_replace("lost card, express please")
        + """
      - tool: set_fields
        args: {reason: lost, shipping: express}
      - tools:
          - {tool: activate_skill, args: {skill: card_replace, block: order_card}}
          - {tool: complete_skill}
  - user: "what are my options?"
    model:
      - say: "C-11 or C-12."
""",
    )
    advanced = [s["step"] for s in steps(playback, 1, "BLOCK_STEP") if s["event"] == "advanced"]
    assert advanced == ["load_cards"]  # list_cards ran without the model; pick_card waits
    assert "pick_shipping" not in advanced
    refused = steps(playback, 1, "REFUSED_STEP")
    assert refused[0]["name"] == "complete_skill" and "ordered block" in refused[0]["reason"]
    tools = offered_tools(playback, 2)
    assert "complete_skill" not in tools and "cancel_skill" in tools
    ran = [(s["name"], s["source"]) for s in steps(playback, 1, "ACTION_STEP")]
    assert ("list_cards", "deterministic") in ran


def test_M4_if_paragraphs_are_removed_from_the_prompt(agent: MantleAgent) -> None:
    playback = run_file(agent, "rule4_if_markers.yml")
    first = steps(playback, 1, "LLM_STEP")[0]["input"]["instructions"]
    assert "must be blocked first" not in first and "do not block it" not in first
    assert "if:" not in first


def test_M5_confirmation_resolved_by_the_model(agent: MantleAgent) -> None:
    playback = run_text(
        agent,
        in_card_replace("lost C-11, standard")
        + """
      - tool: set_fields
        args: {reason: lost, card_id: C-11, shipping: standard}
      - tool: activate_skill
        args: {skill: card_replace, block: order_card}
  - user: "sounds good to me"
    model:
      - tool: order_replacement
        args: {card_id: C-11, shipping: standard}
      - tool: resolve_tool_confirmation
        args: {confirmed: true}
      - say: "Ordered."
""",
    )
    assert "resolve_tool_confirmation" in offered_tools(playback, 2, 0)
    refused = steps(playback, 2, "REFUSED_STEP")
    assert refused[0]["name"] == "order_replacement" and "confirmation" in refused[0]["reason"]
    resolved = [
        s for s in steps(playback, 2, "EVENT_STEP") if s["event"] == "confirmation_resolved"
    ]
    assert resolved[0]["confirmed"] is True and resolved[0]["via"] == "llm"
    assert playback.variables["card_replace.order_reference"] == "R-C-11-S"
    assert "Your new card is on its way. Reference R-C-11-S." in playback.turns[1].reply.messages


def test_M6_unmet_requires_hides_tools(agent: MantleAgent) -> None:
    playback = run_file(agent, "rule5_tool_constraints.yml")
    first = steps(playback, 1, "RESOLUTION_STEP")[1]  # [0] is the routing prompt
    assert set(first["hiddenTools"]) == {"block_card", "order_replacement"}
    assert "order_replacement" not in first["tools"]


def test_M7_set_fields_checks_types_enums_and_ownership(agent: MantleAgent) -> None:
    playback = run_text(
        agent,
        in_card_replace("x")
        + """
      - tool: set_fields
        args: {reason: exploded}
      - tool: set_fields
        args: {replacement_ordered: true}
      - tool: set_fields
        args: {reason: Lost}
      - say: "ok"
""",
    )
    refused = [r["reason"] for r in steps(playback, 1, "REFUSED_STEP")]
    assert "not one of" in refused[0]
    assert "cannot be set here" in refused[1]
    assert playback.variables["card_replace.reason"] == "lost"
    assert playback.variables["card_replace.replacement_ordered"] is None
    spec = steps(playback, 1, "LLM_STEP")[1]["input"]["tools"]
    fields = next(t for t in spec if t["name"] == "set_fields")["parameters"]["properties"]
    assert sorted(fields) == ["card_id", "reason", "shipping"]
    assert fields["shipping"]["enum"] == ["standard", "express"]


def test_M8_one_condition_grammar_for_when_utters_and_complete_when(agent: MantleAgent) -> None:
    playback = run_file(agent, "rule3_prose_and_block.yml")
    utters = [s for s in steps(playback, 2, "RESPONSE_STEP") if s.get("kind") == "utter"]
    assert [u["response"] for u in utters] == ["utter_card_replace_stolen"]
    # It fires once, not on every turn the condition still holds.
    assert all(
        s.get("response") != "utter_card_replace_stolen"
        for t in (3, 4, 5)
        for s in steps(playback, t, "RESPONSE_STEP")
    )
    # complete_when has criteria: the model is told them and the skill is not auto-completed.
    assert "The customer knows the fee" in last_instructions(playback, 5)
    assert playback.turns[4].reply.node == "card_replace"


def test_M8_complete_skill_is_refused_while_the_condition_does_not_hold(
    agent: MantleAgent,
) -> None:
    playback = run_text(
        agent,
        in_card_replace("x")
        + """
      - tool: complete_skill
      - tool: cancel_skill
      - say: "ok"
""",
    )
    refused = steps(playback, 1, "REFUSED_STEP")
    assert "replacement_ordered does not hold" in refused[0]["reason"]
    assert events(playback, 1, "SKILL_STEP")[-1] == ("cancelled", "card_replace")


def test_ask_before_filling_forces_the_question(tmp_path: Path) -> None:
    project = tmp_path / "bank"
    shutil.copytree(EXAMPLE, project)
    skill_md = project / "skills" / "card_replace" / "skill.md"
    text = skill_md.read_text()
    text = text.replace(
        "utterance: utter_card_replace_ask_shipping",
        "utterance: utter_card_replace_ask_shipping\n    ask_before_filling: true",
    )
    skill_md.write_text(text)
    agent = agentscript.load(project)
    playback = run_text(
        agent,  # type: ignore[arg-type]
        in_card_replace("lost C-11, express")
        + """
      - tool: set_fields
        args: {reason: lost, card_id: C-11, shipping: express}
      - tool: activate_skill
        args: {skill: card_replace, block: order_card}
  - user: "express"
    model:
      - tool: set_fields
        args: {shipping: express}
""",
    )
    advanced = [s["step"] for s in steps(playback, 1, "BLOCK_STEP") if s["event"] == "advanced"]
    assert advanced == ["load_cards", "pick_card"]  # stops at pick_shipping despite the value
    asked = [s["step"] for s in steps(playback, 1, "RESPONSE_STEP") if s["kind"] == "collect"]
    assert asked == ["pick_shipping"]  # asked verbatim although a value was given
    assert "even if the user mentioned a value" in last_instructions(playback, 2)
    assert playback.turns[0].reply.confirmation is None
    assert playback.turns[1].reply.confirmation == (
        "Order an express replacement for card C-11 for 5.00?"
    )


@pytest.mark.parametrize("name", sorted(p.name for p in CONVERSATIONS.glob("*.yml")))
def test_every_tool_call_is_answered_right_after_it(agent: MantleAgent, name: str) -> None:
    # Regression (fuzz): responses said while a call waited for its answer (on-activate
    # utters, on_success, confirmations) came between the call and its answer.
    playback = run_file(agent, name)
    for turn in range(1, len(playback.turns) + 1):
        for llm in steps(playback, turn, "LLM_STEP"):
            messages = llm["input"]["messages"]
            for index, message in enumerate(messages):
                ids = [c["id"] for c in message.get("tool_calls", [])]
                answers = messages[index + 1 : index + 1 + len(ids)]
                assert sorted(m.get("tool_call_id") for m in answers) == sorted(ids)


@pytest.fixture(scope="module")
def abc(tmp_path_factory: pytest.TempPathFactory) -> MantleAgent:
    """Skill a invokes b (named in its prose); c is unrelated."""
    root = tmp_path_factory.mktemp("abc")
    (root / "agent.yml").write_text("agent:\n  id: abc\n  persona: P.\n")
    for name, prose in [("a", "For details use @skill.b."), ("b", "Do b."), ("c", "Do c.")]:
        folder = root / "skills" / name
        folder.mkdir(parents=True)
        (folder / "skill.md").write_text(f"---\nname: {name}\ndescription: {name}.\n---\n{prose}\n")
    loaded = agentscript.load(root)
    assert isinstance(loaded, MantleAgent)
    return loaded


ABC_START = """
turns:
  - user: "go"
    model:
      - tool: activate_skill
        args: {skill: a}
      - tool: activate_skill
        args: {skill: b}
      - tool: activate_skill
        args: {skill: c}
"""


def test_dropping_an_invoked_skill_pauses_its_caller(abc: MantleAgent) -> None:
    # Regression (fuzz): the caller stayed parked for good; activate_skill a was refused
    # ("waits for a skill it started") for the rest of the session.
    playback = run_text(
        abc,
        ABC_START
        + """
      - tool: complete_skill
      - tool: cancel_skill
      - tool: activate_skill
        args: {skill: a}
      - say: "back to a"
""",
    )
    skill_steps = steps(playback, 1, "SKILL_STEP")
    assert [(s["event"], s["skill"]) for s in skill_steps][-4:] == [
        ("completed", "c"),
        ("cancelled", "b"),
        ("interrupted", "a"),
        ("resumed", "a"),
    ]
    assert skill_steps[-2]["reason"] == "the skill it started was dropped"
    assert steps(playback, 1, "REFUSED_STEP") == []
    assert playback.turns[0].reply.node == "a"


def test_resuming_an_invoked_skill_keeps_its_caller_waiting_for_it(abc: MantleAgent) -> None:
    # Regression (fuzz): resuming b moved it away from its parked caller, which then never
    # resumed when b completed.
    playback = run_text(
        abc,
        ABC_START
        + """
      - tool: activate_skill
        args: {skill: b}
      - tool: complete_skill
      - say: "back to a"
""",
    )
    events_seen = events(playback, 1, "SKILL_STEP")
    assert events_seen[-3:] == [("resumed", "b"), ("completed", "b"), ("resumed", "a")]
    assert playback.turns[0].reply.node == "a"  # c stays paused below a
    assert [
        s["skill"] for s in steps(playback, 1, "SKILL_STEP") if s["event"] == "interrupted"
    ] == [
        "b",
        "c",
    ]


def test_a_link_drops_the_confirmation_its_skill_was_waiting_for(tmp_path: Path) -> None:
    # Regression (fuzz invariant): a pending call outlived its skill when a link: step
    # replaced the skill, so the next prompt still asked for a confirmation nobody could use.
    (tmp_path / "agent.yml").write_text("agent:\n  id: link\n  persona: P.\n")
    skill = tmp_path / "skills" / "s"
    skill.mkdir(parents=True)
    (skill / "skill.md").write_text(
        """---
name: S
description: S.
import_tools: [t]
tool_constraints:
  - t:
      requires_confirmation: {enabled: true}
---
:::ordered_block id=main
steps:
  - id: ask
    collect: x
  - id: go
    link: other
:::
"""
    )
    (skill / "memory.yml").write_text("schema:\n  public:\n    x:\n      type: text\n")
    other = tmp_path / "skills" / "other"
    other.mkdir()
    (other / "skill.md").write_text("---\nname: O\ndescription: O.\n---\nDo o.\n")
    agent = load_mantle_agent(tmp_path, stub_missing_tools=True)
    playback = run_text(
        agent,
        """
turns:
  - user: "go"
    model:
      - tool: activate_skill
        args: {skill: s}
      - tool: t
      - tool: set_fields
        args: {x: "1"}
      - say: "done"
""",
    )
    assert ("activated", "other") in events(playback, 1, "SKILL_STEP")
    assert "resolve_tool_confirmation" not in offered_tools(playback, 1)
    assert "asked to confirm" not in last_instructions(playback, 1)
