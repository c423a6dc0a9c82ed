"""Rules that must hold for what survives between turns: a held call, a collect in progress,
the history of a failed turn, and the path of a turn that resumes a node.

Each test pins a rule of the design (S1, S5, S7, S12, S13) or a decision of docs/semantics.md
where the state one turn left behind used to mislead the next one.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from engine_helpers import Scripted, agent, assert_histories_well_formed, llm_inputs, steps

from agentscript.actions.registry import StubBook
from agentscript.engine.session import AgentBase, Reply
from agentscript.models.base import ModelRequest, TextSink
from agentscript.models.function import FunctionInfo, FunctionModel
from agentscript.models.scripted import ScriptedModel


def restored(
    session: Scripted,
    onto: AgentBase,
    stubs: dict[str, Any],
    variables: dict[str, Any] | None = None,
) -> Scripted:
    """``session`` saved to JSON and restored onto ``onto`` (a redeploy when it differs), with
    ``variables`` as the host's corrections."""
    data = json.loads(json.dumps(session.session.to_json()))
    model = ScriptedModel()
    session.agent, session.model = onto, model
    session.session = onto.restore(
        data, model=model, stubs=StubBook.from_data(stubs), variables=variables
    )
    return session


def tool_answers(reply: Reply) -> dict[str, Any]:
    """The answers of the tool calls in the history the model was last sent, by call name."""
    messages = llm_inputs(reply)[-1]
    return {m["name"]: json.loads(m["content"]) for m in messages if m["role"] == "tool"}


# ---------------------------------------------------------------------- S5 on a "yes"

GATED_REFUND = """
variables:
    verified: mutable boolean = False
    refunds: mutable number = 0

start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | Refunds only for verified users.
        actions:
            refund: @actions.issue_refund
{gate}                with amount=...
                set @variables.refunds = @variables.refunds + 1
    actions:
        issue_refund:
            description: "refund"
            target: "flow://Refund"
            require_user_confirmation: True
            inputs:
                amount: number
            outputs:
                ok: boolean
"""
VERIFIED_GATE = "                available when @variables.verified == True\n"
REFUND_STUB = {"issue_refund": {"outputs": {"ok": True}}}


def assert_refused_as_hidden(reply: Reply) -> None:
    assert steps(reply, "ACTION_STEP") == []
    assert reply.actions == []
    assert reply.variables["refunds"] == 0
    refused = steps(reply, "REFUSED_STEP")
    assert [(r["name"], r["cause"]) for r in refused] == [("refund", "hidden")]
    # The model is told what any hidden or unknown tool gets (S5).
    assert tool_answers(reply)["refund"] == {"error": "tool 'refund' is not available now"}
    assert_histories_well_formed(reply)


def test_S5_a_yes_does_not_run_a_held_call_whose_gate_closed_between_turns(
    tmp_path: Path,
) -> None:
    refund = agent(tmp_path, "Refund", GATED_REFUND.format(gate=VERIFIED_GATE))
    session = Scripted(refund, variables={"verified": True}, stubs=REFUND_STUB)
    held = session.send("refund me", {"tool": "refund", "args": {"amount": 500}})
    assert held.confirmation is not None
    # The host knows better between turns: the verification was revoked.
    session = restored(session, refund, REFUND_STUB, variables={"verified": False})
    reply = session.send("yes", {"say": "I cannot do that now."})
    assert_refused_as_hidden(reply)
    assert "available when" in steps(reply, "REFUSED_STEP")[0]["reason"]


def test_S5_a_yes_does_not_run_a_held_call_gated_by_a_redeploy(tmp_path: Path) -> None:
    # A new gate changes no variable or node, so the saved session still fits the agent:
    # the gate must be checked when the call runs, not when the session is restored.
    before = agent(tmp_path, "Refund", GATED_REFUND.format(gate=""))
    session = Scripted(before, stubs=REFUND_STUB)
    assert session.send("refund", {"tool": "refund", "args": {"amount": 900}}).confirmation
    after = agent(tmp_path, "Refund", GATED_REFUND.format(gate=VERIFIED_GATE))
    reply = restored(session, after, REFUND_STUB).send("yes", {"say": "Not now."})
    assert_refused_as_hidden(reply)


