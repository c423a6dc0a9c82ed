"""One small snippet per diagnostic code: code, severity and line."""

from __future__ import annotations

import textwrap

import pytest

from agentscript.check import check
from agentscript.diagnostics import Diagnostic
from agentscript.syntax import parse

HEAD = """\
config:
    developer_name: "test_agent"
variables:
    name: mutable string = ""
        description: "d"
    count: mutable number = 0
    ctx_id: linked string
        source: @MessagingSession.Id
"""

START = """\
start_agent main:
    description: "Router"
    reasoning:
        instructions: ->
            | Hello {!@variables.name} {!@variables.count} {!@variables.ctx_id}
"""


def run(body: str, dialect: str | None = None, *, head: str = HEAD) -> list[Diagnostic]:
    text = head + textwrap.dedent(body)
    doc = parse(text)
    assert not doc.has_errors, [d.format() for d in doc.diagnostics]
    return check(doc, dialect=dialect).diagnostics


def find(diags: list[Diagnostic], code: str) -> Diagnostic:
    hits = [d for d in diags if d.code == code]
    assert hits, f"{code} not in {[d.format() for d in diags]}"
    return hits[0]


def line_of(body: str, needle: str, head: str = HEAD) -> int:
    lines = (head + textwrap.dedent(body)).splitlines()
    return next(i for i, line in enumerate(lines, 1) if needle in line)


def assert_diag(
    body: str, code: str, severity: str, needle: str, dialect: str | None = None
) -> None:
    d = find(run(body, dialect), code)
    assert d.severity.value == severity
    assert d.span.line == line_of(body, needle)


def test_clean_agent_has_no_errors() -> None:
    diags = run(START)
    assert [d for d in diags if d.is_error] == []


def test_unknown_field_suggests_close_name() -> None:
    body = START + '    descripton: "x"\n'
    d = find(run(body), "unknown-field")
    assert "Did you mean 'description'" in d.message
    assert d.span.line == line_of(body, "descripton")


def test_unknown_top_level_block() -> None:
    assert_diag(START + 'sytem:\n    instructions: "x"\n', "unknown-block", "error", "sytem:")


def test_missing_required_field() -> None:
    body = START + 'subagent other:\n    label: "x"\n'
    assert_diag(body, "missing-required-field", "error", "subagent other")


def test_missing_required_action_target() -> None:
    body = START + '    actions:\n        Do:\n            description: "x"\n'
    assert_diag(body, "missing-required-field", "error", "Do:")


def test_duplicate_subagent_name() -> None:
    body = START + 'subagent a:\n    description: "x"\nsubagent a:\n    description: "y"\n'
    d = find(run(body), "duplicate-name")
    assert d.span.line == 16


def test_duplicate_key_is_an_error() -> None:
    # Stricter than the official warning: the first value would be lost silently.
    body = START + '    label: "a"\n    label: "b"\n'
    d = find(run(body), "duplicate-key")
    assert d.severity.value == "error"


def test_block_under_a_string_field_is_an_error() -> None:
    text = START + '    label: "a"\n        stray: "b"\n'
    d = find(run(text), "unexpected-block")
    assert d.severity.value == "error"


def test_empty_instructions_are_an_error() -> None:
    text = 'subagent a:\n    description: "x"\n    reasoning:\n        instructions: ->\n            |\n'
    d = find(run(START + text), "empty-block")
    assert d.severity.value == "error"


def test_duplicate_variable() -> None:
    head = HEAD + "    name: mutable string\n"
    d = find(run(START, head=head), "duplicate-name")
    assert d.span.line == 9


@pytest.mark.parametrize("starts", [0, 2])
def test_singular_collection(starts: int) -> None:
    body = 'subagent a:\n    description: "x"\n' + START * starts
    if starts == 2:
        body = body.replace("start_agent main:", "start_agent main2:", 1)
    assert "singular-collection" in {d.code for d in run(body)}


def test_undefined_variable_reference_with_suggestion() -> None:
    body = START + "            | {!@variables.nmae}\n"
    d = find(run(body), "undefined-reference")
    assert "Did you mean 'name'" in d.message
    assert d.span.line == line_of(body, "nmae")


