"""How an action's failure is reported, in every isolation mode (thread, inline, process, and
an ``async def`` action on the loop):

* a URL in the failure's text is shown as a target is, without its user, password, query
  string and fragment (a backend's exception names the URL it called: httpx's
  ``raise_for_status`` message does), in the step's ``error``, the turn's error, what the model
  gets and what the action printed;
* when ``[actions.targets]`` ran another target, the message names both targets;
* the same failure has the same wording in every mode (a worker process's import and lookup
  failures were worded otherwise);
* process mode keeps ``[actions] output_limit`` characters of what an action printed, and its
  marker counts what it dropped, as the other modes do.
"""

from __future__ import annotations

import io
import json
import string
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

import agentscript
from agentscript import redaction
from agentscript.actions import capture
from agentscript.actions.capture import Printed
from agentscript.engine.session import Reply
from agentscript.models.scripted import Move, ScriptedModel
from fakes.agent_texts import act_action, agent_text
from fakes.spies import record_lengths

# The turn runs the action itself (a failure ends the turn: Reply.error, the server's
# failed-turn log line), or the model calls it (a failure is the model's tool result).
PROCEDURE = "run @actions.act"

MODES = ["thread", "inline", "process", "async"]
FLOW = "flow://Get_Delivery_Date"
RAN = "python://backend:act"
MAPPED = f"action 'act' ({FLOW}, run as {RAN} by [actions.targets])"

TOKEN = "tok_live_ABCDEF123456"
PASSWORD = "hunter2"
RAISES_URL = (
    "def act():\n"
    "    raise ConnectionError("
    f"'POST https://svc:{PASSWORD}@orders.internal/api?key={TOKEN} -> 503')\n"
)


def agent_in(
    folder: Path,
    mode: str,
    code: str,
    *,
    mapped: bool,
    procedure: bool = False,
    toml: str = "",
) -> Path:
    """An agent whose action ``act`` runs ``code``'s ``act`` (``backend.py``) in ``mode``:
    through ``[actions.targets]`` (``mapped``) or as its own ``python://`` target."""
    folder.mkdir(parents=True, exist_ok=True)
    if mode == "async":
        code = code.replace("def act(", "async def act(")
    (folder / "backend.py").write_text(code, encoding="utf-8")
    isolation = "thread" if mode == "async" else mode
    table = f'[actions]\nisolation = "{isolation}"\n{toml}'
    if mapped:
        table += f'\n[actions.targets]\n"{FLOW}" = "{RAN}"\n'
    (folder / "agentscript.toml").write_text(table, encoding="utf-8")
    text = agent_text(
        developer_name="Errors",
        run=[PROCEDURE] if procedure else [],
        actions=[act_action(FLOW if mapped else RAN)],
    )
    path = folder / "a.agent"
    path.write_text(text, encoding="utf-8")
    return path


def call(path: Path, timeout: float = 20.0) -> tuple[Reply, Any]:
    agent = agentscript.load(path)
    session = agent.session(
        model=ScriptedModel([Move(calls=[("act", {})]), Move(text="Done.")]),
        limits=agentscript.Limits(action_timeout=timeout),
    )
    return session.send("go"), session


def action_step(reply: Reply) -> dict[str, Any]:
    steps: list[dict[str, Any]] = reply.trace["planTrace"]["steps"]
    return next(s for s in steps if s["type"] == "ACTION_STEP")


def error_of(folder: Path, mode: str, code: str, *, mapped: bool) -> str:
    reply, _ = call(agent_in(folder, mode, code, mapped=mapped))
    return str(action_step(reply)["error"])


@pytest.fixture(autouse=True)
def _no_config_override(monkeypatch: pytest.MonkeyPatch) -> None:
    # The toml under test is the one beside the agent, not one the shell points at.
    monkeypatch.delenv("AGENTSCRIPT_CONFIG", raising=False)


# ------------------------------------------------------------------ credentials in errors


@pytest.mark.parametrize("mapped", [False, True], ids=["direct", "mapped"])
@pytest.mark.parametrize("mode", MODES)
def test_a_url_in_the_error_reaches_the_model_without_its_credentials(
    tmp_path: Path, mode: str, mapped: bool
) -> None:
    reply, session = call(agent_in(tmp_path, mode, RAISES_URL, mapped=mapped))
    subject = MAPPED if mapped else "action 'act'"
    expected = f"{subject} failed: ConnectionError: POST https://orders.internal/api -> 503"
    assert action_step(reply)["error"] == expected
    [result] = [m.content for m in session.state.history if m.role == "tool"]
    assert "orders.internal/api" in result
    for where in (result, json.dumps(reply.trace)):
        assert PASSWORD not in where and TOKEN not in where


