"""The playground's server side: page and assets from the package, per-session stubs and
scripted replays, conversation and trace downloads, guards, the graph route, start-up checks."""

from __future__ import annotations

import asyncio
import functools
import io
import json
import re
import sys
import types
import zipfile
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import httpx2 as httpx
import pytest
from click.testing import CliRunner
from tests.playground.harness import (
    CARD_BANK,
    LATE_ORDER,
    ORDER_STATUS,
    BehindProxy,
    client,
    options,
    run,
    say,
    session,
)

from agentscript.cli import main
from agentscript.server.command import ServeError, build_app
from agentscript.server.playground.routes import STATIC
from agentscript.trace_inputs import rebuild_messages

CARD_VARS = {
    "project.authenticated": True,
    "project.customer_id": "1001",
    "project.customer_name": "Ada",
}


class References(HTMLParser):
    """The URLs a page loads (``src``, ``href``), ``data:`` ones left out."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href") and value and not value.startswith("data:"):
                self.found.append(value)


def references(html: str) -> list[str]:
    parser = References()
    parser.feed(html)
    return parser.found


async def follow(c: httpx.AsyncClient, url: str) -> str:
    """Where the redirect from ``url`` leads, resolved as a browser resolves it."""
    response = await c.get(url)
    assert response.status_code == 307, response.text
    return urljoin(str(response.url), response.headers["location"])


def test_playground_page_and_assets_come_from_the_package_without_network() -> None:
    async def scenario(c: httpx.AsyncClient) -> None:
        page_url = "http://127.0.0.1:8000/playground/"
        assert await follow(c, "/") == page_url
        page = await c.get("/playground/")
        assert page.status_code == 200
        loaded = sorted(urljoin(page_url, ref) for ref in references(page.text))
        assert loaded == [f"{page_url}static/playground.{kind}" for kind in ("css", "js")]
        for url in loaded:
            asset = await c.get(url)
            assert asset.status_code == 200 and len(asset.content) > 1000

    run(options(ORDER_STATUS), scenario)
    for file in STATIC.iterdir():
        text = file.read_text(encoding="utf-8")
        # Nothing is loaded from elsewhere: no absolute URL in src/href/url()/fetch.
        assert not re.search(r"""(src|href)=["']?(https?:)?//""", text), file.name
        assert not re.search(r"""(url|fetch|import)\(\s*["']?(https?:)?//""", text), file.name
        # Nor from the host's root: the server may be served under a prefix.
        assert not re.search(r"""["'](/v1/|/playground)""", text), file.name


def test_playground_page_and_assets_are_revalidated_so_an_upgrade_never_mixes_versions() -> None:
    """The page and its script and style all say ``Cache-Control: no-cache``: a browser keeps
    them but asks again (the assets answer 304 to their ETag), so a server upgrade never runs
    the new page with the old script, nor the old page with the new one."""

    async def scenario(c: httpx.AsyncClient) -> None:
        page = await c.get("/playground/")
        assert page.headers.get("cache-control") == "no-cache"
        for url in ("/playground/static/playground.js", "/playground/static/playground.css"):
            first = await c.get(url)
            assert first.status_code == 200
            assert first.headers.get("cache-control") == "no-cache", url
            again = await c.get(url, headers={"If-None-Match": first.headers["etag"]})
            assert again.status_code == 304, url
            assert again.headers.get("cache-control") == "no-cache", url

    run(options(ORDER_STATUS), scenario)


@pytest.mark.parametrize("told", [True, False], ids=["root_path", "prefix_stripped"])
def test_playground_page_behind_a_proxy_prefix_loads_everything_from_under_it(
    told: bool,
) -> None:
    """A proxy serves the app at /agents/: with ``root_path`` set (uvicorn --root-path), or
    only stripping the prefix. The redirects and the page's assets stay under it."""
    page_url = "http://127.0.0.1:8000/agents/playground/"

    async def scenario(c: httpx.AsyncClient) -> None:
        assert await follow(c, "/agents/") == page_url
        assert await follow(c, "/agents/playground?agent=A") == page_url + "?agent=A"
        if told:  # the prefix without its slash: a relative redirect would leave it
            assert await follow(c, "/agents") == page_url
        page = await c.get(page_url)
        assert page.status_code == 200
        loaded = [urljoin(page_url, ref) for ref in references(page.text)]
        assert len(loaded) == 2 and all(url.startswith(page_url) for url in loaded)
        for url in loaded:
            assert (await c.get(url)).status_code == 200, url
        # The API the page calls (relative to it) answers under the prefix too.
        config = await c.get(urljoin(page_url, "../playground/api/config"))
        assert config.status_code == 200 and config.json()["agents"]

    async def main() -> None:
        wrap = functools.partial(BehindProxy, prefix="/agents", told=told)
        async with client(options(ORDER_STATUS), wrap) as c:
            await scenario(c)

    asyncio.run(main())


