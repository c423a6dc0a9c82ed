"""`agentscript prompts`: every effective prompt, per node, labelled with its condition."""

from __future__ import annotations

import json
from pathlib import Path

from agentscript.authoring.prompts import node_prompts, simplify

from .helpers import agent_text, invoke, outline_of

ROOT = Path(__file__).resolve().parents[2]
ORDER_STATUS = ROOT / "examples" / "order_status" / "order_status.agent"
SECURITY_GATE = ROOT / "examples" / "security_gate" / "security_gate.agent"

# Cases counted by hand: `tier` is compared with two literals, `is_verified` is a boolean.
#   is_verified False                      -> "verify first" text, refund hidden      (1)
#   is_verified True, tier == "vip"         -> verified + vip text, refund offered     (2)
#   is_verified True, tier == "gold"        -> verified + gold text                    (3)
#   is_verified True, tier neither          -> verified text only                      (4)
# The second `if is_verified == False` cannot hold after the first's True branch: no 5th case.
COUNTED = agent_text(
    """\
    variables:
        is_verified: mutable boolean = False
        tier: mutable string = "basic"

    start_agent main:
        description: "Main"
        reasoning:
            instructions: ->
                if @variables.is_verified == False:
                    | Verify the customer first.
                else:
                    | The customer is verified.
                    if @variables.tier == "vip":
                        | Offer the VIP desk.
                    else if @variables.tier == "gold":
                        | Offer the gold desk.
            actions:
                refund: @actions.refund_order
                    available when @variables.is_verified == True
                verify: @utils.setVariables
                    with is_verified=...
        actions:
            refund_order:
                description: "Refund"
                target: "flow://Refund"
    """
)


def test_prompt_cases_are_counted_by_hand() -> None:
    (main,) = node_prompts(outline_of(COUNTED))
    labels = [c.label for c in main.cases]
    assert labels == [
        "is_verified == False",
        'is_verified == True and tier == "vip"',
        'is_verified == True and tier != "vip" and tier == "gold"',
        'is_verified == True and tier != "vip" and tier != "gold"',
    ]
    first, vip, gold, plain = main.cases
    assert first.instructions == "Verify the customer first."
    assert first.hidden_tools == {"refund": "is_verified == True"}
    assert first.tools == ["verify"]
    assert vip.instructions == "The customer is verified.\nOffer the VIP desk."
    assert vip.tools == ["refund", "verify"]
    assert gold.instructions.endswith("Offer the gold desk.")
    assert plain.instructions == "The customer is verified."


def test_order_status_prints_the_seed_002_two_line_prompt() -> None:
    result = invoke("prompts", ORDER_STATUS, "--format", "json")
    assert result.exit_code == 0, result.output
    nodes = {n["node"]: n for n in json.loads(result.stdout)}
    cases = nodes["Order_Management"]["cases"]
    late = next(c for c in cases if c["condition"].startswith("is_late == True"))
    assert late["instructions"].splitlines() == [
        "Tell the user that the expected delivery date for order number "
        "{!@variables.order_ID} is {!@variables.updated_delivery_date}.",
        "Apologize to the customer for the delay in receiving their order.",
    ]
    # is_late is only known once check_if_late has run: the case says so.
    assert "set at run time by check_if_late" in late["condition"]
    assert late["effects"][:2] == ["set num_turns = num_turns + 1", "run get_delivery_date"]


def test_tool_names_render_as_the_model_sees_them() -> None:
    (router, _account) = node_prompts(outline_of(SECURITY_GATE.read_text()))
    assert router.cases[0].instructions == (
        "Use go_account for anything about the customer's account."
    )


def test_a_transition_before_any_llm_call_is_its_own_case() -> None:
    text = agent_text(
        """\
        variables:
            done: mutable boolean = False

        start_agent main:
            description: "Main"
            reasoning:
                instructions: ->
                    if @variables.done:
                        transition to @subagent.bye
                    | Keep helping.

        subagent bye:
            description: "Bye"
            reasoning:
                instructions: ->
                    | Say goodbye.
        """
    )
    main, _bye = node_prompts(outline_of(text))
    by_label = {c.label: c for c in main.cases}
    assert by_label["done"].transition == "bye"
    assert by_label["done"].instructions == ""
    assert by_label["not (done)"].instructions == "Keep helping."