@pytest.mark.parametrize("mapped", [False, True], ids=["direct", "mapped"])
@pytest.mark.parametrize("mode", MODES)
def test_a_url_in_the_error_that_ends_the_turn_has_no_credentials(
    tmp_path: Path, mode: str, mapped: bool
) -> None:
    # Reply.error is what the server answers as turn.error and logs in its WARNING line.
    reply, _ = call(agent_in(tmp_path, mode, RAISES_URL, mapped=mapped, procedure=True))
    assert reply.error is not None
    assert "https://orders.internal/api -> 503" in reply.error
    assert PASSWORD not in reply.error and TOKEN not in reply.error
    assert PASSWORD not in json.dumps(reply.trace) and TOKEN not in json.dumps(reply.trace)


@pytest.mark.parametrize("mode", MODES)
def test_an_import_failure_and_an_action_error_quoting_a_url_have_no_credentials(
    tmp_path: Path, mode: str
) -> None:
    url = f"https://svc:{PASSWORD}@orders.internal/api?key={TOKEN}"
    at_import = f"raise RuntimeError('no config at {url}')\n"
    assert error_of(tmp_path / "imp", mode, at_import, mapped=False) == (
        "cannot import 'backend' for action 'act': no config at https://orders.internal/api"
    )
    own = f"from agentscript.actions import ActionError\n\ndef act():\n    raise ActionError('{url} said no')\n"
    assert error_of(tmp_path / "own", mode, own, mapped=False) == (
        "https://orders.internal/api said no"
    )


@pytest.mark.parametrize("mode", MODES)
def test_what_an_action_printed_shows_urls_without_credentials(tmp_path: Path, mode: str) -> None:
    # A client library's log line (httpx logs each request at INFO) names the URL it called.
    code = (
        "import sys\n\ndef act():\n"
        f"    print('HTTP Request: POST https://svc:{PASSWORD}@orders.internal/api?key={TOKEN}"
        ' "HTTP/1.1 200 OK"\', file=sys.stderr)\n'
        "    return {'who': 'x'}\n"
    )
    reply, _ = call(agent_in(tmp_path, mode, code, mapped=False))
    assert action_step(reply)["printed"] == {
        "stderr": 'HTTP Request: POST https://orders.internal/api "HTTP/1.1 200 OK"\n'
    }


@pytest.mark.parametrize("mode", MODES)
def test_a_url_the_output_limit_cuts_through_is_not_kept(tmp_path: Path, mode: str) -> None:
    # Cut after the password, the URL's "@" is gone: nothing would tell the password from a host.
    head = "calling https://svc:" + PASSWORD
    code = (
        f"def act():\n    print({head + '@orders.internal/api?key=' + TOKEN!r})\n    return {{}}\n"
    )
    toml = f"output_limit = {len(head)}\n"
    reply, _ = call(agent_in(tmp_path, mode, code, mapped=False, toml=toml))
    total = len(head) + len("@orders.internal/api?key=" + TOKEN) + 1
    dropped = total - len("calling ")
    assert action_step(reply)["printed"] == {
        "stdout": f"calling \n[... {dropped} more characters not kept]"
    }


# What the error keeps of a failure's text (actions/registry.py: MAX_ERROR_CHARS).
KEPT = 4_000
OWN_ERROR = "from agentscript.actions import ActionError\n\ndef act():\n    raise ActionError("
RAISED = "def act():\n    raise ValueError("


