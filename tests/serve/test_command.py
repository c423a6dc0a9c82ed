"""``agentscript serve`` start-up checks: every refusal is one clear line and exit 2."""

from __future__ import annotations

import socket
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from agentscript.cli import main
from agentscript.server.auth import ApiKeys, KeyConfigError, key_hash
from agentscript.server.command import ServeError, ServeOptions, build_app, parse_ttl

from .harness import CARD_BANK, NOTES


def serve(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    # Neither the keys nor the store of the shell running the tests.
    clean: dict[str, str | None] = {"AGENTSCRIPT_API_KEYS": "", "AGENTSCRIPT_STORE": None}
    result = CliRunner().invoke(main, ["serve", *args], env={**clean, **(env or {})})
    return result.exit_code, result.output


def test_serve_refuses_non_loopback_without_keys() -> None:
    code, out = serve(NOTES, "--model", "standin", "--host", "0.0.0.0")
    assert code == 2 and "refusing to listen on 0.0.0.0 without API keys" in out
    assert "AGENTSCRIPT_API_KEYS" in out and "Traceback" not in out


def test_serve_non_loopback_with_keys_is_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTSCRIPT_API_KEYS", "secret-1-0123456789")
    _app, lines = build_app(
        ServeOptions(paths=[NOTES], host="0.0.0.0", model="standin", store="memory://")
    )
    assert "1 API key(s)" in "\n".join(lines)
    assert "secret-1-0123456789" not in "\n".join(lines)


def test_serve_two_agents_with_one_name_is_an_error(tmp_path: Path) -> None:
    other = tmp_path / "copy.agent"
    other.write_text(Path(NOTES).read_text())
    code, out = serve(NOTES, str(other), "--model", "standin")
    assert code == 2 and "two agents are named 'Notes'" in out


def test_serve_agent_with_errors_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.agent"
    bad.write_text('config:\n    agent_name "x"\n')
    code, out = serve(str(bad), "--model", "standin")
    assert code == 2 and "cannot serve an agent with errors" in out


def test_serve_missing_path_and_unknown_store_are_clear() -> None:
    code, out = serve("nowhere.agent", "--model", "standin")
    assert code == 2 and "no such file" in out
    code, out = serve(NOTES, "--model", "standin", "--store", "redis://x")
    assert code == 2 and "unknown store" in out
    code, out = serve(NOTES, "--model", "standin", "--store", "memory://", "--workers", "2")
    assert code == 2 and "memory://" in out


def test_serve_without_a_model_says_how_to_configure_one(tmp_path: Path) -> None:
    code, out = serve(NOTES, env={"AGENTSCRIPT_API_KEYS": "", "AGENTSCRIPT_MODEL": ""})
    assert code == 2 and out.startswith("agentscript serve: Notes:")


def test_serve_lists_store_and_agents() -> None:
    _app, lines = build_app(
        ServeOptions(paths=[NOTES, CARD_BANK], model="standin", store="memory://", port=9)
    )
    text = "\n".join(lines)
    assert "listening on http://127.0.0.1:9" in text and "store:  memory://" in text
    assert "agent:  Notes" in text and "agent:  card-bank" in text


def test_serve_folder_finds_agent_files_and_mantle_projects_below_it() -> None:
    # The same expansion as validate/fmt: a folder holding a Mantle project serves it too.
    examples = Path(CARD_BANK).parent
    _app, lines = build_app(ServeOptions(paths=[str(examples)], model="standin", store="memory://"))
    text = "\n".join(lines)
    assert f"agent:  card-bank ({examples / 'card_bank'})" in text
    assert str(examples / "order_status" / "order_status.agent") in text


@pytest.mark.parametrize(("rate", "burst"), [(20.0, 40), (1.0, 2), (0.2, 1), (0.0, 1)])
def test_serve_rate_limit_sets_a_burst_of_two_seconds(rate: float, burst: int) -> None:
    # The burst stayed 40 whatever --rate-limit said: --rate-limit 1 let 40 requests through.
    app, _lines = build_app(
        ServeOptions(paths=[NOTES], model="standin", store="memory://", rate_limit=rate)
    )
    assert (app.state.config.rate_limit, app.state.config.rate_burst) == (rate, burst)


def test_serve_max_concurrent_turns_reaches_the_service() -> None:
    app, _lines = build_app(
        ServeOptions(paths=[NOTES], model="standin", store="memory://", max_concurrent_turns=5)
    )
    assert app.state.service.config.max_concurrent_turns == 5
    app, _lines = build_app(ServeOptions(paths=[NOTES], model="standin", store="memory://"))
    assert app.state.service.config.max_concurrent_turns == 64
    code, out = serve(NOTES, "--model", "standin", "--max-concurrent-turns", "0")
    assert code == 2 and "--max-concurrent-turns" in out and "Traceback" not in out


def test_serve_store_connections_reach_the_postgresql_store() -> None:
    # Nothing connects before start-up, so no database is needed here.
    url = "postgresql://nobody@127.0.0.1:9/none"
    app, _lines = build_app(
        ServeOptions(paths=[NOTES], model="standin", store=url, store_connections=3)
    )
    assert app.state.service.store.max_connections == 3
    app, _lines = build_app(ServeOptions(paths=[NOTES], model="standin", store=url))
    assert app.state.service.store.max_connections == 16
    code, out = serve(NOTES, "--model", "standin", "--store-connections", "0")
    assert code == 2 and "--store-connections" in out and "Traceback" not in out


def test_serve_shutdown_grace_reaches_the_app_and_uvicorn(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentscript.server import logs, runner

    given: dict[str, object] = {}
    monkeypatch.setattr(runner, "run", lambda app, **kwargs: given.update(kwargs) or 0)
    monkeypatch.setattr(logs, "configure", lambda **options: None)
    code, _out = serve(NOTES, "--model", "standin", "--store", "memory://", "--shutdown-grace", "7")
    assert code == 0 and given["timeout_graceful_shutdown"] == 7
    app, _lines = build_app(
        ServeOptions(paths=[NOTES], model="standin", store="memory://", shutdown_grace=7)
    )
    assert app.state.service.config.shutdown_grace == 7
    code, out = serve(NOTES, "--model", "standin", "--shutdown-grace", "-1")
    assert code == 2 and "--shutdown-grace" in out and "Traceback" not in out


def test_serve_store_from_the_environment_keeps_the_password_out_of_argv(
    monkeypatch: pytest.MonkeyPatch, pg_dsn: str
) -> None:
    from agentscript.server import logs, runner

    monkeypatch.setattr(runner, "run", lambda app, **kwargs: 0)
    monkeypatch.setattr(logs, "configure", lambda **options: None)
    # Trust authentication ignores the password; the banner must not show it.
    url = pg_dsn.replace("://postgres@", "://postgres:hunter2@")
    code, out = serve(NOTES, "--model", "standin", env={"AGENTSCRIPT_STORE": url})
    shown = pg_dsn.replace("://postgres@", "://postgres:***@")
    assert code == 0 and f"store:  {shown}" in out
    assert "hunter2" not in out
    code, out = serve(
        NOTES, "--model", "standin", "--store", "memory://", env={"AGENTSCRIPT_STORE": url}
    )
    assert code == 0 and "store:  memory://" in out  # the option wins


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://app:hunter2@127.0.0.1:9/none", "postgresql://app:***@127.0.0.1:9/none"),
        (
            "postgresql://app@127.0.0.1:9/none?sslmode=disable&password=hunter2",
            "postgresql://app@127.0.0.1:9/none?sslmode=disable&password=***",
        ),
        (
            "postgresql://127.0.0.1:9/none?PassWord=hunter2&sslpassword=hunter2",
            "postgresql://127.0.0.1:9/none?PassWord=***&sslpassword=***",
        ),
    ],
    ids=["user-part", "query", "query-any-case"],
)
def test_serve_masks_every_form_of_store_password(url: str, shown: str) -> None:
    # Nothing listens on port 9: the check before listening fails, naming the store.
    code, out = serve(NOTES, "--model", "standin", "--store", url)
    assert code == 2 and f"cannot connect to {shown}" in out
    assert "hunter2" not in out and "Traceback" not in out


