"""Rules that hold across the calls of one LLM answer and across the turns after it.

Each test pins a rule of the design (S1, S5, S7, S8, S12, S13) or the delegation decision of
docs/semantics.md where an answer with several calls, or text next to a call, used to break it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from engine_helpers import Scripted, agent, assert_histories_well_formed, steps

from agentscript.engine.session import Reply


def tool_results(step: dict[str, object]) -> list[dict[str, object]]:
    messages = step["input"]["messages"]  # type: ignore[index]
    return [m for m in messages if m["role"] == "tool"]  # type: ignore[union-attr]


# ---------------------------------------------------------------------- S5

# Blocks several test agents share: an action that needs the user's confirmation, and the
# node a transition goes to (it counts its entries in n).
WIPE_ALL = """    actions:
        wipe_all:
            description: "wipe"
            target: "flow://Wipe"
            require_user_confirmation: True
            outputs:
                ok: boolean
"""
OTHER_NODE = """subagent other:
    description: "other"
    before_reasoning:
        set @variables.n = @variables.n + 1
    reasoning:
        instructions: ->
            | other node
"""


REFUND = """
variables:
    refund_issued: mutable boolean = False
        description: "refund done"
    count: mutable number = 0
        description: "count"
    payload: mutable object
        description: "payload"

start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | Issue at most one refund.
        actions:
            refund: @actions.issue_refund
                description: "Issue the refund"
                available when @variables.refund_issued == False
                set @variables.refund_issued = True
                set @variables.count = @variables.count + 1
            fragile: @actions.issue_refund
                description: "Gate that breaks once the payload is cleared"
                available when @variables.payload.level > 1
                set @variables.payload = None
            note: @utils.setVariables
                description: "note"
                with count=...
    actions:
        issue_refund:
            description: "refund"
            target: "flow://Refund"
            outputs:
                ok: boolean
"""


def test_S5_available_when_is_checked_again_before_each_call_of_one_answer(
    tmp_path: Path,
) -> None:
    session = Scripted(
        agent(tmp_path, "Refund", REFUND), stubs={"issue_refund": {"outputs": {"ok": True}}}
    )
    reply = session.send(
        "refund me three times",
        {"tools": [{"tool": "refund"}, {"tool": "refund"}, {"tool": "refund"}]},
        {"say": "done"},
    )
    # Only the first call ran: its callback closed the gate for the two after it.
    assert reply.variables == {"refund_issued": True, "count": 1, "payload": None}
    assert [s["name"] for s in steps(reply, "ACTION_STEP")] == ["refund"]
    refused = steps(reply, "REFUSED_STEP")
    assert [(r["name"], r["cause"]) for r in refused] == [("refund", "hidden")] * 2
    assert "became false" in refused[0]["reason"]
    # The model is told what it is told for an unknown tool, so it cannot tell the tool exists.
    results = tool_results(steps(reply, "LLM_STEP")[-1])
    assert [json.loads(r["content"]) for r in results[1:]] == [
        {"error": "tool 'refund' is not available now"}
    ] * 2
    assert_histories_well_formed(reply)


def test_S5_a_gate_that_cannot_be_evaluated_after_earlier_calls_hides_the_tool(
    tmp_path: Path,
) -> None:
    session = Scripted(
        agent(tmp_path, "Refund", REFUND),
        variables={"payload": {"level": 2}},
        stubs={"issue_refund": {"outputs": {"ok": True}}},
    )
    reply = session.send(
        "x", {"tools": [{"tool": "fragile"}, {"tool": "fragile"}]}, {"say": "done"}
    )
    assert [s["name"] for s in steps(reply, "ACTION_STEP")] == ["fragile"]
    refused = steps(reply, "REFUSED_STEP")
    assert [(r["name"], r["cause"]) for r in refused] == [("fragile", "hidden")]
    assert "cannot be evaluated" in refused[0]["reason"]


def test_S5_calls_of_an_ungated_tool_in_one_answer_all_run(tmp_path: Path) -> None:
    session = Scripted(agent(tmp_path, "Refund", REFUND))
    reply = session.send(
        "x",
        {"tools": [{"tool": "note", "args": {"count": 1}}, {"tool": "note", "args": {"count": 2}}]},
        {"say": "done"},
    )
    assert steps(reply, "REFUSED_STEP") == []
    assert reply.variables["count"] == 2


# ---------------------------------------------------------------------- S7

CONFIRM = f"""
variables:
    n: mutable number = 0
        description: "n"