@pytest.mark.parametrize("own", [False, True], ids=["raised", "action_error"])
@pytest.mark.parametrize("mode", MODES)
def test_a_huge_error_text_is_cut_before_its_paths_are_shown(
    tmp_path: Path, mode: str, own: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Paths a client named, 25,000 of them: showing every one would hold the event loop
    # (~2.5 µs each; an exception's text has no bound).
    real = redaction.shown_urls
    lengths = record_lengths(monkeypatch, redaction, "shown_urls")
    path = f" /api?key={TOKEN}"
    code = (OWN_ERROR if own else RAISED) + f"'refused:' + {path!r} * 25_000)\n"
    message = ("" if own else "action 'act' failed: ValueError: ") + "refused:" + path * 25_000
    error = error_of(tmp_path, mode, code, mapped=False)
    assert lengths and max(lengths) <= KEPT
    assert error == (f"{real(message[:KEPT])} [... {len(message) - KEPT} more characters not kept]")
    assert TOKEN[:4] not in error


@pytest.mark.parametrize("mode", MODES)
def test_a_url_the_error_cut_goes_through_is_not_kept(tmp_path: Path, mode: str) -> None:
    # Cut after the password, the URL's "@" is gone: nothing would tell the password from a host.
    subject = "action 'act' failed: ValueError: "
    head = f" https://svc:{PASSWORD}"
    filler = "x" * (KEPT - len(subject) - len(head))
    code = RAISED + f"{filler + head + '@orders.internal/api?key=' + TOKEN!r})\n"
    message = f"{subject}{filler}{head}@orders.internal/api?key={TOKEN}"
    error = error_of(tmp_path, mode, code, mapped=False)
    dropped = len(message) - len(subject + filler + " ")
    assert error == f"{subject}{filler}  [... {dropped} more characters not kept]"
    assert PASSWORD not in error


# ------------------------------------------------------------------ the same words in every mode

MISSING = "def other():\n    return {}\n"
# What the modes worded differently, and how every mode words it now (an unmapped action: the
# words threads used).
UNMAPPED = {
    "missing_function": (MISSING, "'backend' has no function 'act' (action 'act')"),
    "import_error": (
        "import orders_sdk_not_installed\n",
        "cannot import 'backend' for action 'act': No module named 'orders_sdk_not_installed'",
    ),
    "own_action_error": (
        "from agentscript.actions import ActionError\n\n"
        "def act():\n    raise ActionError('order 7 does not exist')\n",
        "order 7 does not exist",
    ),
    # A socket's timeout is the action's failure, not the runner's timeout (threads said
    # "timed out after 20 s" at once).
    "own_timeout": (
        "def act():\n    raise TimeoutError('read timed out')\n",
        "action 'act' failed: TimeoutError: read timed out",
    ),
}


@pytest.mark.parametrize("case", sorted(UNMAPPED))
def test_a_failure_is_worded_alike_in_every_mode(tmp_path: Path, case: str) -> None:
    code, expected = UNMAPPED[case]
    errors = {mode: error_of(tmp_path / mode, mode, code, mapped=False) for mode in MODES}
    assert errors == dict.fromkeys(MODES, expected)


def test_a_missing_module_is_worded_alike_in_every_mode(tmp_path: Path) -> None:
    errors = {}
    for mode in MODES:
        path = agent_in(tmp_path / mode, mode, "", mapped=False)
        (path.parent / "backend.py").unlink()
        errors[mode] = str(action_step(call(path)[0])["error"])
    expected = "cannot import 'backend' for action 'act': No module named 'backend'"
    assert errors == dict.fromkeys(MODES, expected)


MAPPED_CASES = {
    "missing_function": (MISSING, f"{MAPPED} failed: 'backend' has no function 'act'"),
    "import_error": (
        "import orders_sdk_not_installed\n",
        f"{MAPPED} failed: cannot import 'backend': No module named 'orders_sdk_not_installed'",
    ),
    "raising": (
        "def act():\n    raise ValueError('bad order')\n",
        f"{MAPPED} failed: ValueError: bad order",
    ),
    "sys_exit": ("import sys\n\ndef act():\n    sys.exit(3)\n", f"{MAPPED} failed: SystemExit: 3"),
    "non_dict": (
        "def act():\n    return 'February 10'\n",
        f"{MAPPED} returned str; it must return a dict of outputs",
    ),
}


@pytest.mark.parametrize("case", sorted(MAPPED_CASES))
@pytest.mark.parametrize("mode", MODES)
def test_a_mapped_actions_failure_names_the_agents_target_and_the_one_that_ran(
    tmp_path: Path, mode: str, case: str
) -> None:
    code, expected = MAPPED_CASES[case]
    assert error_of(tmp_path, mode, code, mapped=True) == expected


@pytest.mark.parametrize("mode", MODES)
def test_a_mapped_actions_missing_module_and_timeout_name_both_targets(
    tmp_path: Path, mode: str
) -> None:
    path = agent_in(tmp_path / "gone", mode, "", mapped=True)
    (path.parent / "backend.py").unlink()
    assert action_step(call(path)[0])["error"] == (
        f"{MAPPED} failed: cannot import 'backend': No module named 'backend'"
    )
    if mode == "inline":
        return  # an inline call holds the loop: no timer can stop it
    release = tmp_path / "release"
    sleep = (
        "import time\n\ndef act():\n    for _ in range(1000):\n"
        f"        if __import__('os').path.exists({str(release)!r}):\n            return\n"
        "        time.sleep(0.01)\n"
    )
    if mode == "async":
        sleep = "import asyncio\n\ndef act():\n    await asyncio.sleep(10)\n"
    try:
        reply, _ = call(agent_in(tmp_path / "slow", mode, sleep, mapped=True), timeout=0.5)
    finally:
        release.touch()  # a thread cannot be stopped: the action returns by itself
        _no_action_running()
    assert action_step(reply)["error"] == f"{MAPPED} timed out after 0.5 s"


def _no_action_running() -> None:
    """Wait for a timed-out action's thread to return: while it runs, stdout stays captured
    (other tests check that it is not)."""
    deadline = time.monotonic() + 10
    while capture._running and time.monotonic() < deadline:
        time.sleep(0.01)


# ------------------------------------------------------------------ printed, in a worker process

LIMITS = {"default": None, "larger": 100_000, "smaller": 10}


@pytest.mark.parametrize("limit", sorted(LIMITS))
def test_process_mode_keeps_output_limit_and_counts_what_it_dropped(
    tmp_path: Path, limit: str
) -> None:
    code = (
        "import sys\n\ndef act():\n    print('x' * 2_000_000)\n"
        "    print('E' * 50_000, file=sys.stderr)\n    return {'who': 'p'}\n"
    )
    chars = LIMITS[limit]
    toml = f"output_limit = {chars}\n" if chars is not None else ""
    kept = chars if chars is not None else 16_000
    expected = {
        "stdout": _kept("x" * 2_000_000 + "\n", kept),
        "stderr": _kept("E" * 50_000 + "\n", kept),
    }
    for mode in ("thread", "process"):
        reply, _ = call(agent_in(tmp_path / mode, mode, code, mapped=False, toml=toml))
        printed = action_step(reply)["printed"]
        # Compared by sizes and ends first: a failure would print two megabytes.
        assert _summary(printed) == _summary(expected), mode
        assert printed == expected, mode


def _kept(text: str, limit: int) -> str:
    dropped = len(text) - limit
    return text[:limit] + f"\n[... {dropped} more characters not kept]" if dropped > 0 else text


def _summary(printed: dict[str, str] | None) -> dict[str, tuple[int, str]] | None:
    return {k: (len(v), v[-60:]) for k, v in printed.items()} if printed is not None else None


def test_output_is_captured_after_the_host_replaced_stdout_while_an_action_hung(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A timed-out action goes on running on its thread; the host (here, the test runner's
    # capture) swaps sys.stdout meanwhile: later actions' output went to that stream.
    release = threading.Event()

    def hangs() -> dict[str, str]:
        release.wait(timeout=30)
        return {}

    def talks() -> dict[str, str]:
        print("said")
        return {}

    agent = agentscript.load(agent_in(tmp_path, "thread", "", mapped=False))

    def send(act: Any, timeout: float) -> Reply:
        session = agent.session(
            model=ScriptedModel([Move(calls=[("act", {})]), Move(text="ok")]),
            actions={"act": act},
            limits=agentscript.Limits(action_timeout=timeout),
        )
        return session.send("go")

    host = io.StringIO()
    try:
        assert "timed out" in str(action_step(send(hangs, 0.2))["error"])
        monkeypatch.setattr(sys, "stdout", host)
        reply = send(talks, 10.0)
    finally:
        release.set()
        _no_action_running()
    assert action_step(reply)["printed"] == {"stdout": "said\n"}
    assert host.getvalue() == ""


# ------------------------------------------------------------------ shown_urls


def shown_urls(text: str) -> str:
    # Looked up at the call, so the other tests of this file run against a tree without it.
    shown: str = redaction.shown_urls(text)
    return shown


def test_shown_urls_examples() -> None:
    assert (
        shown_urls(f"POST https://svc:{PASSWORD}@orders.internal/api?key={TOKEN} -> 503")
        == "POST https://orders.internal/api -> 503"
    )
    # httpx's raise_for_status message: a quoted URL, then another URL.
    assert shown_urls(
        f"Client error '404 Not Found' for url 'https://orders.internal/x?key={TOKEN}'\n"
        "For more information check: https://developer.mozilla.org/en-US/docs/Web/HTTP/Status/404"
    ) == (
        "Client error '404 Not Found' for url 'https://orders.internal/x'\n"
        "For more information check: https://developer.mozilla.org/en-US/docs/Web/HTTP/Status/404"
    )
    assert shown_urls("(see https://h/x?k=v).") == "(see https://h/x)."
    assert shown_urls("{'url': 'https://u:p@h/x#frag'}") == "{'url': 'https://h/x'}"
    assert shown_urls("https://[::1]:8080/x?k=v") == "https://[::1]:8080/x"
    assert shown_urls("https://h/wiki/A_(b)?k=v") == "https://h/wiki/A_(b)"
    # Other targets, and text without URLs, as written.
    for text in ("python://backend:act failed", "flow://Get_Delivery_Date", "no url: here", ""):
        assert shown_urls(text) == text
    # A password or query holding a quote or a bracket is hidden whole.
    assert shown_urls("'https://u:p'a(ss@h/x?q=it's(ok)'") == "'https://h/x'"
    assert shown_urls("https://[::1/x?key=k") == "https://(unreadable)"


def test_printed_counts_what_a_worker_kept() -> None:
    worker = Printed(10)
    worker.add(0, "a" * 25)
    caller = Printed(10)
    for index, (text, size) in enumerate(worker.streams()):
        if size:
            caller.add_kept(index, text, size)
    assert (
        caller.to_json()
        == worker.to_json()
        == {"stdout": "a" * 10 + "\n[... 15 more characters not kept]"}
    )


# Secrets are made of capital letters (and URL punctuation); everything else of none, so a
# capital letter in the output is a piece of a secret.
SECRET = st.text(alphabet=string.ascii_uppercase + "%!$&'()*+,;=:~-._/?#[]@", min_size=1).filter(
    lambda s: any(c.isupper() for c in s)
)
PUBLIC = st.text(alphabet=string.ascii_lowercase + string.digits + "-._", min_size=1)
FILLER = st.text(st.characters(exclude_characters=string.ascii_uppercase), max_size=12)


@st.composite
def url_with_secrets(draw: st.DrawFn) -> str:
    scheme = draw(st.sampled_from(["http", "https", "postgres", "redis", "x"]))
    user = draw(st.one_of(st.just(""), PUBLIC, SECRET))
    password = draw(SECRET)
    host = draw(PUBLIC)
    path = draw(st.lists(PUBLIC, max_size=3))
    query = draw(st.one_of(st.just(""), SECRET.map(lambda s: "?" + s)))
    fragment = draw(st.one_of(st.just(""), SECRET.map(lambda s: "#" + s)))
    userinfo = draw(st.sampled_from([f"{user}:{password}@", f"{password}@", ""]))
    tail = "".join("/" + part for part in path)
    if not userinfo:  # then the secret is in the query
        query = query or "?" + password
    return f"{scheme}://{userinfo}{host}{tail}{query}{fragment}"


@settings(deadline=None)
@given(st.lists(st.tuples(FILLER, url_with_secrets()), min_size=1, max_size=4), FILLER)
@example([("", f"https://svc:{PASSWORD.upper()}@h/api?key={TOKEN.upper()}")], " -> 503")
@example([("'", "https://U:P@h/x?Q"), ("', '", "https://h/y#F")], "'")
@example([("(", "https://h/a)b?QUERY")], ")")
def test_shown_urls_never_shows_a_password_or_a_query(
    parts: list[tuple[str, str]], end: str
) -> None:
    text = "".join(filler + url for filler, url in parts) + end
    assume(not any(c in string.ascii_uppercase for c in "".join(f for f, _ in parts) + end))
    shown = shown_urls(text)
    assert not any(c in string.ascii_uppercase for c in shown), (text, shown)


@settings(deadline=None)
@given(st.text())
@example("a" * 50 + "://" + ")" * 50)
@example("https://[")
@example("://@")
def test_shown_urls_never_raises_and_keeps_text_without_urls(text: str) -> None:
    shown = shown_urls(text)
    # Without a scheme, only a path's "?" or "#" may change the text (tests/test_redaction_gaps.py).
    if "://" not in text and not ("/" in text and ("?" in text or "#" in text)):
        assert shown == text
