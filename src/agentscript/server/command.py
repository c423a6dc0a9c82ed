"""``agentscript serve``: check the set-up, say what will be served, then run uvicorn.

Everything that can be wrong is found before the server listens, and reported in one line
with its fix (exit 2): a port in use, no agents or an agent with errors, two agents with one
name, no model, an unknown store or one that cannot be opened, bad API key configuration, or
a non-loopback address without API keys. The sockets bound for that check are the ones the
server then listens on (:func:`bind_sockets`).
With ``--workers N`` a supervisor (:mod:`.supervisor`) starts N processes; each rebuilds the
same app from the options (passed in the environment variable ``AGENTSCRIPT_SERVE``).

The store is opened again by the app's start-up (each worker's), and may fail there after the
check passed (the database lost in between, or later, when a worker is started again): that is
one line too (:class:`StoreAtStart`, which the start-up calls), not uvicorn's traceback. One
worker then exits with status 2 as the check would have; a worker of ``--workers N`` exits as
one that could not reach its store, which its supervisor starts again later, or as one that
could not start. uvicorn runs the app itself, so requests pass through nothing of this.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import math
import os
import socket
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from agentscript.commands import ExitCode
from agentscript.server.config import ServerConfig, burst_for

ENV = "AGENTSCRIPT_SERVE"
STANDIN = "standin"  # --model standin: the built-in stand-in model (demos, tests)


class ServeError(Exception):
    """The server cannot start; the message says why and what to do."""


@dataclass
class ServeOptions:
    paths: list[str]
    host: str = "127.0.0.1"
    port: int = 8000
    store: str | None = None
    workers: int = 1
    model: str | None = None
    base_url: str | None = None
    session_ttl: float | None = None
    # The server's bounds default to ServerConfig's, written once there.
    lock_wait: float = ServerConfig.lock_wait
    rate_limit: float = ServerConfig.rate_limit
    live_sessions: int = ServerConfig.live_sessions
    max_concurrent_turns: int = ServerConfig.max_concurrent_turns
    max_turns_per_key: int = ServerConfig.max_turns_per_key
    store_connections: int = ServerConfig.store_connections
    access_log: bool = ServerConfig.access_log
    log_format: str = "text"  # or "json" (server/logs.py)
    shutdown_grace: int = ServerConfig.shutdown_grace
    worker_timeout: float = ServerConfig.worker_timeout  # with --workers N (server/pings.py)
    worker_start_timeout: float = ServerConfig.worker_start_timeout  # with --workers N
    cors_origins: list[str] = field(default_factory=list)
    # The prefix a proxy strips before the request reaches the server (uvicorn's root_path).
    root_path: str = ""
    # The playground page (agentscript.server.playground), its --stubs file and --var values.
    playground: bool = False
    stubs: str | None = None
    variables: list[str] = field(default_factory=list)
    # Set for the workers of --workers N: each served agent's source_digest at start-up.
    sources: dict[str, str] = field(default_factory=dict)
    # The dialect .agent files are checked against (--dialect; None: each file's header).
    dialect: str | None = None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def build_app(
    options: ServeOptions,
    *,
    freeze_heap: bool = False,
    metrics_dir: str | None = None,
    on_store_failure: Callable[[Exception], None] | None = None,
) -> tuple[Any, list[str]]:
    """The ASGI app for ``options`` and the lines describing it (ServeError when it cannot
    be built). ``metrics_dir``: a worker of ``--workers N`` (:mod:`.sharedmetrics`);
    ``on_store_failure``: told when the app's start-up cannot open the store
    (:class:`StoreAtStart`)."""
    from agentscript.models.base import Model, ModelError
    from agentscript.server.agents import (
        AgentLoadError,
        load_agents,
        serve_agents,
        source_digest,
    )

    try:
        from agentscript.server.app import create_app
    except ImportError as exc:
        raise ServeError(
            f"agentscript serve needs {exc.name or 'FastAPI'}; install it with: "
            "pip install 'agentscript[serve]'"
        ) from None
    from agentscript.server.auth import ApiKeys, KeyConfigError
    from agentscript.store import store_from_url

    try:
        keys = ApiKeys.from_env()
    except KeyConfigError as exc:
        raise ServeError(str(exc)) from None
    if not keys.enabled and not is_loopback(options.host):
        raise ServeError(
            f"refusing to listen on {options.host} without API keys: anyone who can reach it "
            "could use the agents. Set AGENTSCRIPT_API_KEYS (keys, or a file of keys), or "
            "listen on 127.0.0.1"
        )
    try:
        store = store_from_url(options.store, max_connections=options.store_connections)
    except ValueError as exc:
        raise ServeError(str(exc)) from None
    if options.workers > 1 and store.url == "memory://":
        raise ServeError("memory:// cannot be shared by several workers; use SQLite or PostgreSQL")
    try:
        agents = load_agents(options.paths, options.dialect)
    except AgentLoadError as exc:
        raise ServeError(str(exc)) from None
    models: dict[str, Model] = {}
    for agent in agents:
        try:
            models[agent.name] = _model(agent, options)
        except ModelError as exc:
            raise ServeError(f"{agent.name}: {exc}") from None
    served = serve_agents(agents, models)
    # Only several workers compare them (a worker started again after a crash reads the files).
    sources = (
        {item.name: source_digest(item.agent) for item in served.values()}
        if options.workers > 1
        else {}
    )
    changed = sorted(
        name for name, digest in options.sources.items() if sources.get(name) != digest
    )
    if changed or (options.sources and set(sources) != set(options.sources)):
        which = ", ".join(changed) or "the set of agents"
        raise ServeError(
            f"a worker could not start: {which} changed on disk since the server started, and "
            "one server serves one version; restart the server to serve the files as they are"
        )
    config = ServerConfig(
        session_ttl=options.session_ttl,
        lock_wait=options.lock_wait,
        rate_limit=options.rate_limit,
        rate_burst=burst_for(options.rate_limit),
        live_sessions=options.live_sessions,
        max_concurrent_turns=options.max_concurrent_turns,
        max_turns_per_key=options.max_turns_per_key,
        shutdown_grace=options.shutdown_grace,
        access_log=options.access_log,
        cors_origins=list(options.cors_origins),
        local_only=not keys.enabled,
    )
    app = create_app(
        served,
        store,
        config=config,
        keys=keys,
        freeze_heap=freeze_heap,
        metrics_dir=metrics_dir,
        on_store_failure=on_store_failure,
    )
    app.state.sources = sources
    page: list[str] = []
    if options.playground:
        from agentscript.server.playground.command import add_playground

        names = sorted({m.name for m in models.values()})
        page = add_playground(app, served, options, ", ".join(names))
    # An IPv6 address is written in brackets in a URL.
    host = f"[{options.host}]" if ":" in options.host else options.host
    lines = [
        f"agentscript serve: listening on http://{host}:{options.port} "
        f"({options.workers} worker{'s' if options.workers != 1 else ''})",
        f"  store:  {_shown_store(store)}",
        *(
            [f"  prefix: {options.root_path} (stripped by the proxy in front)"]
            if options.root_path
            else []
        ),
        f"  keys:   {len(keys.hashes)} API key(s)"
        if keys.enabled
        else "  keys:   none (loopback only)",
    ]
    for item in served.values():
        lines.append(f"  agent:  {item.name} ({item.path}) model {models[item.name].name}")
    return app, lines + page


def _shown_store(store: Any) -> str:
    """The store's URL, and for a SQLite file named relative to the working folder, where
    that file is (``sqlite:///tmp/x.db`` is ``./tmp/x.db``; an absolute path takes a fourth
    slash, which the URL alone does not make plain)."""
    path = getattr(store, "path", None)
    if isinstance(path, Path) and not path.is_absolute():
        return f"{store.url} (the file {os.path.abspath(path)})"
    return str(store.url)


def _model(agent: Any, options: ServeOptions) -> Any:
    if options.model == STANDIN:
        from agentscript.server.standin import StandInModel

        return StandInModel()
    from agentscript.chat import choose_model

    return choose_model(agent, spec=options.model, base_url=options.base_url)


# uvicorn's exit code for a worker that failed before it served (uvicorn.config.STARTUP_FAILURE):
# its supervisor stops the server instead of starting the worker again.
WORKER_STARTUP_FAILURE = 3
# uvicorn's own line after a failed start-up, which adds nothing to the one saying why.
UVICORN_START_FAILED = "Application startup failed. Exiting."
TRACEBACK = "Traceback (most recent call last):"


class StoreAtStart:
    """What the app's start-up calls when it cannot open its store (``on_store_failure``):
    ``say`` gets the error in one line, and uvicorn's log leaves out what it would add: the
    traceback Starlette hands it, then its own line. The app's ``state.store_failed`` keeps
    the error (for the exit status). Any other failure is left as it was, traceback and all
    (a bug to report)."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say

    def __call__(self, failure: Exception) -> None:
        self.say(str(failure))
        logging.getLogger("uvicorn.error").addFilter(_SaidAlready(failure))


