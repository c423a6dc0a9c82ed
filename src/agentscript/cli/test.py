"""``agentscript test [PATH...]``: run test specs (Salesforce A/B/C and the metadata XML, Mantle
evaluation scenarios, conversation files) against the local agent (the logic is in
:mod:`agentscript.testing.command`)."""

from __future__ import annotations

from pathlib import Path

import click

from agentscript.cli.common import exit_with, interruptible
from agentscript.commands import ExitCode


@click.command("test")
@click.argument("paths", nargs=-1)
@click.option("--agent", "agent_path", default=None, help="The agent to test (.agent or project).")
@click.option("--model", "model_spec", default=None, help="Live model for the agent (record).")
@click.option("--judge", "judge_spec", default=None, help="Judge model (default: --model).")
@click.option("--base-url", default=None, help="Server URL for --model and --judge.")
@click.option(
    "--result-format",
    type=click.Choice(["human", "json", "junit", "tap"]),
    default="human",
    show_default=True,
)
@click.option("--output-dir", "-d", default=None, help="Also write the result to this folder.")
@click.option("-j", "jobs", type=click.IntRange(1, 64), default=1, help="Cases run at once.")
@click.option("--fail-fast", is_flag=True, help="Stop after the first case that does not pass.")
@click.option("-k", "pattern", default=None, help="Only cases whose name or utterance match.")
@click.option("--verbose", is_flag=True, help="Show every expectation and the generated data.")
@click.option(
    "--action-match",
    type=click.Choice(["exact", "in_order", "subset", "superset"]),
    default=None,
    help="How expected actions are compared (default: the spec's, else exact).",
)
@click.option("--judge-runs", type=click.IntRange(1, 20), default=1, help="Judge k times.")
@click.option("--judge-threshold", type=click.FloatRange(0, 1), default=0.6, show_default=True)
@click.option("--judge-blocking", is_flag=True, help="Judged failures also fail the run.")
@click.option("--record", is_flag=True, help="Ask --model for every call and save the answers.")
@click.option("--refresh-stale", is_flag=True, help="Re-record only stale calls (with --model).")
@click.option("--update-snapshots", is_flag=True, help="Rewrite instruction snapshots.")
@click.option("--coverage", "show_coverage", is_flag=True, help="Print the agent coverage table.")
@click.option("--coverage-json", default=None, help="Write agent coverage as JSON to this file.")
@click.option("--coverage-html", default=None, help="Write agent coverage as HTML to this file.")
@click.option(
    "--fail-under", type=click.FloatRange(0, 100), default=None, help="Minimum coverage (%)."
)
@click.option("--mutate", is_flag=True, help="Mutation testing: does the suite catch edits?")
@click.option(
    "--no-fail-on-assertion",
    "no_fail_on_assertion",
    is_flag=True,
    help="Exit 0 when expectations fail (only cases that cannot run exit 1).",
)
@interruptible()
def test_cmd(
    paths: tuple[str, ...],
    agent_path: str | None,
    model_spec: str | None,
    judge_spec: str | None,
    base_url: str | None,
    result_format: str,
    output_dir: str | None,
    jobs: int,
    fail_fast: bool,
    pattern: str | None,
    verbose: bool,
    action_match: str | None,
    judge_runs: int,
    judge_threshold: float,
    judge_blocking: bool,
    record: bool,
    refresh_stale: bool,
    update_snapshots: bool,
    show_coverage: bool,
    coverage_json: str | None,
    coverage_html: str | None,
    fail_under: float | None,
    mutate: bool,
    no_fail_on_assertion: bool,
) -> None:
    """Run test specs (Salesforce A/B/C and XML, Mantle scenarios, conversation files)."""
    from agentscript.models.base import ModelError
    from agentscript.models.config import model_from_spec, resolve_model
    from agentscript.testing.command import TestOptions, test_command
    from agentscript.testing.spec import MatchRule

    try:
        model = resolve_model(model_spec, base_url=base_url) if model_spec else None
        judge = model_from_spec(judge_spec, base_url=base_url) if judge_spec else None
    except ModelError as exc:
        click.echo(str(exc), err=True)
        exit_with(ExitCode.USAGE)
    if (record or refresh_stale) and model is None:
        click.echo("--record and --refresh-stale need --model", err=True)
        exit_with(ExitCode.USAGE)
    options = TestOptions(
        paths=[Path(p) for p in paths],
        agent=Path(agent_path) if agent_path else None,
        model=model,
        judge_model=judge,
        result_format=result_format,
        output_dir=Path(output_dir) if output_dir else None,
        jobs=jobs,
        fail_fast=fail_fast,
        pattern=pattern,
        verbose=verbose,
        match_rule=MatchRule(action_match) if action_match else None,
        judge_runs=judge_runs,
        judge_threshold=judge_threshold,
        judge_blocking=judge_blocking,
        record=record,
        refresh_stale=refresh_stale,
        update_snapshots=update_snapshots,
        fail_on_assertion=not no_fail_on_assertion,
        coverage=show_coverage,
        coverage_json=Path(coverage_json) if coverage_json else None,
        coverage_html=Path(coverage_html) if coverage_html else None,
        fail_under=fail_under,
        mutate=mutate,
    )
    exit_with(
        test_command(
            options,
            lambda text: click.echo(text, nl=False),
            lambda text: click.echo(text, err=True),
        )
    )


__all__ = ["test_cmd"]
