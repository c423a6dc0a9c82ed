"""The playground in a real browser: full conversations with examples/order_status and
examples/card_bank, asserting on what the page shows; the README screenshot; page-load and
200-step rendering times (printed, never asserted)."""

from __future__ import annotations

import io
import json
import os
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.playground.browser import browser, chromium_path, playground_server
from tests.playground.harness import CARD_BANK, LATE_ORDER, ORDER_STATUS, ROOT, options

SCREENSHOT = ROOT / "docs" / "playground.png"
# The README image is rewritten only on request (`make screenshot`), so an ordinary test run
# leaves the work tree clean; otherwise the same screenshot goes to a temporary file.
UPDATE_SCREENSHOT = "AGENTSCRIPT_UPDATE_SCREENSHOT"


def screenshot_path(tmp_path: Path) -> Path:
    """docs/playground.png when AGENTSCRIPT_UPDATE_SCREENSHOT=1, else a file under tmp_path."""
    return SCREENSHOT if os.environ.get(UPDATE_SCREENSHOT) == "1" else tmp_path / "playground.png"


@pytest.fixture(scope="module")
def chrome() -> Iterator[Any]:
    with browser(chromium_path()) as launched:
        yield launched


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    # Both examples on one server; late_order.yaml's actions answer the flow:// actions.
    with playground_server(options(ORDER_STATUS, CARD_BANK, stubs=LATE_ORDER)) as url:
        yield url


@pytest.fixture
def page(chrome: Any, base_url: str) -> Iterator[Any]:
    context = chrome.new_context(viewport={"width": 1440, "height": 900}, accept_downloads=True)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield opened
    finally:
        context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def open_agent(page: Any, base_url: str, agent: str) -> None:
    page.goto(f"{base_url}/playground/?agent={agent}")
    page.wait_for_selector("body[data-ready=true]")


def send(page: Any, text: str) -> None:
    """Type a message and press Enter (keyboard only); wait for the turn to finish."""
    turns = page.locator(".turn-head").count()
    page.focus("#input")
    page.keyboard.type(text)
    page.keyboard.press("Enter")
    page.wait_for_function(
        f"document.querySelectorAll('.turn-head').length > {turns} && !window.playground.state.busy"
    )


def steps_of(page: Any, kind: str) -> list[str]:
    texts: list[str] = page.locator(f"#trace .step-{kind}").all_inner_texts()
    return texts


def test_browser_order_status_conversation_shows_reply_trace_and_variable_change(
    page: Any, base_url: str
) -> None:
    open_agent(page, base_url, "Order_Status")
    assert page.locator(".msg.welcome").inner_text() == "Hi! I can help with your orders."
    # Variables are editable before the first message, linked ones included; a change
    # starts a new session with the new value.
    order = page.locator('#variables input[data-variable="order_ID"]')
    assert order.input_value() == "1234"  # pre-filled from --stubs late_order.yaml
    order.fill("5678")
    order.press("Tab")
    page.wait_for_function("window.playground.state.variables.order_ID === '5678'")

    send(page, "/go_to_orders")  # the stand-in model calls the tool

    assert page.locator(".msg.agent").last.inner_text().startswith("done:")
    assert any("entered router" in s for s in steps_of(page, "NODE_ENTER"))
    assert any("router → Order_Management" in s for s in steps_of(page, "TRANSITION_STEP"))
    actions = steps_of(page, "ACTION_STEP")
    assert any("get_delivery_date" in s and '"order_ID":"5678"' in s for s in actions)
    assert any('"delivery_date":"February 10, 2026"' in s for s in actions)
    offered = page.locator("#trace .step-RESOLUTION_STEP .chip.tool").all_inner_texts()
    assert "go_to_orders" in offered
    # The variable change: highlighted, with the value before.
    row = page.locator('#variables tr[data-variable="is_late"]')
    assert "changed" in (row.get_attribute("class") or "")
    assert row.locator(".prev").inner_text() == "false"
    assert row.locator(".value").inner_text() == "true"
    assert page.locator("#where .node").inner_text() == "Order_Management"
    assert page.locator('#graph g.gnode.current[data-node="Order_Management"]').count() == 1
    assert page.locator('#graph g.gnode.visited[data-node="router"]').count() == 1
    # The graph's edges are drawn (from agentscript.authoring.graph), the transition taken
    # highlighted and the others not.
    assert page.locator("#graph path.gedge").count() == 4
    taken = page.locator("#graph path.gedge.taken")
    assert taken.count() == 1
    assert taken.get_attribute("data-edge") == "router->Order_Management"
    assert "taken" not in (
        page.locator('#graph path.gedge[data-edge="router->escalate_order"]').get_attribute("class")
        or ""
    )
    assert page.locator("#path").inner_text() == "Visited: router → Order_Management"
    # Each model call's input is shown whole, rebuilt from the trace's deltas
    # (input.messagesFrom): the later call still shows the user's message.
    llm = page.locator("#trace .step-LLM_STEP")
    assert llm.count() >= 2
    llm.last.locator("summary").click()
    shown = llm.last.locator("pre").inner_text()
    assert "/go_to_orders" in shown and "messagesFrom" not in shown
    # Linked variables are read-only once the conversation started.
    assert page.locator("#variables input").count() == 0
    # Restart (Alt+R): a new session with the same variables, editable again.
    old = page.evaluate("window.playground.state.session")
    page.keyboard.press("Alt+R")
    page.wait_for_function(f"window.playground.state.session !== {old!r}")
    page.wait_for_selector('#variables input[data-variable="order_ID"]')
    assert page.locator('#variables input[data-variable="order_ID"]').input_value() == "5678"
    assert page.locator("#trace .step").count() == 0
    assert page.locator(".msg.user").count() == 0