class _SaidAlready(logging.Filter):
    """A filter of uvicorn's log, once a start-up's store failure was said in one line: it
    drops the traceback of that failure and uvicorn's line after it, then lets all pass."""

    def __init__(self, failure: Exception) -> None:
        super().__init__()
        # How a traceback of the failure ends (Starlette's is traceback.format_exc()).
        self.ending = "".join(traceback.format_exception_only(failure)).rstrip()
        self.spent = False

    def filter(self, record: logging.LogRecord) -> bool:
        if self.spent:
            return True
        text = record.getMessage()
        if text == UVICORN_START_FAILED:
            self.spent = True  # uvicorn's last word on this start-up
            return False
        return not (text.startswith(TRACEBACK) and text.rstrip().endswith(self.ending))


def worker_app() -> Any:
    """The app of one worker process (uvicorn's factory with ``--workers N``)."""
    from agentscript.server import logs
    from agentscript.server.sharedmetrics import METRICS_DIR_ENV

    options = ServeOptions(**json.loads(os.environ[ENV]))
    logs.configure(access_log=options.access_log, log_format=options.log_format)
    log = logging.getLogger("agentscript.server")
    said = StoreAtStart(lambda line: log.error("a worker could not open the store: %s", line))
    try:
        app, _lines = build_app(
            options,
            freeze_heap=True,
            metrics_dir=os.environ.get(METRICS_DIR_ENV),
            on_store_failure=said,
        )
    except ServeError as exc:
        # The command built the same app from the same options before it started any worker:
        # a check failing now read a file that changed on disk since (an agent edited, half
        # copied, no longer loading). One line, and an exit its supervisor answers by starting
        # another worker later while the others serve the version they loaded: the files may
        # be put back, and a restart serves them as they are.
        from agentscript.server.supervisor import FILES_CHANGED

        log.error("%s", exc)
        sys.exit(FILES_CHANGED)
    except Exception as exc:
        # A bug: one line, and uvicorn's exit code for a worker that cannot start; its
        # supervisor then stops the server rather than start the worker again and again.
        log.error("a worker could not start: %s: %s", type(exc).__name__, exc)
        sys.exit(WORKER_STARTUP_FAILURE)
    from agentscript.server.orphan import stop_when_orphaned, supervisor_pid

    stop_when_orphaned(supervisor_pid())  # a supervisor killed outright leaves no worker serving
    return app