@pytest.mark.parametrize(
    "ref",
    [
        "@subagent.nowhere",
        "@utils.jump",
        "@system_variables.user_inputs",
        "@knowledge.citations_url",
        "@outputs.x",
        "@connected_subagent.nope",
        "@bogus.x",
        "@actions.none_here",
    ],
)
def test_undefined_references(ref: str) -> None:
    body = START + f"            | {{!{ref}}}\n"
    d = find(run(body), "undefined-reference")
    assert d.severity.value == "error"
    assert d.span.line == line_of(body, ref)


def test_known_references_resolve() -> None:
    body = START + (
        "            | {!@system_variables.user_input} {!@system_variables.last_reply.interrupted}\n"
        'knowledge:\n    citations_url: "https://x"\n'
    )
    body = body.replace("{!@variables.ctx_id}", "{!@variables.ctx_id} {!@knowledge.citations_url}")
    assert not [d for d in run(body) if d.is_error]


def test_set_on_linked_variable() -> None:
    body = START + '            set @variables.ctx_id = "x"\n'
    assert_diag(body, "set-linked-variable", "error", "set @variables.ctx_id")


BINDINGS = (
    START
    + """\
        actions:
            fill: @utils.setVariables
                with nope=...
                with ctx_id=...
            look: @actions.Lookup
                with order=...
                with colour="red"
                set @variables.name = @outputs.statuss
    actions:
        Lookup:
            target: "flow://Lookup"
            inputs:
                order: string
                size: number
                    is_required: True
            outputs:
                status: string
"""
)


def test_set_variables_unknown_and_immutable() -> None:
    diags = run(BINDINGS)
    assert find(diags, "set-variables-unknown-variable").span.line == line_of(BINDINGS, "nope=")
    assert find(diags, "set-variables-immutable-target").span.line == line_of(
        BINDINGS, "ctx_id=..."
    )


def test_action_io() -> None:
    diags = run(BINDINGS)
    unknown_in = find(diags, "action-unknown-input")
    assert unknown_in.span.line == line_of(BINDINGS, "colour=")
    unknown_out = find(diags, "action-unknown-output")
    assert "Did you mean 'status'" in unknown_out.message
    missing = find(diags, "action-missing-input")
    assert missing.severity.value == "info" and "size" in missing.message


def test_outline_bindings() -> None:
    doc = parse(HEAD + BINDINGS)
    outline = check(doc).outline
    tools = outline.subagents["main"].tools
    assert tools["fill"].kind == "set_variables"
    assert tools["look"].kind == "action" and tools["look"].target == "Lookup"
    assert set(tools["look"].inputs) == {"order", "colour"}


def test_transition_targets() -> None:
    # The bare statement form is reported by the parser; the binding form by the checker.
    body = START + "        actions:\n            go: @utils.transition\n"
    assert_diag(body, "transition-missing-target", "error", "go:")


def test_template_in_before_reasoning() -> None:
    body = START + "    before_reasoning:\n        | not here\n"
    assert_diag(body, "template-in-deterministic-procedure", "error", "| not here")


def test_unreachable_code_after_transition() -> None:
    body = (
        START
        + 'subagent b:\n    description: "b"\n    before_reasoning:\n'
        + "        transition to @subagent.main\n        set @variables.count = 1\n"
    )
    assert_diag(body, "unreachable-code", "warning", "set @variables.count = 1")


NESTED = START + (
    "            if @variables.count > 1:\n"
    "                if @variables.count > 2:\n"
    "                    | deep\n"
)


def test_nested_if_error_in_agentforce_warning_in_agentscript() -> None:
    assert_diag(NESTED, "unsupported-nested-if", "error", "count > 2")
    assert_diag(NESTED, "unsupported-nested-if", "warning", "count > 2", dialect="agentscript")


def test_else_if_chain_is_fine() -> None:
    body = START + (
        "            if @variables.count > 1:\n                | a\n"
        "            else if @variables.count > 0:\n                | b\n"
        "            else:\n                | c\n"
    )
    assert not [d for d in run(body) if d.is_error]