def test_playground_stubs_answer_flow_actions_like_chat_stubs() -> None:
    async def scenario(c: httpx.AsyncClient) -> dict[str, Any]:
        sid = await session(c, "Order_Status", variables={"order_ID": "1234"})
        return await say(c, sid, "/go_to_orders")

    turn = run(options(ORDER_STATUS, stubs=LATE_ORDER), scenario)
    assert turn["actions"] == ["go_to_orders", "get_delivery_date", "check_if_late"]
    assert turn["variables"]["updated_delivery_date"] == "February 10, 2026"
    assert turn["variables"]["is_late"] is True
    assert turn["error"] is None


def test_playground_without_stubs_a_flow_action_fails_as_a_turn_error(tmp_path: Path) -> None:
    async def scenario(c: httpx.AsyncClient) -> dict[str, Any]:
        sid = await session(c, "Order_Status", variables={"order_ID": "1234"})
        return await say(c, sid, "/go_to_orders")

    # The agent alone: its folder's agentscript.toml maps the flows to a Python backend.
    alone = tmp_path / "order_status.agent"
    alone.write_text(Path(ORDER_STATUS).read_text(encoding="utf-8"), encoding="utf-8")
    turn = run(options(str(alone)), scenario)
    assert turn["error"] and "get_delivery_date" in turn["error"]


def test_playground_replay_answers_each_turn_with_the_files_moves_then_the_live_model() -> None:
    text = Path(LATE_ORDER).read_text(encoding="utf-8")

    async def scenario(c: httpx.AsyncClient) -> list[dict[str, Any]]:
        created = await c.post(
            "/playground/api/agents/Order_Status/sessions", json={"conversation": text}
        )
        assert created.status_code == 201
        assert created.json()["scripted_turns"] == 1
        assert created.json()["variables"] == {"order_ID": "1234", "num_turns": 2}
        sid = created.json()["session_id"]
        return [await say(c, sid, "Where is my order?"), await say(c, sid, "thanks")]

    first, second = run(options(ORDER_STATUS), scenario)
    assert first["response"].startswith("Your order 1234 is expected on February 10, 2026")
    assert first["actions"] == ["go_to_orders", "get_delivery_date", "check_if_late"]
    assert first["variables"]["num_turns"] == 3
    assert second["response"].endswith("You said: thanks")  # past the script: stand-in model


def test_playground_bad_conversation_file_is_422_with_the_reason() -> None:
    async def scenario(c: httpx.AsyncClient) -> None:
        bad = await c.post("/playground/api/conversations", json={"text": "turns: [{model: []}]"})
        assert bad.status_code == 422
        assert bad.json()["error"]["code"] == "invalid_conversation"
        assert "user" in bad.json()["error"]["message"]
        good = await c.post(
            "/playground/api/conversations", json={"text": Path(LATE_ORDER).read_text()}
        )
        assert good.json()["turns"][0]["user"] == "Where is my order?"
        assert good.json()["actions"] == ["check_if_late", "get_delivery_date"]

    run(options(ORDER_STATUS), scenario)


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_playground_saved_conversation_replays_with_agentscript_run(
    tmp_path: Path, store: str
) -> None:
    async def scenario(c: httpx.AsyncClient) -> tuple[str, list[dict[str, Any]]]:
        sid = await session(c, "card-bank", variables=CARD_VARS)
        turns = [
            await say(c, sid, '/activate_skill {"skill": "card_replace"}'),
            await say(c, sid, '/set_fields {"reason": "lost"}'),
            await say(c, sid, '/activate_skill {"skill": "check_balance"}'),
            await say(c, sid, "/get_balance"),
        ]
        saved = await c.get(f"/playground/api/sessions/{sid}/conversation.yaml")
        assert saved.status_code == 200
        assert "attachment" in saved.headers["content-disposition"]
        return saved.text, turns

    # The SQL stores list turns without their traces, which the export is made of.
    url = "memory://" if store == "memory" else f"sqlite:///{tmp_path}/sessions.db"
    text, turns = run(options(CARD_BANK, store=url), scenario)
    file = tmp_path / "saved.yaml"
    file.write_text(text, encoding="utf-8")
    result = CliRunner().invoke(main, ["run", CARD_BANK, "--conversation", str(file), "--json"])
    assert result.exit_code == 0, result.output
    replayed = json.loads(result.output)["turns"]
    assert [t["response"] for t in replayed] == [t["response"] for t in turns]
    assert replayed[-1]["variables"] == turns[-1]["variables"]


