"""The same turn in agentscript, LangGraph and the OpenAI Agents SDK, interleaved in one run.

The turn is ``bench/turn.py``'s ``seed_tool``: seed 002 (a router hands over to
Order_Management, which runs two deterministic actions before each model call and builds its
instructions from their outputs) plus one model-called action, so 3 model calls, 1 tool call,
2 instruction resolutions and 4 deterministic action calls, with actions as real Python
callables and an instant fake model. Each peer is written the way its documentation shows:

* LangGraph: a ``StateGraph`` over ``MessagesState`` (no checkpointer), a router node, an
  Order_Management node that runs the two actions and calls the model, a prebuilt ``ToolNode``
  for the model-called action, conditional edges; the model is ``GenericFakeChatModel``
  (langchain-core's scripted chat model), invoked with ``ainvoke``.
* OpenAI Agents SDK: a router ``Agent`` with a handoff to an Order_Management ``Agent`` whose
  dynamic ``instructions`` function runs the two actions (the SDK calls it before every model
  call), a ``function_tool``; the model is a ``Model`` subclass returning scripted output
  items; tracing disabled.

Rounds alternate the runtimes so load changes hit all of them; the report gives each
runtime's median µs per turn over the rounds and each peer's time divided by ours.

Dependencies: ``pip install -r bench/requirements.txt`` (``make bench`` does it; ``make test``
never needs them). Usage: ``python bench/peers.py [--quick]``.
"""

import argparse
import asyncio
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from agentscript.actions.settings import Isolation
from common import machine
from turn import (
    SYNC_ACTIONS,
    TOOL_USER,
    TOOL_VARIABLES,
    check_if_late,
    get_delivery_date,
    send_update,
    tool_agent,
    tool_sessions,
)

SYSTEM = "You are a helpful order support agent. Be brief."
ROUTER = "Route the customer's request. Use go_to_orders for anything about an order."
NOTE = "Your order is late; it arrives February 10."
ANSWER = "Your order 1234 arrives February 10, 2026. Sorry for the delay."

Turn = Callable[[], Awaitable[str]]


def order_instructions(state: dict[str, Any]) -> str:
    """Order_Management's resolution: the two deterministic actions, then the text."""
    state["num_turns"] += 1
    state["updated_delivery_date"] = get_delivery_date(state["order_ID"])["delivery_date"]
    parts = [
        f"Tell the user that the expected delivery date for order number {state['order_ID']} "
        f"is {state['updated_delivery_date']}."
    ]
    state["is_late"] = check_if_late(state["order_ID"], state["updated_delivery_date"])["is_late"]
    if state["is_late"] is True:
        parts.append("Apologize to the customer for the delay in receiving their order.")
    return "\n".join(parts)


# ---------------------------------------------------------------------- LangGraph