def test_browser_replays_a_conversation_file_step_by_step_and_saves_it(
    page: Any, base_url: str, tmp_path: Path
) -> None:
    open_agent(page, base_url, "Order_Status")
    page.set_input_files("#load-file", LATE_ORDER)
    page.wait_for_selector("#script li.next")
    assert page.locator("#script-turns li").all_inner_texts() == ["Where is my order?"]
    page.keyboard.press("Alt+S")  # Next step, from the keyboard
    page.wait_for_selector("#script li.done")
    reply = page.locator(".msg.agent").last.inner_text()
    assert reply.startswith("Your order 1234 is expected on February 10, 2026")
    assert page.locator("#step").is_disabled()  # the script is done

    with page.expect_download() as saved:
        page.click("#save")
    text = Path(saved.value.path()).read_text(encoding="utf-8")
    assert "user: Where is my order?" in text and "tool: go_to_orders" in text
    with page.expect_download() as traces:
        page.click("#traces")
    archive = zipfile.ZipFile(io.BytesIO(Path(traces.value.path()).read_bytes()))
    (name,) = archive.namelist()
    assert json.loads(archive.read(name))["userInput"] == "Where is my order?"


def test_browser_shows_action_and_model_failures_plainly(
    page: Any, base_url: str, tmp_path: Path
) -> None:
    failing = tmp_path / "failing.yaml"
    failing.write_text(
        "variables: {order_ID: '1234'}\n"
        "actions:\n"
        "  get_delivery_date: {outputs: {delivery_date: soon}}\n"
        "  check_if_late: {error: 'service unavailable'}\n"
        "turns:\n"
        "  - user: Where is my order?\n"
        "    model: [{tool: go_to_orders}]\n"
        "  - user: Hello?\n"
        "    model: []\n",
        encoding="utf-8",
    )
    open_agent(page, base_url, "Order_Status")
    page.set_input_files("#load-file", str(failing))
    page.wait_for_selector("#script li.next")
    page.click("#step")
    page.wait_for_selector("#script li.done")
    # A failing action: the step is marked failed with the error; the turn says it failed.
    failed = page.locator("#trace .step-ACTION_STEP.failed").inner_text()
    assert "check_if_late" in failed and "service unavailable" in failed
    errors = page.locator(".msg.error").all_inner_texts()
    assert len(errors) == 1 and errors[0].startswith("The turn failed:")
    # The model fails (the script has no move for it): said plainly, and the page goes on.
    page.click("#step")
    page.wait_for_function("document.querySelectorAll('.msg.error').length === 2")
    last = page.locator(".msg.error").last.inner_text()
    assert last.startswith("The turn failed:") and "no model move left" in last
    page.wait_for_function("!window.playground.state.busy")
    assert not page.locator("#send").is_disabled()