start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | main node
        actions:
            go_other: @utils.transition to @subagent.other
                description: "go"
            wipe: @actions.wipe_all
                description: "wipe"

{WIPE_ALL}
{OTHER_NODE}"""


def test_S7_a_transition_earlier_in_the_answer_wins_over_a_call_needing_confirmation(
    tmp_path: Path,
) -> None:
    session = Scripted(
        agent(tmp_path, "Conf", CONFIRM), stubs={"wipe_all": {"outputs": {"ok": True}}}
    )
    reply = session.send(
        "go and wipe",
        {"tools": [{"tool": "go_other"}, {"tool": "wipe"}]},
        {"say": "in other"},
    )
    # Not held and not run: the transition the model was told about took effect.
    assert reply.confirmation is None and session.session.state.pending_confirmation is None
    assert steps(reply, "ACTION_STEP") == []
    assert reply.path == ["main", "other"] and reply.variables["n"] == 1
    assert reply.text == "in other"
    refused = steps(reply, "REFUSED_STEP")
    assert [r["name"] for r in refused] == ["wipe"]
    assert "transition was requested earlier in the same answer" in refused[0]["reason"]
    results = tool_results(steps(reply, "LLM_STEP")[-1])
    assert json.loads(results[0]["content"]) == {"status": "transferring to other"}
    assert "transition was requested" in json.loads(results[1]["content"])["error"]
    assert_histories_well_formed(reply)


def test_S7_a_call_needing_confirmation_without_a_transition_is_still_held(
    tmp_path: Path,
) -> None:
    session = Scripted(agent(tmp_path, "Conf", CONFIRM))
    reply = session.send("wipe", {"tool": "wipe"})
    assert reply.confirmation is not None and reply.path == ["main"]


CONFIRM_IN_DELEGATE = f"""
variables:
    n: mutable number = 0
        description: "n"

start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | main node
        actions:
            go_other: @utils.transition to @subagent.other
                description: "go"
            ask_ops: @subagent.ops
                description: "ops"
            human: @utils.escalate
                description: "escalate"

subagent ops:
    description: "ops"
    reasoning:
        instructions: ->
            | ops node
        actions:
            wipe: @actions.wipe_all
                description: "wipe"
            ask_deeper: @subagent.deeper
                description: "deeper"
            human: @utils.escalate
                description: "escalate"

{WIPE_ALL}
subagent deeper:
    description: "deeper"
    reasoning:
        instructions: ->
            | deeper node
        actions:
            wipe: @actions.wipe_all
                description: "wipe"

