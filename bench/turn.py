"""Engine overhead per turn and per reasoning iteration, with the scripted model and no trace I/O.

Agents measured:

* ``seed002``: ``examples/order_status`` playing ``late_order.yaml`` (router -> transition ->
  Order_Management with two deterministic actions, then text: 2 LLM iterations per turn);
* ``hub30``: a generated agent with a router and 30 subagents (the corpus tops out at 13):
  30 gated transition tools, each subagent resolving ``set``/``run``/``if``/``|`` and offering an
  LLM-called action (router tool -> subagent tool call -> text: 3 iterations per turn).

References measured in the same run, to read the engine's numbers against:

* ``json.dumps`` of the turn's trace (what writing a trace file costs before any I/O);
* a minimal hand-written Python loop doing the same steps (dict state, string prompts, awaited
  stubs and model) with no tracing, checking or snapshots: the floor any engine pays.

Then the turn of issue 10, ``seed_tool``: seed002 plus one model-called action (3 LLM calls, 1
tool call, 2 instruction resolutions, 4 deterministic ``run`` calls), with actions as stubs, as
real sync callables, as real ``async def`` callables and inline; through ``send_async`` and the
synchronous ``send``; over a 100-turn session (per-turn cost and trace bytes at turns 1, 10 and
100); and the memory an idle session holds (``tracemalloc``).

Usage: ``python bench/turn.py [--quick] [--profile]``.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import pstats
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import agentscript
from agentscript.actions.settings import ActionSettings, Isolation
from agentscript.conversation import load_conversation
from agentscript.engine.session import Agent, Session
from agentscript.models.scripted import Move, ScriptedModel
from common import REPO, best_of, machine, micro

SEED_AGENT = REPO / "examples" / "order_status" / "order_status.agent"
SEED_CONVERSATION = REPO / "examples" / "order_status" / "late_order.yaml"
HUB_SIZE = 30


# ---------------------------------------------------------------------- the agents


def hub_agent_text(size: int = HUB_SIZE) -> str:
    """A router and ``size`` subagents, each with deterministic steps and an LLM tool."""
    lines = [
        "# @dialect: agentscript",
        "system:",
        '    instructions: "You route support requests. Be brief."',
        "    messages:",
        '        welcome: "Hello!"',
        '        error: "Sorry, something went wrong."',
        "",
        "variables:",
        "    ref: linked string",
        '        description: "Case reference"',
        "    visits: mutable number = 0",
        "    status: mutable string",
        "    note: mutable string",
        "",
        "start_agent router:",
        '    description: "Route the customer"',
        "    reasoning:",
        "        instructions: ->",
        "            | Route case {!@variables.ref} to the right area.",
        "            if @variables.visits > 100:",
        "                | This customer has been here often.",
        "        actions:",
    ]
    for k in range(size):
        lines += [
            f"            go_{k}: @utils.transition to @subagent.area_{k}",
            f'                description: "Questions about area {k}"',
            "                available when @variables.visits < 1000000",
        ]
    for k in range(size):
        lines += [
            "",
            f"subagent area_{k}:",
            f'    description: "Area {k}"',
            "    reasoning:",
            "        instructions: ->",
            "            set @variables.visits = @variables.visits + 1",
            f"            run @actions.lookup_{k}",
            "                with ref=@variables.ref",
            "                set @variables.status = @outputs.status",
            f"            | Help with area {k}. The case status is {{!@variables.status}}.",
            '            if @variables.status == "late":',
            "                | Apologize for the delay.",
            f"            | Use {{!@actions.note_{k}}} to record the outcome.",
            "        actions:",
            f"            note_{k}: @actions.record_{k}",
            "                with text=...",
            "                set @variables.note = @outputs.saved",
            "            back: @utils.transition to @start_agent.router",
            "    actions:",
            f"        lookup_{k}:",
            '            description: "Look up the case"',
            f'            target: "flow://Lookup_{k}"',
            "            inputs:",
            "                ref: string",
            "            outputs:",
            "                status: string",
            f"        record_{k}:",
            '            description: "Record a note"',
            f'            target: "flow://Record_{k}"',
            "            inputs:",
            "                text: string",
            "            outputs:",
            "                saved: string",
        ]
    return "\n".join(lines) + "\n"


@dataclass
class Scenario:
    name: str
    agent: Agent
    variables: dict[str, Any]
    stubs: dict[str, Any]
    user: str
    moves: list[Move]

    def session(self) -> tuple[Session, ScriptedModel]:
        from agentscript.actions.registry import StubBook

        model = ScriptedModel()
        session = self.agent.session(
            model=model, variables=self.variables, stubs=StubBook.from_data(self.stubs)
        )
        return session, model


def seed_scenario() -> Scenario:
    conversation = load_conversation(SEED_CONVERSATION)
    [turn] = conversation.turns
    return Scenario(
        "seed002",
        agentscript.load(SEED_AGENT),
        conversation.variables,
        conversation.stubs,
        turn.user,
        turn.moves,
    )


def hub_scenario(folder: Path) -> Scenario:
    path = folder / "hub30.agent"
    path.write_text(hub_agent_text(), encoding="utf-8")
    stubs: dict[str, Any] = {}
    for k in range(HUB_SIZE):
        stubs[f"lookup_{k}"] = {"outputs": {"status": "late"}}
        stubs[f"record_{k}"] = {"outputs": {"saved": "yes"}}
    k = HUB_SIZE - 1  # the last route: every gate before it is evaluated too
    moves = [
        Move(calls=[(f"go_{k}", {})]),
        Move(calls=[(f"note_{k}", {"text": "customer informed"})]),
        Move(text="I recorded it; sorry for the delay."),
    ]
    return Scenario(
        "hub30", agentscript.load(path), {"ref": "CASE-7"}, stubs, "My case is late", moves
    )


# ---------------------------------------------------------------------- measuring the engine


@dataclass
class Result:
    name: str
    iterations: int  # LLM calls per turn
    turn: float  # seconds per turn (engine)
    dumps: float  # seconds per json.dumps of the turn's trace
    minimal: float  # seconds per turn of the minimal hand-written loop
    long_turn: float  # seconds per turn, averaged over a 20-turn session

    @property
    def per_iteration(self) -> float:
        return self.turn / self.iterations


def fresh_sessions(scenario: Scenario, number: int) -> list[Session]:
    """``number`` new sessions whose model holds the turn's moves (made outside the timing)."""
    sessions = []
    for _ in range(number):
        session, model = scenario.session()
        model.begin_turn(scenario.moves)
        sessions.append(session)
    return sessions