def test_browser_card_bank_hidden_tools_interrupt_and_skill_stack(
    page: Any, base_url: str, tmp_path: Path
) -> None:
    open_agent(page, base_url, "card-bank")
    assert page.locator("#where").inner_text().strip().endswith("no active skill")
    send(page, '/activate_skill {"skill": "authenticate"}')
    send(page, '/verify_customer {"customer_number": "1001", "pin": "4321"}')
    row = page.locator('#variables tr[data-variable="project.authenticated"]')
    assert "changed" in (row.get_attribute("class") or "")
    assert row.locator(".value").inner_text() == "true"
    send(page, "/complete_skill")
    send(page, '/activate_skill {"skill": "card_replace"}')
    send(page, '/set_fields {"reason": "lost"}')
    # block_card is offered only once a card is chosen: marked hidden, with its guard.
    hidden = page.locator('#trace .chip.hidden-tool[data-tool="block_card"]').last
    assert "hidden" in hidden.inner_text()
    assert "session.card_replace.card_id" in (hidden.get_attribute("title") or "")
    send(page, '/activate_skill {"skill": "card_replace", "block": "order_card"}')
    send(page, '/activate_skill {"skill": "check_balance"}')  # the user interrupts
    assert any("interrupted card_replace" in s for s in steps_of(page, "SKILL_STEP"))
    stack = page.locator("#where .stack li")
    assert stack.nth(0).get_attribute("data-skill") == "check_balance"
    assert "active" in stack.nth(0).inner_text()
    assert stack.nth(1).get_attribute("data-skill") == "card_replace"
    assert "paused" in stack.nth(1).inner_text()
    assert "block order_card at pick_card" in stack.nth(1).inner_text()
    send(page, "/get_balance")
    assert "1250.75" in page.locator(".msg.agent").last.inner_text()
    assert (
        page.locator('#variables tr[data-variable="check_balance.balance"] .value').inner_text()
        == "1250.75"
    )
    shot = screenshot_path(tmp_path)
    shot.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(shot))
    assert shot.read_bytes().startswith(b"\x89PNG")


def test_browser_card_bank_refusals_show_their_reason(page: Any, base_url: str) -> None:
    open_agent(page, base_url, "card-bank")
    page.set_input_files(
        "#load-file", str(Path(CARD_BANK) / "conversations" / "rule6_fail_closed.yml")
    )
    page.wait_for_selector("#script li.next")
    page.click("#play")
    page.wait_for_function("document.querySelectorAll('#script li.done').length === 2")
    refused = steps_of(page, "REFUSED_STEP")
    assert any(s.startswith("REFUSED") and "activate_skill" in s for s in refused)
    assert any("block_card" in s for s in refused)
    assert all(" refused: " in s and len(s.split(" refused: ", 1)[1]) > 5 for s in refused)


def test_browser_confirmation_prompt_has_yes_and_no(page: Any, base_url: str) -> None:
    open_agent(page, base_url, "card-bank")
    page.set_input_files(
        "#load-file", str(Path(CARD_BANK) / "conversations" / "rule5_tool_constraints.yml")
    )
    page.wait_for_selector("#script li.next")
    page.click("#play")
    page.wait_for_function(
        "!window.playground.state.busy && document.querySelector('#step').disabled"
    )
    assert page.locator(".msg.confirmation").count() >= 1
    box = page.locator(".msg.confirmation").first
    assert box.inner_text().startswith("Confirmation needed:")
    assert box.locator("button.confirm-yes").count() == 1
    assert box.locator("button.confirm-no").count() == 1


