"""A TCP relay to PostgreSQL for the tests of a database that fails under a running server:
refused (``stop``), gone dark (``go_dark``: the connections stay open and everything sent on
them either way is swallowed, as with a frozen host or a failover that left them dangling,
while new connections are relayed as usual), or at a limit (``accept_only``: connections past
that many are closed as soon as they come). In the test's event loop, or in a thread of its
own (:func:`relay_thread`) for a server run as a process."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine, Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit


class Relay:
    def __init__(self, dsn: str) -> None:
        self._parts = urlsplit(dsn)
        self.target = (self._parts.hostname or "127.0.0.1", self._parts.port or 5432)
        self.port = 0
        self.accept_only: int | None = None  # None: every connection
        self.accepted = 0
        self._server: asyncio.Server | None = None
        self._writers: dict[int, list[asyncio.StreamWriter]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._dark: set[int] = set()
        self.dark_over = False

    @property
    def dsn(self) -> str:
        """The database's URL through this relay."""
        netloc = f"{self._parts.username}@127.0.0.1:{self.port}"
        return urlunsplit(self._parts._replace(netloc=netloc))

    async def start(self) -> None:
        """Listen (on the same port as before, after a ``stop``)."""
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        """Refuse new connections and close every open one: the database is gone."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for writers in self._writers.values():
            for writer in writers:
                writer.close()
        self._writers.clear()
        if self._tasks:  # each ends on its closed connections
            await asyncio.wait(self._tasks, timeout=5)

    def go_dark(self, hold: float) -> None:
        """Every connection open now swallows what is sent on it, either way, for ``hold``
        seconds; then they are closed (as the host's keepalives would end them at last) and
        ``dark_over`` is set: a test of what must answer while they are dark asserts it is
        not, and fails rather than hangs where something waits for them."""
        dark = set(self._writers)
        self._dark |= dark
        asyncio.get_running_loop().call_later(hold, self._end_dark, dark)

    def _end_dark(self, dark: set[int]) -> None:
        self.dark_over = True
        for number in dark:
            for writer in self._writers.pop(number, []):
                writer.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.accept_only is not None and self.accepted > self.accept_only:
            writer.close()
            return
        number = self.accepted
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self._writers[number] = [writer, up_writer]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, ConnectionError):
                while data := await src.read(65536):
                    if number not in self._dark:
                        dst.write(data)
                        await dst.drain()
            if number not in self._dark:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


class RelayThread:
    """A :class:`Relay` run by an event loop in a thread of its own."""

    def __init__(self, relay: Relay, loop: asyncio.AbstractEventLoop) -> None:
        self.relay = relay
        self._loop = loop

    def call(self, step: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(step, self._loop).result(30)


@contextlib.contextmanager
def relay_thread(dsn: str, *, accept_only: int | None = None) -> Iterator[RelayThread]:
    relay = Relay(dsn)
    relay.accept_only = accept_only
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    running = RelayThread(relay, loop)
    try:
        running.call(relay.start())
        yield running
    finally:
        running.call(relay.stop())
        running.call(asyncio.sleep(0.1))  # the relaying tasks end on the closed connections
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