def test_serve_refuses_a_store_url_with_an_unencoded_at_in_its_password() -> None:
    url = "postgresql://app:hun@ter2@127.0.0.1:9/none"
    code, out = serve(NOTES, "--model", "standin", "--store", url)
    assert code == 2 and "write an @ in the password as %40" in out
    assert "ter2" not in out and "Traceback" not in out


def test_serve_reports_a_store_it_cannot_open_in_one_line_before_listening(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from agentscript.server import runner

    ran: list[object] = []
    monkeypatch.setattr(runner, "run", lambda app, **kwargs: ran.append(app) or 0)
    code, out = serve(NOTES, "--model", "standin", "--store", "postgresql://app@127.0.0.1:9/x")
    assert code == 2 and out.count("\n") <= 1 and "Traceback" not in out
    assert out.startswith("agentscript serve: cannot connect to postgresql://app@127.0.0.1:9/x")
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    code, out = serve(NOTES, "--model", "standin", "--store", f"sqlite:///{blocker}/sessions.db")
    assert code == 2 and "cannot open the SQLite store" in out and "Traceback" not in out
    assert ran == []  # nothing listened


def test_store_url_masking_covers_keyword_connection_strings() -> None:
    from agentscript.store.postgres import masked

    assert masked("host=db password=hunter2 dbname=x") == "host=db password=*** dbname=x"
    assert masked("host=db password = 'hun ter2' dbname=x") == "host=db password = *** dbname=x"
    assert masked("postgresql://app@db/x") == "postgresql://app@db/x"
    assert masked("postgresql://app:hun@ter2@db/x") == "postgresql://app:***@db/x"


def test_serve_bounds_default_to_the_server_configs() -> None:
    """The command line, ServeOptions and ServerConfig agree on every default bound."""
    from agentscript.cli.serve import serve as command
    from agentscript.server.config import ServerConfig

    defaults = ServerConfig()
    by_option = {p.name: p.default for p in command.params}
    options = ServeOptions(paths=[])
    for name in (
        "lock_wait",
        "rate_limit",
        "live_sessions",
        "max_concurrent_turns",
        "store_connections",
        "shutdown_grace",
        "worker_timeout",
    ):
        assert by_option[name] == getattr(options, name) == getattr(defaults, name), name
    from agentscript.store.postgres import MAX_CONNECTIONS

    assert defaults.store_connections == MAX_CONNECTIONS  # the store's own default
    assert by_option["log_format"] == options.log_format == "text"


def test_serve_refuses_an_unknown_log_format() -> None:
    code, out = serve(NOTES, "--model", "standin", "--log-format", "xml")
    assert code == 2 and "--log-format" in out and "Traceback" not in out


def test_the_command_line_loads_no_store_until_a_command_needs_one() -> None:
    """Every `agentscript` command starts by importing the CLI: the stores (and what they
    import) wait for `serve` to run."""
    import subprocess
    import sys

    code = "import sys, agentscript.cli; print(sorted(m for m in sys.modules if m.startswith('agentscript.store')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_serve_session_ttl_units() -> None:
    assert parse_ttl("90") == 90 and parse_ttl("30m") == 1800 and parse_ttl("2d") == 172800
    assert parse_ttl(None) is None
    with pytest.raises(ServeError, match="session-ttl"):
        parse_ttl("soon")
    code, out = serve(NOTES, "--model", "standin", "--session-ttl", "-1")
    assert code == 2 and "must be positive" in out


def test_api_keys_from_env_or_file_kept_as_hashes(tmp_path: Path) -> None:
    a, b = "key-a-0123456789", "key-b-0123456789"
    keys = ApiKeys.from_env({"AGENTSCRIPT_API_KEYS": f"{a}, {b}"})
    assert keys.hashes == {key_hash(a), key_hash(b)}
    file = tmp_path / "keys"
    plain = "plain-key-0123456789"
    file.write_text(f"# team keys\n{plain}\nsha256:{key_hash('hashed-key')}\n")
    from_file = ApiKeys.from_env({"AGENTSCRIPT_API_KEYS": str(file)})
    # A key given by its hash is taken as it is: its length cannot be known.
    assert from_file.owner("Bearer hashed-key") == key_hash("hashed-key")
    assert from_file.owner(f"Bearer {plain}") == key_hash(plain)
    assert from_file.owner("Bearer other") is None and from_file.owner(None) is None
    assert plain not in repr(from_file.hashes)
    with pytest.raises(KeyConfigError, match="64 hex"):
        ApiKeys.from_env({"AGENTSCRIPT_API_KEYS": "sha256:xyz"})
    with pytest.raises(KeyConfigError, match="cannot read"):
        ApiKeys.from_env({"AGENTSCRIPT_API_KEYS": str(tmp_path / "missing")})
    assert ApiKeys.from_env({}).owner(None) == ""  # keys off: one anonymous owner


def test_serve_on_a_port_in_use_is_one_line_and_exit_2_before_the_banner() -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, out = serve(NOTES, "--model", "standin", "--store", "memory://", "--port", str(port))
    assert code == 2
    assert out == f"agentscript serve: cannot listen on 127.0.0.1:{port}: Address already in use\n"


def test_binding_ipv6_is_no_clash_with_another_programs_ipv4_port() -> None:
    # asyncio binds "::" IPv6-only: another program's IPv4 listener on the port is no clash.
    import socket

    from agentscript.server.command import bind_sockets

    def bind(host: str, port: int) -> None:
        for sock in bind_sockets(host, port):
            sock.close()

    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        bind("::", port)
        bind("localhost", 0)
        with pytest.raises(ServeError, match="Address already in use"):
            bind("0.0.0.0", port)


def test_the_server_binds_one_port_for_every_address_a_host_names_and_several_workers_one_socket(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import socket

    from agentscript.server import command

    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # Several workers share one socket bound as uvicorn's supervisor bound it: "::" takes
        # IPv4 too (the system's default), so another program's IPv4 port is a clash there.
        with pytest.raises(ServeError, match="Address already in use"):
            command.bind_sockets("::", port, workers=2)
    both = [
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 0)),
        (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("::1", 0, 0, 0)),
    ]
    monkeypatch.setattr(command.socket, "getaddrinfo", lambda *args: both)
    sockets = command.bind_sockets("localhost", 0)
    try:
        # The system chose the first port; the banner names one port, so every address has it.
        assert [s.family for s in sockets] == [socket.AF_INET, socket.AF_INET6]
        assert sockets[0].getsockname()[1] == sockets[1].getsockname()[1] != 0
    finally:
        for sock in sockets:
            sock.close()