def test_S5_a_yes_runs_a_held_call_whose_gate_still_holds(tmp_path: Path) -> None:
    refund = agent(tmp_path, "Refund", GATED_REFUND.format(gate=VERIFIED_GATE))
    session = Scripted(refund, variables={"verified": True}, stubs=REFUND_STUB)
    session.send("refund me", {"tool": "refund", "args": {"amount": 500}})
    reply = session.send("yes", {"say": "Done."})
    assert [s["name"] for s in steps(reply, "ACTION_STEP")] == ["refund"]
    assert steps(reply, "REFUSED_STEP") == []
    assert reply.variables["refunds"] == 1


# ---------------------------------------------------------------------- S12 ran, then failed

AUDITED_REFUND = """
variables:
    refunded: mutable boolean = False
    audit_n: mutable number = 0
    note: mutable string = ""

start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | Help.
        actions:
            refund: @actions.issue_refund
                with amount=...
                set @variables.refunded = @outputs.ok
                run @actions.audit
                    set @variables.audit_n = @outputs.n
            careful_refund: @actions.confirmed_refund
                with amount=...
                set @variables.refunded = @outputs.ok
                run @actions.audit
            remember: @utils.setVariables
                with note=...
                set @variables.audit_n = @variables.note
            broken_refund: @actions.issue_refund
                with amount=@variables.note.size
    actions:
        issue_refund:
            description: "refund"
            target: "flow://Refund"
            inputs:
                amount: number
            outputs:
                ok: boolean
                ledger_id: string
                    filter_from_agent: True
        confirmed_refund:
            description: "refund after asking"
            target: "flow://Refund"
            require_user_confirmation: True
            inputs:
                amount: number
            outputs:
                ok: boolean
        audit:
            description: "audit"
            target: "flow://Audit"
            outputs:
                n: number
"""
AUDIT_DOWN = {
    "issue_refund": {"outputs": {"ok": True, "ledger_id": "L-1"}},
    "confirmed_refund": {"outputs": {"ok": True}},
    "audit": {"error": "audit service down"},
}


def answer_after_failure(session: Scripted, failed: Reply, tool: str) -> dict[str, Any]:
    """The answer the model reads next turn for the call ``tool`` of the failed turn."""
    assert failed.error is not None
    following = session.send("did it work?", {"say": "Yes."})
    assert_histories_well_formed(failed, following)
    answers: dict[str, Any] = tool_answers(following)
    return answers[tool]


def test_S12_an_action_that_ran_is_not_reported_as_not_completed_when_its_callback_fails(
    tmp_path: Path,
) -> None:
    session = Scripted(agent(tmp_path, "Audited", AUDITED_REFUND), stubs=AUDIT_DOWN)
    failed = session.send("refund 50", {"tool": "refund", "args": {"amount": 50}})
    assert failed.error == "audit service down"
    assert failed.variables["refunded"] is True  # S12: kept
    # The outputs the model may see, and that the follow-up failed: not an invitation to retry.
    assert answer_after_failure(session, failed, "refund") == {
        "ok": True,
        "note": "the action ran; its follow-up failed: audit service down",
    }


def test_S12_a_confirmed_action_that_ran_is_not_reported_as_not_completed(
    tmp_path: Path,
) -> None:
    session = Scripted(agent(tmp_path, "Audited", AUDITED_REFUND), stubs=AUDIT_DOWN)
    session.send("refund 50", {"tool": "careful_refund", "args": {"amount": 50}})
    failed = session.send("yes")
    assert failed.error == "audit service down"
    assert answer_after_failure(session, failed, "careful_refund") == {
        "ok": True,
        "note": "the action ran; its follow-up failed: audit service down",
    }


def test_S12_variables_written_before_a_failing_callback_are_reported_as_written(
    tmp_path: Path,
) -> None:
    session = Scripted(agent(tmp_path, "Audited", AUDITED_REFUND), stubs=AUDIT_DOWN)
    failed = session.send("remember", {"tool": "remember", "args": {"note": "vip"}})
    assert failed.variables["note"] == "vip"
    assert answer_after_failure(session, failed, "remember") == {
        "status": "updated",
        "variables": ["note"],
        "note": f"the action ran; its follow-up failed: {failed.error}",
    }


