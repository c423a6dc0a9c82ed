"""``.agent`` texts for the tests, built from their parts: a ``system:`` block, an optional
``config:`` and ``variables:`` block, and a ``start_agent main`` whose reasoning offers tools
and whose ``actions:`` declares actions. What a test varies is a keyword; the rest is the
text the action tests have always written:

    agent_text(actions=[act_action("python://backend:act")])

is an agent whose one tool ``act`` calls the action ``act`` (outputs ``who``), run by
``backend.py``'s ``act``. Only text is built here: nothing is parsed, checked or written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class System:
    """The ``system:`` block: the agent's instructions and its two messages."""

    instructions: str = "Be brief."
    welcome: str = "Hi"
    error: str = "Something failed."


@dataclass(frozen=True)
class Field:
    """What follows a name's colon (a type such as ``string``, or a variable's declaration
    such as ``mutable string = ""``) and, if given, the ``description:`` beneath it."""

    kind: str
    description: str | None = None


@dataclass(frozen=True)
class Action:
    """An entry of the start agent's ``actions:``; ``inputs`` and ``outputs`` map a name to a
    type (or a :class:`Field` to describe it); ``require_user_confirmation`` writes that key
    (a call waits for the user's yes)."""

    name: str
    description: str
    target: str
    inputs: Mapping[str, str | Field] = field(default_factory=dict)
    outputs: Mapping[str, str | Field] = field(default_factory=dict)
    require_user_confirmation: bool = False


@dataclass(frozen=True)
class Tool:
    """An entry of the reasoning's ``actions:``: ``name: <to>`` (``@actions.<name>`` unless
    given), with ``lines`` (``with x=...``, ``set ...``, ``description: ...``) beneath it."""

    name: str
    to: str = ""
    lines: Sequence[str] = ()


SYSTEM = System()  # the system block most tests write


def act_action(target: str, description: str = "The action under test") -> Action:
    """The action ``act`` of the action tests: no inputs, one output ``who``."""
    return Action("act", description, target, outputs={"who": "string"})


def orders_agent(target: str, outputs: Sequence[str] = ("status", "where")) -> str:
    """The orders agent of the action tests: its one tool ``lookup`` calls the action
    ``lookup`` (order 7), whose target is ``target`` and whose outputs, strings, ``outputs``."""
    return agent_text(
        developer_name="Orders",
        tools=[Tool("lookup", lines=['with order_ID="7"'])],
        actions=[
            Action(
                "lookup",
                "Look an order up",
                target,
                inputs={"order_ID": "string"},
                outputs=dict.fromkeys(outputs, "string"),
            )
        ],
    )


def agent_text(
    *,
    actions: Sequence[Action] = (),
    tools: Sequence[Tool] | None = None,
    instructions: str = "Use the tool.",
    run: Sequence[str] = (),
    system: System = SYSTEM,
    developer_name: str | None = None,
    variables: Mapping[str, Field] | None = None,
    dialect: str | None = "agentscript",
    more: str = "",
) -> str:
    """The text of an agent whose start agent is ``main``.

    ``tools`` default to one per action, of the action's name. ``instructions`` is the
    reasoning's prompt line; ``run`` the procedure statements before it (``run @actions.x``).
    ``developer_name`` makes a ``config:`` block, ``variables`` a ``variables:`` block;
    ``dialect`` is the ``# @dialect:`` line's (None: no such line). ``more`` holds further
    top-level blocks (subagents), written after a blank line."""
    lines = [f"# @dialect: {dialect}"] if dialect else []
    lines += [
        "system:",
        f'    instructions: "{system.instructions}"',
        "    messages:",
        f'        welcome: "{system.welcome}"',
        f'        error: "{system.error}"',
    ]
    if developer_name is not None:
        lines += ["config:", f'    developer_name: "{developer_name}"']
    if variables:
        lines += ["variables:", *_fields(variables, 4)]
    lines += [
        "",
        "start_agent main:",
        '    description: "main"',
        "    reasoning:",
        "        instructions: ->",
        *(f"            {statement}" for statement in run),
        f"            | {instructions}",
    ]
    offered = [Tool(a.name) for a in actions] if tools is None else tools
    if offered:
        lines.append("        actions:")
    for tool in offered:
        lines.append(f"            {tool.name}: {tool.to or '@actions.' + tool.name}")
        lines += [f"                {line}" for line in tool.lines]
    if actions:
        lines.append("    actions:")
    for action in actions:
        lines += [
            f"        {action.name}:",
            f'            description: "{action.description}"',
            f'            target: "{action.target}"',
        ]
        if action.require_user_confirmation:
            lines.append("            require_user_confirmation: True")
        for block, fields in (("inputs", action.inputs), ("outputs", action.outputs)):
            if fields:
                lines += [f"            {block}:", *_fields(fields, 16)]
    text = "\n".join(lines) + "\n"
    return text + "\n" + more if more else text


def _fields(fields: Mapping[str, str | Field], indent: int) -> list[str]:
    """``name: kind`` lines at ``indent``, each with its description indented beneath it."""
    pad = " " * indent
    lines: list[str] = []
    for name, given in fields.items():
        declared = Field(given) if isinstance(given, str) else given
        lines.append(f"{pad}{name}: {declared.kind}")
        if declared.description is not None:
            lines.append(f'{pad}    description: "{declared.description}"')
    return lines
