"""Every conformance agent that loads, served through the real ASGI app of ``agentscript serve``.

tests/test_corpus_run.py plays the corpus in-process; this plays it over the HTTP API, with the
in-process stand-in model (agentscript.server.standin) and a SQLite store, so every turn, view
and trace is written to the store and read back. For each agent:

* ``GET /v1/agents/{name}`` is 200 and describes the loaded agent (variables, nodes or skills);
* ``POST /v1/agents/{name}/sessions`` with no variables is 201: no corpus agent gives a linked
  variable a default, and the API requires none (the host may leave one out), so each linked
  variable reads back ``null``;
* a plain message, then ``/<tool>`` for the first tool the start node offered in turn 1 (the
  trace's first RESOLUTION_STEP there; the stand-in calls a tool named so): each answer is a
  200 turn with the documented fields (docs/serve.md "Send a message"), its session view, trace
  (``agentscript-trace/1``) and turn list read back. A turn may end with an ``error`` (an action
  with no handler); a 5xx, a traceback in a body, or a read that fails is a failure.

Agents are grouped: one app serves a shard of them (in sub-groups, since two agents in one app
must not share a name), run once per shard and cached; each agent is its own test case.

Which files: the serve loader (``load_agents``) for every fixture; the ones only the
``agentforce`` org rules reject (tests/check/test_corpus.py ORG_REJECTED) are loaded in the
``agentscript`` dialect, as ``# @dialect: agentscript`` would; BROKEN ones load in no dialect.
Mantle: the two projects whose tools are all present load as served; the seven Maestro-era
ones ship without their Python tools (see mantle/README.md) and are loaded with
``stub_missing_tools`` (``agentscript serve`` has no such option: it refuses them).
"""

from __future__ import annotations

import asyncio
import importlib.util
import traceback
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx2 as httpx
import pytest

import agentscript
from agentscript import AgentScriptError
from agentscript.engine.session import Agent, AgentBase
from agentscript.mantle.runtime import MantleAgent
from agentscript.server.agents import load_agents, serve_agents
from agentscript.server.app import create_app
from agentscript.server.config import ServerConfig
from agentscript.server.standin import StandInModel
from agentscript.store import store_from_url
from agentscript.trace import FORMAT as TRACE_FORMAT
from conformance import MANTLE, fixture_files