def test_the_port_the_server_bound_is_its_own_until_it_stops() -> None:
    # Bound only, the port could still be bound by another socket setting SO_REUSEADDR, as
    # servers do: the banner's port, then uvicorn failing to listen on it.
    import socket

    from agentscript.server.command import bind_sockets

    for workers in (1, 2):
        sockets = bind_sockets("127.0.0.1", 0, workers=workers)
        port = sockets[0].getsockname()[1]
        with socket.socket() as other:
            other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            with pytest.raises(OSError, match="Address already in use"):
                other.bind(("127.0.0.1", port))
        for sock in sockets:
            sock.close()


def banner_port(out: str) -> int:
    return int(out.split("listening on http://127.0.0.1:", 1)[1].split(" ", 1)[0])


def test_serve_on_port_0_hands_the_socket_it_bound_to_uvicorn_and_names_its_port(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentscript.server import logs, runner

    given: list[object] = []
    monkeypatch.setattr(runner, "run", lambda app, sockets, **kwargs: given.extend(sockets) or 0)
    monkeypatch.setattr(logs, "configure", lambda **options: None)
    code, out = serve(NOTES, "--model", "standin", "--store", "memory://", "--port", "0")
    assert code == 0 and len(given) == 1
    sock = given[0]
    assert isinstance(sock, socket.socket)
    assert sock.fileno() == -1  # closed once the server stopped
    assert banner_port(out) != 0


def test_serve_with_workers_hands_the_supervisor_its_socket_and_worker_timeout(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from agentscript.server import command, logs, orphan, supervisor

    ran: dict[str, object] = {}

    class FakeSupervisor:
        def __init__(
            self, config: object, workers: int, worker_timeout: float, start_timeout: float
        ) -> None:
            ran.update(workers=workers, worker_timeout=worker_timeout, start=start_timeout)

        def run(self, sockets: list[socket.socket]) -> int:
            ran["ports"] = [sock.getsockname()[1] for sock in sockets]
            return 0

    monkeypatch.setattr(supervisor, "Supervisor", FakeSupervisor)
    monkeypatch.setattr(logs, "configure", lambda **options: None)
    for name in (command.ENV, orphan.SUPERVISOR_ENV):  # set for the workers: undone after
        monkeypatch.delenv(name, raising=False)
    store = f"sqlite:///{tmp_path / 's.db'}"
    args = (NOTES, "--model", "standin", "--store", store, "--port", "0", "--workers", "2")
    code, out = serve(*args, "--worker-timeout", "0")
    assert code == 0 and ran["workers"] == 2 and ran["worker_timeout"] == 0
    assert ran["ports"] == [banner_port(out)] and banner_port(out) != 0
    code, out = serve(*args)
    assert code == 0 and ran["worker_timeout"] == 30 and ran["start"] == 60
    code, out = serve(*args, "--worker-start-timeout", "90")
    assert code == 0 and ran["start"] == 90


@pytest.mark.parametrize("option", ["--worker-timeout", "--worker-start-timeout"])
@pytest.mark.parametrize("bad", ["-1", "nan", "inf"])
def test_serve_refuses_a_worker_timeout_that_is_not_seconds_in_one_line(
    option: str, bad: str
) -> None:
    code, out = serve(NOTES, "--model", "standin", "--workers", "2", option, bad)
    assert code == 2 and out.count("\n") == 1 and "Traceback" not in out
    assert out.startswith(f"agentscript serve: {option} {bad}") and "0 to turn" in out


def test_serve_refuses_an_agent_whose_name_cannot_be_part_of_a_url(tmp_path: Path) -> None:
    agent = tmp_path / "spaced.agent"
    agent.write_text(
        Path(NOTES)
        .read_text(encoding="utf-8")
        .replace('developer_name: "Notes"', 'developer_name: "My Notes"'),
        encoding="utf-8",
    )
    code, out = serve(str(agent), "--model", "standin", "--store", "memory://")
    assert code == 2 and "the agent's name 'My Notes' cannot be part of a URL" in out
    assert "Traceback" not in out


def test_serve_root_path_reaches_uvicorn_and_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentscript.server import logs, runner

    given: dict[str, object] = {}
    monkeypatch.setattr(runner, "run", lambda app, **kwargs: given.update(kwargs) or 0)
    monkeypatch.setattr(logs, "configure", lambda **options: None)
    code, out = serve(
        NOTES, "--model", "standin", "--store", "memory://", "--root-path", "/agents/"
    )
    assert code == 0 and given["root_path"] == "/agents"
    assert "prefix: /agents (stripped by the proxy in front)" in out
    for bad in ("agents", "/a b", "/a?x=1", "/a#b", "//evil.example", "/a/../b", "/a//b", "/."):
        code, out = serve(NOTES, "--model", "standin", "--root-path", bad)
        assert code == 2 and "--root-path" in out and "e.g. /agents" in out, bad
        assert "Traceback" not in out


def test_serve_takes_an_agent_named_twice_as_one(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentscript.server import logs, runner

    monkeypatch.setattr(runner, "run", lambda app, **kwargs: 0)
    monkeypatch.setattr(logs, "configure", lambda **options: None)
    folder = str(Path(NOTES).parent)
    code, out = serve(folder, NOTES, "--model", "standin", "--store", "memory://")
    assert code == 0, out
    assert out.count("agent:  Notes") == 1 and "two agents" not in out


def test_the_banner_says_where_a_relative_sqlite_file_is_and_brackets_an_ipv6_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    # sqlite:///tmp/x.db is ./tmp/x.db: the banner names the file, so nobody takes it for /tmp
    options = ServeOptions(paths=[NOTES], model="standin", store="sqlite:///tmp/x.db", host="::1")
    _app, lines = build_app(options)
    text = "\n".join(lines)
    assert f"store:  sqlite:///tmp/x.db (the file {tmp_path / 'tmp' / 'x.db'})" in text
    assert "listening on http://[::1]:8000 " in text
    absolute = tmp_path / "abs.db"
    _app, lines = build_app(replace(options, store=f"sqlite:///{absolute}", host="127.0.0.1"))
    assert f"store:  sqlite:///{absolute}\n" in "\n".join(lines) + "\n"


ORG_AGENT = """\
system:
    instructions: "Help."
    messages:
        welcome: "Hi"
        error: "Sorry."

config:
    developer_name: "OrgAgent"

variables:
    customer_id: linked string
        description: "The customer ID, from the host"

start_agent main:
    description: "Main"
    reasoning:
        instructions: ->
            | Help the customer.
"""


def test_serve_checks_against_the_dialect_it_is_given(tmp_path: Path) -> None:
    """A linked variable without a Salesforce source is an error of the agentforce dialect
    (the default without a header), with a hint; `--dialect agentscript` serves it, as `run`
    and `chat` do."""
    agent = tmp_path / "org.agent"
    agent.write_text(ORG_AGENT)
    code, out = serve(str(agent), "--model", "standin")
    assert code == 2 and "cannot serve an agent with errors" in out
    assert "linked-variable-missing-source" in out
    assert "hint: --dialect agentscript checks without the Salesforce-org rules" in out
    options = ServeOptions(paths=[str(agent)], model="standin", store="memory://")
    with pytest.raises(ServeError):
        build_app(options)
    _app, lines = build_app(replace(options, dialect="agentscript"))
    assert any("OrgAgent" in line for line in lines)
