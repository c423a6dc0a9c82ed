"""What a client may give a new Mantle session: never an entry the conversation could not have
written that way. A project entry is settable at creation only with ``mutable: true``
(``llm_settable`` means nothing for project memory, which the model never writes: it opened a
login's ``authenticated`` to any client), and never an entry a post-write hook checks (a value
given at creation skipped the hook: a hook refusing ``qty > 10`` let a client start at 999)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import httpx2 as httpx

from agentscript.server.agents import describe, load_agents, serve_agents
from agentscript.server.app import create_app
from agentscript.server.auth import ApiKeys
from agentscript.server.standin import StandInModel
from agentscript.store import store_from_url

from .harness import CARD_BANK

HOOK = '''

def run_after_setting_shipping(value: Any = None, context: Any = None) -> dict[str, Any]:
    """Refuse a shipping the bank does not offer."""
    if value not in ("standard", "express"):
        return {"error": f"no such shipping: {value}"}
    return {"ok": True}
'''


def card_bank_copy(tmp_path: Path, *, llm_settable_login: bool = False, hook: bool = False) -> Path:
    project = tmp_path / "card_bank"
    shutil.copytree(CARD_BANK, project)
    if llm_settable_login:
        memory = project / "memory.yml"
        text = memory.read_text(encoding="utf-8")
        memory.write_text(
            text.replace(
                "authenticated:\n  type: bool\n",
                "authenticated:\n  type: bool\n  llm_settable: true\n",
                1,
            ),
            encoding="utf-8",
        )
    if hook:
        tools = project / "skills" / "card_replace" / "tools.py"
        tools.write_text(tools.read_text(encoding="utf-8") + HOOK, encoding="utf-8")
    return project


def variables_of(project: Path) -> dict[str, dict[str, Any]]:
    [agent] = load_agents([str(project)])
    return {v["name"]: v for v in describe(agent)["variables"]}


async def create(project: Path, variables: dict[str, Any]) -> httpx.Response:
    loaded = load_agents([str(project)])
    served = serve_agents(loaded, {a.name: StandInModel() for a in loaded})
    app = create_app(served, store_from_url("memory://"), keys=ApiKeys.of(), purge_every=None)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c,
    ):
        name = loaded[0].name
        return await c.post(f"/v1/agents/{name}/sessions", json={"variables": variables})


def test_an_llm_settable_project_entry_is_not_a_clients_to_set(tmp_path: Path) -> None:
    project = card_bank_copy(tmp_path, llm_settable_login=True)
    assert variables_of(project)["project.authenticated"]["mutable"] is False
    refused = asyncio.run(create(project, {"project.authenticated": True}))
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["code"] == "invalid_variable"
    assert "project.authenticated" in refused.json()["error"]["message"]


def test_an_entry_a_hook_checks_is_not_a_clients_to_set(tmp_path: Path) -> None:
    plain = variables_of(card_bank_copy(tmp_path / "plain"))
    assert plain["card_replace.shipping"]["mutable"] is True  # a collect step fills it
    project = card_bank_copy(tmp_path / "hooked", hook=True)
    described = variables_of(project)
    assert described["card_replace.shipping"]["mutable"] is False
    assert described["card_replace.reason"]["mutable"] is True  # no hook of its own
    refused = asyncio.run(create(project, {"card_replace.shipping": "teleport"}))
    assert refused.status_code == 422, refused.text
    assert "card_replace.shipping" in refused.json()["error"]["message"]
    created = asyncio.run(create(project, {"card_replace.reason": "lost"}))
    assert created.status_code == 201, created.text
