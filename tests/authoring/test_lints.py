"""Each lint fires on its wrong example, stays silent on the right one, and its fix (where it
has one) turns the wrong example into the right one."""

from __future__ import annotations

import glob
from collections import Counter
from pathlib import Path

import pytest

from agentscript.authoring import lints
from agentscript.authoring.lints import fix_source, lint_agent, lint_project
from agentscript.authoring.prompts import node_prompts
from agentscript.check import check
from agentscript.loader import parse_file
from agentscript.mantle import load_project
from conformance import CONFORMANCE as CORPUS

from .helpers import agent_text, invoke, outline_of, swap

ROOT = Path(__file__).resolve().parents[2]


def codes(text: str) -> list[str]:
    return [d.code for d in lint_agent(outline_of(text), text)]


POST_ACTION_WRONG = agent_text(
    """\
    variables:
        done: mutable boolean = False

    start_agent main:
        description: "Main"
        reasoning:
            instructions: ->
                | Help the customer.
                if @variables.done:
                    transition to @subagent.bye

    subagent bye:
        description: "Bye"
        reasoning:
            instructions: ->
                | Bye.
    """
)
POST_ACTION_RIGHT = swap(
    POST_ACTION_WRONG,
    "                | Help the customer.\n"
    "                if @variables.done:\n"
    "                    transition to @subagent.bye\n",
    "                if @variables.done:\n"
    "                    transition to @subagent.bye\n"
    "                | Help the customer.\n",
)


def test_check_below_prose() -> None:
    assert lints.CHECK_BELOW_PROSE in codes(POST_ACTION_WRONG)
    assert lints.CHECK_BELOW_PROSE not in codes(POST_ACTION_RIGHT)
    fixed, count = fix_source(POST_ACTION_WRONG, "x.agent")
    assert count >= 1
    assert fixed == POST_ACTION_RIGHT


def _effective_prompts(text: str) -> list[tuple[str, list[tuple[object, ...]]]]:
    """What ``agentscript prompts`` shows of each node: per case, its condition, text, tools,
    effects and transition."""
    return [
        (
            node.node,
            [
                (c.label, c.instructions, c.tools, c.conditional_tools, c.effects, c.transition)
                for c in node.cases
            ],
        )
        for node in node_prompts(outline_of(text))
    ]


# The `if` below the prose, with each kind of other branch: (its lines, whether the fix applies).
BELOW_PROSE_BRANCHES = {
    "no other branch": ("", True),
    "else with prose (the audit's case)": (
        "                else:\n                    | Ask whether they are finished.\n",
        False,
    ),
    "else if with prose": (
        "                else if @variables.tries > 2:\n                    | Offer to stop.\n",
        False,
    ),
    "else that transitions": (
        "                else:\n"
        "                    | Unseen.\n"
        "                    transition to @subagent.bye\n",
        True,
    ),
    "else writing what the prose does not read": (
        "                else:\n                    set @variables.tries = @variables.tries + 1\n",
        True,
    ),
    "else writing what the prose reads": (
        "                else:\n                    set @variables.tries = @variables.tries + 1\n",
        False,
    ),
}


@pytest.mark.parametrize("case", sorted(BELOW_PROSE_BRANCHES))
def test_check_below_prose_fix_keeps_every_effective_prompt(case: str) -> None:
    # Moving the `if` above `| Help the customer.` put its else's `| Ask ...` line first.
    branch, fixable = BELOW_PROSE_BRANCHES[case]
    prose = "Help the customer {!@variables.tries}." if case.endswith("reads") else "Help."
    text = swap(
        swap(POST_ACTION_WRONG, "| Help the customer.", f"| {prose}"),
        "                    transition to @subagent.bye\n",
        "                    transition to @subagent.bye\n" + branch,
    )
    text = swap(
        text,
        "        done: mutable boolean = False\n",
        "        done: mutable boolean = False\n        tries: mutable number = 0\n",
    )
    assert lints.CHECK_BELOW_PROSE in codes(text)
    fixed, count = fix_source(text, "x.agent")
    assert (count > 0) is fixable, fixed
    assert _effective_prompts(fixed) == _effective_prompts(text)


LITERAL_WRONG = agent_text(
    """\
    start_agent main:
        description: "Main"
        reasoning:
            instructions: |
                Help the customer.
                if the order is late:
                run @actions.refund
    """
)
LITERAL_RIGHT = swap(
    swap(LITERAL_WRONG, "                if the order is late:\n", ""),
    "                run @actions.refund\n",
    "",
)


def test_procedure_syntax_in_literal() -> None:
    assert codes(LITERAL_WRONG).count(lints.PROCEDURE_IN_LITERAL) == 2
    assert lints.PROCEDURE_IN_LITERAL not in codes(LITERAL_RIGHT)