def _corpus_lists() -> ModuleType:
    """ORG_REJECTED and BROKEN live in tests/check/test_corpus.py: reuse them, not a copy."""
    path = Path(__file__).resolve().parents[1] / "check" / "test_corpus.py"
    spec = importlib.util.spec_from_file_location("_served_corpus_lists", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_LISTS = _corpus_lists()
ORG_REJECTED: dict[str, set[str]] = _LISTS.ORG_REJECTED
BROKEN: dict[str, set[str]] = _LISTS.BROKEN

SHARDS = 8

# docs/serve.md "Send a message": always there; the optional ones only when they apply.
TURN_FIELDS = {
    "user",
    "response",
    "node",
    "path",
    "actions",
    "variables",
    "escalated",
    "ended",
    "error",
    "displayable",
    "unused_moves",
    "usage",
    "confirmation",
    "turn",
    "trace_url",
}
OPTIONAL_TURN_FIELDS = {"refused", "delegated", "buttons"}
USAGE_FIELDS = {"llm_calls", "input_tokens", "output_tokens", "llm_ms"}
SESSION_FIELDS = {
    "session_id",
    "agent",
    "turns",
    "variables",
    "node",
    "skill_stack",
    "ended",
    "escalated",
    "pending_confirmation",
    "created_at",
    "updated_at",
    "expires_at",
    "compatible",
}
TURN_LINE_FIELDS = {"turn", "user", "response", "node", "error", "created_at", "trace_url"}
FIRST_MESSAGE = "Hello, I need some help."


@dataclass(frozen=True)
class Case:
    """One corpus agent: a fixture file or a Mantle project folder."""

    id: str
    path: Path
    kind: str  # "fixture", "org" (agentscript dialect), "mantle", "mantle-stubbed"


def _cases() -> list[Case]:
    cases = [
        Case(p.name, p, "org" if p.name in ORG_REJECTED else "fixture")
        for p in fixture_files()
        if p.name not in BROKEN
    ]
    if MANTLE.is_dir():
        for folder in sorted(p for p in MANTLE.iterdir() if p.is_dir()):
            stubbed = _missing_tools_only(folder)
            cases.append(Case(folder.name, folder, "mantle-stubbed" if stubbed else "mantle"))
    return cases


def _missing_tools_only(folder: Path) -> bool:
    """Whether the project's only errors are tools whose code was not copied."""
    try:
        agentscript.load(folder)
    except AgentScriptError as exc:
        codes = {d.code for d in exc.diagnostics if d.is_error}
        return codes == {"mantle-unresolved-tool"}
    return False


CASES = _cases()
SHARD_OF = {case.id: index % SHARDS for index, case in enumerate(CASES)}

# Agents whose served run shows a bug in the source: id -> the bug (strict: fixed = remove).
KNOWN_BUGS: dict[str, str] = {}

pytestmark = pytest.mark.skipif(not CASES, reason="conformance corpus not available")


# ---------------------------------------------------------------------- loading


def load_case(case: Case) -> AgentBase:
    """The agent as the server would load it (see the module docstring for the exceptions)."""
    if case.kind == "org":
        return agentscript.load(case.path, dialect="agentscript")
    if case.kind == "mantle-stubbed":
        return agentscript.load(case.path, stub_missing_tools=True)
    return load_agents([str(case.path)])[0]


def app_groups(loaded: list[tuple[Case, AgentBase]]) -> list[list[tuple[Case, AgentBase]]]:
    """The agents split into groups with unique names: one app each (the loader refuses two
    agents of one name)."""
    groups: list[list[tuple[Case, AgentBase]]] = []
    for item in loaded:
        home = next(
            (g for g in groups if all(a.name != item[1].name for _, a in g)),
            None,
        )
        if home is None:
            groups.append([item])
        else:
            home.append(item)
    return groups


# ---------------------------------------------------------------------- checks


class Problems:
    """What went wrong for one agent (the test case fails with all of it), and the tool its
    second message called, if it sent one."""

    def __init__(self, *items: str) -> None:
        self.items = list(items)
        self.tool: str | None = None

    def append(self, what: str) -> None:
        self.items.append(what)

    def check(self, ok: bool, what: str) -> bool:
        if not ok:
            self.append(what)
        return ok


def excerpt(response: httpx.Response) -> str:
    return response.text[:400].replace("\n", "\\n")


def answered(
    problems: Problems, response: httpx.Response, request: str, status: int
) -> dict[str, Any] | None:
    """The JSON body of ``response`` if it has ``status``; else a problem naming the request,
    its status and an excerpt of its body."""
    if "Traceback" in response.text:
        problems.append(f"{request}: traceback in body: {excerpt(response)}")
    if response.status_code != status:
        problems.append(f"{request}: {response.status_code} (want {status}): {excerpt(response)}")
        return None
    try:
        body = response.json()
    except ValueError:
        problems.append(f"{request}: body is not JSON: {excerpt(response)}")
        return None
    if not isinstance(body, dict):
        problems.append(f"{request}: body is not an object: {excerpt(response)}")
        return None
    return body


def check_description(problems: Problems, agent: AgentBase, body: dict[str, Any]) -> None:
    """The description names the loaded agent's variables and its nodes or skills."""
    check = problems.check
    check(body.get("name") == agent.name, f"description name {body.get('name')!r}")
    variables = body.get("variables")
    if not isinstance(variables, list):
        problems.append(f"description variables {variables!r}")
        return
    for v in variables:
        check(
            set(v) == {"name", "type", "mutable", "linked", "description"},
            f"description variable fields {sorted(v)}",
        )
    names = [v.get("name") for v in variables]
    if isinstance(agent, Agent):
        declared = agent.outline.variables
        check(body.get("format") == "agentscript", f"format {body.get('format')!r}")
        check(names == list(declared), f"variables {names} != declared {list(declared)}")
        for v in variables:
            info = declared.get(v["name"])
            if info is not None:
                check(
                    (v["type"], v["linked"], v["mutable"])
                    == (info.type, info.modifier == "linked", info.modifier == "mutable"),
                    f"variable {v['name']}: {v} vs declared {info.type} {info.modifier}",
                )
        check(body.get("nodes") == sorted(agent.program.nodes), f"nodes {body.get('nodes')}")
        check(body.get("start") == agent.outline.start_agent, f"start {body.get('start')!r}")
    elif isinstance(agent, MantleAgent):
        project = agent.project
        entries = [e.qualified_name for e in project.all_memory()]
        check(body.get("format") == "mantle", f"format {body.get('format')!r}")
        check(names == entries, f"variables {names} != memory entries {entries}")
        check(body.get("skills") == sorted(project.skills), f"skills {body.get('skills')}")


def check_turn(problems: Problems, body: dict[str, Any], text: str, number: int) -> None:
    """The turn JSON of docs/serve.md: its fields, what it answers, its number and trace."""
    check = problems.check
    keys = set(body)
    check(keys >= TURN_FIELDS, f"turn {number}: missing fields {sorted(TURN_FIELDS - keys)}")
    extra = keys - TURN_FIELDS - OPTIONAL_TURN_FIELDS
    check(not extra, f"turn {number}: undocumented fields {sorted(extra)}")
    check(body.get("user") == text, f"turn {number}: user {body.get('user')!r}")
    check(body.get("turn") == number, f"turn {number}: turn {body.get('turn')!r}")
    check(isinstance(body.get("response"), str), f"turn {number}: response not text")
    error = body.get("error")
    check(error is None or isinstance(error, str), f"turn {number}: error {error!r}")
    usage = body.get("usage")
    check(
        isinstance(usage, dict) and set(usage) >= USAGE_FIELDS,
        f"turn {number}: usage {usage!r}",
    )


async def read_back(
    problems: Problems,
    client: httpx.AsyncClient,
    sid: str,
    agent: str,
    sent: list[tuple[str, dict[str, Any]]],
) -> None:
    """The session view, every turn's trace and the turn list agree with the turns sent."""
    check = problems.check
    number = len(sent)
    view = answered(
        problems, await client.get(f"/v1/sessions/{sid}"), f"GET session #{number}", 200
    )
    if view is not None:
        check(set(view) == SESSION_FIELDS, f"view fields {sorted(view)}")
        check(view.get("turns") == number, f"view turns {view.get('turns')} != {number}")
        check(view.get("agent") == agent, f"view agent {view.get('agent')!r}")
        check(view.get("compatible") is True, f"view compatible {view.get('compatible')!r}")
        last = sent[-1][1]
        # The view is the state the last turn left: its variables and node.
        check(
            view.get("variables") == last.get("variables"),
            f"view variables differ from turn {number}'s",
        )
        check(
            view.get("node") == last.get("node"),
            f"view node {view.get('node')!r} != turn {number}'s {last.get('node')!r}",
        )
    for index, (text, turn) in enumerate(sent, start=1):
        url = f"/v1/sessions/{sid}/turns/{index}/trace"
        trace = answered(problems, await client.get(url), f"GET trace {index}", 200)
        if trace is None:
            continue
        check(trace.get("format") == TRACE_FORMAT, f"trace {index} format {trace.get('format')!r}")
        check(trace.get("turn") == index, f"trace {index} turn {trace.get('turn')!r}")
        check(trace.get("userInput") == text, f"trace {index} userInput")
        check(trace.get("response") == turn.get("response"), f"trace {index} response")
        check(turn.get("trace_url") == url, f"turn {index} trace_url {turn.get('trace_url')!r}")
    listed = answered(
        problems, await client.get(f"/v1/sessions/{sid}/turns"), f"GET turns #{number}", 200
    )
    if listed is not None:
        lines = listed.get("turns") or []
        check(listed.get("next_after") is None, f"turns next_after {listed.get('next_after')}")
        check(
            [line.get("turn") for line in lines] == list(range(1, number + 1)),
            f"turns listed {[line.get('turn') for line in lines]}",
        )
        for line, (text, turn) in zip(lines, sent, strict=False):
            check(set(line) == TURN_LINE_FIELDS, f"turn line fields {sorted(line)}")
            same = (line.get("user"), line.get("response"), line.get("node"), line.get("error"))
            want = (text, turn.get("response"), turn.get("node"), turn.get("error"))
            check(same == want, f"turn line {line.get('turn')}: {same} != {want}")


async def first_offered_tool(client: httpx.AsyncClient, sid: str, start: str | None) -> str | None:
    """The first tool of turn 1's first RESOLUTION_STEP at the start node (Agent Script: the
    description's ``start``; Mantle: wherever routing resolved first)."""
    response = await client.get(f"/v1/sessions/{sid}/turns/1/trace")
    if response.status_code != 200:
        return None  # already a problem of read_back
    for step in response.json().get("planTrace", {}).get("steps", []):
        if step.get("type") == "RESOLUTION_STEP" and (start is None or step.get("node") == start):
            tools = step.get("tools") or []
            return str(tools[0]) if tools else None
    return None


async def send(
    problems: Problems, client: httpx.AsyncClient, sid: str, text: str, number: int
) -> dict[str, Any] | None:
    response = await client.post(f"/v1/sessions/{sid}/messages", json={"text": text})
    turn = answered(problems, response, f"POST message {number} {text!r}", 200)
    if turn is not None:
        check_turn(problems, turn, text, number)
    return turn


async def exercise(client: httpx.AsyncClient, agent: AgentBase) -> Problems:
    """The HTTP round of one agent (module docstring); every problem, not only the first."""
    problems = Problems()
    name = agent.name
    description = answered(
        problems, await client.get(f"/v1/agents/{name}"), f"GET /v1/agents/{name}", 200
    )
    if description is None:
        return problems
    check_description(problems, agent, description)
    # No variables: the API requires none, linked ones included (they read back null).
    created = answered(
        problems,
        await client.post(f"/v1/agents/{name}/sessions", json={"variables": {}}),
        "POST session",
        201,
    )
    if created is None:
        return problems
    sid = str(created.get("session_id"))
    problems.check(created.get("agent") == name, f"created agent {created.get('agent')!r}")
    problems.check(isinstance(created.get("messages"), list), f"created {created}")
    view = answered(problems, await client.get(f"/v1/sessions/{sid}"), "GET session #0", 200)
    if view is not None:
        values = view.get("variables") or {}
        declared = [v["name"] for v in description["variables"]]
        problems.check(sorted(values) == sorted(declared), f"new session variables {values}")
        linked = {v["name"]: values.get(v["name"]) for v in description["variables"] if v["linked"]}
        problems.check(
            all(value is None for value in linked.values()), f"linked not given: {linked}"
        )
        problems.check(view.get("turns") == 0 and view.get("node") is None, f"new view {view}")
    sent: list[tuple[str, dict[str, Any]]] = []
    first = await send(problems, client, sid, FIRST_MESSAGE, 1)
    if first is None:
        return problems
    sent.append((FIRST_MESSAGE, first))
    await read_back(problems, client, sid, name, sent)
    start = description.get("start") if description.get("format") == "agentscript" else None
    tool = await first_offered_tool(client, sid, start)
    if tool is None:
        return problems
    second = await send(problems, client, sid, f"/{tool}", 2)
    if second is None:
        return problems
    sent.append((f"/{tool}", second))
    await read_back(problems, client, sid, name, sent)
    problems.tool = tool
    trace = await client.get(f"/v1/sessions/{sid}/turns/2/trace")
    if trace.status_code == 200:
        called = [
            call.get("name")
            for step in trace.json()["planTrace"]["steps"]
            if step.get("type") == "LLM_STEP"
            for call in (step.get("output") or {}).get("tool_calls") or []
        ]
        # The probe reached the tool: the start node offered it again in turn 2.
        problems.check(tool in called, f"turn 2 did not call {tool}: {called}")
    return problems


async def serve_group(group: list[tuple[Case, AgentBase]], store_url: str) -> dict[str, Problems]:
    agents = [agent for _, agent in group]
    served = serve_agents(agents, {a.name: StandInModel() for a in agents})
    # No rate limit: a shard sends thousands of requests a second from one client.
    config = ServerConfig(rate_limit=0)
    app = create_app(served, store_from_url(store_url), config=config, purge_every=None)
    results: dict[str, Problems] = {}
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://test") as client,
    ):
        for case, agent in group:
            try:
                results[case.id] = await exercise(client, agent)
            except Exception:  # raised through the transport: the app let it escape
                results[case.id] = Problems(f"exception escaped the app:\n{traceback.format_exc()}")
    return results


