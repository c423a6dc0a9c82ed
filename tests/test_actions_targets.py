"""``[actions.targets]`` of ``agentscript.toml``: an ``.agent`` file written for Salesforce
(``flow://``, ``apex://``) runs unchanged, each mapped target by the ``python://`` function the
file names, exactly as that target written in the agent would run. Stubs and ``actions=``
callables still come first; a malformed table stops the agent from loading (``load``,
``validate``, ``serve``); a key no action targets is a ``validate`` warning; the trace keeps the
agent's ``target`` and says what ran instead in ``ranTarget``."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from click.testing import CliRunner

import agentscript
from agentscript.actions import StubBook
from agentscript.actions.settings import ActionConfigError
from agentscript.cli import main
from agentscript.diagnostics import AgentScriptError
from agentscript.engine.session import Reply
from agentscript.models.scripted import Move, ScriptedModel
from agentscript.validation import validate_path
from fakes.agent_texts import orders_agent

REPO = Path(__file__).resolve().parents[1]
ORDER_STATUS = REPO / "examples" / "order_status"


BACKEND = """\
import os


def lookup(order_ID):
    return {"status": f"shipped {order_ID}", "where": f"{__name__} pid {os.getpid()}"}
"""

MAPPING = '[actions.targets]\n"flow://Lookup_Order" = "python://backend:lookup"\n'


@pytest.fixture(autouse=True)
def _no_config_override(monkeypatch: pytest.MonkeyPatch) -> None:
    # The toml under test is the one beside the agent, not one the shell points at.
    monkeypatch.delenv("AGENTSCRIPT_CONFIG", raising=False)


def agent_in(folder: Path, toml: str | None, target: str = "flow://Lookup_Order") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "backend.py").write_text(BACKEND, encoding="utf-8")
    if toml is not None:
        (folder / "agentscript.toml").write_text(toml, encoding="utf-8")
    path = folder / "orders.agent"
    path.write_text(orders_agent(target), encoding="utf-8")
    return path


def one_call(path: Path, **session: Any) -> Reply:
    agent = agentscript.load(path)
    model = ScriptedModel([Move(calls=[("lookup", {})]), Move(text="Done.")])
    return agent.session(model=model, **session).send("where is order 7?")


def action_step(reply: Reply) -> dict[str, Any]:
    steps: list[dict[str, Any]] = reply.trace["planTrace"]["steps"]
    return next(s for s in steps if s["type"] == "ACTION_STEP")


# ------------------------------------------------------------------ running


def test_a_mapped_target_runs_the_python_function_of_the_agents_folder(tmp_path: Path) -> None:
    reply = one_call(agent_in(tmp_path / "a", MAPPING))
    step = action_step(reply)
    assert reply.error is None and step["error"] is None
    assert step["output"]["status"] == "shipped 7"
    # Imported as the agent's own module (actions/modules.py), as python://backend:lookup is.
    assert step["output"]["where"].startswith("agentscript_agents.a")
    assert step["output"]["where"].split(" pid ")[0].endswith(".backend")
    assert int(step["output"]["where"].split(" pid ")[1]) == os.getpid()  # thread mode


def test_the_trace_keeps_the_agents_target_and_says_what_ran_instead(tmp_path: Path) -> None:
    step = action_step(one_call(agent_in(tmp_path / "a", MAPPING)))
    assert step["target"] == "flow://Lookup_Order"
    assert step["ranTarget"] == "python://backend:lookup"
    # Null without a mapping, as every step key that does not apply (trace_steps.py): a
    # target that runs as written ran nothing instead.
    direct = action_step(one_call(agent_in(tmp_path / "b", None, "python://backend:lookup")))
    assert direct["target"] == "python://backend:lookup" and direct["ranTarget"] is None
    assert direct["output"]["status"] == step["output"]["status"]


def test_without_a_mapping_the_target_still_has_no_handler(tmp_path: Path) -> None:
    step = action_step(one_call(agent_in(tmp_path / "a", None)))
    assert "has no handler" in step["error"] and step["ranTarget"] is None


def test_a_stub_wins_over_the_mapping(tmp_path: Path) -> None:
    stubs = StubBook.from_data({"lookup": {"outputs": {"status": "stubbed", "where": "stub"}}})
    step = action_step(one_call(agent_in(tmp_path / "a", MAPPING), stubs=stubs))
    assert step["output"] == {"status": "stubbed", "where": "stub"}
    assert step["ranTarget"] is None


def test_an_actions_callable_wins_over_the_mapping(tmp_path: Path) -> None:
    def lookup(order_ID: str) -> dict[str, str]:
        return {"status": "callable", "where": "session"}

    step = action_step(one_call(agent_in(tmp_path / "a", MAPPING), actions={"lookup": lookup}))
    assert step["output"] == {"status": "callable", "where": "session"}
    assert step["ranTarget"] is None


def test_the_mapping_wins_over_a_handler_registered_for_the_scheme(tmp_path: Path) -> None:
    agent = agentscript.load(agent_in(tmp_path / "a", MAPPING))
    agent.register_handler("flow", lambda request: {"status": "flow handler", "where": "h"})
    model = ScriptedModel([Move(calls=[("lookup", {})]), Move(text="Done.")])
    step = action_step(agent.session(model=model).send("go"))
    assert step["output"]["status"] == "shipped 7" and step["ranTarget"]


def test_ran_target_is_shown_as_target_is(tmp_path: Path) -> None:
    # A python:// value is checked for a module and a function only, so a query string
    # passes; the trace shows it as it shows any target (redaction.shown_target).
    toml = '[actions.targets]\n"flow://Lookup_Order" = "python://backend:lookup?token=sk-9"\n'
    step = action_step(one_call(agent_in(tmp_path / "a", toml)))
    assert step["ranTarget"] == "python://backend:lookup"


CONNECTED = """\
# @dialect: agentscript
system:
    instructions: "Be brief."
    messages:
        welcome: "Hi"
        error: "Something failed."
