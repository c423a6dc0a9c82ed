"""pytest plugin: spec files collected as pytest items, one per case.

Opt-in per project, so a ``tests/`` folder full of unrelated YAML is never touched: list the
spec files or folders in the ini option ``agentscript_specs`` (paths relative to the ini
file), e.g. in ``pyproject.toml``::

    [tool.pytest.ini_options]
    agentscript_specs = ["specs", "eval/scenarios"]

Each case runs like ``agentscript test`` runs it (scripted moves or recorded answers beside
the spec; no live model): a case that fails shows each failed expectation with expected and
actual; a spec that cannot be read is a collection error naming the file and line. A file in a
listed folder that is no spec at all (a JSON fixture, a Mantle ``memory.yml``) is skipped, as
``agentscript test FOLDER`` skips it; a file listed by itself must be a spec.
``--agentscript-agent PATH`` tests that agent instead of the one each spec names.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agentscript.testing.command import replay_path
from agentscript.testing.discovery import AgentCache, bind_to_agent
from agentscript.testing.errors import NotASpec, SpecError
from agentscript.testing.readers import is_spec_file, read_spec
from agentscript.testing.replay import ReplayStore
from agentscript.testing.results import CaseResult, Status
from agentscript.testing.runner import CaseRunner, RunOptions
from agentscript.testing.spec import Case, Suite

_AGENTS = pytest.StashKey[AgentCache]()
# The suites whose names were checked against their agent (once each, as `agentscript test` does).
_BOUND = pytest.StashKey[set[int]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("agentscript_specs", "spec files or folders run as tests", type="paths")
    parser.addoption("--agentscript-agent", default=None, help="the agent the specs test")


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_AGENTS] = AgentCache()
    config.stash[_BOUND] = set()


def _roots(config: pytest.Config) -> list[Path]:
    return [Path(p).resolve() for p in config.getini("agentscript_specs") or []]


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if not is_spec_file(file_path):
        return None
    resolved = file_path.resolve()
    roots = _roots(parent.config)
    if any(resolved == root or root in resolved.parents for root in roots):
        spec: SpecFile = SpecFile.from_parent(parent, path=file_path)
        return spec
    return None


class SpecFile(pytest.File):
    def collect(self) -> Any:
        try:
            suite = read_spec(self.path)
        except NotASpec as exc:
            if self.path.resolve() in _roots(self.config):
                raise self.CollectError(str(exc)) from None  # listed by itself: must be a spec
            # Found in a listed folder (a fixture, a memory.yml): skipped, as by the command.
            return
        except SpecError as exc:
            raise self.CollectError(str(exc)) from None
        for number, case in enumerate(suite.cases, start=1):
            yield SpecCase.from_parent(self, name=case.name, suite=suite, case=case, number=number)


class SpecCaseFailed(Exception):
    def __init__(self, result: CaseResult) -> None:
        self.result = result
        super().__init__(result.case)


class SpecCase(pytest.Item):
    def __init__(self, *, suite: Suite, case: Case, number: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.suite = suite
        self.case = case
        self.number = number

    def runtest(self) -> None:
        agents = self.config.stash[_AGENTS]
        override = self.config.getoption("--agentscript-agent")
        try:
            agent = agents.for_suite(self.suite, Path(override) if override else None)
            bound = self.config.stash[_BOUND]
            if id(self.suite) not in bound:
                bind_to_agent(self.suite, agent)  # a name the agent lacks is a spec error
                bound.add(id(self.suite))
        except SpecError as exc:
            raise SpecCaseFailed(_error_result(self.suite, self.case, str(exc))) from None
        try:
            # A damaged recording is a SpecError too: the case fails naming the file.
            store = ReplayStore.open(replay_path(self.suite.path))
            runner = CaseRunner(agent, self.suite, store, RunOptions())
            result = asyncio.run(runner.run(self.case, self.number))
        except SpecError as exc:  # found while running (e.g. a snapshot path that is a folder)
            raise SpecCaseFailed(_error_result(self.suite, self.case, str(exc))) from None
        if result.status() is not Status.PASS:
            raise SpecCaseFailed(result)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if not isinstance(excinfo.value, SpecCaseFailed):
            return str(super().repr_failure(excinfo))
        result = excinfo.value.result
        lines = [f"{self.suite.path} :: {result.case}"]
        if result.error:
            lines.append(f"  error: {result.error}")
        for v in result.verdicts:
            if not v.passed and not v.judged:
                at = f" (line {v.line})" if v.line else ""
                lines.append(f"  {v.name}{at}: expected {v.expected!r}, actual {v.actual!r}")
                if v.explanation:
                    lines.append(f"    {v.explanation}")
        return "\n".join(lines)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, (self.case.line or 1) - 1, f"{self.suite.name}::{self.case.name}"


def _error_result(suite: Suite, case: Case, message: str) -> CaseResult:
    result = CaseResult(suite.name, str(suite.path), case.name, 0)
    result.error = message
    return result
