"""Runs cases: each in a fresh session, through the public API only.

For a case: start ``agent.session`` with the context variables (by variable name, by
``$Context.<name>``, or by the field a linked variable's ``source`` names); replay
``conversationHistory`` *scripted* (messages put into the saved session with ``to_json`` /
``restore``, the active subagent set from the last agent turn's ``topic``, no model call);
then send each turn with ``send_async``. The model is the scripted one when the turn has moves,
else a :class:`ReplayModel` (recorded answers, or the live ``--model`` when recording). Then
:mod:`.matchers` and :mod:`.judge` give the verdicts; a turn that ends in an error nothing expects
is a failed verdict (``turn_error``). A failure to run a case (bad variable, no
recorded answer, stale recording, a judge model that cannot answer) makes the case an ERROR
with the reason, never a traceback.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from agentscript.engine.session import AgentBase, Session
from agentscript.limits import Limits
from agentscript.models.base import Message, Model, ModelError, ModelRequest, ModelResponse
from agentscript.models.scripted import ScriptedModel
from agentscript.testing import matchers
from agentscript.testing.errors import SpecError
from agentscript.testing.faults import fault_function, fault_timeouts
from agentscript.testing.judge import JudgeKeys, JudgeSettings, judge
from agentscript.testing.replay import ReplayModel, ReplayStore
from agentscript.testing.results import Answers, CaseResult, TurnOutcome, Verdict
from agentscript.testing.spec import Case, Check, CheckKind, MatchRule, Suite, TurnSpec
from agentscript.testing.whitebox import check_whitebox

SIMULATOR_SYSTEM = (
    "You play a user talking to a customer-service agent. Stay in character as described "
    "below, write only your next message, short and natural. When your goal is reached or "
    "the conversation cannot go further, answer exactly ###STOP###.\n\n"
)
STOP = "###STOP###"


@dataclass
class RunOptions:
    model: Model | None = None  # live model of the agent (record / refresh / no recording)
    judge_model: Model | None = None
    judge: JudgeSettings = field(default_factory=JudgeSettings)
    match_rule: MatchRule | None = None  # --action-match: wins over the spec
    record: bool = False
    refresh_stale: bool = False
    update_snapshots: bool = False
    # Off for a mutant's run: a mutant's instructions must never become a snapshot.
    write_snapshots: bool = True


def _variables(agent: AgentBase, given: dict[str, Any]) -> dict[str, Any]:
    outline = getattr(agent, "outline", None)
    declared = getattr(outline, "variables", None)
    if declared is None:
        return dict(given)  # Mantle: memory names are taken as written
    by_source = {
        str(info.source).split(".")[-1]: name
        for name, info in declared.items()
        if getattr(info, "source", None)
    }
    values: dict[str, Any] = {}
    for raw, value in given.items():
        name = raw.removeprefix("$Context.")
        if name not in declared:
            name = by_source.get(name, name)
        if name not in declared:
            raise ValueError(f"context variable {raw!r} is not a variable of the agent")
        values[name] = value
    return values


def recording_keys(suite: Suite) -> dict[int, str]:
    """Each case's key in the recording (by ``id`` of the case): ``<suite>/<case name>``.

    Two cases may share a name (an NGT case's ``x-agentscript.name`` covers all its inputs); the
    second and later ones get `` #2``, `` #3``... so one case's answers never overwrite
    another's. The first keeps the plain key, so recordings of uniquely named cases (nearly
    all of them) stay valid."""
    names = {case.name for case in suite.cases}
    taken: set[str] = set()
    keys: dict[int, str] = {}
    for case in suite.cases:
        name = case.name
        if name in taken:
            n = 2
            while f"{case.name} #{n}" in taken or f"{case.name} #{n}" in names:
                n += 1
            name = f"{case.name} #{n}"
        taken.add(name)
        keys[id(case)] = f"{suite.name}/{name}"
    return keys


class CaseRunner:
    def __init__(self, agent: AgentBase, suite: Suite, store: ReplayStore, options: RunOptions):
        self.agent = agent
        self.suite = suite
        self.store = store
        self.options = options
        self.keys = recording_keys(suite)

    @property
    def rule(self) -> MatchRule:
        return self.options.match_rule or self.suite.match_rule or MatchRule.EXACT

    async def run(self, case: Case, number: int) -> CaseResult:
        result = CaseResult(self.suite.name, str(self.suite.path), case.name, number)
        started = time.perf_counter()
        try:
            await self._run(case, result)
        except SpecError:
            # The spec's mistake found while running (e.g. a snapshot path that is a folder):
            # the whole run stops with the usage exit code, like a spec error found on reading.
            raise
        except (ValueError, ModelError) as exc:
            result.error = str(exc)
        result.duration_ms = (time.perf_counter() - started) * 1000
        return result

    def _session(self, case: Case, model: Model) -> Session:
        from agentscript.actions.registry import StubBook

        # ``case.faults`` is keyed by action name (discovery.bind_to_agent), as stubs are.
        stub_data = {k: v for k, v in case.stubs.items() if k not in case.faults}
        stubs = StubBook.from_data(stub_data) if stub_data else None
        functions = {name: fault_function(name, f) for name, f in case.faults.items()}
        limits = self._fault_limits(case)
        session = self.agent.session(
            model=model,
            variables=_variables(self.agent, case.context_variables),
            stubs=stubs,
            actions=functions or None,
            limits=limits,
        )
        if not case.history:
            return session
        saved = session.to_json()
        for turn in case.history:
            role = "user" if turn.role == "user" else "assistant"
            saved["history"].append(Message(role, turn.message).to_json())
        topics = [t.topic for t in case.history if t.role == "agent" and t.topic]
        if topics:
            saved["current_node"] = topics[-1]
        return self.agent.restore(
            saved, model=model, stubs=stubs, actions=functions or None, limits=limits
        )

    def _fault_limits(self, case: Case) -> Limits | None:
        """The agent's own limits (its ``agentscript.toml`` ``[limits]``) with the timeouts of
        the case's ``timeout`` faults added, or None (the agent's limits) without them.

        Limits given to a session replace the agent's whole: a fresh ``Limits`` here dropped
        every configured bound (``max_llm_calls = 1`` held without faults and not with
        them), so a case with a fault could pass where the agent fails."""
        timeouts = fault_timeouts(case.faults)
        if not timeouts:
            return None
        base = self.agent.limits
        return replace(base, action_timeouts={**base.action_timeouts, **timeouts})

    async def _run(self, case: Case, result: CaseResult) -> None:
        key = self.keys.get(id(case), f"{self.suite.name}/{case.name}")
        replay = ReplayModel(self.store, self.options.model, key)
        scripted = ScriptedModel(keep_requests=False)  # never read: kept, N turns cost N²
        chooser = _Chooser(replay, scripted)
        judge_keys = JudgeKeys()  # the recording keys of this case's judged checks
        session = self._session(case, chooser)
        answers = self._answers(case)
        memory_before = session.variables
        transcript = result.transcript
        for turn in case.history:
            transcript.append({"role": turn.role, "text": turn.message})
        if case.simulation is not None:
            await self._simulate(case, session, replay, result, answers)
        for number, spec in enumerate(case.turns, start=len(result.turns) + 1):
            chooser.scripted = spec.moves is not None
            scripted.begin_turn(spec.moves or [])
            replay.turn = number
            outcome = await self._send(session, spec.utterance, answers)
            result.turns.append(outcome)
            if replay.failure is not None:
                raise ModelError(f"turn {number}: {replay.failure}")
            transcript += [
                {"role": "user", "text": spec.utterance},
                {"role": "agent", "text": outcome.reply.text},
            ]
            for check in spec.checks:
                if check.kind.judged:
                    result.verdicts.append(
                        await self._judge(replay.case, check, transcript, number, judge_keys)
                    )
                elif check.kind is CheckKind.WHITEBOX:
                    snapshots = self.suite.path.with_name(self.suite.path.name + ".snapshots")
                    result.verdicts.append(
                        check_whitebox(
                            check,
                            outcome,
                            number,
                            snapshots,
                            self.options.update_snapshots,
                            read_only=not self.options.write_snapshots,
                        )
                    )
                else:
                    result.verdicts.extend(matchers.check_turn(check, outcome, self.rule, number))
            self._check_turn_error(case, outcome, spec, number, result)
            if outcome.reply.exhausted:
                raise ModelError(
                    f"turn {number}: the scripted moves ran out (the agent asked the model "
                    "more often than the spec scripts)"
                )
        for check in case.final_checks:
            if check.kind is CheckKind.MANTLE:
                result.verdicts.append(matchers.check_mantle(check, result.turns, memory_before))
            else:
                result.verdicts.append(
                    await self._judge(replay.case, check, transcript, len(result.turns), judge_keys)
                )

    @staticmethod
    def _check_turn_error(
        case: Case, outcome: TurnOutcome, spec: TurnSpec | None, number: int, result: CaseResult
    ) -> None:
        checks = spec.checks if spec is not None else []
        line = spec.line if spec is not None else None
        verdict = matchers.turn_error(outcome, checks, case.faults, number, line)
        if verdict is not None:
            result.verdicts.append(verdict)

    async def _send(self, session: Session, text: str, answers: Answers) -> TurnOutcome:
        started = time.perf_counter()
        reply = await session.send_async(text)
        return TurnOutcome(text, reply, (time.perf_counter() - started) * 1000, answers)

    def _answers(self, case: Case) -> Answers:
        """The calls ``case`` answers itself, named as :meth:`_session` gives them to the
        action runner: a Mantle project's runner asks by tool name, Agent Script's by action."""
        # Imported here: the pytest plugin imports this module in every pytest run.
        from agentscript.mantle.runtime import MantleAgent

        mantle = isinstance(self.agent, MantleAgent)
        stubbed = frozenset(k for k in case.stubs if k not in case.faults)
        return Answers(stubbed, frozenset(case.faults), by_tool=mantle)

    async def _simulate(
        self,
        case: Case,
        session: Session,
        replay: ReplayModel,
        result: CaseResult,
        answers: Answers,
    ) -> None:
        assert case.simulation is not None
        user_model = self.options.judge_model or self.options.model
        for number in range(1, case.simulation.max_turns + 1):
            messages = [
                Message("assistant" if m["role"] == "user" else "user", m["text"])
                for m in result.transcript
            ] or [Message("user", "(the agent waits for you to start)")]
            request = ModelRequest(
                SIMULATOR_SYSTEM + case.simulation.context, "", messages, [], node="user"
            )
            key = f"{replay.case}|{number}|user|0"
            answer = await self.store.answer(key, request, user_model)
            text = (answer.text or "").strip()
            if not text or STOP in text or session.ended:
                return
            replay.turn = number
            outcome = await self._send(session, text, answers)
            result.turns.append(outcome)
            if replay.failure is not None:
                raise ModelError(f"turn {number}: {replay.failure}")
            self._check_turn_error(case, outcome, None, number, result)
            result.transcript += [
                {"role": "user", "text": text},
                {"role": "agent", "text": outcome.reply.text},
            ]

    async def _judge(
        self,
        base: str,
        check: Check,
        transcript: list[dict[str, str]],
        turn: int,
        keys: JudgeKeys,
    ) -> Verdict:
        """``base`` is the case's key in the recording (cases may run concurrently).

        A judge model that cannot answer raises ``JudgeFailed`` (a ``ModelError``): the case
        stops there and is an ERROR, as when the agent's own model cannot answer."""
        live = self.options.judge_model or self.options.model

        async def ask(key: str, request: ModelRequest) -> ModelResponse:
            return await self.store.answer(f"{base}|{turn}|judge|{key}", request, live)

        name = live.name if live is not None else "replay"
        key = keys.key(check, turn)
        return await judge(check, list(transcript), ask, self.options.judge, name, turn, key)


class _Chooser:
    """The session's model: the scripted one on scripted turns, else the replay model."""

    def __init__(self, replay: ReplayModel, scripted: ScriptedModel) -> None:
        self.replay = replay
        self.scripted_model = scripted
        self.scripted = False
        self.name = "test"

    async def complete(self, request: ModelRequest, *, stream: Any = None) -> ModelResponse:
        if self.scripted:
            return await self.scripted_model.complete(request, stream=stream)
        return await self.replay.complete(request, stream=stream)