async def first_turns(sessions: list[Session], user: str) -> float:
    """Seconds per ``send_async`` over the sessions, all in one event loop."""
    start = time.perf_counter()
    for session in sessions:
        await session.send_async(user)
    return (time.perf_counter() - start) / len(sessions)


def time_turns(scenario: Scenario, *, repeat: int, number: int) -> float:
    """Seconds per turn: the first turn of a fresh session, best of ``repeat`` batches."""
    loop = asyncio.new_event_loop()
    try:
        return min(
            loop.run_until_complete(first_turns(fresh_sessions(scenario, number), scenario.user))
            for _ in range(repeat)
        )
    finally:
        loop.close()


def time_long_session(scenario: Scenario, *, turns: int = 20, repeat: int = 3) -> float:
    """Seconds per turn over one session of ``turns`` turns (history grows every turn)."""

    async def one() -> float:
        session, model = scenario.session()
        initial = dict(session.state.variables)
        elapsed = 0.0
        for _ in range(turns):
            model.begin_turn(scenario.moves)
            # Same path every turn (router first, counters reset); only the history grows.
            session.state.current_node = None
            session.state.variables.update(initial)
            start = time.perf_counter()
            reply = await session.send_async(scenario.user)
            elapsed += time.perf_counter() - start
            if reply.error is not None:
                raise SystemExit(f"{scenario.name}: a long-session turn failed: {reply.error}")
        return elapsed / turns

    loop = asyncio.new_event_loop()
    try:
        return min(loop.run_until_complete(one()) for _ in range(repeat))
    finally:
        loop.close()


def one_reply(scenario: Scenario) -> tuple[int, dict[str, Any]]:
    session, model = scenario.session()
    model.begin_turn(scenario.moves)
    reply = session.send(scenario.user)
    if reply.error is not None:
        raise SystemExit(f"{scenario.name}: the benchmark turn failed: {reply.error}")
    steps = reply.trace["planTrace"]["steps"]
    return sum(s["type"] == "LLM_STEP" for s in steps), reply.trace


# ---------------------------------------------------------------------- the minimal reference