# How long the check before listening waits for the store (a host that drops packets would
# otherwise keep the command silent for minutes).
STORE_CHECK_SECONDS = 15.0


def check_store(options: ServeOptions) -> None:
    """Open the store once and close it, before anything listens: a store that cannot be
    opened (PostgreSQL down, a SQLite file that cannot be written) is one line and exit 2, not
    a traceback from inside uvicorn's start-up (each worker opens it again there, and migrates
    it the first time)."""
    import asyncio

    from agentscript.store import StoreError, store_from_url

    store = store_from_url(options.store, max_connections=1)

    async def open_and_close() -> None:
        try:
            await store.open()
        finally:
            await store.close()

    try:
        asyncio.run(asyncio.wait_for(open_and_close(), STORE_CHECK_SECONDS))
    except StoreError as exc:
        raise ServeError(str(exc)) from None
    except TimeoutError:
        raise ServeError(
            f"the store {store.url} did not answer within {STORE_CHECK_SECONDS:g} s"
        ) from None


def bind_sockets(host: str, port: int, *, workers: int = 1) -> list[socket.socket]:
    """The sockets the server will listen on, bound and listening before the banner, and kept
    for uvicorn: the banner names the port really bound (``--port 0``: the one the system
    chose), a port in use is one line and exit 2 (not a banner, then uvicorn's error and exit
    3), and no other process takes the port in between. A socket only bound would not keep
    it: another one with ``SO_REUSEADDR`` (most servers set it) may bind the same port until
    one of them listens. Connections that come while the app starts wait in the backlog.

    One worker binds as asyncio's server binds ``host``: each address it names, IPv6 without
    IPv4 (``::`` is not refused for another program's IPv4 port), the same port for each
    when the system chooses it. Several bind one socket, as uvicorn's supervisor did: IPv6
    when the host is an IPv6 address, taking IPv4 too as the system's default has it.
    ``SO_REUSEADDR`` as uvicorn sets it."""
    try:
        if workers == 1:
            return _bind_each(_addresses(host, port), ipv6_only=True)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        return _bind_each([(family, (host, port))], ipv6_only=False)
    except OSError as exc:
        raise ServeError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def _addresses(host: str, port: int) -> list[tuple[int, Any]]:
    found = socket.getaddrinfo(
        host, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE
    )
    return list(dict.fromkeys((family, address) for family, _kind, _proto, _name, address in found))