BARE_WRONG = agent_text(
    """\
    variables:
        name: mutable string = "Ann"

    start_agent main:
        description: "Main"
        reasoning:
            instructions: ->
                | Greet @variables.name by name.
    """
)
BARE_RIGHT = swap(BARE_WRONG, "Greet @variables.name", "Greet {!@variables.name}")


def test_bare_reference_in_prose() -> None:
    assert codes(BARE_WRONG) == [lints.BARE_REFERENCE]
    assert lints.BARE_REFERENCE not in codes(BARE_RIGHT)
    assert lints.BARE_REFERENCE not in codes(BARE_RIGHT.replace("{!@", "{! @"))
    assert fix_source(BARE_WRONG, "x.agent") == (BARE_RIGHT, 1)


PROSE_IF_WRONG = agent_text(
    """\
    variables:
        is_verified: mutable boolean = False

    start_agent main:
        description: "Main"
        reasoning:
            instructions: ->
                | If the user is verified, help with the account.
                | Otherwise ask for the email {!@variables.is_verified}.
    """
)
PROSE_IF_RIGHT = swap(
    PROSE_IF_WRONG,
    "                | If the user is verified, help with the account.\n",
    "                if @variables.is_verified:\n                    | Help with the account.\n",
)


def test_prose_conditional() -> None:
    assert lints.PROSE_CONDITIONAL in codes(PROSE_IF_WRONG)
    assert lints.PROSE_CONDITIONAL not in codes(PROSE_IF_RIGHT)


PERSONA = "You are a friendly banking assistant who always answers in two sentences."
PERSONA_WRONG = agent_text(
    f"""\
    start_agent main:
        description: "Main"
        reasoning:
            instructions: ->
                | {PERSONA}
                | Route the customer.
            actions:
                go: @utils.transition to @subagent.other

    subagent other:
        description: "Other"
        reasoning:
            instructions: ->
                | {PERSONA}
                | Answer questions.
    """
)
PERSONA_RIGHT = swap(
    swap(PERSONA_WRONG, f"                | {PERSONA}\n", ""),
    'instructions: "Be brief."',
    f'instructions: "{PERSONA}"',
)


def test_repeated_persona() -> None:
    assert codes(PERSONA_WRONG).count(lints.REPEATED_PERSONA) == 1
    assert lints.REPEATED_PERSONA not in codes(PERSONA_RIGHT)


CONSEQUENTIAL_WRONG = agent_text(
    """\
    variables:
        is_verified: mutable boolean = False

    start_agent main:
        description: "Main"
        reasoning:
            instructions: ->
                | Help {!@variables.is_verified}.
            actions:
                issue_refund: @actions.refund_payment
                    with order=...
        actions:
            refund_payment:
                description: "Refund a payment"
                target: "flow://Refund"
                inputs:
                    order: string
    """
)
CONSEQUENTIAL_RIGHT = swap(
    CONSEQUENTIAL_WRONG,
    "                    with order=...\n",
    "                    available when @variables.is_verified == True\n"
    "                    with order=...\n",
)


def test_unguarded_consequential_action() -> None:
    assert lints.UNGUARDED_CONSEQUENTIAL in codes(CONSEQUENTIAL_WRONG)
    assert lints.UNGUARDED_CONSEQUENTIAL not in codes(CONSEQUENTIAL_RIGHT)
    confirmed = swap(
        CONSEQUENTIAL_WRONG,
        '                target: "flow://Refund"\n',
        '                target: "flow://Refund"\n                require_user_confirmation: True\n',
    )
    assert lints.UNGUARDED_CONSEQUENTIAL not in codes(confirmed)


UNREACHABLE_WRONG = agent_text(
    """\
    start_agent main:
        description: "Main"
        reasoning:
            instructions: ->
                | Help.

    subagent lonely:
        description: "Nobody comes here"
        reasoning:
            instructions: ->
                | Hello.
    """
)
UNREACHABLE_RIGHT = swap(
    UNREACHABLE_WRONG,
    "                | Help.\n",
    "                | Help.\n            actions:\n"
    "                go: @utils.transition to @subagent.lonely\n",
)


def test_unreachable_subagent() -> None:
    assert codes(UNREACHABLE_WRONG) == [lints.UNREACHABLE_SUBAGENT]
    assert lints.UNREACHABLE_SUBAGENT not in codes(UNREACHABLE_RIGHT)


SELF_WRONG = agent_text(
    """\
    variables:
        tries: mutable number = 0

    start_agent main:
        description: "Main"
        reasoning:
            instructions: ->
                | Help {!@variables.tries}.
            actions:
                again: @utils.transition to @start_agent.main
    """
)
SELF_RIGHT = swap(
    SELF_WRONG,
    "                again: @utils.transition to @start_agent.main\n",
    "                again: @utils.transition to @start_agent.main\n"
    "                    set @variables.tries = @variables.tries + 1\n",
)


def test_self_transition_without_change() -> None:
    assert lints.SELF_TRANSITION in codes(SELF_WRONG)
    assert lints.SELF_TRANSITION not in codes(SELF_RIGHT)


