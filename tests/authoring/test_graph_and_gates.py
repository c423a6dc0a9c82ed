"""`agentscript graph` in every format, and `agentscript check-gates` with its assertions."""

from __future__ import annotations

import html
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from agentscript.authoring.gates import gate_proofs, load_asserts
from agentscript.authoring.graph import (
    EdgeKind,
    Graph,
    GraphEdge,
    GraphNode,
    NodeKind,
    agent_graph,
)
from agentscript.authoring.render import to_dot, to_mermaid
from agentscript.render import terminal_safe

from .helpers import agent_text, invoke, outline_of, swap

ROOT = Path(__file__).resolve().parents[2]
ORDER_STATUS = ROOT / "examples" / "order_status" / "order_status.agent"
SECURITY_GATE = ROOT / "examples" / "security_gate" / "security_gate.agent"


def test_graph_edges_of_order_status() -> None:
    graph = agent_graph(outline_of(ORDER_STATUS.read_text()))
    edges = {(e.source, e.target, e.kind, e.via, e.guard) for e in graph.edges}
    assert edges == {
        ("router", "Order_Management", EdgeKind.TRANSITION, "go_to_orders", None),
        ("router", "escalate_order", EdgeKind.TRANSITION, "go_to_escalation", None),
        (
            "Order_Management",
            "escalate_order",
            EdgeKind.PROCEDURE,
            "after_reasoning",
            "num_turns > 5",
        ),
        ("escalate_order", "@escalation", EdgeKind.ESCALATE, "escalate", None),
    }


def test_graph_guards_and_delegation() -> None:
    text = agent_text(
        """\
        variables:
            ok: mutable boolean = False

        start_agent main:
            description: "Main"
            reasoning:
                instructions: ->
                    | Help.
                actions:
                    go: @utils.transition to @subagent.other
                        available when @variables.ok
                    ask: @subagent.other
                        description: "Ask the other one"
                    bye: @utils.end_session

        subagent other:
            description: "Other"
            reasoning:
                instructions: ->
                    | Other.
        """
    )
    graph = agent_graph(outline_of(text))
    kinds = {(e.via, e.kind, e.guard) for e in graph.edges}
    assert ("go", EdgeKind.TRANSITION, "ok") in kinds
    assert ("bye", EdgeKind.END, None) in kinds
    assert any(e.kind == EdgeKind.DELEGATE and e.target == "other" for e in graph.edges)


@pytest.mark.parametrize("fmt", ["mermaid", "dot", "svg", "json"])
def test_graph_formats(fmt: str) -> None:
    result = invoke("graph", ORDER_STATUS, "--format", fmt)
    assert result.exit_code == 0, result.output
    out = result.stdout
    if fmt == "mermaid":
        assert out.startswith("flowchart TD\n")
        assert '-->|"after_reasoning [num_turns #gt; 5]"|' in out
    elif fmt == "dot":
        assert out.startswith('digraph "Order_Status" {')
        assert '"router" -> "Order_Management" [label="go_to_orders"];' in out
    elif fmt == "svg":
        root = ET.fromstring(out)  # well-formed XML, drawn without external programs
        labels = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
        assert "Order_Management" in labels
        assert "go_to_orders" in labels
    else:
        data = json.loads(out)
        assert data["format"] == "agentscript-graph/1"
        assert {n["id"] for n in data["nodes"]} == {
            "router",
            "Order_Management",
            "escalate_order",
            "@escalation",
        }