async def _stub(outputs: dict[str, Any]) -> dict[str, Any]:
    return dict(outputs)


class _MiniModel:
    """Returns canned answers, like the scripted model, without requests or records."""

    def __init__(self, answers: list[dict[str, Any]]) -> None:
        self.answers = answers
        self.index = 0

    async def complete(self, system: str, prompt: str, history: list[dict[str, Any]]) -> Any:
        answer = self.answers[self.index]
        self.index += 1
        return answer


async def minimal_seed_turn(user: str) -> str:
    """Seed 002's turn as a plain loop: the least any engine must do for these steps."""
    state: dict[str, Any] = {
        "order_ID": "1234",
        "num_turns": 2,
        "updated_delivery_date": None,
        "is_late": False,
    }
    history: list[dict[str, Any]] = [{"role": "user", "content": user}]
    model = _MiniModel([{"tool": "go_to_orders"}, {"text": "It arrives February 10."}])
    system = "You are a helpful order support agent. Be brief."
    node = "router"
    while True:
        if node == "router":
            prompt = "Route the customer's request. Use go_to_orders for anything about an order."
            tools = ["go_to_orders", "go_to_escalation"]
            answer = await model.complete(system, prompt, history)
            if answer.get("tool") in tools:
                history.append({"role": "assistant", "tool": answer["tool"]})
                node = "Order_Management"
                continue
        state["num_turns"] += 1
        out = await _stub({"delivery_date": "February 10, 2026"})
        state["updated_delivery_date"] = out["delivery_date"]
        parts = [
            f"Tell the user that the expected delivery date for order number "
            f"{state['order_ID']} is {state['updated_delivery_date']}."
        ]
        out = await _stub({"is_late": True})
        state["is_late"] = out["is_late"]
        if state["is_late"] is True:
            parts.append("Apologize to the customer for the delay in receiving their order.")
        answer = await model.complete(system, "\n".join(parts), history)
        text = str(answer["text"])
        history.append({"role": "assistant", "content": text})
        if state["num_turns"] > 5:
            node = "escalate_order"
        return text


async def minimal_hub_turn(user: str) -> str:
    """The hub30 turn as a plain loop (30 gates, set/run/if/template, one tool action)."""
    state: dict[str, Any] = {"ref": "CASE-7", "visits": 0, "status": None, "note": None}
    history: list[dict[str, Any]] = [{"role": "user", "content": user}]
    k = HUB_SIZE - 1
    model = _MiniModel(
        [{"tool": f"go_{k}"}, {"tool": f"note_{k}", "args": {"text": "x"}}, {"text": "Done."}]
    )
    system = "You route support requests. Be brief."
    prompt = f"Route case {state['ref']} to the right area."
    if state["visits"] > 100:
        prompt += "\nThis customer has been here often."
    tools = [f"go_{i}" for i in range(HUB_SIZE) if state["visits"] < 1000000]
    answer = await model.complete(system, prompt, history)
    assert answer["tool"] in tools
    history.append({"role": "assistant", "tool": answer["tool"]})
    while True:
        state["visits"] += 1
        out = await _stub({"status": "late"})
        state["status"] = out["status"]
        parts = [f"Help with area {k}. The case status is {state['status']}."]
        if state["status"] == "late":
            parts.append("Apologize for the delay.")
        parts.append(f"Use note_{k} to record the outcome.")
        answer = await model.complete(system, "\n".join(parts), history)
        if "tool" in answer:
            out = await _stub({"saved": "yes"})
            state["note"] = out["saved"]
            history.append({"role": "tool", "content": json.dumps(out)})
            continue
        history.append({"role": "assistant", "content": answer["text"]})
        return str(answer["text"])


def time_minimal(turn: Callable[[str], Awaitable[str]], *, repeat: int, number: int) -> float:
    async def batch() -> float:
        start = time.perf_counter()
        for _ in range(number):
            await turn("hello")
        return (time.perf_counter() - start) / number

    loop = asyncio.new_event_loop()
    try:
        return min(loop.run_until_complete(batch()) for _ in range(repeat))
    finally:
        loop.close()


# ---------------------------------------------------------------------- seed_tool: issue 10's turn

TOOL_REASONING = """\
        actions:
            notify: @actions.send_update
                with message=...
"""
TOOL_ACTION = """\
    actions:
        send_update:
            description: "Send the customer an update"
            target: "flow://Send_Update"
            inputs:
                message: string
            outputs:
                sent: boolean
"""


