"""The peer of ``agentscript serve`` in ``bench/serve.py``: seed 002 as a LangGraph server.

Built the way LangGraph's and FastAPI's documentation show, so that ``bench/serve.py`` can
measure it in the same run, through the same HTTP harness and against the same stand-in
model as ``agentscript serve``:

* a ``StateGraph`` over ``MessagesState`` plus the seed's variables: a router node whose
  ``ChatOpenAI`` (bound to the ``go_to_orders`` and ``go_to_escalation`` tools) picks the
  subagent; ``tools_condition`` and the prebuilt ``ToolNode`` run the transition tool it
  called; an edge on that tool's name leads to an Order_Management node that runs the two
  deterministic actions, builds its instructions from their outputs and calls the model:
  2 LLM calls a turn;
* the conversation persisted by LangGraph's own checkpointer, ``AsyncSqliteSaver`` (SQLite) or
  ``AsyncPostgresSaver`` over a psycopg connection pool (PostgreSQL), keyed by ``thread_id``;
* FastAPI routes with pydantic bodies, served by uvicorn (uvloop and httptools when present,
  as for agentscript).

The routes are the subset of agentscript's API the harness uses: ``POST
/v1/agents/{agent}/sessions``, ``POST /v1/sessions/{id}/messages``, ``GET /readyz`` and
``GET /v1/sessions/{id}/turns/{n}/trace``, which answers only the turn's LLM calls and the
time spent waiting for them (checkpointed in the graph's state: LangGraph has no per-turn
trace of its own).

Dependencies: ``pip install -r bench/requirements.txt``. Run by ``bench/serve.py --models
langgraph``; alone: ``python bench/langgraph_server.py --port 8002 --store sqlite:///lg.db
--base-url http://127.0.0.1:8001/v1``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from pydantic import BaseModel

SYSTEM = "You are a helpful order support agent. Be brief."
ROUTER = "Route the customer's request. Use go_to_orders for anything about an order."


def get_delivery_date(order_ID: str) -> dict[str, object]:
    return {"delivery_date": "February 10, 2026"}


def check_if_late(order_ID: str, delivery_date: str) -> dict[str, object]:
    return {"is_late": True}


@tool
def go_to_orders() -> str:
    """Order questions"""
    return "transferring to Order_Management"


@tool
def go_to_escalation() -> str:
    """The customer asks for a human"""
    return "transferring to escalate_order"


class State(MessagesState):
    order_ID: str
    num_turns: int
    updated_delivery_date: str
    is_late: bool
    # The turn's number, LLM calls and seconds spent waiting for them, checkpointed with the
    # rest so that any worker can answer the harness's ``trace`` route.
    turn: int
    llm_calls: int
    llm_seconds: float


async def timed(bound: Any, messages: list[Any]) -> tuple[AIMessage, float]:
    started = time.perf_counter()
    reply = await bound.ainvoke(messages)
    return reply, time.perf_counter() - started


def build_graph(model: ChatOpenAI, checkpointer: Any) -> Any:
    router_model = model.bind_tools([go_to_orders, go_to_escalation])

    async def router(state: State) -> dict[str, Any]:
        prompt = [SystemMessage(f"{SYSTEM}\n{ROUTER}"), *state["messages"]]
        reply, waited = await timed(router_model, prompt)
        return {
            "messages": [reply],
            "turn": state.get("turn", 0) + 1,
            "llm_calls": 1,
            "llm_seconds": waited,
        }

    def after_tools(state: State) -> str:
        last = state["messages"][-1]
        if isinstance(last, ToolMessage) and last.name == "go_to_orders":
            return "order_management"
        return END

    async def order_management(state: State) -> dict[str, Any]:
        date = get_delivery_date(state["order_ID"])["delivery_date"]
        parts = [
            f"Tell the user that the expected delivery date for order number {state['order_ID']} "
            f"is {date}."
        ]
        late = check_if_late(state["order_ID"], str(date))["is_late"]
        if late is True:
            parts.append("Apologize to the customer for the delay in receiving their order.")
        instructions = "\n".join(parts)
        prompt = [SystemMessage(f"{SYSTEM}\n{instructions}"), *state["messages"]]
        reply, waited = await timed(model, prompt)
        return {
            "messages": [reply],
            "num_turns": state.get("num_turns", 0) + 1,
            "updated_delivery_date": date,
            "is_late": late,
            "llm_calls": state["llm_calls"] + 1,
            "llm_seconds": state["llm_seconds"] + waited,
        }

    graph = StateGraph(State)
    graph.add_node("router", router)
    graph.add_node("tools", ToolNode([go_to_orders, go_to_escalation]))
    graph.add_node("order_management", order_management)
    graph.add_edge(START, "router")
    graph.add_conditional_edges("router", tools_condition)
    graph.add_conditional_edges("tools", after_tools)
    graph.add_edge("order_management", END)
    return graph.compile(checkpointer=checkpointer)


class NewSession(BaseModel):
    variables: dict[str, Any] = {}


class Message(BaseModel):
    text: str


@asynccontextmanager
async def checkpointer(store: str) -> AsyncIterator[Any]:
    if store.startswith("sqlite:///"):
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async with AsyncSqliteSaver.from_conn_string(store.removeprefix("sqlite:///")) as saver:
            yield saver
        return
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg.rows import dict_row
    from psycopg_pool import AsyncConnectionPool

    async with AsyncConnectionPool(
        store,
        max_size=64,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
    ) as pool:
        yield AsyncPostgresSaver(pool)  # type: ignore[arg-type]


async def migrate(store: str) -> None:
    """Create LangGraph's PostgreSQL tables once, before the workers start: workers that each
    ran ``setup()`` on a new database would race on creating them."""
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    async with AsyncPostgresSaver.from_conn_string(store) as saver:
        await saver.setup()


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    model = ChatOpenAI(
        model="gpt-standin",
        base_url=os.environ["LG_BENCH_BASE_URL"],
        api_key="bench",  # type: ignore[arg-type]
        max_retries=0,
    )
    async with checkpointer(os.environ["LG_BENCH_STORE"]) as saver:
        app.state.graph = build_graph(model, saver)
        yield


app = FastAPI(lifespan=lifespan)


@app.get("/readyz")
async def readyz() -> dict[str, str]:
    return {"status": "ready"}


@app.post("/v1/agents/{agent}/sessions", status_code=201)
async def new_session(agent: str, body: NewSession) -> dict[str, Any]:
    # A LangGraph thread exists once its first checkpoint is written: nothing to store yet.
    return {"session_id": uuid.uuid4().hex, "agent": agent, "messages": []}


@app.post("/v1/sessions/{thread}/messages")
async def message(thread: str, body: Message) -> dict[str, Any]:
    config = {"configurable": {"thread_id": thread}}
    result = await app.state.graph.ainvoke(
        {"messages": [HumanMessage(body.text)], "order_ID": "1234"}, config
    )
    return {"response": result["messages"][-1].content, "turn": result["turn"], "error": None}


@app.get("/v1/sessions/{thread}/turns/{turn}/trace")
async def trace(thread: str, turn: int) -> dict[str, Any]:
    """The latest turn's LLM calls and model wait (the harness asks for no other)."""
    state = await app.state.graph.aget_state({"configurable": {"thread_id": thread}})
    if state.values.get("turn") != turn:
        raise HTTPException(404, f"turn {turn} is not the latest of this thread")
    calls, seconds = state.values["llm_calls"], state.values["llm_seconds"]
    return {"usage": {"llm_calls": calls, "llm_ms": seconds * 1000}}


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--store", required=True, help="sqlite:///PATH or postgresql://...")
    parser.add_argument("--base-url", required=True, help="the OpenAI-compatible model server")
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    if not args.store.startswith("sqlite:///"):
        asyncio.run(migrate(args.store))
    os.environ["LG_BENCH_STORE"] = args.store
    os.environ["LG_BENCH_BASE_URL"] = args.base_url
    uvicorn.run(
        "langgraph_server:app",
        app_dir=os.path.dirname(os.path.abspath(__file__)),
        port=args.port,
        workers=args.workers,
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()