def test_browser_page_load_and_200_step_trace_timings(
    page: Any, base_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    page.goto(f"{base_url}/playground/?agent=Order_Status")
    page.wait_for_selector("body[data-ready=true]")
    navigation = page.evaluate(
        "(() => { const n = performance.getEntriesByType('navigation')[0];"
        " return {dom: n.domContentLoadedEventEnd, load: n.loadEventEnd}; })()"
    )
    ready_ms = page.evaluate(
        "window.playground.loadMs + performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd"
    )
    send(page, "/go_to_orders")
    # 200 steps drawn by the same code the SSE stream uses: the real turn's steps, repeated.
    timing = page.evaluate(
        """async () => {
            const turn = document.querySelectorAll('#trace .step').length;
            const r = await fetch('/v1/sessions/' + window.playground.state.session + '/turns/1/trace');
            const steps = (await r.json()).planTrace.steps;
            const many = [];
            while (many.length < 200) many.push(...steps);
            many.length = 200;
            const t0 = performance.now();
            window.playground.renderSteps(many);
            const drawn = performance.now();
            await new Promise((done) => requestAnimationFrame(() => setTimeout(done, 0)));
            return {script: drawn - t0, painted: performance.now() - t0,
                    count: document.querySelectorAll('#trace .step').length - turn};
        }"""
    )
    assert timing["count"] == 200
    # The page still answers after the long trace.
    send(page, "hello")
    assert page.locator(".msg.agent").last.inner_text().endswith("You said: hello")
    with capsys.disabled():
        print(
            f"\nplayground timings: DOMContentLoaded {navigation['dom']:.0f} ms, load event "
            f"{navigation['load']:.0f} ms, page ready (config, session, state, graph) "
            f"{ready_ms:.0f} ms; 200-step trace: script {timing['script']:.1f} ms, "
            f"painted {timing['painted']:.1f} ms"
        )


def test_browser_escalation_is_shown_plainly(page: Any, base_url: str, tmp_path: Path) -> None:
    script = tmp_path / "escalate.yaml"
    script.write_text(
        "variables: {order_ID: '1234'}\n"
        "turns:\n"
        "  - user: I want a human\n"
        "    model: [{tool: go_to_escalation}, {tool: escalate}]\n",
        encoding="utf-8",
    )
    open_agent(page, base_url, "Order_Status")
    page.set_input_files("#load-file", str(script))
    page.wait_for_selector("#script li.next")
    page.keyboard.press("Alt+S")
    page.wait_for_selector("#script li.done")
    notice = page.locator(".msg.notice.escalated")
    assert notice.inner_text().startswith("Escalated:")
    assert page.locator("#where .node").inner_text() == "escalate_order"


def test_browser_mantle_response_buttons_send_their_payload(chrome: Any, tmp_path: Path) -> None:
    import shutil

    project = tmp_path / "card_bank"
    shutil.copytree(CARD_BANK, project)
    responses = project / "skills" / "card_replace" / "responses.yml"
    responses.write_text(
        responses.read_text(encoding="utf-8").replace(
            "    - text: I can help you replace your card.\n",
            "    - text: I can help you replace your card.\n"
            "      buttons:\n"
            '        - {title: Lost, payload: \'/set_fields {"reason": "lost"}\'}\n'
            '        - {title: Damaged, payload: \'/set_fields {"reason": "damaged"}\'}\n',
        ),
        encoding="utf-8",
    )
    with playground_server(options(str(project))) as url:
        context = chrome.new_context(viewport={"width": 1280, "height": 800})
        page = context.new_page()
        try:
            page.goto(f"{url}/playground/")
            page.wait_for_selector("body[data-ready=true]")
            for name, value in (
                ("project.authenticated", "true"),
                ("project.customer_name", "Ada"),
            ):
                field = page.locator(f'#variables input[data-variable="{name}"]')
                field.fill(value)
                field.press("Tab")
                page.wait_for_function(f"window.playground.state.variables[{name!r}] !== undefined")
            send(page, '/activate_skill {"skill": "card_replace"}')
            buttons = page.locator(".msg.agent button.payload")
            assert buttons.all_inner_texts() == ["Lost", "Damaged"]
            buttons.first.focus()
            page.keyboard.press("Enter")  # keyboard only
            page.wait_for_function("document.querySelectorAll('.turn-head').length === 2")
            page.wait_for_function("!window.playground.state.busy")
            assert page.locator(".msg.user").last.inner_text() == '/set_fields {"reason": "lost"}'
            value = page.locator('#variables tr[data-variable="card_replace.reason"] .value')
            assert value.inner_text() == '"lost"'
        finally:
            context.close()