def test_S12_a_call_stopped_before_its_action_ran_is_reported_as_not_completed(
    tmp_path: Path,
) -> None:
    session = Scripted(agent(tmp_path, "Audited", AUDITED_REFUND), stubs=AUDIT_DOWN)
    failed = session.send("refund", {"tool": "broken_refund"})
    assert failed.error is not None and failed.actions == []
    following = session.send("did it work?", {"say": "No."})
    answer = tool_answers(following)["broken_refund"]
    assert answer == {"error": f"not completed: {failed.error}"}


# ---------------------------------------------------------------------- S1 and collect

COLLECT = """
variables:
    name: mutable string
    routed: mutable number = 0

start_agent router:
    description: "router"
    before_reasoning:
        set @variables.routed = @variables.routed + 1
    reasoning:
        instructions: ->
            | Route.
        actions:
            go: @utils.transition to @subagent.intake

subagent intake:
    description: "intake"
    reasoning:
        instructions: ->
            collect @variables.name
                message: "Name?"
            | Thanks.
    after_reasoning:
        run @actions.extract
            set @variables.name = @outputs.name
    actions:
        extract:
            description: "extract the name from the utterance"
            target: "flow://Extract"
            outputs:
                name: string
"""


def test_S1_a_collect_filled_after_the_resolution_no_longer_skips_the_router(
    tmp_path: Path,
) -> None:
    session = Scripted(
        agent(tmp_path, "Intake", COLLECT), stubs={"extract": {"outputs": {"name": "Ada"}}}
    )
    first = session.send("hi", {"tool": "go"}, {"say": "What's your name?"})
    assert first.variables["name"] == "Ada"  # after_reasoning filled the field
    reply = session.send("something else", {"tool": "go"}, {"say": "Hello Ada."})
    assert reply.path == ["router", "intake"]
    assert steps(reply, "NODE_ENTER")[0]["reason"] == "turn start (router)"
    assert reply.variables["routed"] == 2


def test_S1_a_collect_filled_by_the_host_on_restore_no_longer_skips_the_router(
    tmp_path: Path,
) -> None:
    intake = agent(tmp_path, "Intake", COLLECT)
    stubs = {"extract": {"outputs": {"name": None}}}
    session = Scripted(intake, stubs=stubs)
    session.send("hi", {"tool": "go"}, {"say": "What's your name?"})
    session = restored(session, intake, stubs, variables={"name": "Ada"})
    reply = session.send("something else", {"say": "Routed."})
    assert reply.path == ["router"]
    assert reply.variables["routed"] == 2


def test_S1_a_collect_still_missing_a_field_resumes_in_its_subagent(tmp_path: Path) -> None:
    session = Scripted(
        agent(tmp_path, "Intake", COLLECT), stubs={"extract": {"outputs": {"name": None}}}
    )
    session.send("hi", {"tool": "go"}, {"say": "What's your name?"})
    reply = session.send("Ada", {"say": "Name?"})
    assert reply.path == ["intake"]
    assert steps(reply, "NODE_ENTER")[0]["reason"] == "collect in progress"


# ---------------------------------------------------------------------- connected subagents

CONNECTED = """
variables:
    customer_id: mutable string = "C-7"
    refund_requested: mutable boolean = False
    audited: mutable boolean = False

connected_subagent Refunds:
    target: "agent://Refund_Agent"
    description: "Handles refunds end to end"
    inputs:
        customer_id: string = @variables.customer_id
        reason: string
    after_response:
        set @variables.refund_requested = True
        transition to @subagent.done

start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | Help the customer.
        actions:
            refund: @connected_subagent.Refunds
                with reason = ...
                set @variables.audited = True
                {second}

subagent done:
    description: "done"
    reasoning:
        instructions: ->
            | Wrap up.

subagent other:
    description: "other"
    reasoning:
        instructions: ->
            | Elsewhere.
"""


def connected_turn(tmp_path: Path, second: str) -> Reply:
    refunds = agent(tmp_path, "Conn", CONNECTED.format(second=second))
    refunds.register_handler("agent", lambda request: {"reply": "ok"})
    return Scripted(refunds).send(
        "refund", {"tool": "refund", "args": {"reason": "x"}}, {"say": "bye"}
    )


def test_S7_a_connected_subagents_after_response_transition_still_runs_the_binding_callback(
    tmp_path: Path,
) -> None:
    reply = connected_turn(tmp_path, "")
    assert reply.variables["refund_requested"] is True
    assert reply.variables["audited"] is True
    assert reply.path == ["main", "done"]


