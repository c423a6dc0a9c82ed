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

Usage: ``python bench/turn.py [--quick] [--profile]``.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import pstats
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import agentscript
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
    print(
        f"(µs/turn: first turn of a fresh session, best of {repeat} batches of {number}; "
        f"µs/turn@20: mean over a 20-turn session; dumps: json.dumps of one turn's trace; "
        f"minimal: a plain Python loop doing the same steps; e.g. {micro(1e-4)} = 0.1 ms)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
