"""The supervisor of ``--workers N`` pings each worker's event loop, so that a worker whose
loop is stuck is found (and then killed and replaced by the supervisor).

A worker that dies is seen by its exit code. One whose event loop is stuck (a deadlock, an
inline ``python://`` action that never returns, a process stopped with ``SIGSTOP``) lives on,
keeps its share of the listening socket's connections and answers none of them.

Each worker gets one end of a pipe. Its event loop answers each ping (:func:`answer_pings`: a
reader on the loop, never a thread, which would answer for a loop that is stuck), and speaks
once unasked when its server has started: it is then ready. The supervisor's end
(:class:`Pings`, read from the supervisor's check loop) pings a ready worker every
:data:`PING_EVERY` seconds, one ping at a time, and says how long the ping not yet answered has
waited. A worker still starting is never pinged: its app's start-up may take long (a store's
first migration); the supervisor bounds a start apart, by when the worker became ready
(:attr:`Pings.ready`, ``--worker-start-timeout``). When the supervisor goes away, the worker's end reads the end of the pipe
and stops answering; nothing more (:mod:`.orphan` stops a worker whose supervisor died).
"""

from __future__ import annotations

import asyncio
from multiprocessing.connection import Connection

PING = b"ping"
# The answer to a ping, and the message a worker sends unasked once its server has started.
ANSWER = b"pong"
# Seconds between two pings of a worker: an answer costs its event loop one wake-up, a few
# microseconds, while a stuck worker is found within PING_EVERY + --worker-timeout.
PING_EVERY = 1.0


class Pings:
    """The supervisor's end of one worker's pipe: the ping sent, the answers heard."""

    def __init__(self, pipe: Connection) -> None:
        self.pipe = pipe
        self.ready = False  # the worker's event loop has spoken: its server has started
        self.sent_at: float | None = None  # when the ping not yet answered was sent
        self.last_sent = float("-inf")

    def check(self, now: float) -> float:
        """Read the answers that came, ping the worker if a ping is due; the seconds the ping
        not yet answered has waited (0.0 when none waits)."""
        self.listen()
        if self.ready and self.sent_at is None and now - self.last_sent >= PING_EVERY:
            self._ping(now)
        return 0.0 if self.sent_at is None else now - self.sent_at

    def listen(self) -> bool:
        """Read the answers that came, pinging nothing; whether the worker is ready."""
        if self._heard():
            self.ready = True
            self.sent_at = None
        return self.ready

    def close(self) -> None:
        self.pipe.close()

    def _heard(self) -> bool:
        heard = False
        try:
            while self.pipe.poll():
                self.pipe.recv_bytes()
                heard = True
        except (EOFError, OSError):
            pass  # the worker died: its exit code says so to the supervisor
        return heard

    def _ping(self, now: float) -> None:
        try:
            self.pipe.send_bytes(PING)
        except OSError:
            return  # the worker died (a broken pipe): its exit code says so
        self.sent_at = self.last_sent = now


def answer_pings(pipe: Connection) -> None:
    """From now on, let the running event loop answer each ping that comes on ``pipe``, and
    answer once now: the worker's server has started."""
    loop = asyncio.get_running_loop()

    def answer() -> None:
        try:
            pipe.recv_bytes()
            pipe.send_bytes(ANSWER)
        except (EOFError, OSError):
            # The supervisor is gone: the end of the pipe would wake the loop forever.
            loop.remove_reader(pipe.fileno())

    try:
        pipe.send_bytes(ANSWER)
    except OSError:
        return  # the supervisor died while this worker started: nobody to answer
    loop.add_reader(pipe.fileno(), answer)
