"""`agentscript test` speed: a 200-case Salesforce spec (format A) replayed from recorded answers.

Setup (not timed): a copy of ``examples/order_status`` and a 200-case spec, each case
"Where is my order?" with its topic, action list and a JSONPath custom evaluation; every model
answer is recorded once through ``--record`` with an in-process stand-in model (no network).

Measured, best of N, in one run:

* *replay*: ``agentscript test`` on the spec (``test_command``: read the spec, find the agent by
  ``subjectName``, run each case in a fresh session from the recording, check every
  expectation, render the json result), i.e. what CI pays;
* *replay -j 2*: the same with two cases at once;
* *engine floor*: the same 200 conversations sent straight through ``session.send_async`` with
  the scripted model, nothing read, checked or reported: the reference the runner is read
  against.

Usage: ``python bench/test.py [--repeat N] [--cases N]``. Prints a markdown table. Nothing here
asserts a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import agentscript
from agentscript.actions.registry import StubBook
from agentscript.models.base import ModelRequest, ModelResponse, TextSink, ToolCall
from agentscript.models.scripted import Move
from agentscript.testing.command import TestOptions, test_command
from common import REPO, machine

CASE = """  - utterance: Where is my order? ({n})
    expectedTopic: Order_Management
    expectedActions: [go_to_orders, get_delivery_date, check_if_late]
    contextVariables: [{{name: Id, value: "{n}"}}]
    customEvaluations:
      - name: string_comparison
        parameters:
          - {{name: operator, value: equals, isReference: false}}
          - name: actual
            value: "$.generatedData.invokedActions[*][?(@.function.name == 'get_delivery_date')].function.input.order_ID"
            isReference: true
          - {{name: expected, value: "{n}", isReference: false}}
"""
HEADER = """name: Bench
subjectType: AGENT
subjectName: Order_Status
x-agentscript:
  actions:
    get_delivery_date: {outputs: {delivery_date: "February 10, 2026"}}
    check_if_late: {outputs: {is_late: true}}
testCases:
"""
STUBS = {
    "get_delivery_date": {"outputs": {"delivery_date": "February 10, 2026"}},
    "check_if_late": {"outputs": {"is_late": True}},
}


class StandIn:
    """The live model while recording: routes, then answers."""

    name = "stand-in"

    async def complete(
        self, request: ModelRequest, *, stream: TextSink | None = None
    ) -> ModelResponse:
        if request.node == "router":
            return ModelResponse(tool_calls=[ToolCall("c1", "go_to_orders", {})])
        return ModelResponse(text="It arrives February 10, 2026. Sorry for the delay.")


def run_command(spec: Path, jobs: int, **extra: object) -> float:
    options = TestOptions(paths=[spec], result_format="json", jobs=jobs, **extra)  # type: ignore[arg-type]
    sink: list[str] = []
    start = time.perf_counter()
    code = test_command(options, sink.append, sink.append)
    elapsed = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"the spec did not pass (exit {code}):\n{''.join(sink)[:2000]}")
    return elapsed


def engine_floor(agent_path: Path, cases: int) -> float:
    agent = agentscript.load(agent_path)
    moves = [Move(calls=[("go_to_orders", {})]), Move(text="It arrives February 10, 2026.")]

    async def play() -> None:
        for n in range(cases):
            model = agentscript.ScriptedModel(moves)
            session = agent.session(
                model=model, variables={"order_ID": str(n)}, stubs=StubBook.from_data(STUBS)
            )
            await session.send_async(f"Where is my order? ({n})")

    start = time.perf_counter()
    asyncio.run(play())
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--cases", type=int, default=200)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "order_status"
        shutil.copytree(REPO / "examples" / "order_status", folder)
        shutil.rmtree(folder / "specs")
        spec = folder / "bench-testSpec.yaml"
        spec.write_text(
            HEADER + "".join(CASE.format(n=n) for n in range(args.cases)), encoding="utf-8"
        )
        run_command(spec, 1, model=StandIn(), record=True)  # the recording, not timed
        rows = [
            ("replay", min(run_command(spec, 1) for _ in range(args.repeat))),
            ("replay -j 2", min(run_command(spec, 2) for _ in range(args.repeat))),
            (
                "engine floor",
                min(
                    engine_floor(folder / "order_status.agent", args.cases)
                    for _ in range(args.repeat)
                ),
            ),
        ]
    floor = rows[-1][1]
    print(f"{machine()}; {args.cases} cases, best of {args.repeat}\n")
    print("| run | seconds | cases/s | ÷ engine floor |")
    print("|---|---:|---:|---:|")
    for name, seconds in rows:
        print(f"| {name} | {seconds:.3f} | {args.cases / seconds:,.0f} | {seconds / floor:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