def test_playground_saved_conversation_stubs_the_actions_that_ran(tmp_path: Path) -> None:
    async def scenario(c: httpx.AsyncClient) -> str:
        sid = await session(c, "Order_Status", variables={"order_ID": "1234"})
        await say(c, sid, "/go_to_orders")
        return (await c.get(f"/playground/api/sessions/{sid}/conversation.yaml")).text

    text = run(options(ORDER_STATUS, stubs=LATE_ORDER), scenario)
    file = tmp_path / "saved.yaml"
    file.write_text(text, encoding="utf-8")
    # Replayed without --stubs: the file itself answers the flow:// actions.
    result = CliRunner().invoke(main, ["run", ORDER_STATUS, "--conversation", str(file), "--json"])
    assert result.exit_code == 0, result.output
    turn = json.loads(result.output)["turns"][0]
    assert turn["variables"]["is_late"] is True and turn["error"] is None


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_playground_traces_zip_has_the_trace_dir_layout(tmp_path: Path, store: str) -> None:
    async def scenario(c: httpx.AsyncClient) -> tuple[str, bytes]:
        sid = await session(c, "Order_Status", variables={"order_ID": "1234"})
        await say(c, sid, "hello")
        await say(c, sid, "again")
        response = await c.get(f"/playground/api/sessions/{sid}/traces.zip")
        assert response.headers["content-type"] == "application/zip"
        return sid, response.content

    url = "memory://" if store == "memory" else f"sqlite:///{tmp_path}/sessions.db"
    sid, data = run(options(ORDER_STATUS, store=url), scenario)
    archive = zipfile.ZipFile(io.BytesIO(data))
    names = archive.namelist()
    assert len(names) == 2
    assert all(n.startswith(f"Order_Status/sessions/{sid}/traces/") for n in names)
    doc = json.loads(archive.read(names[0]))
    assert doc["format"] == "agentscript-trace/1" and doc["planTrace"]["steps"]


def test_playground_config_names_the_guard_of_each_gated_tool() -> None:
    async def scenario(c: httpx.AsyncClient) -> dict[str, Any]:
        response = await c.get("/playground/api/config")
        data: dict[str, Any] = response.json()
        return data

    config = run(options(ORDER_STATUS, CARD_BANK, variables=["order_ID=A-1"]), scenario)
    bank = next(a for a in config["agents"] if a["name"] == "card-bank")
    assert bank["guards"]["card_replace"]["block_card"] == "session.card_replace.card_id"
    assert config["variables"] == {"order_ID": "A-1"}
    assert config["model"] == "standin"


def test_playground_var_takes_dotted_mantle_names() -> None:
    """--var project.authenticated=true pre-fills the Mantle entry; the page's session gets it."""

    async def scenario(c: httpx.AsyncClient) -> tuple[dict[str, Any], dict[str, Any]]:
        config: dict[str, Any] = (await c.get("/playground/api/config")).json()
        # As the page does: the pre-filled values of the agent's own variables.
        mine = {k: v for k, v in config["variables"].items() if k.startswith("project.")}
        sid = await session(c, "card-bank", variables=mine)
        state: dict[str, Any] = (await c.get(f"/playground/api/sessions/{sid}/state")).json()
        return config, state

    given = ["project.authenticated=true", "project.customer_name=Ada", "order_ID=A-1"]
    config, state = run(options(ORDER_STATUS, CARD_BANK, variables=given), scenario)
    assert config["variables"] == {
        "project.authenticated": True,
        "project.customer_name": "Ada",
        "order_ID": "A-1",
    }
    assert state["variables"]["project.authenticated"] is True
    assert state["variables"]["project.customer_name"] == "Ada"


def test_playground_refuses_a_var_no_served_agent_has() -> None:
    with pytest.raises(ServeError, match=r"--var project\.nope: no served agent has this variable"):
        build_app(options(CARD_BANK, variables=["project.nope=1"]))
    result = CliRunner().invoke(main, ["playground", CARD_BANK, "--var", "project.nope=1"])
    assert result.exit_code == 2
    assert "project.nope" in result.output and "Traceback" not in result.output


def test_playground_state_shows_the_skill_stack_with_block_pointers() -> None:
    async def scenario(c: httpx.AsyncClient) -> dict[str, Any]:
        sid = await session(c, "card-bank", variables=CARD_VARS)
        await say(c, sid, '/activate_skill {"skill": "card_replace"}')
        await say(c, sid, '/set_fields {"reason": "lost"}')
        await say(c, sid, '/activate_skill {"skill": "card_replace", "block": "order_card"}')
        await say(c, sid, '/activate_skill {"skill": "check_balance"}')
        state: dict[str, Any] = (await c.get(f"/playground/api/sessions/{sid}/state")).json()
        return state

    state = run(options(CARD_BANK), scenario)
    assert [f["skill"] for f in state["stack"]] == ["card_replace", "check_balance"]
    assert [f["status"] for f in state["stack"]] == ["paused", "active"]
    assert state["stack"][0]["blocks"][0]["block"] == "order_card"
    assert state["stack"][0]["blocks"][0]["step"] == "pick_card"


