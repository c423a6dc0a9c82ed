"""An action's target is recorded without a URL's user, password, query string and fragment
(``redaction.shown_target``): in its ACTION_STEP (so ``reply.trace`` and trace files) and in
the error of a target no handler serves, as docs/security.md promises for traces and errors."""

from __future__ import annotations

import json
from pathlib import Path

import agentscript
from agentscript.actions import StubBook
from agentscript.models.scripted import Move, ScriptedModel
from agentscript.redaction import shown_target, shown_url

SECRET = "sk-live-QUERYSECRET"
TARGET = f"https://bot:hunter22@api.example.com/orders/find?api_key={SECRET}#t={SECRET}"
SHOWN = "https://api.example.com/orders/find"

AGENT = """\
system:
    instructions: "Be brief."
    messages:
        error: "Failed."
config:
    developer_name: "targets"
start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | Help.
        actions:
            lookup: @actions.lookup
    actions:
        lookup:
            description: "Look an order up"
            target: "TARGET"
            outputs:
                status: string
"""


def test_shown_target_drops_a_urls_credentials_and_keeps_other_targets_as_written() -> None:
    assert shown_target(TARGET) == SHOWN
    assert shown_target("http://127.0.0.1:8080/x?token=abc") == "http://127.0.0.1:8080/x"
    for target in (
        "python://backend.orders:lookup",
        "flow://Get_Order",
        "mcp://billing/charge",
        "https://api.example.com/orders",
        "not a url",
    ):
        assert shown_target(target) == target
    assert shown_target("https://[::1/x?key=" + SECRET) == "https://(unreadable)"


def test_a_password_with_a_raw_hash_question_mark_or_slash_is_not_shown() -> None:
    # A URL parser ends the host at the first of them: the credential was kept as host or path.
    url = "https://user:p/ss@api.example.com/orders"
    assert shown_target(url) == shown_url(url) == "https://api.example.com/orders"
    # After a "?" or "#", the "@" may as well be a query's (?email=a@b.com&key=...): every
    # part of the URL is secret in one reading or the other.
    for password in ("se#cret", "se?cret"):
        url = f"https://user:{password}@api.example.com/orders"
        assert shown_target(url) == "https://(unreadable)"
        assert shown_url(url) == "(a URL)"
    url = f"https://api.example.com/users?email=bob@example.com&api_key={SECRET}"
    assert shown_target(url) == "https://(unreadable)"


def _send(tmp_path: Path, stubs: StubBook | None) -> agentscript.Reply:
    path = tmp_path / "targets.agent"
    path.write_text(AGENT.replace("TARGET", TARGET))
    model = ScriptedModel([Move(calls=[("lookup", {})]), Move(text="Done.")])
    session = agentscript.load(path).session(model=model, stubs=stubs, trace_dir=tmp_path / "t")
    return session.send("where is it?")


def test_an_action_steps_target_holds_no_url_credentials(tmp_path: Path) -> None:
    stubs = StubBook.from_data({"lookup": {"outputs": {"status": "shipped"}}})
    reply = _send(tmp_path, stubs)
    assert reply.error is None, reply.error
    (step,) = [s for s in reply.trace["planTrace"]["steps"] if s["type"] == "ACTION_STEP"]
    assert step["target"] == SHOWN
    assert reply.trace_file is not None
    written = Path(reply.trace_file).read_text()
    assert SECRET not in written + json.dumps(reply.trace) and "hunter22" not in written


def test_a_target_no_handler_serves_is_named_without_url_credentials(tmp_path: Path) -> None:
    reply = _send(tmp_path, None)
    (step,) = [s for s in reply.trace["planTrace"]["steps"] if s["type"] == "ACTION_STEP"]
    assert "has no handler" in step["error"] and SHOWN in step["error"]
    assert SECRET not in json.dumps(reply.trace) and "hunter22" not in json.dumps(reply.trace)