def test_S7_the_after_response_transition_wins_over_the_binding_callbacks(tmp_path: Path) -> None:
    reply = connected_turn(tmp_path, "transition to @subagent.other")
    assert reply.variables["audited"] is True
    assert reply.path == ["main", "done"]
    assert [s["to"] for s in steps(reply, "TRANSITION_STEP")] == ["done"]


# ---------------------------------------------------------------------- S12 internal errors

NOTE = """
variables:
    n: mutable number = 0

start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | Help.
        actions:
            note: @utils.setVariables
                with n=...
"""


def raising_on_second_call(error: Exception) -> FunctionModel:
    def answer(messages: list[Any], info: FunctionInfo) -> Any:
        if info.calls_before == 0:
            return info.call("note", {"n": 5})
        if info.calls_before == 1:
            raise error
        return "fine"

    return FunctionModel(answer)


def assert_failed_cleanly(reply: Reply, session: Any, message: str, n: int = 5) -> None:
    assert reply.text == "ERR"
    assert reply.error == message
    assert [s["message"] for s in steps(reply, "ERROR_STEP")] == [message]
    assert reply.variables == {"n": n}  # S12: what was committed stays
    history = [m.role for m in session.state.history]
    assert history == ["user", "assistant", "tool", "assistant"]
    assert_histories_well_formed(reply)


def test_S12_a_model_exception_that_is_not_a_model_error_fails_the_turn(tmp_path: Path) -> None:
    note = agent(tmp_path, "Note", NOTE)
    session = note.session(model=raising_on_second_call(ConnectionResetError("socket closed")))
    reply = session.send("hi")
    assert_failed_cleanly(reply, session, "internal error: ConnectionResetError: socket closed")
    # The failing call is on its LLM_STEP too.
    assert steps(reply, "LLM_STEP")[-1]["error"] == reply.error
    following = session.send("again")
    assert following.text == "fine"
    assert_histories_well_formed(reply, following)


def test_S12_an_internal_error_never_shows_credentials_of_a_url(tmp_path: Path) -> None:
    note = agent(tmp_path, "Note", NOTE)
    error = RuntimeError("cannot reach https://bob:hunter22@llm.example/v1/chat?key=sk-1234 now")
    session = note.session(model=raising_on_second_call(error))
    reply = session.send("hi")
    assert (
        reply.error == "internal error: RuntimeError: cannot reach https://llm.example/v1/chat now"
    )
    assert "hunter22" not in json.dumps(reply.trace)
    assert "sk-1234" not in json.dumps(reply.trace)


def test_S12_an_internal_error_hides_a_password_holding_a_quote(tmp_path: Path) -> None:
    """The scrub stopped a URL at a quote, so the rest of such a password and the query
    showed; it now reads a URL to the next whitespace, as for an action's error."""
    note = agent(tmp_path, "Note", NOTE)
    error = RuntimeError("cannot reach https://bob:hun'ter22@llm.example/v1?key=sk-5678 now")
    reply = note.session(model=raising_on_second_call(error)).send("hi")
    assert reply.error is not None and reply.error.startswith("internal error: RuntimeError: ")
    shown = json.dumps(reply.trace) + reply.error
    assert "ter22" not in shown and "sk-5678" not in shown and reply.error.endswith(" now")


def test_S12_a_failing_step_observer_fails_the_turn(tmp_path: Path) -> None:
    note = agent(tmp_path, "Note", NOTE)
    session = note.session(model=raising_on_second_call(AssertionError("unused")))
    seen: list[str] = []

    def observe(step: dict[str, Any]) -> None:
        seen.append(step["type"])
        if step["type"] == "ACTION_STEP":
            raise ValueError("observer broke")

    session.on_step = observe
    reply = session.send("hi")
    # The ACTION_STEP is added before the call writes anything: nothing was written.
    assert_failed_cleanly(reply, session, "internal error: ValueError: observer broke", n=0)
    # Once it raised, the observer is not called again in that turn (it would raise again).
    assert seen[-1] == "ACTION_STEP"