config:
    developer_name: "Conn"
variables:
    customer_id: mutable string = "C-7"
connected_subagent Refunds:
    target: "agent://Refund_Agent"
    description: "Handles refunds end to end"
    inputs:
        customer_id: string = @variables.customer_id
        reason: string
start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | Help the customer.
        actions:
            refund: @connected_subagent.Refunds
                with reason = ...
"""

REFUNDS = """\
def refund(customer_id, reason):
    return {"reply": f"refund for {customer_id}: {reason}"}
"""


def connected_agent(folder: Path, toml: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "refunds.py").write_text(REFUNDS, encoding="utf-8")
    (folder / "agentscript.toml").write_text(toml, encoding="utf-8")
    path = folder / "conn.agent"
    path.write_text(CONNECTED, encoding="utf-8")
    return path


CONNECTED_MAPPING = '[actions.targets]\n"agent://Refund_Agent" = "python://refunds:refund"\n'


def test_a_connected_subagents_target_is_mapped(tmp_path: Path) -> None:
    # A connected subagent is called like an action, through the same runner.
    path = connected_agent(tmp_path / "c", CONNECTED_MAPPING)
    model = ScriptedModel([Move(calls=[("refund", {"reason": "damaged"})]), Move(text="ok")])
    step = action_step(agentscript.load(path).session(model=model).send("refund"))
    assert step["target"] == "agent://Refund_Agent"
    assert step["ranTarget"] == "python://refunds:refund"
    assert step["output"] == {"reply": "refund for C-7: damaged"}


def test_a_run_conversation_with_stubs_behaves_as_before() -> None:
    # examples/order_status maps its flows now; late_order.yaml's stubs still answer.
    result = CliRunner().invoke(
        main,
        [
            "run",
            str(ORDER_STATUS / "order_status.agent"),
            "--conversation",
            str(ORDER_STATUS / "late_order.yaml"),
        ],
    )
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    ("files", "function", "expected", "mapped_expected"),
    [
        (
            {},
            "lookup",
            "cannot import 'backend' for action 'lookup': ",
            "cannot import 'backend': ",
        ),
        (
            {"backend.py": BACKEND},
            "nope",
            "'backend' has no function 'nope' (action 'lookup')",
            "'backend' has no function 'nope'",
        ),
    ],
)
def test_a_missing_module_or_function_is_the_error_a_python_target_gives(
    tmp_path: Path, files: dict[str, str], function: str, expected: str, mapped_expected: str
) -> None:
    def error_of(target: str, toml: str | None, folder: Path) -> str:
        path = agent_in(folder, toml, target)
        if "backend.py" not in files:
            (folder / "backend.py").unlink()
        return str(action_step(one_call(path))["error"]).replace(str(folder), "")

    toml = f'[actions.targets]\n"flow://Lookup_Order" = "python://backend:{function}"\n'
    mapped = error_of("flow://Lookup_Order", toml, tmp_path / "mapped")
    direct = error_of(f"python://backend:{function}", None, tmp_path / "direct")
    # The same failure, and the mapped one names both targets (tests/test_actions_errors.py).
    both = (
        f"action 'lookup' (flow://Lookup_Order, run as python://backend:{function} "
        "by [actions.targets]) failed: "
    )
    assert direct.startswith(expected) and mapped.startswith(both + mapped_expected)
    assert mapped.removeprefix(both + mapped_expected) == direct.removeprefix(expected)


def test_process_isolation_runs_a_mapped_target_in_a_worker(tmp_path: Path) -> None:
    toml = '[actions]\nisolation = "process"\n\n' + MAPPING
    step = action_step(one_call(agent_in(tmp_path / "p", toml)))
    assert step["error"] is None and step["ranTarget"] == "python://backend:lookup"
    assert step["output"]["status"] == "shipped 7"
    module, pid = step["output"]["where"].split(" pid ")
    assert module.startswith("agentscript_agents.a") and module.endswith(".backend")
    assert int(pid) != os.getpid()  # ran in a worker process


def test_a_mantle_project_ignores_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Mantle tools are Python already: the mapping is for Agent Script actions only.
    config = tmp_path / "agentscript.toml"
    config.write_text('[actions.targets]\n"mantle://x/y" = "python://backend:lookup"\n')
    monkeypatch.setenv("AGENTSCRIPT_CONFIG", str(config))
    agent = agentscript.load(REPO / "examples" / "card_bank")
    assert agent.action_settings.targets == {}
    orders = agentscript.load(agent_in(tmp_path / "a", None))
    assert orders.action_settings.targets == {"mantle://x/y": "python://backend:lookup"}


# ------------------------------------------------------------------ serve


def test_serve_runs_the_example_flows_through_the_mapping(tmp_path: Path) -> None:
    from agentscript.server.agents import load_agents, serve_agents
    from agentscript.server.app import create_app
    from agentscript.server.auth import ApiKeys
    from agentscript.server.standin import StandInModel
    from agentscript.store import store_from_url

    agents = load_agents([str(ORDER_STATUS)])
    served = serve_agents(agents, {a.name: StandInModel() for a in agents})
    store = store_from_url(f"sqlite:///{tmp_path}/sessions.db")
    app = create_app(served, store, keys=ApiKeys.of(), purge_every=None)

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://test"
            ) as client,
        ):
            created = await client.post(
                "/v1/agents/Order_Status/sessions", json={"variables": {"order_ID": "1234"}}
            )
            assert created.status_code == 201, created.text
            sid = created.json()["session_id"]
            turn = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "/go_to_orders"})
            assert turn.status_code == 200, turn.text
            trace = await client.get(turn.json()["trace_url"])
            return turn.json(), trace.json()

    turn, trace = asyncio.run(scenario())
    assert turn["error"] is None
    assert turn["actions"] == ["go_to_orders", "get_delivery_date", "check_if_late"]
    assert turn["variables"]["updated_delivery_date"] == "February 10, 2026"
    assert turn["variables"]["is_late"] is True
    steps = [s for s in trace["planTrace"]["steps"] if s["type"] == "ACTION_STEP"]
    assert [(s["target"], s["ranTarget"], s["error"]) for s in steps] == [
        ("flow://Get_Delivery_Date", "python://orders_backend:get_delivery_date", None),
        ("flow://Check_If_Late", "python://orders_backend:check_if_late", None),
    ]


# ------------------------------------------------------------------ configuration errors

BAD = {
    "key not a target": (
        '"Get_Delivery" = "python://backend:lookup"',
        "[actions.targets] key 'Get_Delivery' is not an action target",
    ),
    "value not a target": (
        '"flow://Lookup_Order" = "backend:lookup"',
        "[actions.targets] 'flow://Lookup_Order' = 'backend:lookup' is not a target",
    ),
    "value not python": (
        '"flow://Lookup_Order" = "apex://Lookup"',
        "'apex://Lookup': only a python:// target can run instead of another",
    ),
    "value not a string": (
        '"flow://Lookup_Order" = 5',
        "[actions.targets] 'flow://Lookup_Order' is a number",
    ),
    "value a table": (
        '"flow://Lookup_Order" = { module = "backend" }',
        "[actions.targets] 'flow://Lookup_Order' is a table",
    ),
    "python target without a function": (
        '"flow://Lookup_Order" = "python://backend"',
        "'python://backend' names no function",
    ),
}


def bad_agent(folder: Path, line: str) -> Path:
    return agent_in(folder, f"[actions.targets]\n{line}\n")


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_malformed_mapping_is_a_load_error_naming_the_file(tmp_path: Path, case: str) -> None:
    line, message = BAD[case]
    path = bad_agent(tmp_path / "bad", line)
    with pytest.raises(AgentScriptError) as caught:
        agentscript.load(path)
    [diag] = caught.value.diagnostics
    assert diag.code == "config-error" and diag.file == str(path.parent / "agentscript.toml")
    assert message in diag.message
    assert 'write "python://module:function"' in diag.message or "in quotes" in diag.message


def test_targets_must_be_a_table(tmp_path: Path) -> None:
    path = agent_in(tmp_path / "bad", '[actions]\ntargets = "python://backend:lookup"\n')
    with pytest.raises(AgentScriptError, match=r"\[actions.targets\] must be a table"):
        agentscript.load(path)


@pytest.mark.parametrize("case", sorted(BAD))
def test_validate_reports_a_malformed_mapping_as_load_does(tmp_path: Path, case: str) -> None:
    line, message = BAD[case]
    path = bad_agent(tmp_path / "bad", line)
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 1, result.output
    assert "error[config-error]" in result.output and message in result.output


@pytest.mark.parametrize("case", ["key not a target", "value not python", "value not a string"])
def test_serve_refuses_to_start_with_a_malformed_mapping(tmp_path: Path, case: str) -> None:
    # The real command in a process of its own, bounded: a server that starts would serve on.
    line, message = BAD[case]
    path = bad_agent(tmp_path / "bad", line)
    env = {
        k: v for k, v in os.environ.items() if k not in ("AGENTSCRIPT_STORE", "AGENTSCRIPT_CONFIG")
    }
    env["AGENTSCRIPT_API_KEYS"] = ""
    command = [sys.executable, "-m", "agentscript.cli", "serve", str(path), "--model", "standin"]
    command += ["--store", f"sqlite:///{tmp_path}/s.db", "--port", "0"]
    try:
        result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("serve started with a malformed [actions.targets]")
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert "cannot serve an agent with errors" in output and message in output
    assert "Traceback" not in output


# ------------------------------------------------------------------ the typo warning


def test_a_key_no_action_targets_is_a_validate_warning_on_its_line(tmp_path: Path) -> None:
    toml = MAPPING + '"flow://Lookup_Ordr" = "python://backend:lookup"\n'
    path = agent_in(tmp_path / "typo", toml)
    agentscript.load(path)  # a warning, not a load error
    [warning] = [d for d in validate_path(path) if d.code == "unmatched-action-target"]
    assert warning.severity.value == "warning"
    assert warning.file == str(path.parent / "agentscript.toml")
    assert (warning.span.line, warning.span.column) == (3, 1)
    assert "'flow://Lookup_Ordr'" in warning.message and "flow://Lookup_Order" in warning.message
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert "warning[unmatched-action-target]" in result.output
    assert "0 error(s), 1 warning(s)" in result.output


def test_no_warning_when_every_key_is_a_target_of_the_agent() -> None:
    diagnostics = validate_path(ORDER_STATUS / "order_status.agent")
    assert not [d for d in diagnostics if d.code == "unmatched-action-target"]


def test_the_example_validates_clean(tmp_path: Path) -> None:
    # A copy, so the result depends on the example's files alone.
    folder = tmp_path / "order_status"
    shutil.copytree(ORDER_STATUS, folder)
    result = CliRunner().invoke(main, ["validate", str(folder)])
    assert result.exit_code == 0 and "0 error(s), 0 warning(s)" in result.output, result.output


def test_a_connected_subagents_target_is_no_unmatched_key(tmp_path: Path) -> None:
    # The mapping applies at run time (test above), so validate must not call it a typo.
    path = connected_agent(tmp_path / "c", CONNECTED_MAPPING)
    assert not [d for d in validate_path(path) if d.code == "unmatched-action-target"]
    typo = connected_agent(tmp_path / "t", CONNECTED_MAPPING.replace("Refund_Agent", "Refund_Agnt"))
    [warning] = [d for d in validate_path(typo) if d.code == "unmatched-action-target"]
    assert "'agent://Refund_Agnt'" in warning.message
    assert warning.message.endswith("its action targets: agent://Refund_Agent")


SECRET_URL = "https://svc:hunter2pw@api.example/lookup?api_key=sk-live-abc123"


def test_the_warning_shows_the_agents_targets_without_credentials(tmp_path: Path) -> None:
    # Its message goes to CI logs: targets are named as a trace names them.
    toml = '[actions.targets]\n"flow://Lookup_Ordr" = "python://backend:lookup"\n'
    path = agent_in(tmp_path / "leak", toml, SECRET_URL)
    [warning] = [d for d in validate_path(path) if d.code == "unmatched-action-target"]
    assert warning.message.endswith("its action targets: https://api.example/lookup")
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert "warning[unmatched-action-target]" in result.output
    assert "hunter2pw" not in result.output and "sk-live" not in result.output


def test_the_warning_shows_a_key_without_credentials(tmp_path: Path) -> None:
    toml = f'[actions.targets]\n"{SECRET_URL.replace("lookup", "lookp")}" = "python://b:f"\n'
    path = agent_in(tmp_path / "leak", toml, SECRET_URL)
    [warning] = [d for d in validate_path(path) if d.code == "unmatched-action-target"]
    assert "'https://api.example/lookp'" in warning.message
    assert "hunter2pw" not in warning.message and "sk-live" not in warning.message


def test_no_unmatched_warning_when_the_actions_table_does_not_load(tmp_path: Path) -> None:
    # The table is read whole, as the loader reads it: a bad [actions] is one config-error,
    # and its targets are not judged against the agent (the agent does not load at all).
    toml = '[actions]\nisolation = "fork"\n\n' + MAPPING + '"flow://Lookup_Ordr" = "python://b:f"\n'
    path = agent_in(tmp_path / "bad", toml)
    assert not [d for d in validate_path(path) if d.code == "unmatched-action-target"]
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 1 and "error[config-error]" in result.output, result.output
    assert "unmatched-action-target" not in result.output


# ------------------------------------------------------------------ one toml, several agents


# A folder of migrated agents sharing one toml, each agent targeting one of its keys.
SHARED = {
    "billing": "apex://Billing.GetInvoice",
    "orders": "flow://Lookup_Order",
    "returns": "flow://Get_Return",
    "shipping": "flow://Get_Shipment",
    "warranty": "apex://Warranty.GetExpiry",
    "zeta": "flow://Zeta_Flow",
}
TYPO = '"flow://Lookup_Ordr" = "python://backend:lookup"\n'


def shared_folder(folder: Path, extra: str = TYPO) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "backend.py").write_text(BACKEND, encoding="utf-8")
    keys = "".join(f'"{target}" = "python://backend:lookup"\n' for target in SHARED.values())
    (folder / "agentscript.toml").write_text("[actions.targets]\n" + keys + extra)
    paths = {}
    for name, target in SHARED.items():
        paths[name] = folder / f"{name}.agent"
        paths[name].write_text(orders_agent(target), encoding="utf-8")
    return paths


def unmatched(diagnostics: list[Any]) -> list[Any]:
    return [d for d in diagnostics if d.code == "unmatched-action-target"]


def test_a_toml_shared_by_several_agents_warns_once_about_its_one_typo(tmp_path: Path) -> None:
    # Judged per agent, 6 agents and 7 keys gave 36 warnings: each agent's 6 others' keys.
    paths = shared_folder(tmp_path / "migrated")
    result = CliRunner().invoke(main, ["validate", str(tmp_path / "migrated")])
    assert result.exit_code == 0, result.output
    assert "6 file(s) checked: 0 error(s), 1 warning(s)" in result.output
    assert result.output.count("warning[unmatched-action-target]") == 1
    found = {name: unmatched(validate_path(path)) for name, path in paths.items()}
    assert [name for name, diags in found.items() if diags] == ["orders"]  # its likely target
    [warning] = found["orders"]
    assert warning.file == str(tmp_path / "migrated" / "agentscript.toml")
    assert (warning.span.line, warning.span.column) == (8, 1)  # the typo's line
    assert "'flow://Lookup_Ordr'" in warning.message
    assert "the 6 agents this file applies to (billing.agent, orders.agent" in warning.message
    assert "and 1 more" in warning.message  # a bounded list
    assert warning.message.endswith(
        "the closest target is 'flow://Lookup_Order' (orders.agent, mapped too)"
    )


def test_one_agent_checked_alone_is_judged_with_the_agents_sharing_its_toml(
    tmp_path: Path,
) -> None:
    paths = shared_folder(tmp_path / "migrated", TYPO + '"flow://Gone" = "python://backend:x"\n')
    # The keys its siblings use are no typo; each typo comes with one agent: the one whose
    # target it is close to, else the first by path.
    billing = unmatched(validate_path(paths["billing"]))
    assert ["'flow://Gone'" in d.message for d in billing] == [True]
    assert [
        "'flow://Lookup_Ordr'" in d.message for d in unmatched(validate_path(paths["orders"]))
    ] == [True]
    assert not unmatched(validate_path(paths["returns"]))
    result = CliRunner().invoke(main, ["validate", str(paths["returns"])])
    assert result.exit_code == 0 and "0 error(s), 0 warning(s)" in result.output, result.output
    # An agent below with a toml of its own is not one of this toml's agents.
    sub = tmp_path / "migrated" / "sub"
    agent_in(sub, MAPPING.replace("Lookup_Order", "Get_Return"), "flow://Get_Return")
    (tmp_path / "migrated" / "returns.agent").unlink()
    assert "'flow://Get_Return'" in unmatched(validate_path(paths["billing"]))[0].message


# ------------------------------------------------------------------ a mapping to nothing


def unresolved(diagnostics: list[Any]) -> list[Any]:
    return [d for d in diagnostics if d.code == "unresolved-python-target"]


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (
            "python://no_such_backend_x9:lookup",
            "the agent's folder has no no_such_backend_x9.py or no_such_backend_x9/, and no "
            "module 'no_such_backend_x9' is installed",
        ),
        ("python://backend:lookp", "backend.py has no top-level function 'lookp'"),
        (
            "python://backend.sub:lookup",
            "backend.py of the agent's folder is a module, not a package",
        ),
        ("python://pkg.nope:f", "the agent's folder has no pkg/nope.py or pkg/nope/"),
        ("python://pkg.mod:g", "pkg/mod.py has no top-level function 'g'"),
        ("python://json.no_such_sub_x9:f", "the installed package 'json' has no module"),
    ],
)
def test_a_mapping_to_a_missing_module_or_function_is_a_validate_warning(
    tmp_path: Path, value: str, words: str
) -> None:
    # It loads and serves (the module may be installed at deploy time), and failed every turn.
    toml = f'[actions.targets]\n"flow://Lookup_Order" = "{value}"\n'
    path = agent_in(tmp_path / "a", toml)
    (tmp_path / "a" / "pkg").mkdir()
    (tmp_path / "a" / "pkg" / "__init__.py").write_text("")
    (tmp_path / "a" / "pkg" / "mod.py").write_text("def f():\n    return {}\n")
    agentscript.load(path)
    [warning] = unresolved(validate_path(path))
    assert warning.severity.value == "warning"
    assert warning.file == str(tmp_path / "a" / "agentscript.toml")
    assert (warning.span.line, warning.span.column) == (2, 1)
    assert f"maps 'flow://Lookup_Order' to '{value}', which cannot run for orders.agent" in (
        warning.message
    )
    assert words in warning.message
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert "warning[unresolved-python-target]" in result.output
    assert "0 error(s), 1 warning(s)" in result.output


REEXPORTS = """\
from os.path import join as joined
import json as encoded

