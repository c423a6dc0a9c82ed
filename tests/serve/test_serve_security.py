"""Findings of a security review of ``agentscript serve``, each through the real ASGI app:

- a new session takes only the variables ``GET /v1/agents/{agent}`` marks linked or mutable
  (a key holder presetting a Mantle project entry skipped the login that writes it);
- ``/readyz`` names the store's kind, never its URL or file (that goes to the log);
- a ``#`` inside a key of a key file is part of the key; keys shorter than 16 are refused;
- a path with a trailing slash is a ``404 not_found``, never a redirect built from ``Host``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

from agentscript.server.agents import load_agents, serve_agents
from agentscript.server.app import create_app
from agentscript.server.auth import ApiKeys, KeyConfigError, key_hash
from agentscript.server.command import ServeError, ServeOptions, build_app
from agentscript.server.config import ServerConfig
from agentscript.server.errors import ApiError
from agentscript.server.logs import WithRequestId
from agentscript.server.standin import StandInModel
from agentscript.store import store_from_url

from .harness import CARD_BANK, NOTES, run

NO_LIMIT = ServerConfig(rate_limit=0)
MIN_KEY_CHARS = 16  # the shortest key a server takes
# What a tool of examples/card_bank writes once the customer passed the login.
SIGNED_IN = {
    "project.authenticated": True,
    "project.customer_id": "1001",
    "project.customer_name": "Alice",
}
SETTABLE = "neither linked nor mutable"

ADMIN_AGENT = """\
system:
    instructions: "Help the user."
    messages:
        welcome: "Hi."
        error: "Sorry."

config:
    developer_name: "Gate"

variables:
    is_admin: boolean = False
        description: "Set by the agent alone"
    user_id: linked string
        description: "Who is talking, from the host"
        source: @MessagingSession.Id
    note: mutable string = ""
        description: "A starting note"

start_agent router:
    description: "Answer"
    reasoning:
        instructions: ->
            | Answer the user.