{WIPE_ALL}
{OTHER_NODE}"""


def event_names(reply: Reply) -> list[str]:
    return [s["event"] for s in steps(reply, "EVENT_STEP")]


def test_S7_a_transition_earlier_in_the_answer_wins_over_a_call_held_inside_a_delegate(
    tmp_path: Path,
) -> None:
    session = Scripted(
        agent(tmp_path, "ConfDeleg", CONFIRM_IN_DELEGATE),
        stubs={"wipe_all": {"outputs": {"ok": True}}},
    )
    reply = session.send(
        "go and ask ops to wipe",
        {"tools": [{"tool": "go_other"}, {"tool": "ask_ops"}]},
        {"tool": "wipe"},
        {"say": "ops cannot wipe now"},
        {"say": "in other"},
    )
    # The delegate's call gave way as a direct one does: not held, not run, and the delegate
    # came back, so the transition the caller's model was told about took effect.
    assert reply.confirmation is None and session.session.state.pending_confirmation is None
    assert steps(reply, "ACTION_STEP") == []
    assert reply.node == "other" and reply.text == "in other" and reply.variables["n"] == 1
    assert reply.path == ["main", "other"] and reply.delegated == ["ops"]
    assert event_names(reply) == ["delegate_start", "delegate_end"]
    assert steps(reply, "EVENT_STEP")[1]["reply"] == "ops cannot wipe now"
    refused = steps(reply, "REFUSED_STEP")
    assert [(r["name"], r["node"]) for r in refused] == [("wipe", "ops")]
    assert "transition was requested before this subagent was called" in refused[0]["reason"]
    [transition] = steps(reply, "TRANSITION_STEP")
    assert (transition["from"], transition["to"], transition["via"]) == (
        "main",
        "other",
        "tool go_other",
    )
    delegate_results = tool_results(steps(reply, "LLM_STEP")[2])
    assert "transition was requested" in json.loads(delegate_results[0]["content"])["error"]
    caller_results = tool_results(steps(reply, "LLM_STEP")[-1])
    assert [json.loads(r["content"]) for r in caller_results] == [
        {"status": "transferring to other"},
        {"reply": "ops cannot wipe now"},
    ]
    assert_histories_well_formed(reply)


def test_S7_a_transition_before_a_delegation_also_reaches_the_delegates_own_delegates(
    tmp_path: Path,
) -> None:
    session = Scripted(
        agent(tmp_path, "ConfDeleg", CONFIRM_IN_DELEGATE),
        stubs={"wipe_all": {"outputs": {"ok": True}}},
    )
    reply = session.send(
        "go and ask ops to wipe",
        {"tools": [{"tool": "go_other"}, {"tool": "ask_ops"}]},
        {"tool": "ask_deeper"},
        {"tool": "wipe"},
        {"say": "deeper cannot wipe now"},
        {"say": "ops: deeper said no"},
        {"say": "in other"},
    )
    assert reply.confirmation is None and reply.node == "other"
    assert [(r["name"], r["node"]) for r in steps(reply, "REFUSED_STEP")] == [("wipe", "deeper")]
    # `delegated` lists a nested delegate first: it came back first.
    assert reply.path == ["main", "other"] and reply.delegated == ["deeper", "ops"]
    assert_histories_well_formed(reply)


def test_S7_a_delegation_without_an_earlier_transition_still_holds_its_call(
    tmp_path: Path,
) -> None:
    session = Scripted(agent(tmp_path, "ConfDeleg", CONFIRM_IN_DELEGATE))
    # The transition comes after the delegation here: the held call ends the turn first.
    reply = session.send(
        "ask ops to wipe", {"tools": [{"tool": "ask_ops"}, {"tool": "go_other"}]}, {"tool": "wipe"}
    )
    assert reply.confirmation is not None and reply.node == "ops"
    assert session.session.state.pending_confirmation is not None
    assert [r["name"] for r in steps(reply, "REFUSED_STEP")] == ["go_other"]
    assert steps(reply, "TRANSITION_STEP") == []


DELEGATE_CALLBACK = """
variables:
    asked: mutable number = 0
        description: "asked"

start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | main node
        actions:
            go_help: @utils.transition to @subagent.help
                description: "help"
            ask_ops: @subagent.ops
                description: "ops"
                set @variables.asked = @variables.asked + 1
                transition to @subagent.other

subagent ops:
    description: "ops"
    reasoning:
        instructions: ->
            | ops node
        actions:
            human: @utils.escalate
                description: "escalate"

subagent other:
    description: "other"
    reasoning:
        instructions: ->
            | other node

subagent help:
    description: "help"
    reasoning:
        instructions: ->
            | help node