try:
    from fast_lookup_x9 import lookup_fast
except ImportError:
    def lookup_fast(order_ID):
        return {}
Lookup = type("Lookup", (), {})
"""


@pytest.mark.parametrize(
    "value",
    [
        "python://json:dumps",
        "python://os.path:join",
        "python://json.decoder:JSONDecoder",
        "python://backend:lookup",
        "python://pkg.mod:f",
        "python://pkg:f",
        "python://reexports:joined",
        "python://reexports:encoded",
        "python://reexports:lookup_fast",
        "python://reexports:Lookup",
    ],
)
def test_a_mapping_that_can_run_gives_no_warning(tmp_path: Path, value: str) -> None:
    # Beside a mapping that cannot run, for the one warning to show the check ran.
    toml = (
        f'[actions.targets]\n"flow://Lookup_Order" = "{value}"\n'
        '"flow://Control" = "python://no_such_backend_x9:lookup"\n'
    )
    path = agent_in(tmp_path / "a", toml)
    control = tmp_path / "a" / "control.agent"
    control.write_text(orders_agent("flow://Control"), encoding="utf-8")
    (tmp_path / "a" / "pkg").mkdir()
    (tmp_path / "a" / "pkg" / "__init__.py").write_text("from .mod import f\n")
    (tmp_path / "a" / "pkg" / "mod.py").write_text("async def f():\n    return {}\n")
    (tmp_path / "a" / "reexports.py").write_text(REEXPORTS)
    [warning] = unresolved([*validate_path(path), *validate_path(control)])
    assert "'flow://Control'" in warning.message


RAISES = """\
import pathlib
pathlib.Path({marker!r}).write_text("imported")
raise SystemExit("agent code ran")
def lookup(order_ID):
    return {{}}