@pytest.mark.parametrize(
    ("word", "code"),
    [
        ("true", "identifier-confusable-boolean"),
        ("false", "identifier-confusable-boolean"),
        ("none", "identifier-confusable-none"),
        ("null", "null-not-allowed"),
        ("name", "unknown-identifier"),
    ],
)
def test_bare_identifiers(word: str, code: str) -> None:
    body = START + f"            if @variables.name == {word}:\n                | x\n"
    assert_diag(body, code, "error", f"== {word}")


def test_unknown_function() -> None:
    body = START + "            | {!upper(@variables.name)} {!len(@variables.name)}\n"
    d = find(run(body), "unknown-function")
    assert d.span.line == line_of(body, "upper(")
    assert len([x for x in run(body) if x.code == "unknown-function"]) == 1


def test_multiply_rejected_only_in_agentforce() -> None:
    body = START + "            set @variables.count = @variables.count * 2\n"
    assert_diag(body, "unsupported-operator", "error", "* 2")
    assert "unsupported-operator" not in {d.code for d in run(body, "agentscript")}


ACTION = START + '    actions:\n        A:\n            target: "{target}"\n'


@pytest.mark.parametrize(
    ("target", "severity"),
    [
        ("flow://X", None),
        ("python://pkg.mod:fn", None),
        ("https://x.test/a", None),
        ("StandardInvocableAction://x", None),
        ("nope://x", "error"),
        ("no_scheme", "error"),
    ],
)
def test_action_targets(target: str, severity: str | None) -> None:
    diags = [
        d for d in run(ACTION.replace("{target}", target)) if d.code == "invalid-action-target"
    ]
    assert [d.severity.value for d in diags] == ([severity] if severity else [])


def test_placeholder_target_warns() -> None:
    d = find(run(ACTION.replace("{target}", "placeholder://x")), "placeholder-action-target")
    assert d.severity.value == "warning"


def test_variable_default_type_mismatch() -> None:
    head = HEAD + '    flag: mutable boolean = "yes"\n'
    d = find(run(START, head=head), "variable-default-type-mismatch")
    assert (d.severity.value, d.span.line) == ("warning", 9)


def test_with_type_mismatch_warns() -> None:
    body = BINDINGS.replace('with colour="red"', 'with size="big"')
    d = find(run(body), "type-mismatch")
    assert d.severity.value == "warning"


@pytest.mark.parametrize(
    ("decl", "code", "dialects"),
    [
        ("x: linked string", "linked-variable-missing-source", ("agentforce",)),
        (
            "x: linked list[string]\n        source: @MessagingSession.Id",
            "linked-variable-cannot-be-list",
            ("agentforce", "agentscript"),
        ),
        (
            "x: linked object\n        source: @MessagingSession.Id",
            "linked-variable-cannot-be-object",
            ("agentforce", "agentscript"),
        ),
        (
            'x: linked string = "a"\n        source: @MessagingSession.Id',
            "linked-variable-cannot-have-default",
            ("agentforce", "agentscript"),
        ),
        (
            "x: mutable string\n        source: @MessagingSession.Id",
            "mutable-variable-cannot-have-source",
            ("agentforce", "agentscript"),
        ),
        ("_x: mutable string", "invalid-variable-name", ("agentforce",)),
        ("string: mutable string", "reserved-name", ("agentforce", "agentscript")),
        ("x: mutable strng", "unknown-type", ("agentforce", "agentscript")),
        (
            "x: linked string\n        source: @Creator.Id",
            "constraint-allowed-namespaces",
            ("agentforce",),
        ),
    ],
)
def test_variable_rules(decl: str, code: str, dialects: tuple[str, ...]) -> None:
    head = HEAD + f"    {decl}\n"
    for dialect in ("agentforce", "agentscript"):
        doc = parse(head + START)
        codes = {d.code for d in check(doc, dialect=dialect).errors}
        assert (code in codes) == (dialect in dialects), (dialect, codes)


def test_collect_in_start_agent() -> None:
    body = START + "            collect @variables.name\n"
    assert_diag(body, "collect-in-start-agent", "error", "collect")


CONFIG_HEAD = (
    'config:\n    agent_type: "AgentforceServiceAgent"\nvariables:\n    v: mutable string\n'
)