"""


def test_S7_a_delegation_runs_its_binding_body_and_defers_its_transition(tmp_path: Path) -> None:
    session = Scripted(agent(tmp_path, "DelegBody", DELEGATE_CALLBACK))
    reply = session.send("ask ops", {"tool": "ask_ops"}, {"say": "ops says"}, {"say": "in other"})
    assert reply.variables["asked"] == 1
    assert reply.path == ["main", "other"] and reply.delegated == ["ops"]
    [transition] = steps(reply, "TRANSITION_STEP")
    assert (transition["from"], transition["to"], transition["via"]) == (
        "main",
        "other",
        "tool ask_ops",
    )
    assert reply.text == "in other"


def test_S7_a_transition_earlier_in_the_answer_wins_over_a_delegations_body(
    tmp_path: Path,
) -> None:
    session = Scripted(agent(tmp_path, "DelegBody", DELEGATE_CALLBACK))
    reply = session.send(
        "help, then ops",
        {"tools": [{"tool": "go_help"}, {"tool": "ask_ops"}]},
        {"say": "ops says"},
        {"say": "in help"},
    )
    # The body ran (its `set`), and its transition came second.
    assert reply.variables["asked"] == 1
    assert reply.path == ["main", "help"] and reply.text == "in help"


def test_S13_a_delegation_that_ends_the_turn_does_not_run_its_binding_body(
    tmp_path: Path,
) -> None:
    session = Scripted(agent(tmp_path, "DelegBody", DELEGATE_CALLBACK))
    reply = session.send("ops", {"tool": "ask_ops"}, {"tool": "human"})
    # Control never came back to the caller, so nothing of the caller's ran after the call.
    assert reply.escalated and reply.node == "ops" and reply.variables["asked"] == 0
    assert steps(reply, "TRANSITION_STEP") == []


def test_S13_a_delegate_that_escalates_wins_over_an_earlier_transition(tmp_path: Path) -> None:
    session = Scripted(agent(tmp_path, "ConfDeleg", CONFIRM_IN_DELEGATE))
    reply = session.send(
        "go and ask ops", {"tools": [{"tool": "go_other"}, {"tool": "ask_ops"}]}, {"tool": "human"}
    )
    # Escalation hands the user to a person: stronger than picking the next node, as when the
    # caller's own answer escalates after a transition.
    assert reply.escalated and reply.node == "ops"
    assert reply.path == ["main", "ops"] and reply.delegated == []
    assert steps(reply, "TRANSITION_STEP") == [] and reply.variables["n"] == 0
    caller = Scripted(agent(tmp_path, "ConfDeleg", CONFIRM_IN_DELEGATE))
    direct = caller.send("go, then a person", {"tools": [{"tool": "go_other"}, {"tool": "human"}]})
    assert direct.escalated and direct.node == "main" and steps(direct, "TRANSITION_STEP") == []


# ---------------------------------------------------------------------- S8, S12

SETV = """
variables:
    name: mutable string = "bob"
        description: "name"
    count: mutable number = 0
        description: "count"
    flag: mutable boolean = False
        description: "flag"
    customer: mutable object
        description: "customer"
    tier: mutable string = ""
        description: "tier"

start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | count is {!@variables.count}
        actions:
            save: @utils.setVariables
                description: "save"
                with count=@variables.name
                with flag=...
            save_tier: @utils.setVariables
                description: "save the tier"
                with tier=@variables.customer.tier
                with flag=...
            act: @actions.do_it
                description: "do"
                with tier=@variables.customer.tier
    actions:
        do_it:
            description: "do"
            target: "flow://Do"
            inputs:
                tier: string
            outputs:
                ok: boolean
