"""``agentscript test``: read specs, run their cases, report, and return the exit code.

Exit codes (``agentscript.commands.ExitCode``): ``OK`` every case passed; ``FAILED`` a case
failed an expectation (judged ones only with ``judge_blocking``) or could not run (unless
``fail_on_assertion`` is off: then only cases that could not run give ``FAILED``), or
``mutate`` was asked for a suite that does not pass on the unmutated agent (or on an unmutated
copy of it in a temporary folder); ``USAGE`` bad usage
or a bad spec (the message names the file and line). A spec that is legal but checks
(nearly) nothing gets a ``warning:`` line on the error stream (:func:`weak_checks`).
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentscript.commands import ExitCode
from agentscript.engine.session import AgentBase
from agentscript.models.base import Model, ModelError
from agentscript.testing import coverage as agent_coverage
from agentscript.testing.discovery import AgentCache, bind_to_agent, collect, shown_path
from agentscript.testing.errors import NotASpec, SpecError
from agentscript.testing.judge import JudgeSettings
from agentscript.testing.mutation import UnmutatedCopyFails
from agentscript.testing.readers import read_spec
from agentscript.testing.replay import ReplayStore
from agentscript.testing.reporters import REPORTERS, SUFFIXES
from agentscript.testing.reporters.escaping import terminal_text
from agentscript.testing.results import CaseResult, RunResult, Status
from agentscript.testing.runner import CaseRunner, RunOptions
from agentscript.testing.spec import Check, CheckKind, MatchRule, Suite


@dataclass
class TestOptions:
    paths: list[Path] = field(default_factory=list)
    agent: Path | None = None
    model: Model | None = None
    judge_model: Model | None = None
    result_format: str = "human"
    output_dir: Path | None = None
    jobs: int = 1
    fail_fast: bool = False
    pattern: str | None = None
    verbose: bool = False
    match_rule: MatchRule | None = None
    judge_runs: int = 1
    judge_threshold: float = 0.6
    judge_blocking: bool = False
    record: bool = False
    refresh_stale: bool = False
    update_snapshots: bool = False
    fail_on_assertion: bool = True
    coverage: bool = False  # print the agent coverage table
    coverage_json: Path | None = None
    coverage_html: Path | None = None
    fail_under: float | None = None  # exit 1 when an agent's coverage is below this percent
    mutate: bool = False  # mutation testing of each tested agent
    base: Path = field(default_factory=Path.cwd)


def replay_path(spec: Path) -> Path:
    return spec.with_name(spec.name + ".replay.json")


def selected(result_case: str, utterances: list[str], pattern: str | None) -> bool:
    if not pattern:
        return True
    texts = [result_case, *utterances]
    glob = pattern if any(c in pattern for c in "*?[") else f"*{pattern}*"
    return any(fnmatch.fnmatch(t.lower(), glob.lower()) for t in texts)


async def run_suites(
    suites: list[Suite],
    agents: AgentCache,
    options: TestOptions,
    steps: dict[int, tuple[AgentBase, list[dict[str, Any]]]] | None = None,
    *,
    read_only: bool = False,
) -> RunResult:
    """Run every selected case; ``steps`` (when given) collects each agent's trace steps.

    ``read_only`` reads the recordings and snapshots but never writes them (mutation runs: a
    mutant's answers must not land in the real spec's recording, nor its instructions become
    a snapshot; a snapshot missing then fails its check)."""
    run = RunResult(judged_blocking=options.judge_blocking)
    started = time.perf_counter()
    run_options = RunOptions(
        model=options.model,
        judge_model=options.judge_model,
        judge=JudgeSettings(threshold=options.judge_threshold, runs=options.judge_runs),
        match_rule=options.match_rule,
        record=options.record,
        refresh_stale=options.refresh_stale,
        update_snapshots=options.update_snapshots,
        write_snapshots=not read_only,
    )
    # Every recording is opened before the first case runs, so a damaged one stops the run
    # before anything was asked of a live model (and paid for).
    stores = [
        ReplayStore.open(
            replay_path(suite.path), record=options.record, refresh_stale=options.refresh_stale
        )
        for suite in suites
    ]
    gate = asyncio.Semaphore(max(1, options.jobs))
    stop = False
    for suite, store in zip(suites, stores, strict=True):
        agent = agents.for_suite(suite, options.agent)
        runner = CaseRunner(agent, suite, store, run_options)
        numbered = [
            (n, c)
            for n, c in enumerate(suite.cases, start=1)
            if selected(c.name, [t.utterance for t in c.turns], options.pattern)
        ]

        async def one(number: int, case: object, runner: CaseRunner = runner) -> CaseResult:
            async with gate:
                return await runner.run(case, number)  # type: ignore[arg-type]

        try:
            if options.fail_fast:
                results = []
                for number, case in numbered:
                    results.append(await one(number, case))
                    status = results[-1].status(judged_blocking=options.judge_blocking)
                    if status is not Status.PASS:
                        stop = True
                        break
            else:
                results = list(await asyncio.gather(*(one(n, c) for n, c in numbered)))
        except BaseException:
            # A spec error mid-suite or Ctrl-C: the answers recorded so far were paid for,
            # keep them; the original error is the one to report.
            if not read_only:
                with contextlib.suppress(SpecError):
                    store.save()
            raise
        if not read_only:
            store.save()
        run.cases += results
        if steps is not None:
            _, collected = steps.setdefault(id(agent), (agent, []))
            collected += [s for r in results for t in r.turns for s in t.steps]
        run.stale.update(store.stale)
        run.refreshed.update(store.refreshed)
        if stop:
            break
    run.duration_ms = (time.perf_counter() - started) * 1000
    return run


def test_command(
    options: TestOptions, echo: Callable[[str], None], error: Callable[[str], None]
) -> ExitCode:
    if options.result_format not in REPORTERS:
        error(f"unknown result format {options.result_format!r}; use {', '.join(REPORTERS)}")
        return ExitCode.USAGE
    problem = _output_problem(options)
    if problem is not None:
        # Found before any case runs: a run (maybe paid for) must not end unable to write.
        error(terminal_text(problem))
        return ExitCode.USAGE
    try:
        base = options.agent.parent if options.agent else options.base
        files = collect(options.paths, base)
        if not files:
            error("no spec files found (give PATH, or put specs in specs/, tests/ or eval/)")
            return ExitCode.USAGE
        suites = []
        for path, explicit in files:
            try:
                suites.append(read_spec(path))
            except NotASpec:
                if explicit:
                    raise
        if not suites:
            error("no spec files found among the given paths")
            return ExitCode.USAGE
        has_cases = any(suite.cases for suite in suites)
        if options.pattern and has_cases and not _any_selected(suites, options.pattern):
            # A typo in -k would otherwise run nothing and pass CI.
            error(
                terminal_text(f"-k {options.pattern!r} matches no test case (names and utterances)")
            )
            return ExitCode.USAGE
        agents = AgentCache()
        for suite in suites:
            bind_to_agent(suite, agents.for_suite(suite, options.agent))
            for warning in weak_checks(suite, options.match_rule):
                error(terminal_text(f"warning: {warning}"))
        steps: dict[int, tuple[AgentBase, list[dict[str, Any]]]] = {}
        run = asyncio.run(run_suites(suites, agents, options, steps))
    except (SpecError, ModelError) as exc:
        # Messages quote spec text; keep its control characters off the terminal.
        error(terminal_text(str(exc)))
        return ExitCode.USAGE
    text = REPORTERS[options.result_format](run, options.verbose)
    echo(text)
    try:
        below = _report_coverage(options, steps, echo, error)
        unmutated_fails = False
        if options.mutate:
            out = echo if options.result_format == "human" else error
            for agent_path, group in _by_agent(suites, agents, options).items():
                failing = _not_passing(run, group)
                if failing:
                    # Every mutant would "fail the suite": a score of 100% that means nothing.
                    error(
                        terminal_text(
                            f"mutation testing of {shown_path(agent_path)} not run: {failing} "
                            "case(s) do not pass on the unmutated agent, so every mutant would "
                            "count as killed; make the suite pass first"
                        )
                    )
                    unmutated_fails = True
                    continue
                try:
                    out(asyncio.run(_mutation_run(agent_path, group, options)))
                except UnmutatedCopyFails as exc:
                    error(
                        terminal_text(
                            f"mutation testing of {shown_path(agent_path)} not run: {exc}"
                        )
                    )
                    unmutated_fails = True
        if options.output_dir is not None:
            suffix = SUFFIXES[options.result_format]
            _write(options.output_dir / f"test-result.{suffix}", text, "--output-dir")
    except (_OutputError, SpecError) as exc:
        error(terminal_text(str(exc)))
        return ExitCode.USAGE
    counts = run.counts()
    if below or unmutated_fails:
        return ExitCode.FAILED
    if counts[Status.ERROR]:
        return ExitCode.FAILED
    if counts[Status.FAILURE] and options.fail_on_assertion:
        return ExitCode.FAILED
    return ExitCode.OK


def weak_checks(suite: Suite, override: MatchRule | None) -> list[str]:
    """What in ``suite`` checks (nearly) nothing, one warning each, naming the file (and line
    when the check has one) and the case: a case with no expectation (it fails only when a turn
    errs), and each check that holds whatever the agent does (:func:`_holds_always`). Warnings,
    not errors: such a spec is legal in every format, and users run the spec files they have."""
    warnings: list[str] = []
    for case in suite.cases:
        at = f"{suite.path}:{case.line}" if case.line else str(suite.path)
        if not case.all_checks:
            warnings.append(f"{at}: case {case.name!r} has no expectation; add one")
        placed: list[tuple[int | None, Check]] = [
            (n, c) for n, t in enumerate(case.turns, start=1) for c in t.checks
        ]
        placed += [(None, c) for c in case.final_checks]
        for turn, check in placed:
            rule = override or suite.match_rule or MatchRule.EXACT
            if check.kind is CheckKind.ACTIONS:
                rule = check.params.get("rule") or rule
            for name, why in _holds_always(check, rule):
                where = f"{suite.path}:{check.line}" if check.line else at
                # A check without a line of its own (a conversation file's expect:) is found by
                # its turn.
                which = f"case {case.name!r}" + (
                    f", turn {turn}" if not check.line and turn else ""
                )
                warnings.append(f"{where}: {which}: {name}: {why}")
    return warnings


_EMPTY_TEXT_OPERATORS = ("contains", "startswith", "endswith")


def _holds_always(check: Check, rule: MatchRule) -> list[tuple[str, str]]:
    """Each part of ``check`` that no turn can fail, as (the name shown, why and the fix).

    An empty expected action list only under ``subset`` and ``in_order`` (under ``exact`` or
    ``superset`` it says "no action ran", a real check). The white-box checks and custom
    string comparisons below still fail when nothing is there to look at (no LLM call, the
    action did not run, the path matches nothing), so the warning says what is left."""
    params, name = check.params, check.label or check.name
    kind = check.kind
    if kind is CheckKind.ACTIONS:
        if not check.expected and rule in (MatchRule.SUBSET, MatchRule.IN_ORDER):
            return [
                (
                    name,
                    f"an empty action list under rule {rule.value} holds whatever runs; "
                    "list the actions, or use exact to mean none",
                )
            ]
        return []
    if kind is CheckKind.STRING:
        operator, expected = params.get("operator"), params.get("expected")
        if operator in _EMPTY_TEXT_OPERATORS and isinstance(expected, str) and not expected:
            return [
                (
                    name,
                    f"{operator} an empty text holds for any value (it fails only when "
                    "'actual' matches nothing); give the expected text",
                )
            ]
        return []
    if kind is CheckKind.MANTLE:
        if check.name == "bot_uttered" and str(params.get("text_matches", "")) == "":
            return [(name, "an empty text_matches holds for any reply; give what must be said")]
        return []
    if kind is CheckKind.EXPECT and isinstance(check.expected, dict):
        return _expect_holds_always(check.expected)
    if kind is CheckKind.WHITEBOX:
        return _whitebox_holds_always(check.name, params)
    return []


def _expect_holds_always(spec: dict[str, Any]) -> list[tuple[str, str]]:
    found = []
    if "response_contains" in spec and str(spec["response_contains"]) == "":
        found.append(
            ("expect.response_contains", "an empty text holds for any reply; give the text")
        )
    if "variables" in spec and not spec["variables"]:
        found.append(
            ("expect.variables", "an empty mapping holds whatever the variables are; list some")
        )
    if spec.get("error") == "":
        found.append(
            (
                "expect.error",
                "an empty text holds whether or not the turn fails (and excuses its error); "
                "use true, false, or a text the error contains",
            )
        )
    return found


def _whitebox_holds_always(kind: str, params: dict[str, Any]) -> list[tuple[str, str]]:
    if kind == "instructions_contain" and params.get("text") == "":
        why = "an empty text is in any instructions (it checks only that an LLM call was made)"
        return [(kind, why + "; give the text")]
    if kind in ("tools_offered", "tools_hidden") and not params.get("tools"):
        why = "an empty tool list holds at any LLM call (it checks only that one was made)"
        return [(kind, why + "; list the tools")]
    if kind in ("variables_before", "variables_after") and not params:
        return [(kind, "an empty mapping holds whatever the variables are; list some")]
    if kind == "action_variables" and not (params.get("before") or params.get("after")):
        why = f"without before or after it checks only that {params.get('action')!r} ran"
        return [(kind, why + "; give before or after")]
    return []


def _any_selected(suites: list[Suite], pattern: str) -> bool:
    return any(
        selected(case.name, [t.utterance for t in case.turns], pattern)
        for suite in suites
        for case in suite.cases
    )


def _output_problem(options: TestOptions) -> str | None:
    """Why an output path cannot be written, or None; the output folder is created here."""
    if options.output_dir is not None:
        folder = options.output_dir
        if folder.exists() and not folder.is_dir():
            return f"--output-dir {folder}: exists and is not a folder"
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return f"--output-dir {folder}: cannot create the folder: {exc.strerror or exc}"
    for flag, file in (
        ("--coverage-json", options.coverage_json),
        ("--coverage-html", options.coverage_html),
    ):
        if file is None:
            continue
        if file.is_dir():
            return f"{flag} {file}: is a folder; give a file name"
        parent = file.parent
        if not parent.is_dir():
            return f"{flag} {file}: the folder {parent} does not exist; create it first"
    return None


class _OutputError(Exception):
    """An output file could not be written after the run (e.g. no permission)."""


def _write(path: Path, text: str, flag: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise _OutputError(f"{flag} {path}: cannot write: {exc.strerror or exc}") from None


def _report_coverage(
    options: TestOptions,
    steps: dict[int, tuple[AgentBase, list[dict[str, Any]]]],
    echo: Callable[[str], None],
    error: Callable[[str], None],
) -> bool:
    """Print/write agent coverage as asked; True when some agent is under ``fail_under``."""
    wanted = options.coverage or options.coverage_json or options.coverage_html
    if not wanted and options.fail_under is None:
        return False
    measured = [agent_coverage.measure(agent, found) for agent, found in steps.values()]
    if options.coverage or options.fail_under is not None:
        # To stderr when the result itself is machine-readable on stdout.
        out = echo if options.result_format == "human" else error
        for cov in measured:
            out(agent_coverage.render_table(cov))
    if options.coverage_json is not None:
        _write(options.coverage_json, agent_coverage.render_json(measured), "--coverage-json")
    if options.coverage_html is not None:
        _write(options.coverage_html, agent_coverage.render_html(measured), "--coverage-html")
    if options.fail_under is None:
        return False
    low = [c for c in measured if c.percent < options.fail_under]
    for cov in low:
        error(
            f"coverage of {cov.agent} is {cov.percent:.1f}%, under --fail-under "
            f"{options.fail_under:g}%"
        )
    return bool(low)


def _by_agent(
    suites: list[Suite], agents: AgentCache, options: TestOptions
) -> dict[Path, list[Suite]]:
    groups: dict[Path, list[Suite]] = {}
    for suite in suites:
        agent = agents.for_suite(suite, options.agent)
        if agent.path is not None:
            groups.setdefault(agent.path.resolve(), []).append(suite)
    return groups


def _not_passing(run: RunResult, suites: list[Suite]) -> int:
    """How many of ``suites``' cases did not pass in ``run`` (as the exit code counts them)."""
    paths = {str(suite.path) for suite in suites}
    return sum(
        1
        for case in run.cases
        if case.spec_path in paths
        and case.status(judged_blocking=run.judged_blocking) is not Status.PASS
    )


async def _mutation_run(agent_path: Path, suites: list[Suite], options: TestOptions) -> str:
    from dataclasses import replace

    from agentscript.testing import mutation

    if agent_path.is_dir():
        mutants = mutation.mantle_mutants(agent_path)
    else:
        mutants = mutation.script_mutants(agent_path)
    quiet = replace(
        options, record=False, refresh_stale=False, update_snapshots=False, fail_fast=True
    )

    async def suite_fails(mutant_path: Path) -> bool:
        cache = AgentCache()
        try:
            cache.load(mutant_path, suites[0].path)
        except SpecError:
            raise mutation.invalid() from None
        run = await run_suites(suites, cache, replace(quiet, agent=mutant_path), read_only=True)
        return run.failed

    await mutation.run_mutants(agent_path, mutants, suite_fails)
    return mutation.render(str(shown_path(agent_path)), mutants)