def langgraph_turn(*, chat_model: bool = True) -> Turn:
    """``chat_model``: the model is langchain-core's ``GenericFakeChatModel`` (what a LangGraph
    app calls: a chat model's ``ainvoke``); False: a bare ``async def`` returning the scripted
    messages, the cheapest fake possible (a lower bound for LangGraph's own cost)."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
    from langchain_core.tools import tool
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode

    class State(MessagesState):
        order_ID: str
        num_turns: int
        updated_delivery_date: str | None
        is_late: bool

    @tool
    def send_update_tool(message: str) -> dict[str, Any]:
        """Send the customer an update."""
        return send_update(message)

    script: list[AIMessage] = []
    model = GenericFakeChatModel(messages=iter(()))

    def answers() -> None:
        script[:] = [
            AIMessage("", tool_calls=[{"name": "go_to_orders", "args": {}, "id": "c1"}]),
            AIMessage(
                "", tool_calls=[{"name": "send_update_tool", "args": {"message": NOTE}, "id": "c2"}]
            ),
            AIMessage(ANSWER),
        ]
        model.messages = iter(script)

    async def ask(messages: list[Any]) -> Any:
        if chat_model:
            return await model.ainvoke(messages)
        return next(model.messages)

    async def router(state: State) -> dict[str, Any]:
        reply = await ask([SystemMessage(f"{SYSTEM}\n{ROUTER}"), *state["messages"]])
        assert isinstance(reply, AIMessage)
        done = [ToolMessage("Transferred.", tool_call_id=c["id"]) for c in reply.tool_calls]
        return {"messages": [reply, *done]}

    async def order_management(state: State) -> dict[str, Any]:
        values = {k: state[k] for k in ("order_ID", "num_turns")}  # type: ignore[literal-required]
        instructions = order_instructions(values)
        reply = await ask([SystemMessage(f"{SYSTEM}\n{instructions}"), *state["messages"]])
        return {"messages": [reply], **values}

    def after_router(state: State) -> str:
        last = state["messages"][-2] if len(state["messages"]) > 1 else state["messages"][-1]
        calls = getattr(last, "tool_calls", [])
        return "order_management" if calls and calls[0]["name"] == "go_to_orders" else END

    def after_order(state: State) -> str:
        last = state["messages"][-1]
        return "tools" if getattr(last, "tool_calls", None) else END

    graph = StateGraph(State)
    graph.add_node("router", router)
    graph.add_node("order_management", order_management)
    graph.add_node("tools", ToolNode([send_update_tool]))
    graph.add_edge(START, "router")
    graph.add_conditional_edges("router", after_router)
    graph.add_conditional_edges("order_management", after_order)
    graph.add_edge("tools", "order_management")
    app = graph.compile()

    async def turn() -> str:
        answers()
        result = await app.ainvoke(
            {"messages": [HumanMessage(TOOL_USER)], "order_ID": "1234", "num_turns": 2}
        )
        assert result["num_turns"] == 4, result["num_turns"]
        return str(result["messages"][-1].content)

    return turn


# ---------------------------------------------------------------------- OpenAI Agents SDK


def openai_agents_turn() -> Turn:
    from agents import Agent, RunConfig, RunContextWrapper, Runner, function_tool
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    def call(name: str, arguments: str, call_id: str) -> ResponseFunctionToolCall:
        return ResponseFunctionToolCall(
            type="function_call", name=name, arguments=arguments, call_id=call_id, id=call_id
        )

    def text(value: str) -> ResponseOutputMessage:
        return ResponseOutputMessage(
            id="m1",
            type="message",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text=value, annotations=[])],
        )

    class ScriptModel(Model):
        """Answers from a script, instantly."""

        def __init__(self) -> None:
            self.script: list[Any] = []

        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            return ModelResponse(output=[self.script.pop(0)], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    model = ScriptModel()

    @function_tool
    def send_update_tool(message: str) -> dict[str, Any]:
        """Send the customer an update."""
        return send_update(message)

    def instructions(context: RunContextWrapper[dict[str, Any]], agent: Any) -> str:
        return f"{SYSTEM}\n{order_instructions(context.context)}"

    orders = Agent[dict[str, Any]](
        name="Order_Management", instructions=instructions, tools=[send_update_tool], model=model
    )
    router = Agent[dict[str, Any]](
        name="router", instructions=f"{SYSTEM}\n{ROUTER}", handoffs=[orders], model=model
    )
    config = RunConfig(tracing_disabled=True)

    async def turn() -> str:
        model.script = [
            call("transfer_to_order_management", "{}", "c1"),
            call("send_update_tool", f'{{"message": "{NOTE}"}}', "c2"),
            text(ANSWER),
        ]
        state = dict(TOOL_VARIABLES)
        result = await Runner.run(router, TOOL_USER, context=state, run_config=config)
        assert state["num_turns"] == 4, state
        return str(result.final_output)

    return turn


# ---------------------------------------------------------------------- agentscript


def agentscript_turn(folder: Path, isolation: Isolation, number: int) -> Callable[[], Turn]:
    """A factory: each batch gets fresh sessions made outside the timing, like the peers'
    per-turn state (they start every turn from an empty history too)."""
    agent = tool_agent(folder, isolation)

    def batch() -> Turn:
        sessions = iter(tool_sessions(agent, SYNC_ACTIONS, number))

        async def turn() -> str:
            reply = await next(sessions).send_async(TOOL_USER)
            assert reply.error is None, reply.error
            return reply.text

        return turn

    return batch


async def time_batch(turn: Turn, number: int) -> tuple[float, float]:
    """Seconds per turn: wall clock, and CPU time of the process (every thread). On a loaded
    machine the wall clock includes waiting for a core after each thread hand-off; the CPU
    time is the work itself."""
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(number):
        answer = await turn()
    elapsed = (time.perf_counter() - start) / number
    used = (time.process_time() - cpu) / number
    if answer != ANSWER:
        raise SystemExit(f"a runtime answered {answer!r}")
    return elapsed, used


def handoff_round_trip(trips: int = 5000) -> float:
    """Seconds for one hand-off to another thread and back (two locks, no Python work): the
    floor under any thread-pool call on this machine, measured in the same run."""
    ask, answer = threading.Lock(), threading.Lock()
    ask.acquire()
    answer.acquire()

    def worker() -> None:
        for _ in range(trips):
            ask.acquire()
            answer.release()

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    start = time.perf_counter()
    for _ in range(trips):
        ask.release()
        answer.acquire()
    elapsed = (time.perf_counter() - start) / trips
    thread.join()
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (smoke run)")
    args = parser.parse_args(argv)
    rounds, number = (3, 20) if args.quick else (8, 200)
    try:
        peers = {
            "LangGraph": langgraph_turn(),
            "LangGraph (bare fake model)": langgraph_turn(chat_model=False),
            "OpenAI Agents SDK": openai_agents_turn(),
        }
    except ImportError as exc:
        print(f"peers not installed ({exc}): pip install -r bench/requirements.txt")
        return 2
    print(machine())
    times: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as folder:
        ours = {
            "agentscript (thread pool)": agentscript_turn(Path(folder), Isolation.THREAD, number),
            "agentscript (inline)": agentscript_turn(Path(folder), Isolation.INLINE, number),
        }
        loop = asyncio.new_event_loop()
        try:
            for turn in peers.values():  # warm up (imports, caches)
                loop.run_until_complete(time_batch(turn, 3))
            handoffs = []
            for _ in range(rounds):
                handoffs.append(handoff_round_trip(500 if args.quick else 5000))
                for name, batch in ours.items():
                    times.setdefault(name, []).append(
                        loop.run_until_complete(time_batch(batch(), number))
                    )
                for name, turn in peers.items():
                    times.setdefault(name, []).append(
                        loop.run_until_complete(time_batch(turn, number))
                    )
        finally:
            loop.close()
    wall = {name: statistics.median(v[0] for v in values) for name, values in times.items()}
    cpu = {name: statistics.median(v[1] for v in values) for name, values in times.items()}
    pool, inline = "agentscript (thread pool)", "agentscript (inline)"
    print(
        f"{'runtime':<28} {'wall µs':>9} {'÷ pool':>7} {'÷ inline':>9} "
        f"{'CPU µs':>9} {'÷ pool':>7} {'÷ inline':>9}"
    )
    for name in wall:
        print(
            f"{name:<28} {wall[name] * 1e6:>9.1f} {wall[name] / wall[pool]:>7.1f} "
            f"{wall[name] / wall[inline]:>9.1f} {cpu[name] * 1e6:>9.1f} "
            f"{cpu[name] / cpu[pool]:>7.1f} {cpu[name] / cpu[inline]:>9.1f}"
        )
    print(
        f"(median per turn over {rounds} interleaved rounds of {number} turns; 3 model calls, "
        "1 tool call, 4 deterministic actions per turn; instant fake models; real sync "
        "callables; ÷: the runtime's time divided by agentscript's)"
    )
    handoff = statistics.median(handoffs)
    print(
        f"thread hand-off and back (two locks, no work): {handoff * 1e6:.1f} µs median; the "
        f"thread pool makes 5 per turn, and costs {(wall[pool] - wall[inline]) * 1e6 / 5:.1f} µs "
        "per sync call more than inline"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