def test_self_transition_with_a_change_under_an_if_is_not_flagged() -> None:
    # The callback changes the state when tries < 3: the node does not restart unchanged.
    guarded = swap(
        SELF_WRONG,
        "                again: @utils.transition to @start_agent.main\n",
        "                again: @utils.transition to @start_agent.main\n"
        "                    if @variables.tries < 3:\n"
        "                        set @variables.tries = @variables.tries + 1\n",
    )
    assert lints.SELF_TRANSITION not in codes(guarded)


UNREAD_WRONG = agent_text(
    """\
    variables:
        note: mutable string = ""

    start_agent main:
        description: "Main"
        reasoning:
            instructions: ->
                set @variables.note = "seen"
                | Help.
    """
)
UNREAD_RIGHT = swap(UNREAD_WRONG, "| Help.", "| Help ({!@variables.note}).")


def test_variable_written_never_read() -> None:
    assert codes(UNREAD_WRONG) == [lints.WRITTEN_NEVER_READ]
    assert codes(UNREAD_RIGHT) == []


def test_gate_never_opens() -> None:
    text = agent_text(
        """\
        variables:
            unlocked: mutable boolean = False

        start_agent main:
            description: "Main"
            reasoning:
                instructions: ->
                    | Help.
                actions:
                    secret: @utils.escalate
                        available when @variables.unlocked == True
        """
    )
    assert codes(text) == [lints.GATE_NEVER_OPENS]
    # The model can set it through @utils.setVariables: the gate can open.
    opened = swap(
        text,
        "                actions:\n",
        "                actions:\n"
        "                    open_it: @utils.setVariables\n"
        "                        with unlocked=...\n",
    )
    assert lints.GATE_NEVER_OPENS not in codes(opened)


def test_mantle_collect_without_utterance(tmp_path: Path) -> None:
    project, _diagnostics = load_project(ROOT / "examples" / "card_bank")
    assert project is not None
    before = [d.code for d in lint_project(project)]
    assert lints.MANTLE_COLLECT_NO_UTTERANCE not in before
    step = project.skills["card_replace"].blocks["order_card"].step("pick_card")
    assert step is not None
    step.utterance = None
    project.responses.pop("utter_ask_card_id", None)
    after = [d.code for d in lint_project(project)]
    assert lints.MANTLE_COLLECT_NO_UTTERANCE in after


def test_validate_prints_lints_and_no_lints_hides_them(tmp_path: Path) -> None:
    path = tmp_path / "x.agent"
    path.write_text(BARE_WRONG)
    result = invoke("validate", path)
    assert result.exit_code == 0
    assert "warning[bare-reference-in-prose]" in result.stdout
    quiet = invoke("validate", "--no-lints", path)
    assert "bare-reference" not in quiet.stdout


def test_fmt_fix_applies_safe_fixes(tmp_path: Path) -> None:
    path = tmp_path / "x.agent"
    path.write_text(BARE_WRONG)
    result = invoke("fmt", "--fix", path)
    assert result.exit_code == 0, result.output
    assert "{!@variables.name}" in path.read_text()
    assert invoke("validate", path).stdout == ""


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the conformance corpus is not beside the repo")
def test_lints_run_on_the_whole_corpus_without_crashing() -> None:
    counts: Counter[str] = Counter()
    files = sorted(glob.glob(str(CORPUS / "agentscript" / "**" / "*.agent"), recursive=True))
    for file in files:
        doc, diagnostics = parse_file(file)
        if doc is None:
            continue
        result = check(doc)
        if any(d.is_error for d in [*diagnostics, *result.diagnostics]):
            continue
        source = Path(file).read_text(encoding="utf-8-sig").replace("\r\n", "\n")
        counts.update(d.code for d in lint_agent(result.outline, source))
    assert set(counts) <= set(lints.LINT_CODES)
    assert counts[lints.UNGUARDED_CONSEQUENTIAL] > 0


def test_confirmation_skipped_by_run() -> None:
    text = agent_text(
        """\
        start_agent main:
            description: "Main"
            reasoning:
                instructions: ->
                    | Help.
                actions:
                    check: @actions.lookup
                        description: "Look up the account."
                        run @actions.wipe_all
            actions:
                lookup:
                    description: "Look up."
                    target: "flow://Lookup"
                wipe_all:
                    description: "Wipe."
                    target: "flow://Wipe"
                    require_user_confirmation: True
        """
    )
    # The model's call of `check` runs wipe_all at once: nobody is asked (S13 holds only the
    # model's own calls of a confirmed action).
    assert lints.CONFIRMATION_SKIPPED_BY_RUN in codes(text)
    as_a_tool = swap(
        text,
        "                        run @actions.wipe_all\n",
        '                    wipe: @actions.wipe_all\n                        description: "Wipe."\n',
    )
    assert lints.CONFIRMATION_SKIPPED_BY_RUN not in codes(as_a_tool)