@cache
def shard_results(shard: int, tmp: str) -> dict[str, Problems]:
    """Every agent of the shard served and exercised; problems by case id."""
    results: dict[str, Problems] = {}
    loaded: list[tuple[Case, AgentBase]] = []
    for case in CASES:
        if SHARD_OF[case.id] != shard:
            continue
        try:
            loaded.append((case, load_case(case)))
        except Exception as exc:
            results[case.id] = Problems(f"does not load: {type(exc).__name__}: {str(exc)[:400]}")
    for index, group in enumerate(app_groups(loaded)):
        store = f"sqlite:///{tmp}/shard{shard}-{index}.db"
        results.update(asyncio.run(serve_group(group, store)))
    return results


def _param(case: Case) -> Any:
    marks = (
        [pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[case.id])]
        if case.id in KNOWN_BUGS
        else []
    )
    return pytest.param(case, id=case.id, marks=marks)


# ---------------------------------------------------------------------- tests


@pytest.fixture(scope="module")
def shard_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("corpus_served"))


def test_the_corpus_is_all_here() -> None:
    """268 fixtures (270 less the two broken in every dialect) and 9 Mantle projects, 7 of
    them without their tools' code: guards the test below against serving fewer silently."""
    kinds: dict[str, int] = {}
    for case in CASES:
        kinds[case.kind] = kinds.get(case.kind, 0) + 1
    assert kinds == {"fixture": 242, "org": 26, "mantle": 2, "mantle-stubbed": 7}


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_corpus_agent_served(case: Case, shard_dir: str) -> None:
    problems = shard_results(SHARD_OF[case.id], shard_dir).get(case.id)
    assert problems is not None, f"{case.id} was not exercised"
    assert not problems.items, f"{case.path}:\n" + "\n".join(problems.items)


def test_most_agents_were_probed_with_a_tool(shard_dir: str) -> None:
    """Guards the second message against silently testing nothing: most start nodes offer a
    tool (220 of the 277 at the time of writing)."""
    probed = [
        case_id
        for shard in range(SHARDS)
        for case_id, problems in shard_results(shard, shard_dir).items()
        if problems.tool is not None
    ]
    assert len(probed) > 200