"""


def error_of(response: httpx.Response) -> tuple[int, str, str]:
    error = response.json()["error"]
    return response.status_code, error["code"], error["message"]


# ------------------------------------------------------------------ variables at creation


def test_a_client_cannot_preset_the_project_entries_a_mantle_login_writes(tmp_path: Path) -> None:
    """The review's repro: presetting what the login tool writes skipped the login and
    /get_balance answered customer 1001's balance. Refused, naming the entries and what may be
    set; no session is made."""

    async def scenario(client: httpx.AsyncClient) -> tuple[Any, ...]:
        described = (await client.get("/v1/agents/card-bank")).json()["variables"]
        created = await client.post("/v1/agents/card-bank/sessions", json={"variables": SIGNED_IN})
        listed = (await client.get("/v1/sessions")).json()["sessions"]
        return described, created, listed

    described, created, listed = run(
        f"sqlite:///{tmp_path}/s.db", scenario, paths=(CARD_BANK,), config=NO_LIMIT
    )
    flags = {v["name"]: (v["mutable"], v["linked"]) for v in described}
    assert all(flags[name] == (False, False) for name in SIGNED_IN)
    status, code, message = error_of(created)
    assert (status, code) == (422, "invalid_variable")
    assert all(repr(name) in message for name in SIGNED_IN) and SETTABLE in message
    # It says what may be set: the linked and mutable ones, such as a skill's entries.
    assert "'card_replace.reason'" in message and "GET /v1/agents/card-bank" in message
    assert listed == []


def test_a_client_cannot_preset_what_a_mantle_skills_tools_write(tmp_path: Path) -> None:
    """Skill entries were all described as mutable, so a session could start with
    authenticate.attempts = -100 (a skill's first start keeps memory as given) and take 103
    tries before the limit of 3. Only what the conversation itself fills (llm_settable,
    collect-owned) may be preset."""

    async def scenario(client: httpx.AsyncClient) -> tuple[Any, ...]:
        described = (await client.get("/v1/agents/card-bank")).json()["variables"]
        counted = await client.post(
            "/v1/agents/card-bank/sessions", json={"variables": {"authenticate.attempts": -100}}
        )
        ordered = await client.post(
            "/v1/agents/card-bank/sessions",
            json={"variables": {"card_replace.replacement_ordered": True}},
        )
        collected = await client.post(
            "/v1/agents/card-bank/sessions",
            json={"variables": {"card_replace.card_id": "C-11", "card_replace.reason": "lost"}},
        )
        return described, counted, ordered, collected

    described, counted, ordered, collected = run(
        f"sqlite:///{tmp_path}/s.db", scenario, paths=(CARD_BANK,), config=NO_LIMIT
    )
    mutable = {v["name"] for v in described if v["mutable"]}
    assert mutable == {"card_replace.reason", "card_replace.card_id", "card_replace.shipping"}
    assert error_of(counted)[:2] == (422, "invalid_variable")
    assert "'authenticate.attempts'" in error_of(counted)[2]
    assert error_of(ordered)[:2] == (422, "invalid_variable")
    assert collected.status_code == 201, collected.text


def test_every_variable_is_refused_exactly_when_the_description_says_it_is_fixed(
    tmp_path: Path,
) -> None:
    """One notion of settable: whatever GET /v1/agents/{agent} reports decides creation."""
    agent = tmp_path / "gate.agent"
    agent.write_text(ADMIN_AGENT, encoding="utf-8")

    async def scenario(client: httpx.AsyncClient) -> list[tuple[str, bool, int, str]]:
        seen = []
        for name in ("card-bank", "Gate"):
            for variable in (await client.get(f"/v1/agents/{name}")).json()["variables"]:
                created = await client.post(
                    f"/v1/agents/{name}/sessions", json={"variables": {variable["name"]: None}}
                )
                fixed = not (variable["mutable"] or variable["linked"])
                seen.append((variable["name"], fixed, created.status_code, created.text))
        return seen

    seen = run(
        f"sqlite:///{tmp_path}/s.db", scenario, paths=(CARD_BANK, str(agent)), config=NO_LIMIT
    )
    assert any(fixed for _, fixed, _, _ in seen) and not all(fixed for _, fixed, _, _ in seen)
    for name, fixed, status, text in seen:
        refused = status == 422 and SETTABLE in text
        assert refused == fixed, (name, status, text)


def test_an_agent_script_constant_is_refused_and_linked_and_mutable_ones_are_taken(
    tmp_path: Path,
) -> None:
    agent = tmp_path / "gate.agent"
    agent.write_text(ADMIN_AGENT, encoding="utf-8")

    async def scenario(client: httpx.AsyncClient) -> tuple[httpx.Response, dict[str, Any]]:
        admin = await client.post(
            "/v1/agents/Gate/sessions", json={"variables": {"is_admin": True, "note": "x"}}
        )
        created = await client.post(
            "/v1/agents/Gate/sessions", json={"variables": {"user_id": "U-7", "note": "hello"}}
        )
        assert created.status_code == 201, created.text
        view = (await client.get(f"/v1/sessions/{created.json()['session_id']}")).json()
        return admin, view["variables"]

    admin, variables = run(f"sqlite:///{tmp_path}/s.db", scenario, paths=(str(agent),))
    status, code, message = error_of(admin)
    assert (status, code) == (422, "invalid_variable")
    assert "['is_admin']" in message and SETTABLE in message
    assert "['note', 'user_id']" in message  # what Gate takes
    assert variables == {"is_admin": False, "user_id": "U-7", "note": "hello"}


def test_mantle_project_entries_declared_mutable_or_seed_are_taken(tmp_path: Path) -> None:
    project = tmp_path / "card_bank"
    shutil.copytree(CARD_BANK, project, ignore=shutil.ignore_patterns("__pycache__"))
    with (project / "memory.yml").open("a", encoding="utf-8") as memory:
        memory.write(
            "channel:\n  type: text\n  seed: true\n  description: Where the customer is.\n"
            "theme:\n  type: text\n  mutable: true\n  description: A display choice.\n"
        )
    given = {"project.channel": "app", "project.theme": "dark", "card_replace.reason": "lost"}

    async def scenario(client: httpx.AsyncClient) -> dict[str, Any]:
        described = (await client.get("/v1/agents/card-bank")).json()["variables"]
        flags = {v["name"]: (v["mutable"], v["linked"]) for v in described}
        assert flags["project.channel"][1] and flags["project.theme"][0]
        created = await client.post("/v1/agents/card-bank/sessions", json={"variables": given})
        assert created.status_code == 201, created.text
        view = await client.get(f"/v1/sessions/{created.json()['session_id']}")
        return dict(view.json()["variables"])

    variables = run(f"sqlite:///{tmp_path}/s.db", scenario, paths=(str(project),))
    assert {name: variables[name] for name in given} == given
    assert variables["project.authenticated"] is None


def test_the_service_presets_any_declared_variable_only_when_asked(tmp_path: Path) -> None:
    """``any_declared``: for the playground without keys, whose user wrote the agent."""

    async def main() -> tuple[str, str]:
        agents = load_agents([CARD_BANK])
        served = serve_agents(agents, {a.name: StandInModel() for a in agents})
        app = create_app(served, store_from_url("memory://"), purge_every=None)
        service = app.state.service
        async with app.router.lifespan_context(app):
            created = await service.create("", "card-bank", dict(SIGNED_IN), any_declared=True)
            with pytest.raises(ApiError) as refused:
                await service.create("", "card-bank", dict(SIGNED_IN))
            record = await service.record("", created["session_id"])
            return str(record.state["variables"]["project.customer_id"]), str(refused.value)

    customer, refused = asyncio.run(main())
    assert customer == "1001" and SETTABLE in refused


# ------------------------------------------------------------------ /readyz


def test_readyz_names_the_kind_of_store_and_logs_where_it_is(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "private-name" / "sessions.db"
    path.parent.mkdir()
    caplog.handler.addFilter(WithRequestId())

    async def scenario(client: httpx.AsyncClient) -> httpx.Response:
        assert (await client.get("/readyz")).status_code == 200
        os.rename(path, tmp_path / "elsewhere.db")
        return await client.get("/readyz")

    with caplog.at_level(logging.ERROR, logger="agentscript.server"):
        down = run(f"sqlite:///{path}", scenario)
    status, code, message = error_of(down)
    assert (status, code) == (503, "not_ready")
    assert message == "the sqlite store does not answer (the log says why)"
    assert "private-name" not in down.text
    lines = [r for r in caplog.records if "readyz" in r.getMessage()]
    assert lines and str(path) in lines[0].getMessage()
    assert getattr(lines[0], "request_id", None) == down.headers["x-request-id"]


# ------------------------------------------------------------------ keys


def test_a_hash_sign_inside_a_key_of_a_key_file_is_part_of_the_key(tmp_path: Path) -> None:
    key = "Xy#9kQ2mP7vL4wZ8"
    file = tmp_path / "keys"
    file.write_text(
        f"# the team's keys\n  # indented comment\n{key}\nother-key-0123456789   # ops\n",
        encoding="utf-8",
    )
    keys = ApiKeys.from_env({"AGENTSCRIPT_API_KEYS": str(file)})
    assert keys.hashes == {key_hash(key), key_hash("other-key-0123456789")}
    assert keys.owner(f"Bearer {key}") == key_hash(key)
    assert keys.owner("Bearer Xy") is None


@pytest.mark.parametrize(
    ("setting", "where"),
    [
        ("x", "the key is too short"),
        ("long-enough-0123456789,short-key", "key 2 is too short"),
        ("FILE", "the key on line 2 of"),
    ],
)
def test_a_key_shorter_than_16_is_refused_with_how_to_make_one(
    tmp_path: Path, setting: str, where: str
) -> None:
    if setting == "FILE":
        file = tmp_path / "keys"
        file.write_text("long-enough-0123456789\nXy#9kQ2m\n", encoding="utf-8")
        setting = str(file)
    with pytest.raises(KeyConfigError) as refused:
        ApiKeys.from_env({"AGENTSCRIPT_API_KEYS": setting})
    message = str(refused.value)
    assert where in message and f"at least {MIN_KEY_CHARS}" in message
    assert "secrets.token_urlsafe(32)" in message
    assert "short-key" not in message and "Xy#9" not in message  # never the key itself


def test_a_key_of_16_and_a_short_key_given_by_its_hash_are_taken() -> None:
    keys = ApiKeys.from_env(
        {"AGENTSCRIPT_API_KEYS": f"{'k' * MIN_KEY_CHARS},sha256:{key_hash('x')}"}
    )
    assert keys.owner(f"Bearer {'k' * MIN_KEY_CHARS}") and keys.owner("Bearer x")


def test_serve_refuses_a_short_key_at_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTSCRIPT_API_KEYS", "x")
    options = ServeOptions(paths=[NOTES], host="0.0.0.0", model="standin", store="memory://")
    with pytest.raises(ServeError) as refused:
        build_app(options)
    assert "too short" in str(refused.value) and "token_urlsafe" in str(refused.value)


# ------------------------------------------------------------------ trailing slashes


def test_a_trailing_slash_is_a_404_never_a_redirect(tmp_path: Path) -> None:
    async def scenario(client: httpx.AsyncClient) -> list[httpx.Response]:
        attacker = {"Host": "attacker.example"}
        return [
            await client.get("/v1/agents/", headers=attacker),
            await client.get("/v1/agents/", headers={"Authorization": "Bearer key-0123456789ab"}),
            await client.post("/v1/sessions/abc/messages/", json={"text": "hi"}),
            await client.get("/healthz/"),
            await client.get("/v1/agents/Notes/"),
        ]

    answers = run(f"sqlite:///{tmp_path}/s.db", scenario, keys=("key-0123456789ab",))
    for answer in answers:
        assert answer.status_code == 404, (answer.request.url, answer.status_code)
        assert answer.json()["error"]["code"] == "not_found"
        assert "location" not in answer.headers
    # The paths without the slash still answer.
    ok = run(
        f"sqlite:///{tmp_path}/t.db",
        lambda c: c.get("/v1/agents"),
        keys=("key-0123456789ab",),
    )
    assert ok.status_code == 200