def test_mantle_graph_has_skills_blocks_and_steps() -> None:
    result = invoke("graph", ROOT / "examples" / "card_bank", "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    ids = {n["id"] for n in data["nodes"]}
    assert {"authenticate", "card_replace", "check_balance"} <= ids
    assert "card_replace/order_card/pick_card" in ids
    nexts = {(e["source"], e["target"]) for e in data["edges"] if e["kind"] == "next"}
    assert ("card_replace/order_card/load_cards", "card_replace/order_card/pick_card") in nexts


def test_gate_proof_names_what_opens_the_gate() -> None:
    (proof,) = gate_proofs(outline_of(SECURITY_GATE.read_text()))
    assert (proof.node, proof.tool, proof.guard, proof.can_open) == (
        "account",
        "update_account",
        "is_verified == True",
        True,
    )
    assert [w.how for w in proof.writers] == ["set from verify_identity output verified"]
    result = invoke("check-gates", SECURITY_GATE)
    assert result.exit_code == 0
    assert "update_account is offered only when is_verified == True" in result.stdout
    assert "set from verify_identity output verified" in result.stdout


NEVER_OPENS = agent_text(
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


def test_a_gate_that_can_never_open() -> None:
    (proof,) = gate_proofs(outline_of(NEVER_OPENS))
    assert proof.can_open is False
    assert proof.unwritten == ["unlocked"]
    assert "can NEVER be offered" in proof.sentence()


def test_a_literal_write_that_keeps_the_gate_shut() -> None:
    text = swap(
        NEVER_OPENS,
        "                | Help.\n",
        "                set @variables.unlocked = False\n                | Help.\n",
    )
    (proof,) = gate_proofs(outline_of(text))
    assert proof.can_open is False
    opened = swap(text, "set @variables.unlocked = False", "set @variables.unlocked = True")
    (proof,) = gate_proofs(outline_of(opened))
    assert proof.can_open is True


REFUND = agent_text(
    """\
    variables:
        is_verified: mutable boolean = False

    start_agent main:
        description: "Main"
        reasoning:
            instructions: ->
                | Help.
            actions:
                verify: @utils.setVariables
                    with is_verified=...
                refund: @actions.refund_order
                    GUARD
        actions:
            refund_order:
                description: "Refund"
                target: "flow://Refund"
    """
)


def _project(tmp_path: Path, guard: str, rule: str) -> Path:
    agent = tmp_path / "refund.agent"
    agent.write_text(swap(REFUND, "GUARD", guard))
    (tmp_path / "agentscript.toml").write_text(f'[[assert]]\nrule = "{rule}"\n')
    return agent


def test_assert_holds_when_the_gate_implies_it(tmp_path: Path) -> None:
    agent = _project(
        tmp_path,
        "available when @variables.is_verified == True",
        "refund never offered unless is_verified",
    )
    result = invoke("check-gates", agent)
    assert result.exit_code == 0, result.output
    assert "All 1 assertions hold." in result.stdout
    assert invoke("validate", agent).exit_code == 0


def test_assert_fails_when_a_path_offers_the_tool(tmp_path: Path) -> None:
    agent = _project(
        tmp_path, 'description: "Refund the order"', "refund never offered unless is_verified"
    )
    result = invoke("check-gates", agent)
    assert result.exit_code == 1
    assert "ASSERT FAILED" in result.stdout
    validate = invoke("validate", agent)
    assert validate.exit_code == 1
    assert "error[assert-failed]" in validate.stdout


def test_an_unreadable_assert_is_reported(tmp_path: Path) -> None:
    agent = _project(tmp_path, 'description: "x"', "refund sometimes offered")
    result = invoke("check-gates", agent)
    assert result.exit_code == 2
    assert "does not read '<tool> never offered unless <condition>'" in result.stderr


GATED = "available when @variables.is_verified == True"


def test_an_assert_naming_no_tool_of_the_agent_is_invalid_with_the_close_name(
    tmp_path: Path,
) -> None:
    # A typo would otherwise hold on every path: the tool it names is never offered.
    agent = _project(tmp_path, 'description: "x"', "refnd never offered unless is_verified")
    result = invoke("check-gates", agent)
    assert result.exit_code == 2, result.output
    assert "assert 1: the agent has no tool 'refnd'. Did you mean 'refund'?" in result.stderr
    assert "All 1 assertions hold." not in result.stdout
    validate = invoke("validate", agent)
    assert validate.exit_code == 1
    assert "error[assert-invalid]" in validate.stdout and "no tool 'refnd'" in validate.stdout


def test_an_assert_naming_an_unrelated_name_lists_the_tools(tmp_path: Path) -> None:
    agent = _project(tmp_path, GATED, "payout never offered unless is_verified")
    result = invoke("check-gates", agent)
    assert result.exit_code == 2
    assert "the agent has no tool 'payout'. Name one of its tools: refund, verify" in (
        result.stderr
    )
    assert "Did you mean" not in result.stderr


def test_an_assert_naming_the_action_instead_of_its_tool_is_invalid(tmp_path: Path) -> None:
    # refund_order is offered ungated as `refund`: a rule on the action's name must not hold.
    agent = _project(tmp_path, 'description: "x"', "refund_order never offered unless is_verified")
    result = invoke("check-gates", agent)
    assert result.exit_code == 2
    assert "'refund_order' is an action; name the tool the model sees it as: refund" in (
        result.stderr
    )


def test_an_assert_on_an_action_no_node_offers_holds(tmp_path: Path) -> None:
    agent = _project(tmp_path, GATED, "payout_order never offered unless is_verified")
    agent.write_text(
        agent.read_text()
        + '        payout_order:\n            description: "Pay out"\n'
        + '            target: "flow://Payout"\n'
    )
    result = invoke("check-gates", agent)
    assert result.exit_code == 0, result.output
    assert "All 1 assertions hold." in result.stdout


def test_load_asserts_checks_tool_names_against_a_given_outline(tmp_path: Path) -> None:
    agent = _project(tmp_path, GATED, "refnd never offered unless is_verified")
    agent.write_text("not an agent")  # the outline given is used, not the file
    rules, problems = load_asserts(agent, outline_of(swap(REFUND, "GUARD", GATED)))
    assert rules == []
    assert [str(p) for p in problems] == [
        f"{tmp_path / 'agentscript.toml'}:2: assert 1: the agent has no tool 'refnd'. "
        "Did you mean 'refund'?"
    ]


STATUS = agent_text(
    """\
    variables:
        status: mutable string = "new"

    start_agent main:
        description: "Main"
        reasoning:
            instructions: ->
                | Help.
            actions:
                set_status: @utils.setVariables
                    with status=...
                close_ticket: @actions.close_it
                    available when @variables.status == "open"
                issue_refund: @actions.close_it
                    available when @variables.status == "open"
        actions:
            close_it:
                description: "Close"
                target: "flow://Close"
    """
)


def _status_project(tmp_path: Path, *rules: str) -> Path:
    agent = tmp_path / "status.agent"
    agent.write_text(STATUS)
    tables = "".join(f"[[assert]]\nrule = {json.dumps(rule)}\n" for rule in rules)
    (tmp_path / "agentscript.toml").write_text(tables)
    return agent


@pytest.mark.parametrize(
    "condition",
    [
        'status == "open"',
        'status == "open" or status == "not open"',
        'status != "@variables.open" and status == "open"',
        'not (status == "x \\" open")',  # an escaped quote does not end the string
    ],
)
def test_assert_condition_leaves_words_in_string_literals_alone(
    tmp_path: Path, condition: str
) -> None:
    # The bare names became @variables.x inside the literal too: "open" was read as
    # "@variables.open", and the rule failed although the guard is the condition itself.
    agent = _status_project(tmp_path, f"close_ticket never offered unless {condition}")
    result = invoke("check-gates", agent)
    assert result.exit_code == 0, result.output
    assert "All 1 assertions hold." in result.stdout


def test_assert_condition_names_become_variables_outside_strings_only() -> None:
    from agentscript.authoring.gates import _bare_names_as_variables

    assert _bare_names_as_variables('a == "a b" and len(xs) > 0 or not c.d in [e]') == (
        '@variables.a == "a b" and len(@variables.xs) > 0 or not @variables.c.d in [@variables.e]'
    )
    assert _bare_names_as_variables('s == "q\\"x" # note') == '@variables.s == "q\\"x" # note'


def test_assert_failure_says_how_the_tool_is_offered(tmp_path: Path) -> None:
    agent = _status_project(
        tmp_path,
        'close_ticket never offered unless status == "closed"',
        'set_status never offered unless status == "closed"',
    )
    result = invoke("check-gates", agent)
    assert result.exit_code == 1
    failed = [line for line in result.stdout.splitlines() if line.startswith("ASSERT FAILED")]
    assert failed == [
        "ASSERT FAILED: 'close_ticket never offered unless status == \"closed\"' fails in main: "
        'close_ticket is offered whenever its guard status == "open" holds, which does not '
        "imply the condition",
        "ASSERT FAILED: 'set_status never offered unless status == \"closed\"' fails in main: "
        "set_status is offered whatever the variables are",
    ]
    assert "when always" not in result.stdout


def test_an_assert_naming_a_word_of_a_tool_suggests_that_tool(tmp_path: Path) -> None:
    # docs/authoring.md promises the closest tool name: `refund` means issue_refund.
    agent = _status_project(tmp_path, 'refund never offered unless status == "open"')
    result = invoke("check-gates", agent)
    assert result.exit_code == 2
    assert "the agent has no tool 'refund'. Did you mean 'issue_refund'?" in result.stderr


def test_validate_reports_an_invalid_assert_on_its_line_of_the_toml(tmp_path: Path) -> None:
    agent = _status_project(tmp_path)
    toml = tmp_path / "agentscript.toml"
    toml.write_text(
        "# checks of the status agent\n"
        "[limits]\n"
        "\n"
        "[[assert]]\n"
        'rule = "close_ticket never offered unless status == \\"open\\""\n'
        "[[assert]]\n"
        "# a typo\n"
        'rule = "refnd never offered unless status == \\"open\\""\n'
    )
    result = invoke("validate", "--format", "json", agent)
    assert result.exit_code == 1, result.output
    (diag,) = [d for d in json.loads(result.stdout) if d["code"] == "assert-invalid"]
    assert (diag["file"], diag["line"]) == (str(toml), 8)
    assert diag["message"].startswith("assert 2: the agent has no tool 'refnd'.")
    text = invoke("validate", agent)
    assert f"{toml}:8:1: error[assert-invalid]" in text.stdout
    assert 'rule = "refnd never offered' in text.stdout  # the toml's line shown, not the agent's
    gates = invoke("check-gates", agent)
    assert f"{toml}:8: assert 2: the agent has no tool 'refnd'." in gates.stderr


def test_asserts_come_from_agentscript_config_like_the_other_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The toml beside the agent holds; the one $AGENTSCRIPT_CONFIG names does not.
    agent = _project(tmp_path, 'description: "x"', "verify never offered unless is_verified")
    assert invoke("check-gates", agent).exit_code == 1
    chosen = tmp_path / "elsewhere" / "chosen.toml"
    chosen.parent.mkdir()
    chosen.write_text('[[assert]]\nrule = "refund never offered unless is_verified"\n')
    monkeypatch.setenv("AGENTSCRIPT_CONFIG", str(chosen))
    result = invoke("check-gates", agent)
    assert result.exit_code == 1
    assert "'refund never offered unless is_verified' fails in main" in result.stdout
    assert "verify never offered" not in result.stdout
    monkeypatch.setenv("AGENTSCRIPT_CONFIG", str(tmp_path / "missing.toml"))
    no_rules = invoke("check-gates", agent)  # a named file that is missing: no configuration
    assert no_rules.exit_code == 0 and "ASSERT FAILED" not in no_rules.stdout


# Everything Mermaid or Graphviz could read as syntax, markup or an entity inside a label.
SPECIAL = 'say "hi" <b>bold</b> & #quot; &lt; `md` back\\slash\nnext line'


def _special_graph() -> Graph:
    return Graph(
        "agent",
        "agentscript",
        nodes=[
            GraphNode("main", NodeKind.START, SPECIAL),
            GraphNode("other", NodeKind.SUBAGENT, "other"),
            GraphNode("main/x/step", NodeKind.STEP, "step", group=SPECIAL),
        ],
        edges=[GraphEdge("main", "other", EdgeKind.TRANSITION, SPECIAL, guard="n > 5 & m < 2")],
    )


def _mermaid_decoded(label: str) -> str:
    """What Mermaid draws for a label: `#name;` and `#35;` read as HTML entities."""
    return re.sub(
        r"#(\w+);",
        lambda m: html.unescape(f"&#{m[1]};" if m[1].isdigit() else f"&{m[1]};"),
        label,
    )


def test_graph_mermaid_labels_escape_every_special_character() -> None:
    out = to_mermaid(_special_graph())
    # A label is everything between two quotes: a `"` left in one would end it early.
    labels = re.findall(r'"([^"]*)"', out)
    assert len(labels) == 5  # three nodes, the subgraph's title, the edge
    for label in labels:
        assert not set(label) & set("<>&`\n"), label
        assert re.fullmatch(r"(?:[^#]|#\w+;)*", label), label  # every `#` opens an entity
    assert _mermaid_decoded(labels[0]) == terminal_safe(SPECIAL)
    assert _mermaid_decoded(labels[-1]) == terminal_safe(f"{SPECIAL} [n > 5 & m < 2]")
    assert len(out.split("\n")) == 8  # seven lines and the final newline: none was broken


def test_graph_mermaid_labels_escape_percent_so_no_directive_forms() -> None:
    # Mermaid reads `%%{init: ...}%%` anywhere in the diagram text, a label's included.
    special = "%%{init: {'theme':'dark'}}%% 50%"
    graph = Graph(
        "agent",
        "agentscript",
        nodes=[GraphNode("main", NodeKind.START, special), GraphNode("b", NodeKind.SUBAGENT, "b")],
        edges=[GraphEdge("main", "b", EdgeKind.TRANSITION, "go", guard=f'code == "{special}"')],
    )
    out = to_mermaid(graph)
    assert "%" not in out
    labels = re.findall(r'"((?:[^"])*)"', out)
    assert _mermaid_decoded(labels[0]) == special


def _dot_decoded(label: str) -> str:
    """What Graphviz draws for a quoted label: backslash escapes, then HTML entities."""
    return html.unescape(re.sub(r"\\(.)", r"\1", label))


def test_graph_dot_labels_are_quoted_and_entity_safe() -> None:
    out = to_dot(_special_graph())
    labels = re.findall(r'label="((?:[^"\\]|\\.)*)"', out)
    assert len(labels) == 4  # three nodes and the edge
    assert _dot_decoded(labels[0]) == terminal_safe(SPECIAL)
    assert _dot_decoded(labels[-1]) == terminal_safe(f"{SPECIAL} [n > 5 & m < 2]")
    assert all(line.endswith(("{", ";", "}")) for line in out.rstrip("\n").split("\n"))
