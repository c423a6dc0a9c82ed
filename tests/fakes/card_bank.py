"""A conversation with the ``card_bank`` example (``examples/card_bank``), a Mantle project, for
the tests of what answered its tools' calls: a signed-in customer asks for her balance
(``get_balance`` stubbed to 12), then says she lost her card (``list_cards`` runs)."""

from __future__ import annotations

_HEAD = """variables:
  project.authenticated: true
  project.customer_id: "1001"
  project.customer_name: Ada
actions:
  get_balance: {outputs: {balance: 12}}
turns:
"""

# Each turn: the user's message, the model's moves, the actions the turn runs.
_TURNS = [
    (
        "What's my balance?",
        '[{tool: activate_skill, args: {skill: check_balance}}, {tool: get_balance}, {say: "12."}]',
        "[activate_skill, get_balance]",
    ),
    (
        "I lost my card",
        '[{tool: activate_skill, args: {skill: card_replace}}, {tool: list_cards}, {say: "Which?"}]',
        "[activate_skill, list_cards]",
    ),
]


def card_bank_balance_conversation(*, expect: bool = False) -> str:
    """The conversation's YAML text; with ``expect``, each turn expects the actions it runs."""
    lines: list[str] = []
    for user, model, actions in _TURNS:
        lines += [f'  - user: "{user}"', f"    model: {model}"]
        if expect:
            lines.append(f"    expect: {{actions: {actions}}}")
    return _HEAD + "\n".join(lines) + "\n"
