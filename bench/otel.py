"""The cost of OpenTelemetry export per turn (``agentscript[otel]``), against the same turn
without it, measured in the same run.

Scenarios are ``bench/turn.py``'s (``seed002``, ``hub30``). Spans go to an in-memory exporter
through a ``SimpleSpanProcessor`` (each span exported as it ends, in the turn's thread), the
most expensive local setup: a ``BatchSpanProcessor`` with OTLP moves the export off the turn.
Two variants: attributes only (the default), and with content capture on (prompts, messages,
tool arguments and results serialised into attributes).

Usage: ``python bench/otel.py [--quick]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentscript.integrations.otel import Telemetry
from common import machine
from turn import Scenario, hub_scenario, seed_scenario, time_turns


def telemetry(*, content: bool) -> tuple[Telemetry, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Telemetry.for_provider(provider, capture_content=content), exporter


def measure(scenario: Scenario, *, repeat: int, number: int) -> tuple[float, float, float, int]:
    """Seconds per turn: without export, with export, with export and content; spans a turn."""
    scenario.agent.telemetry = None
    plain = time_turns(scenario, repeat=repeat, number=number)
    exported, exporter = telemetry(content=False)
    scenario.agent.telemetry = exported
    with_spans = time_turns(scenario, repeat=repeat, number=number)
    turns = repeat * number
    spans_per_turn = len(exporter.get_finished_spans()) // turns
    with_content_telemetry, _ = telemetry(content=True)
    scenario.agent.telemetry = with_content_telemetry
    with_content = time_turns(scenario, repeat=repeat, number=number)
    scenario.agent.telemetry = None
    return plain, with_spans, with_content, spans_per_turn


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args(argv)
    repeat, number = (3, 20) if args.quick else (7, 100)
    print(f"# bench/otel.py ({machine()})")
    print(f"best of {repeat} batches of {number} first turns\n")
    print("| agent | no export | spans | ratio | spans + content | ratio | spans/turn |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for scenario in (seed_scenario(), hub_scenario(Path(folder))):
            plain, spans, content, count = measure(scenario, repeat=repeat, number=number)
            print(
                f"| {scenario.name} | {plain * 1e6:.0f} µs | {spans * 1e6:.0f} µs | "
                f"{spans / plain:.2f}x | {content * 1e6:.0f} µs | {content / plain:.2f}x | "
                f"{count} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