def test_config_rules_relaxed_in_agentscript() -> None:
    doc = parse(
        CONFIG_HEAD
        + START.replace(
            " {!@variables.name} {!@variables.count} {!@variables.ctx_id}", " {!@variables.v}"
        )
    )
    codes = {d.code for d in check(doc).errors}
    assert {"config-missing-agent-name", "config-missing-default-agent-user"} <= codes
    assert check(doc, dialect="agentscript").errors == []


def test_hyperclassifier_rules() -> None:
    body = START + (
        "        actions:\n            x: @utils.escalate\n"
        '    model_config:\n        model: "model://sfdc_ai__DefaultEinsteinHyperClassifier"\n'
    )
    assert_diag(body, "hyperclassifier-non-transition", "error", "x: @utils.escalate")
    assert "hyperclassifier-non-transition" not in {d.code for d in run(body, "agentscript")}


def test_system_message_mutable_variable() -> None:
    body = (
        START
        + 'system:\n    messages:\n        welcome: |\n            Hi {!@variables.name}\n        error: "oops"\n'
    )
    d = find(run(body), "system-message-mutable-variable")
    assert d.severity.value == "error"
    assert "system-message-mutable-variable" not in {x.code for x in run(body, "agentscript")}


def test_unused_variable_is_info() -> None:
    head = HEAD + "    spare: mutable string\n"
    d = find(run(START, head=head), "unused-variable")
    assert (d.severity.value, d.span.line) == ("info", 9)


def test_instruction_template_syntax() -> None:
    body = START + "            | Use {@variables.name} here\n"
    assert_diag(body, "instruction-template-syntax", "info", "{@variables.name}")


def test_dialect_header_selects_agentscript() -> None:
    doc = parse(
        "# @dialect: agentscript\n"
        + CONFIG_HEAD
        + START.replace(
            " {!@variables.name} {!@variables.count} {!@variables.ctx_id}", " {!@variables.v}"
        )
    )
    result = check(doc)
    assert result.outline.dialect == "agentscript"
    assert result.errors == []


def test_unknown_dialect_is_reported() -> None:
    result = check(parse(HEAD + START), dialect="klingon")
    assert "unknown-dialect" in {d.code for d in result.errors}


def test_outline_config_and_reset() -> None:
    head = HEAD.replace(
        'developer_name: "test_agent"',
        'developer_name: "test_agent"\n    additional_parameter__reset_to_initial_node: False',
    )
    outline = check(parse(head + START)).outline
    assert outline.reset_to_initial_node is False
    assert outline.config["developer_name"] == "test_agent"
    assert outline.variables["ctx_id"].source == "MessagingSession.Id"


def test_actions_reference_used_as_a_value_is_an_error() -> None:
    body = (
        START
        + "        actions:\n            go: @utils.setVariables\n                with name = @actions.go\n"
    )
    d = find(run(body), "invalid-reference-context")
    assert d.severity.value == "error" and "'@actions.go' names an action" in d.message


def test_actions_reference_in_text_renders_a_tool_name() -> None:
    body = START.replace("| Hello", "| Use {!@actions.go}. Hello") + (
        "        actions:\n            go: @utils.transition to @start_agent.main\n"
    )
    assert not [d for d in run(body) if d.code == "invalid-reference-context"]


def test_subagent_reference_inside_text_is_an_error() -> None:
    body = 'start_agent main:\n    description: "Router"\n    reasoning:\n        instructions: ->\n            | Go to {!@subagent.main} now.\n'
    d = find(run(body), "invalid-reference-context")
    assert (
        d.severity.value == "error" and "'@subagent.main' cannot be written into text" in d.message
    )


def test_available_when_on_a_string_variable_is_a_warning() -> None:
    body = START + (
        "        actions:\n"
        "            go: @utils.transition to @start_agent.main\n"
        "                available when @variables.name\n"
        "            stay: @utils.transition to @start_agent.main\n"
        '                available when @variables.name != ""\n'
    )
    hits = [d for d in run(body) if d.code == "available-when-non-boolean"]
    assert [(d.severity.value, d.span.line) for d in hits] == [("warning", hits[0].span.line)]
    assert "@variables.x != " in hits[0].message