def test_S12_a_failing_text_sink_fails_the_turn(tmp_path: Path) -> None:
    note = agent(tmp_path, "Note", NOTE)
    session = note.session(model=FunctionModel(lambda messages, info: "streamed"))

    def sink(text: str) -> None:
        raise OSError("client gone")

    session.on_text = sink
    reply = session.send("hi")
    assert reply.error == "internal error: OSError: client gone"
    assert reply.text == "ERR"
    assert [m.role for m in session.state.history] == ["user", "assistant"]


class Cancelled:
    """A model whose call is cancelled, as a server cancels a turn whose client left."""

    name = "cancelled"

    async def complete(self, request: ModelRequest, *, stream: TextSink | None = None) -> Any:
        raise asyncio.CancelledError


def test_S12_a_cancelled_turn_is_not_turned_into_a_failure(tmp_path: Path) -> None:
    session = agent(tmp_path, "Note", NOTE).session(model=Cancelled())
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(session.send_async("hi"))


# ---------------------------------------------------------------------- S13 path on a "yes"

PAY = """
variables:
    paid: mutable boolean = False

start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | Help.
        actions:
            go_pay: @utils.transition to @subagent.pay

subagent pay:
    description: "pay"
    reasoning:
        instructions: ->
            | Pay.
        actions:
            pay_it: @actions.pay
                with amount=...
                set @variables.paid = @outputs.ok
                {then}
    actions:
        pay:
            description: "pay"
            target: "flow://Pay"
            require_user_confirmation: True
            inputs:
                amount: number
            outputs:
                ok: boolean

subagent receipt:
    description: "receipt"
    reasoning:
        instructions: ->
            | Receipt.
"""


def pay_on_yes(tmp_path: Path, then: str, *moves: dict[str, Any]) -> Reply:
    session = Scripted(
        agent(tmp_path, "Pay", PAY.format(then=then)), stubs={"pay": {"outputs": {"ok": True}}}
    )
    session.send("pay 5", {"tool": "go_pay"}, {"tool": "pay_it", "args": {"amount": 5}})
    return session.send("yes", *moves)


def node_entries(reply: Reply) -> list[tuple[str, str]]:
    return [(s["node"], s["reason"]) for s in steps(reply, "NODE_ENTER")]


def test_S13_a_confirmed_call_that_transitions_keeps_the_asking_node_on_the_path(
    tmp_path: Path,
) -> None:
    reply = pay_on_yes(tmp_path, "transition to @subagent.receipt", {"say": "Receipt sent."})
    assert reply.path == ["pay", "receipt"]
    assert node_entries(reply) == [
        ("pay", "confirmation resolved"),
        ("receipt", "transition from pay"),
    ]
    # The asking node is entered before its action runs.
    kinds = [s["type"] for s in steps(reply)]
    assert kinds.index("NODE_ENTER") < kinds.index("ACTION_STEP")


def test_S13_a_confirmed_call_enters_the_asking_node_once(tmp_path: Path) -> None:
    reply = pay_on_yes(tmp_path, "", {"say": "Paid."})
    assert reply.path == ["pay"]
    assert node_entries(reply) == [("pay", "confirmation resolved")]


def test_S13_a_declined_call_enters_the_asking_node_once_and_runs_nothing(
    tmp_path: Path,
) -> None:
    session = Scripted(
        agent(tmp_path, "Pay", PAY.format(then="")), stubs={"pay": {"outputs": {"ok": True}}}
    )
    session.send("pay 5", {"tool": "go_pay"}, {"tool": "pay_it", "args": {"amount": 5}})
    reply = session.send("no", {"say": "Not paid."})
    assert reply.path == ["pay"]
    assert node_entries(reply) == [("pay", "confirmation resolved")]
    assert steps(reply, "ACTION_STEP") == []


DELEGATE = """
variables:
    n: mutable number = 0
    label: mutable string = "x"

start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | Help.
        actions:
            ask: @subagent.helper
                set @variables.n = @variables.label

subagent helper:
    description: "helper"
    reasoning:
        instructions: ->
            | Answer.
"""


def test_S12_a_delegate_that_came_back_is_reported_when_the_binding_body_fails(
    tmp_path: Path,
) -> None:
    session = Scripted(agent(tmp_path, "Delegate", DELEGATE))
    failed = session.send("hi", {"tool": "ask"}, {"say": "42"})
    assert failed.error is not None
    assert answer_after_failure(session, failed, "ask") == {
        "reply": "42",
        "note": f"the action ran; its follow-up failed: {failed.error}",
    }