def test_graph_route_is_404_with_a_reason_without_the_authoring_module(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "agentscript.authoring.graph", None)  # import fails

    async def scenario(c: httpx.AsyncClient) -> httpx.Response:
        return await c.get("/v1/agents/Order_Status/graph")

    response = run(options(ORDER_STATUS), scenario)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "graph_unavailable"


def test_graph_route_returns_the_authoring_graph_json(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("agentscript.authoring.graph")

    class FakeGraph:
        def __init__(self, agent: str) -> None:
            self.agent = agent

        def to_json(self) -> dict[str, Any]:
            return {"format": "agentscript-graph/1", "agent": self.agent, "nodes": [], "edges": []}

    fake.agent_graph = lambda outline, name, program=None: FakeGraph(name)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "agentscript.authoring.graph", fake)

    async def scenario(c: httpx.AsyncClient) -> httpx.Response:
        return await c.get("/v1/agents/Order_Status/graph")

    response = run(options(ORDER_STATUS), scenario)
    assert response.status_code == 200
    assert response.json()["agent"] == "Order_Status"
    unknown = run(options(ORDER_STATUS), lambda c: c.get("/v1/agents/Nope/graph"))
    assert unknown.status_code == 404


def test_playground_start_up_refusals_name_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ServeError, match="one worker"):
        build_app(options(ORDER_STATUS, workers=2, store=f"sqlite:///{tmp_path}/s.db"))
    with pytest.raises(ServeError, match="--stubs"):
        build_app(options(ORDER_STATUS, stubs=str(tmp_path / "missing.yaml")))
    with pytest.raises(ServeError, match="--var"):
        build_app(options(ORDER_STATUS, variables=["no_equals_sign"]))
    result = CliRunner().invoke(
        main, ["playground", ORDER_STATUS, "--stubs", str(tmp_path / "missing.yaml")]
    )
    assert result.exit_code == 2
    assert "--stubs" in result.output and "Traceback" not in result.output


def test_serve_playground_flag_reaches_the_playground_checks(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/sessions.db"
    result = CliRunner().invoke(
        main,
        [
            "serve",
            ORDER_STATUS,
            "--playground",
            "--workers",
            "2",
            "--store",
            store,
            "--model",
            "standin",
        ],
    )
    assert result.exit_code == 2
    assert "--playground runs in one worker" in result.output


def test_serve_without_playground_has_no_page() -> None:
    async def scenario(c: httpx.AsyncClient) -> tuple[int, int]:
        return (await c.get("/playground/")).status_code, (await c.get("/")).status_code

    assert run(options(ORDER_STATUS, playground=False), scenario) == (404, 404)


def test_playground_traces_zip_rebuilds_each_model_input_whole() -> None:
    # LLM_STEP keeps only the messages added since the previous call (input.messagesFrom);
    # the downloaded traces, in turn order, rebuild every input with trace_inputs.
    async def scenario(c: httpx.AsyncClient) -> bytes:
        sid = await session(c, "Order_Status", variables={"order_ID": "1234"})
        await say(c, sid, "hello")
        await say(c, sid, "/go_to_orders")
        return (await c.get(f"/playground/api/sessions/{sid}/traces.zip")).content

    archive = zipfile.ZipFile(io.BytesIO(run(options(ORDER_STATUS, stubs=LATE_ORDER), scenario)))
    docs = [json.loads(archive.read(name)) for name in archive.namelist()]  # written in turn order
    inputs = rebuild_messages(docs)
    steps = [s for d in docs for s in d["planTrace"]["steps"] if s["type"] == "LLM_STEP"]
    assert len(inputs) == len(steps) >= 3
    users = [m.get("content") for m in inputs[-1] if m.get("role") == "user"]
    assert users == ["hello", "/go_to_orders"]
    assert any(m.get("role") == "tool" for m in inputs[-1])


def test_graph_route_serves_the_real_graph_with_its_edges() -> None:
    async def scenario(c: httpx.AsyncClient) -> dict[str, Any]:
        data: dict[str, Any] = (await c.get("/v1/agents/Order_Status/graph")).json()
        return data

    graph = run(options(ORDER_STATUS), scenario)
    assert graph["format"] == "agentscript-graph/1"
    edges = {(e["source"], e["target"], e["via"]) for e in graph["edges"]}
    assert ("router", "Order_Management", "go_to_orders") in edges
    assert ("router", "escalate_order", "go_to_escalation") in edges