def _bind_each(addresses: list[tuple[int, Any]], *, ipv6_only: bool) -> list[socket.socket]:
    bound: list[socket.socket] = []
    try:
        for family, address in addresses:
            sock = socket.socket(family, socket.SOCK_STREAM)
            bound.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if ipv6_only and family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if address[1] == 0 and len(bound) > 1:
                # One port for every address: the banner names one.
                address = (address[0], bound[0].getsockname()[1], *address[2:])
            sock.bind(address)
            sock.listen()  # uvicorn listens again, with its backlog
    except OSError:
        for sock in bound:
            sock.close()
        raise
    return bound


def serve_command(options: ServeOptions, echo: Callable[[str], None] = print) -> ExitCode:
    """Run the server until it is stopped; the exit code."""
    if options.workers < 1:
        echo("--workers must be at least 1")
        return ExitCode.USAGE
    try:
        sockets = bind_sockets(options.host, options.port, workers=options.workers)
    except ServeError as exc:
        echo(f"agentscript serve: {exc}")
        return ExitCode.USAGE
    try:
        return _serve_on(sockets, replace(options, port=sockets[0].getsockname()[1]), echo)
    finally:
        for sock in sockets:
            sock.close()


def _serve_on(
    sockets: list[socket.socket], options: ServeOptions, echo: Callable[[str], None]
) -> ExitCode:
    said = StoreAtStart(lambda line: echo(f"agentscript serve: {line}"))
    try:
        app, lines = build_app(options, freeze_heap=True, on_store_failure=said)
    except ServeError as exc:
        echo(f"agentscript serve: {exc}")
        return ExitCode.USAGE
    try:
        import uvicorn
    except ImportError:
        echo("agentscript serve needs uvicorn; install it with: pip install 'agentscript[serve]'")
        return ExitCode.USAGE
    try:
        check_store(options)
    except ServeError as exc:
        echo(f"agentscript serve: {exc}")
        return ExitCode.USAGE
    from agentscript.server import logs
    from agentscript.server.nodelay import protocol

    logs.configure(access_log=options.access_log, log_format=options.log_format)
    for line in logs.banner(lines, options.log_format):
        echo(line)
    common: dict[str, Any] = {
        "host": options.host,
        "port": options.port,
        "http": protocol(),
        "log_level": "warning",
        "access_log": False,  # our own, if asked for (server/logs.py)
        # uvicorn's loggers pass their records to the root handler logs.configure set, so its
        # own warnings (an invalid request, a response left incomplete) have the time, logger
        # and id too.
        "log_config": None,
        "timeout_graceful_shutdown": options.shutdown_grace,
        "root_path": options.root_path,
    }
    if options.workers == 1:
        # uvicorn's server, stopped by SIGINT, SIGTERM and SIGHUP as docs/serve.md says.
        from agentscript.server.runner import run

        try:
            return ExitCode(run(app, sockets=sockets, **common))
        except SystemExit:  # uvicorn's exit after a failed start-up
            if app.state.store_failed is None:
                raise
            return ExitCode.USAGE  # as when the check before listening fails
    from agentscript.server.orphan import SUPERVISOR_ENV
    from agentscript.server.supervisor import Supervisor

    # The workers check that they load the files the banner's agents came from.
    os.environ[ENV] = json.dumps(asdict(replace(options, sources=app.state.sources)))
    os.environ[SUPERVISOR_ENV] = str(os.getpid())
    config = uvicorn.Config(
        "agentscript.server.command:worker_app",
        factory=True,
        workers=options.workers,
        lifespan="on",
        **common,
    )
    chief = Supervisor(
        config, options.workers, options.worker_timeout, options.worker_start_timeout
    )
    return ExitCode(chief.run(sockets))


