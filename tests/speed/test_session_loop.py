"""Issue 10: ``Session.send`` keeps one event loop per thread and is safe from any thread."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.fakes.agent_texts import Action, agent_text

import agentscript
from agentscript.engine.session import Agent
from agentscript.models.scripted import Move, ScriptedModel

AGENT = agent_text(actions=[Action("act", "Records the loop it runs on", "flow://Act")])


@pytest.fixture
def agent(tmp_path: Path) -> Agent:
    path = tmp_path / "a.agent"
    path.write_text(AGENT, encoding="utf-8")
    loaded = agentscript.load(path)
    assert isinstance(loaded, Agent)
    return loaded


def loops_seen(agent: Agent, turns: int) -> list[asyncio.AbstractEventLoop]:
    seen: list[asyncio.AbstractEventLoop] = []

    async def act() -> dict[str, str]:
        seen.append(asyncio.get_running_loop())
        return {}

    session = agent.session(model=ScriptedModel(), actions={"act": act})
    assert isinstance(session.model, ScriptedModel)
    for _ in range(turns):
        session.model.begin_turn([Move(calls=[("act", {})]), Move(text="ok")])
        assert session.send("go").text == "ok"
    return seen


def test_send_reuses_one_event_loop_per_thread(agent: Agent) -> None:
    seen = loops_seen(agent, 3) + loops_seen(agent, 2)  # two sessions, same thread
    assert len(seen) == 5
    assert all(loop is seen[0] for loop in seen)
    assert not seen[0].is_closed()


def test_send_is_safe_from_several_threads_each_with_its_own_loop(agent: Agent) -> None:
    results: dict[int, list[asyncio.AbstractEventLoop]] = {}
    errors: list[BaseException] = []

    def work(index: int) -> None:
        try:
            results[index] = loops_seen(agent, 3)
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert sorted(results) == [0, 1, 2, 3]
    firsts = [seen[0] for seen in results.values()]
    assert all(all(loop is seen[0] for loop in seen) for seen in results.values())
    assert len({id(loop) for loop in firsts}) == 4  # one loop per thread, never shared


def test_send_inside_a_running_loop_says_to_use_send_async(agent: Agent) -> None:
    session = agent.session(model=ScriptedModel([Move(text="ok")]))

    async def inside() -> None:
        with pytest.raises(RuntimeError, match="send_async"):
            session.send("go")

    asyncio.run(inside())


@pytest.fixture
def python_sigint() -> Iterator[None]:
    """Python's own SIGINT handler, as an interactive program has it. A process started in the
    background by a non-interactive shell (``make test &``) inherits SIGINT ignored, and then
    Python, rightly, installs no handler and Ctrl-C does nothing."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only")
    before = signal.getsignal(signal.SIGINT)
    if before is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if before is signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def interrupted_turn(agent: Agent, press_ctrl_c: Callable[[], None]) -> list[bool]:
    """Send a turn whose action presses Ctrl-C, then waits 30 s; expect KeyboardInterrupt. The
    result records, for each cancellation the action saw, whether it cut the wait short (not
    only once the loop's 30 s wait had run out)."""
    cut_short: list[bool] = []

    async def act() -> dict[str, str]:
        loop = asyncio.get_running_loop()
        end_of_wait = loop.time() + 30
        press_ctrl_c()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cut_short.append(loop.time() < end_of_wait)
            raise
        return {}

    session = agent.session(
        model=ScriptedModel([Move(calls=[("act", {})]), Move(text="ok")]), actions={"act": act}
    )
    with pytest.raises(KeyboardInterrupt):
        session.send("go")
    return cut_short


def test_ctrl_c_received_by_another_thread_still_cancels_the_waiting_turn(
    agent: Agent, python_sigint: None
) -> None:
    """The kernel may hand SIGINT to any thread (an action pool's, a store's); Python runs the
    handler on the main thread, which here sleeps in the loop's wait for 30 s. The loop must
    wake for it (a wakeup fd), or the turn goes on as if Ctrl-C had not been pressed."""

    def on_another_thread() -> None:
        time.sleep(0.05)  # the loop's thread is in its wait by now
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)

    def press() -> None:
        threading.Thread(target=on_another_thread).start()

    assert interrupted_turn(agent, press) == [True]


def test_ctrl_c_during_send_cancels_the_turn_and_raises_keyboard_interrupt(
    agent: Agent, python_sigint: None
) -> None:
    # The user presses Ctrl-C while the action waits: the turn is cancelled, not left running.
    assert interrupted_turn(agent, lambda: os.kill(os.getpid(), signal.SIGINT)) == [True]
    # Outside a turn, Ctrl-C is Python's usual KeyboardInterrupt.
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # the handler runs at the next bytecode boundary
            pass