def tool_agent_text() -> str:
    """Seed 002 with a model-called action in Order_Management."""
    text = SEED_AGENT.read_text(encoding="utf-8")
    text = text.replace("    after_reasoning:\n", TOOL_REASONING + "    after_reasoning:\n", 1)
    return text.replace(
        "    actions:\n        get_delivery_date:", TOOL_ACTION + "        get_delivery_date:", 1
    )


TOOL_MOVES = [
    Move(calls=[("go_to_orders", {})]),
    Move(calls=[("notify", {"message": "Your order is late; it arrives February 10."})]),
    Move(text="Your order 1234 arrives February 10, 2026. Sorry for the delay."),
]
TOOL_USER = "Where is my order?"
TOOL_VARIABLES = {"order_ID": "1234", "num_turns": 2}


def get_delivery_date(order_ID: str) -> dict[str, Any]:
    return {"delivery_date": "February 10, 2026"}


def check_if_late(order_ID: str, delivery_date: str) -> dict[str, Any]:
    return {"is_late": True}


def send_update(message: str) -> dict[str, Any]:
    return {"sent": True}


async def aget_delivery_date(order_ID: str) -> dict[str, Any]:
    return {"delivery_date": "February 10, 2026"}


async def acheck_if_late(order_ID: str, delivery_date: str) -> dict[str, Any]:
    return {"is_late": True}


async def asend_update(message: str) -> dict[str, Any]:
    return {"sent": True}


SYNC_ACTIONS = {
    "get_delivery_date": get_delivery_date,
    "check_if_late": check_if_late,
    "send_update": send_update,
}
ASYNC_ACTIONS = {
    "get_delivery_date": aget_delivery_date,
    "check_if_late": acheck_if_late,
    "send_update": asend_update,
}
TOOL_STUBS = {
    "get_delivery_date": {"outputs": {"delivery_date": "February 10, 2026"}},
    "check_if_late": {"outputs": {"is_late": True}},
    "send_update": {"outputs": {"sent": True}},
}


@dataclass
class ToolVariant:
    name: str
    actions: dict[str, Any] | None  # None: stubs
    isolation: Isolation = Isolation.THREAD


TOOL_VARIANTS = [
    ToolVariant("stubs", None),
    ToolVariant("sync callables", SYNC_ACTIONS),
    ToolVariant("async callables", ASYNC_ACTIONS),
    ToolVariant("sync, inline mode", SYNC_ACTIONS, Isolation.INLINE),
]


def tool_agent(folder: Path, isolation: Isolation = Isolation.THREAD) -> Agent:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "seed_tool.agent"
    if not path.exists():
        path.write_text(tool_agent_text(), encoding="utf-8")
    agent = agentscript.load(path)
    assert isinstance(agent, Agent)
    agent.action_settings = ActionSettings(isolation=isolation)
    return agent


def tool_session(agent: Agent, actions: dict[str, Any] | None) -> tuple[Session, ScriptedModel]:
    from agentscript.actions.registry import StubBook

    model = ScriptedModel()
    stubs = StubBook.from_data(TOOL_STUBS) if actions is None else None
    session = agent.session(model=model, variables=TOOL_VARIABLES, actions=actions, stubs=stubs)
    return session, model


def tool_sessions(agent: Agent, actions: dict[str, Any] | None, number: int) -> list[Session]:
    sessions = []
    for _ in range(number):
        session, model = tool_session(agent, actions)
        model.begin_turn(TOOL_MOVES)
        sessions.append(session)
    return sessions


def check_tool_turn(agent: Agent, actions: dict[str, Any] | None) -> None:
    session, model = tool_session(agent, actions)
    model.begin_turn(TOOL_MOVES)
    reply = session.send(TOOL_USER)
    steps = reply.trace["planTrace"]["steps"]
    shape = (
        sum(s["type"] == "LLM_STEP" for s in steps),
        sum(s["type"] == "ACTION_STEP" and s["source"] == "llm" for s in steps),
        sum(s["type"] == "ACTION_STEP" and s["source"] != "llm" for s in steps),
    )
    if reply.error is not None or shape != (3, 1, 4):
        raise SystemExit(f"seed_tool: unexpected turn {shape} (llm, tool, run): {reply.error}")