def parse_ttl(text: str | None) -> float | None:
    """``--session-ttl``: seconds, or a number with ``s``, ``m``, ``h`` or ``d``."""
    if text is None or text.strip() == "":
        return None
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    raw = text.strip().lower()
    scale = units.get(raw[-1], 0)
    number = raw[:-1] if scale else raw
    try:
        value = float(number) * (scale or 1)
    except ValueError:
        raise ServeError(f"--session-ttl {text!r}: write seconds or e.g. 30m, 12h, 7d") from None
    if value <= 0:
        raise ServeError("--session-ttl must be positive")
    return value


def parse_root_path(text: str | None) -> str:
    """``--root-path``: empty, or a path such as ``/agents`` (a trailing slash dropped)."""
    path = (text or "").strip()
    if not path:
        return ""
    if path == "/":
        return ""
    segments = path.strip("/").split("/")
    if (
        not path.startswith("/")
        or path.startswith("//")  # another host's URL, once trace_url starts with it
        or any(segment in ("", ".", "..") for segment in segments)
        or any(c in path for c in "?#%\\")
        or any(c.isspace() for c in path)
    ):
        raise ServeError(f"--root-path {text!r}: write the prefix as a path, e.g. /agents")
    return path.rstrip("/")


def check_worker_timeout(seconds: float, option: str = "--worker-timeout") -> float:
    """``--worker-timeout``, ``--worker-start-timeout``: seconds above 0, or 0 for no check."""
    if not math.isfinite(seconds) or seconds < 0:
        raise ServeError(f"{option} {seconds:g}: write seconds above 0, or 0 to turn the check off")
    return seconds


def options_from_cli(paths: Sequence[str], **given: Any) -> ServeOptions:
    ttl = parse_ttl(given.pop("session_ttl", None))
    root = parse_root_path(given.pop("root_path", ""))
    timeout = check_worker_timeout(given.pop("worker_timeout", ServerConfig.worker_timeout))
    start_timeout = check_worker_timeout(
        given.pop("worker_start_timeout", ServerConfig.worker_start_timeout),
        "--worker-start-timeout",
    )
    return ServeOptions(
        paths=list(paths),
        session_ttl=ttl,
        root_path=root,
        worker_timeout=timeout,
        worker_start_timeout=start_timeout,
        **given,
    )


def serve_cli(paths: Sequence[str], echo: Callable[[str], None] = print, **given: Any) -> ExitCode:
    """What the ``serve`` click command calls: options as parsed, then :func:`serve_command`."""
    try:
        options = options_from_cli(paths, **given)
    except ServeError as exc:
        echo(f"agentscript serve: {exc}")
        return ExitCode.USAGE
    return serve_command(options, echo)