"""


def test_S8_a_bound_set_variables_value_is_checked_like_an_authored_set(tmp_path: Path) -> None:
    session = Scripted(agent(tmp_path, "SetV", SETV))
    reply = session.send("x", {"tool": "save", "args": {"flag": True}}, {"say": "done"})
    # A number variable never gets a string; the turn ends as a refused `set` ends it, and
    # nothing of the call is written (not even the model's valid `flag`).
    assert reply.variables["count"] == 0 and reply.variables["flag"] is False
    assert reply.error is not None and "@variables.count is number" in reply.error
    assert reply.text == "ERR"
    assert steps(reply, "ACTION_STEP")[0]["error"] == reply.error
    assert [s["message"] for s in steps(reply, "ERROR_STEP")] == [reply.error]
    assert_histories_well_formed(reply)


@pytest.mark.parametrize(
    ("tool", "args"), [("save_tier", {"flag": True}), ("act", {})], ids=["setVariables", "action"]
)
def test_S12_a_with_expression_that_cannot_be_evaluated_ends_the_turn_on_every_tool(
    tmp_path: Path, tool: str, args: dict[str, object]
) -> None:
    session = Scripted(agent(tmp_path, "SetV", SETV), stubs={"do_it": {"outputs": {"ok": True}}})
    reply = session.send("x", {"tool": tool, "args": args}, {"say": "never said"})
    assert reply.text == "ERR"
    assert (
        reply.error
        == f"with tier of tool '{tool}': cannot read '.tier': @variables.customer is None"
    )
    assert len(steps(reply, "LLM_STEP")) == 1  # the model was not asked again
    assert reply.variables["flag"] is False and reply.variables["tier"] == ""
    assert_histories_well_formed(reply)
    # The session stays usable.
    assert session.send("again", {"say": "fine"}).text == "fine"


# ---------------------------------------------------------------------- S13

ESCALATE = """
{connection}
start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | main node
        actions:
            human: @utils.escalate
                description: "escalate"
            bye: @utils.end_session
                description: "end"
"""

CONNECTION = """
connection messaging:
    escalation_message: "Transferring you to a human agent"
    outbound_route_type: "OmniChannelFlow"
    outbound_route_name: "flow://Route_To_Agent"
"""


def test_S13_text_said_with_escalate_or_end_session_reaches_the_user(tmp_path: Path) -> None:
    session = Scripted(agent(tmp_path, "Esc", ESCALATE.format(connection="")))
    escalated = session.send(
        "human please", {"say": "Let me connect you to a person.", "tool": "human"}
    )
    assert escalated.escalated and escalated.messages == ["Let me connect you to a person."]
    said = [s for s in steps(escalated, "RESPONSE_STEP")]
    assert [(s["text"], s["kind"]) for s in said] == [("Let me connect you to a person.", "llm")]
    silent = session.send("again", {"tool": "human"})
    assert silent.escalated and silent.text == ""
    ended = session.send("bye", {"say": "Goodbye!", "tool": "bye"})
    assert ended.ended and ended.text == "Goodbye!"
    assert_histories_well_formed(escalated, silent, ended)


def test_S13_the_models_text_comes_before_the_escalation_message(tmp_path: Path) -> None:
    session = Scripted(agent(tmp_path, "Esc", ESCALATE.format(connection=CONNECTION)))
    reply = session.send("human please", {"say": "One moment.", "tool": "human"})
    assert reply.messages == ["One moment.", "Transferring you to a human agent"]
    assert reply.text == "One moment.\n\nTransferring you to a human agent"
    # The history has the same order: the text with the call, the message after its result.
    history = session.session.state.history
    assert [(m.role, m.content) for m in history[-3:]] == [
        ("assistant", "One moment."),
        ("tool", history[-2].content),
        ("assistant", "Transferring you to a human agent"),
    ]


HELD = f"""
start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | main node
        actions:
            wipe: @actions.wipe_all
                description: "wipe"
            ask_ops: @subagent.ops
                description: "ops"

{WIPE_ALL}
subagent ops:
    description: "ops"
    reasoning:
        instructions: ->
            | ops node
        actions:
            wipe: @actions.wipe_all