def time_tool_async(
    agent: Agent, actions: dict[str, Any] | None, *, repeat: int, number: int
) -> float:
    loop = asyncio.new_event_loop()
    try:
        return min(
            loop.run_until_complete(first_turns(tool_sessions(agent, actions, number), TOOL_USER))
            for _ in range(repeat)
        )
    finally:
        loop.close()


def time_tool_sync(
    agent: Agent, actions: dict[str, Any] | None, *, repeat: int, number: int
) -> float:
    best = float("inf")
    for _ in range(repeat):
        sessions = tool_sessions(agent, actions, number)
        start = time.perf_counter()
        for session in sessions:
            session.send(TOOL_USER)
        best = min(best, (time.perf_counter() - start) / number)
    return best


@dataclass
class LongSession:
    at: dict[int, float]  # turn number -> median seconds of the turns around it, all sessions
    trace_bytes: dict[int, int]  # turn number -> bytes of that turn's trace (json.dumps)


def time_long_tool_session(agent: Agent, *, turns: int = 100, sessions: int = 5) -> LongSession:
    """Per-turn cost and trace size along one ``turns``-turn session (the history grows).

    Each mark's cost is the median over every session of the five turns from the mark on
    (the last five for the last mark): one turn's best time hid a cost growing with the
    history once (turn 1's cold caches made turn 100 look cheaper)."""
    marks = [1, 10, turns]
    windows = {
        mark: range(mark, mark + 5) if mark + 4 <= turns else range(turns - 4, turns + 1)
        for mark in marks
    }
    times: dict[int, list[float]] = {mark: [] for mark in marks}
    sizes: dict[int, int] = {}

    async def one() -> None:
        session, model = tool_session(agent, SYNC_ACTIONS)
        initial = dict(session.state.variables)
        for number in range(1, turns + 1):
            model.begin_turn(TOOL_MOVES)
            session.state.current_node = None  # same path every turn; only the history grows
            session.state.variables.update(initial)
            start = time.perf_counter()
            reply = await session.send_async(TOOL_USER)
            elapsed = time.perf_counter() - start
            if reply.error is not None:
                raise SystemExit(f"seed_tool: long-session turn {number} failed: {reply.error}")
            for mark, window in windows.items():
                if number in window:
                    times[mark].append(elapsed)
            if number in times:
                sizes[number] = len(json.dumps(reply.trace))

    loop = asyncio.new_event_loop()
    try:
        for _ in range(sessions):
            loop.run_until_complete(one())
    finally:
        loop.close()
    return LongSession({mark: statistics.median(values) for mark, values in times.items()}, sizes)


def idle_session_bytes(agent: Agent, *, number: int = 200) -> tuple[float, float]:
    """Bytes held per session: just created, and after one turn (tracemalloc, no trace dir)."""
    sessions: list[Session] = []
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(number):
            sessions.append(tool_session(agent, SYNC_ACTIONS)[0])
        created = (tracemalloc.get_traced_memory()[0] - before) / number
        for session in sessions:
            assert isinstance(session.model, ScriptedModel)
            session.model.begin_turn(TOOL_MOVES)
            session.send(TOOL_USER)
        after_turn = (tracemalloc.get_traced_memory()[0] - before) / number
    finally:
        tracemalloc.stop()
    return created, after_turn