def test_undecided_guards_do_not_multiply_cases() -> None:
    text = agent_text(
        """\
        variables:
            a: mutable number = 0
            b: mutable number = 0

        start_agent main:
            description: "Main"
            reasoning:
                instructions: ->
                    | Help.
                actions:
                    one: @utils.escalate
                        available when @variables.a > 1
                    two: @utils.end_session
                        available when @variables.b > 1
        """
    )
    (main,) = node_prompts(outline_of(text))
    assert len(main.cases) == 1
    assert main.cases[0].conditional_tools == {"one": "a > 1", "two": "b > 1"}


def test_simplify_merges_complementary_terms() -> None:
    assert simplify([["a", "x == True"], ["a", "x == False"]]) == [["a"]]
    assert simplify([["a > 1", "b"], ["a <= 1", "b"]]) == [["b"]]
    assert simplify([["a"], ["b"]]) == [["a"], ["b"]]


def test_mantle_prompts_per_if_marker_and_per_step() -> None:
    result = invoke("prompts", ROOT / "examples" / "card_bank", "--format", "json")
    assert result.exit_code == 0, result.output
    skills = {n["node"]: n for n in json.loads(result.stdout)}
    auth = [c["condition"] for c in skills["authenticate"]["cases"]]
    assert auth == ["session.authenticate.attempts >= 3", "session.authenticate.attempts < 3"]
    steps = [c["condition"] for c in skills["card_replace"]["cases"] if "step" in c["condition"]]
    assert "block order_card, step pick_card (collect)" in steps


def test_prompts_unknown_node_and_broken_agent(tmp_path: Path) -> None:
    assert invoke("prompts", ORDER_STATUS, "--node", "nope").exit_code == 2
    broken = tmp_path / "broken.agent"
    broken.write_text("system:\n    instructions: [\n")
    result = invoke("prompts", broken)
    assert result.exit_code == 1
    assert "fix the errors above first" in result.stderr


def test_markdown_format_has_a_heading_per_node() -> None:
    result = invoke("prompts", ORDER_STATUS, "--format", "markdown")
    assert result.exit_code == 0
    assert "## Order_Management" in result.stdout
    assert "### case 1 of 2" in result.stdout


# An agent whose own text is Markdown and HTML: a line of ``` in its instructions, a tag and
# backticks in a guard's string literal, a heading after the fence.
HOSTILE_MARKDOWN = agent_text(
    """\
    variables:
        code: mutable string = ""

    start_agent main:
        description: "Main"
        reasoning:
            instructions: ->
                | Hi
                | ```
                | # injected heading
                | ``````
            actions:
                go: @utils.transition to @subagent.other
                    available when @variables.code == "<img src=x onerror=alert(1)> `a` ``` x`"
                set_code: @utils.setVariables
                    with code=...

    subagent other:
        description: "Other"
        reasoning:
            instructions: ->
                if @variables.code == "<b>x</b>":
                    | Bold.
    """
)


def test_markdown_keeps_the_agents_text_as_text(tmp_path: Path) -> None:
    # Shown by the VS Code extension's "Show Effective Prompts": a ``` line of the agent's
    # closed the fixed fence (the rest became Markdown), and a guard's <img onerror> was HTML.
    import markdown_it  # in requirements-dev.lock (rich's dependency): never skipped

    agent = tmp_path / "hostile.agent"
    agent.write_text(HOSTILE_MARKDOWN)
    result = invoke("prompts", agent, "--format", "markdown")
    assert result.exit_code == 0, result.output
    assert "\n```````text\nHi\n```\n# injected heading\n``````\n```````\n" in result.stdout
    html = markdown_it.MarkdownIt("commonmark").render(result.stdout)
    assert "<img" not in html and "<b>" not in html and "injected heading</h1>" not in html
    assert "<h1>" not in html
    # Every value from the agent is shown whole, as code.
    assert "&lt;img src=x onerror=alert(1)&gt; `a` ``` x`" in html
    assert "<h3>case 1 of 2: <code>code == &quot;&lt;b&gt;x&lt;/b&gt;&quot;</code></h3>" in html