{WIPE_ALL}"""


def test_S13_text_said_with_a_call_held_for_confirmation_reaches_the_user(
    tmp_path: Path,
) -> None:
    session = Scripted(agent(tmp_path, "Held", HELD), stubs={"wipe_all": {"outputs": {"ok": True}}})
    held = session.send("wipe it", {"say": "I can wipe the account.", "tool": "wipe"})
    question = held.confirmation
    assert question is not None and session.session.state.pending_confirmation is not None
    assert held.messages == ["I can wipe the account.", question]
    said = [(s["text"], s["kind"]) for s in steps(held, "RESPONSE_STEP")]
    assert said == [("I can wipe the account.", "llm")]
    assert steps(held, "ACTION_STEP") == []
    # The history has the reply's order: the text with the call, the question after its result.
    history = session.session.state.history
    assert [(m.role, m.content) for m in history[-3:]] == [
        ("assistant", "I can wipe the account."),
        ("tool", history[-2].content),
        ("assistant", question),
    ]
    confirmed = session.send("yes", {"say": "Wiped."})
    assert [s["name"] for s in steps(confirmed, "ACTION_STEP")] == ["wipe"]
    assert confirmed.text == "Wiped." and confirmed.confirmation is None
    # Held inside a delegate: what the caller said with its call, then the delegate's text,
    # each once, before the question.
    delegated = session.send(
        "ops, wipe it",
        {"say": "Asking ops.", "tool": "ask_ops"},
        {"say": "Ops can do that.", "tool": "wipe"},
    )
    assert delegated.confirmation is not None and delegated.node == "ops"
    assert delegated.messages == ["Asking ops.", "Ops can do that.", delegated.confirmation]
    again = session.send("yes", {"say": "Done."})
    assert [s["name"] for s in steps(again, "ACTION_STEP")] == ["wipe"]
    assert again.text == "Done."
    assert_histories_well_formed(held, confirmed, delegated, again)


# ---------------------------------------------------------------------- S1

COLLECT = """
variables:
    city: mutable string
        description: "city"
    blocked: mutable boolean = False
        description: "blocked"

start_agent router:
    description: "router"
    before_reasoning:
        if @variables.blocked == True:
            transition to @subagent.blocked_node
    reasoning:
        instructions: ->
            | route
        actions:
            go_form: @utils.transition to @subagent.form
                description: "form"

subagent form:
    description: "form"
    reasoning:
        instructions: ->
            collect @variables.city
                message: "Which city?"
        actions:
            go_help: @utils.transition to @subagent.help
                description: "help"

subagent help:
    description: "help"
    reasoning:
        instructions: ->
            | help
        actions:
            block: @utils.setVariables
                description: "block"
                with blocked=...
            back: @utils.transition to @subagent.form
                description: "back to the form"

subagent blocked_node:
    description: "blocked"
    reasoning:
        instructions: ->
            | you are blocked
"""


def test_S1_a_collect_left_by_a_transition_no_longer_skips_the_router(tmp_path: Path) -> None:
    session = Scripted(agent(tmp_path, "Collect", COLLECT))
    first = session.send(
        "form",
        {"tool": "go_form"},
        {"tool": "go_help"},
        {"tool": "block", "args": {"blocked": True}},
        {"say": "help here"},
    )
    assert first.path == ["router", "form", "help"]
    second = session.send("hi again", {"say": "blocked"})
    # The router's per-turn check ran: the turn did not resume the form it left.
    assert second.path == ["router", "blocked_node"]
    assert steps(second, "NODE_ENTER")[0]["reason"] == "turn start (router)"


def test_S1_coming_back_to_the_collecting_subagent_resumes_it_next_turn(tmp_path: Path) -> None:
    session = Scripted(agent(tmp_path, "Collect", COLLECT))
    session.send(
        "form", {"tool": "go_form"}, {"tool": "go_help"}, {"tool": "back"}, {"say": "Which city?"}
    )
    reply = session.send("Paris", {"say": "noted"})
    assert reply.path == ["form"]
    assert steps(reply, "NODE_ENTER")[0]["reason"] == "collect in progress"


COLLECTING_DELEGATE = f"""
variables:
    city: mutable string
        description: "city"

start_agent router:
    description: "router"
    reasoning:
        instructions: ->
            | route
        actions:
            ask_form: @subagent.form
                description: "ask the form"
            go_help: @utils.transition to @subagent.help
                description: "help"

subagent form:
    description: "form"
    reasoning:
        instructions: ->
            collect @variables.city
                message: "Which city?"
        actions:
            wipe: @actions.wipe_all
                description: "wipe"
            human: @utils.escalate
                description: "escalate"

{WIPE_ALL}
subagent help:
    description: "help"
    reasoning:
        instructions: ->
            | help