def report_tool_turn(folder: Path, *, repeat: int, number: int, profile_it: bool) -> None:
    print("seed_tool: seed002 + one model-called action (3 LLM calls, 1 tool, 4 runs)")
    print(f"{'actions':<20} {'API':<11} {'µs/turn':>9}")
    # Interleaved: every round measures one batch of each variant, so a change in the machine's
    # load hits all of them; each keeps its best batch.
    runs: list[tuple[str, str, Agent, dict[str, Any] | None]] = []
    for variant in TOOL_VARIANTS:
        agent = tool_agent(
            folder / variant.name.replace(" ", "_").replace(",", ""), variant.isolation
        )
        check_tool_turn(agent, variant.actions)
        runs.append((variant.name, "send_async", agent, variant.actions))
    agent = tool_agent(folder / "sync_send")
    runs.append(("sync callables", "send", agent, SYNC_ACTIONS))
    best: dict[tuple[str, str], float] = {}
    for _ in range(repeat):
        for name, api, run_agent, actions in runs:
            timer = time_tool_async if api == "send_async" else time_tool_sync
            seconds = timer(run_agent, actions, repeat=1, number=number)
            best[name, api] = min(best.get((name, api), float("inf")), seconds)
    for (name, api), seconds in best.items():
        print(f"{name:<20} {api:<11} {seconds * 1e6:>9.1f}")
    sync = best["sync callables", "send"]
    print(f"send ÷ send_async (sync callables): {sync / best['sync callables', 'send_async']:.2f}")
    long = time_long_tool_session(agent, sessions=max(3, repeat))
    cells = ", ".join(
        f"turn {t}: {long.at[t] * 1e6:.1f} µs, {long.trace_bytes[t]:,} B" for t in sorted(long.at)
    )
    print(f"100-turn session (sync callables, send_async; median of 5 turns per mark): {cells}")
    print(
        f"turn 100 ÷ turn 1: time {long.at[100] / long.at[1]:.2f}, "
        f"trace bytes {long.trace_bytes[100] / long.trace_bytes[1]:.2f}"
    )
    created, after = idle_session_bytes(agent)
    print(f"idle session: {created:,.0f} B when created, {after:,.0f} B after one turn")
    if profile_it:
        sessions = tool_sessions(agent, SYNC_ACTIONS, number)
        loop = asyncio.new_event_loop()
        profiler = cProfile.Profile()
        try:
            profiler.enable()
            loop.run_until_complete(first_turns(sessions, TOOL_USER))
            profiler.disable()
        finally:
            loop.close()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(22)
        print(f"\n--- cProfile of {number} seed_tool turns, sync callables (by own time)")
        print(out.getvalue())


# ---------------------------------------------------------------------- report


def measure(
    scenario: Scenario,
    minimal: Callable[[str], Awaitable[str]],
    *,
    repeat: int,
    number: int,
) -> Result:
    iterations, trace = one_reply(scenario)
    turn = time_turns(scenario, repeat=repeat, number=number)
    dumps = best_of(lambda: json.dumps(trace), repeat=repeat, number=number)
    floor = time_minimal(minimal, repeat=repeat, number=number)
    long_turn = time_long_session(scenario, repeat=max(1, repeat // 2))
    return Result(scenario.name, iterations, turn, dumps, floor, long_turn)


def profile(scenario: Scenario, *, number: int) -> str:
    sessions = fresh_sessions(scenario, number)
    loop = asyncio.new_event_loop()
    profiler = cProfile.Profile()
    try:
        profiler.enable()
        loop.run_until_complete(first_turns(sessions, scenario.user))
        profiler.disable()
    finally:
        loop.close()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(18)
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (smoke run)")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of each agent")
    args = parser.parse_args(argv)
    repeat, number = (2, 20) if args.quick else (7, 200)
    print(machine())
    with tempfile.TemporaryDirectory() as folder:
        scenarios = [
            (seed_scenario(), minimal_seed_turn),
            (hub_scenario(Path(folder)), minimal_hub_turn),
        ]
        header = (
            f"{'agent':<9} {'iter/turn':>9} {'µs/turn':>9} {'µs/iter':>9} "
            f"{'dumps µs':>9} {'turn/dumps':>10} {'minimal µs':>10} {'turn/minimal':>12} "
            f"{'µs/turn@20':>10}"
        )
        print(header)
        for scenario, minimal in scenarios:
            r = measure(scenario, minimal, repeat=repeat, number=number)
            print(
                f"{r.name:<9} {r.iterations:>9} {r.turn * 1e6:>9.1f} "
                f"{r.per_iteration * 1e6:>9.1f} {r.dumps * 1e6:>9.1f} "
                f"{r.turn / r.dumps:>10.1f} {r.minimal * 1e6:>10.1f} "
                f"{r.turn / r.minimal:>12.1f} {r.long_turn * 1e6:>10.1f}"
            )
        if args.profile:
            for scenario, _ in scenarios:
                print(f"\n--- cProfile of {number} turns of {scenario.name} (by own time)")
                print(profile(scenario, number=number))
        report_tool_turn(Path(folder), repeat=repeat, number=number, profile_it=args.profile)
    print(
        f"(µs/turn: first turn of a fresh session, best of {repeat} batches of {number}; "
        f"µs/turn@20: mean over a 20-turn session; dumps: json.dumps of one turn's trace; "
        f"minimal: a plain Python loop doing the same steps; e.g. {micro(1e-4)} = 0.1 ms)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