"""


def test_validate_runs_no_code_of_the_agent_nor_of_a_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "ran"
    folder = tmp_path / "a"
    toml = (
        "[actions.targets]\n"
        '"flow://Lookup_Order" = "python://backend:lookp"\n'
        '"flow://Get_Return" = "python://pkg.mod:lookup"\n'
        '"flow://Other" = "python://host_pkg_x9.nope:lookup"\n'
    )
    path = agent_in(folder, toml)
    (folder / "backend.py").write_text(RAISES.format(marker=str(marker)))
    (folder / "pkg").mkdir()
    (folder / "pkg" / "__init__.py").write_text(RAISES.format(marker=str(marker)))
    (folder / "pkg" / "mod.py").write_text(RAISES.format(marker=str(marker)))
    # A package the host would import (find_spec of a dotted name imports its parent).
    host = tmp_path / "host"
    (host / "host_pkg_x9").mkdir(parents=True)
    (host / "host_pkg_x9" / "__init__.py").write_text(RAISES.format(marker=str(marker)))
    monkeypatch.syspath_prepend(str(host))
    second = folder / "second.agent"  # so that every key is some agent's target
    second.write_text(orders_agent("flow://Get_Return"), encoding="utf-8")
    third = folder / "third.agent"
    third.write_text(orders_agent("flow://Other"), encoding="utf-8")
    diagnostics = [d for p in (path, second, third) for d in validate_path(p)]
    assert not marker.exists()
    assert not [m for m in sys.modules if m.startswith("host_pkg_x9")]
    messages = " | ".join(d.message for d in unresolved(diagnostics))
    assert len(unresolved(diagnostics)) == 2, messages  # pkg/mod.py binds lookup (below a raise)
    assert "backend.py has no top-level function 'lookp'" in messages
    assert "the installed package 'host_pkg_x9' has no module 'host_pkg_x9.nope'" in messages


def test_a_python_target_written_in_the_agent_gets_the_same_warning(tmp_path: Path) -> None:
    path = agent_in(tmp_path / "a", None, "python://backend:lookp")
    [warning] = unresolved(validate_path(path))
    agent = orders_agent("python://backend:lookp")
    line = next(i for i, text in enumerate(agent.splitlines(), 1) if "target:" in text)
    assert warning.file == str(path) and warning.span.line == line
    assert warning.message == (
        "Action 'lookup' targets 'python://backend:lookp', which cannot run: backend.py has no "
        "top-level function 'lookp'"
    )
    assert not unresolved(validate_path(agent_in(tmp_path / "b", None, "python://backend:lookup")))
    # Mapped to another, it is not what runs: the mapping's value is checked instead.
    toml = '[actions.targets]\n"python://backend:lookp" = "python://backend:lookup"\n'
    assert not unresolved(validate_path(agent_in(tmp_path / "c", toml, "python://backend:lookp")))


# ------------------------------------------------------------------ read at load


def test_the_loader_reads_the_actions_table_through_the_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentscript.engine.session import AgentBase

    calls: list[AgentBase] = []
    load = AgentBase.load_action_settings

    def counted(self: AgentBase) -> Any:
        calls.append(self)
        return load(self)

    monkeypatch.setattr(AgentBase, "load_action_settings", counted)
    agent = agentscript.load(agent_in(tmp_path / "a", MAPPING))
    assert calls == [agent]
    assert agent.action_settings.targets == {"flow://Lookup_Order": "python://backend:lookup"}
    assert calls == [agent]  # kept: the property does not read the file again


def test_an_agent_not_loaded_by_load_reads_the_table_at_first_use(tmp_path: Path) -> None:
    from agentscript.check import check
    from agentscript.engine.session import Agent
    from agentscript.loader import parse_file

    path = agent_in(tmp_path / "a", MAPPING)
    doc, _ = parse_file(path)
    assert doc is not None
    agent = Agent(check(doc).outline, path=path)
    assert agent.action_settings.targets == {"flow://Lookup_Order": "python://backend:lookup"}
    (path.parent / "agentscript.toml").write_text('[actions]\nisolation = "fork"\n')
    assert agent.action_settings.targets  # kept
    with pytest.raises(ActionConfigError, match="isolation 'fork'"):
        agent.load_action_settings()  # reads again, checks