"""


def _collecting_delegate(tmp_path: Path) -> Scripted:
    return Scripted(
        agent(tmp_path, "CollectDeleg", COLLECTING_DELEGATE),
        stubs={"wipe_all": {"outputs": {"ok": True}}},
    )


def start_reason(reply: Reply) -> str:
    return str(steps(reply, "NODE_ENTER")[0]["reason"])


def test_S1_a_collecting_delegate_that_came_back_does_not_resume_next_turn(
    tmp_path: Path,
) -> None:
    session = _collecting_delegate(tmp_path)
    first = session.send("form", {"tool": "ask_form"}, {"say": "Which city?"}, {"say": "asked"})
    assert first.path == ["router"] and first.delegated == ["form"]
    # The delegate handed control back: the conversation goes on where the caller is.
    second = session.send("hi", {"say": "routed"})
    assert second.path == ["router"] and start_reason(second) == "turn start (router)"
    assert session.session.state.resume_node is None


def test_S1_a_collecting_delegate_does_not_resume_after_the_caller_moved_on(
    tmp_path: Path,
) -> None:
    session = _collecting_delegate(tmp_path)
    first = session.send(
        "form, then help",
        {"tools": [{"tool": "ask_form"}, {"tool": "go_help"}]},
        {"say": "Which city?"},
        {"say": "help here"},
    )
    assert first.path == ["router", "help"] and first.delegated == ["form"]
    second = session.send("hi", {"say": "routed"})
    assert second.path == ["router"] and start_reason(second) == "turn start (router)"


def test_S1_a_collecting_delegate_that_escalates_resumes_next_turn(tmp_path: Path) -> None:
    session = _collecting_delegate(tmp_path)
    first = session.send("form", {"tool": "ask_form"}, {"tool": "human"})
    # The delegate ended the turn: the conversation continues there, collect included.
    assert first.escalated and first.node == "form"
    second = session.send("Paris", {"say": "noted"})
    assert second.path == ["form"] and start_reason(second) == "collect in progress"


def test_S1_a_collecting_delegate_that_holds_a_call_resumes_after_the_answer(
    tmp_path: Path,
) -> None:
    session = _collecting_delegate(tmp_path)
    held = session.send("form", {"tool": "ask_form"}, {"tool": "wipe"})
    assert held.confirmation is not None and held.node == "form"
    confirmed = session.send("yes", {"say": "Wiped. Which city?"})
    assert confirmed.path == ["form"] and start_reason(confirmed) == "confirmation resolved"
    after = session.send("Paris", {"say": "noted"})
    assert after.path == ["form"] and start_reason(after) == "collect in progress"


# ---------------------------------------------------------------------- delegation

DELEGATE = """
    additional_parameter__reset_to_initial_node: False
{connection}
start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | main
        actions:
            ask_billing: @subagent.billing
                description: "billing"

subagent billing:
    description: "billing"
    reasoning:
        instructions: ->
            | billing
        actions:
            human: @utils.escalate
                description: "escalate"
"""


def test_S13_delegation_that_escalates_continues_in_the_delegate(tmp_path: Path) -> None:
    session = Scripted(agent(tmp_path, "Deleg", DELEGATE.format(connection=CONNECTION)))
    reply = session.send(
        "x", {"tool": "ask_billing"}, {"say": "A person will help.", "tool": "human"}
    )
    # Control did not come back to the caller: the delegate is on the path and holds the
    # conversation, and what it said ends the caller's turn too.
    assert reply.escalated and reply.node == "billing"
    assert reply.path == ["main", "billing"] and reply.delegated == []
    assert reply.messages == ["A person will help.", "Transferring you to a human agent"]
    assert_histories_well_formed(reply)
    after = session.send("y", {"say": "ok"})
    assert after.path == ["billing"]
    assert steps(after, "NODE_ENTER")[0]["reason"] == "turn start (previous subagent)"


def test_S13_delegation_that_comes_back_stays_off_the_path(tmp_path: Path) -> None:
    session = Scripted(agent(tmp_path, "Deleg", DELEGATE.format(connection="")))
    reply = session.send("x", {"tool": "ask_billing"}, {"say": "billing says hi"}, {"say": "done"})
    assert reply.node == "main" and reply.path == ["main"] and reply.delegated == ["billing"]
    assert reply.text == "done"
