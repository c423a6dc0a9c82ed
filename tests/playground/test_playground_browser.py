"""The playground in a real browser: full conversations with examples/order_status and
examples/card_bank, asserting on what the page shows; the README screenshot; page-load and
200-step rendering times (printed, never asserted)."""

from __future__ import annotations

import functools
import io
import json
import os
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.playground.browser import browser, checked_page, chromium_path, playground_server
from tests.playground.harness import (
    CARD_BANK,
    LATE_ORDER,
    ORDER_STATUS,
    ROOT,
    BehindProxy,
    options,
)

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
    with checked_page(chrome, accept_downloads=True) as opened:
        yield opened


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
    # Leaving the old session sets none for a moment (leaveSession): wait for the new one.
    page.wait_for_function(f"(s => s && s !== {old!r})(window.playground.state.session)")
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
    # The skill's `if:` paragraph that now holds is shown with its condition.
    kept = [line for line in instruction_lines(page) if line["branches"]]
    assert len(kept) == 1 and kept[0]["text"].startswith("The old card must be blocked first")
    assert kept[0]["branches"] == [
        'if session.card_replace.reason == "stolen" or session.card_replace.reason == "lost" → true'
    ]
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
    # Step by step until the confirmation: its Yes button has the focus (Enter confirms).
    for _ in range(3):
        done = page.locator(".turn-head").count()
        page.click("#step")
        page.wait_for_function(
            f"document.querySelectorAll('.turn-head').length > {done}"
            " && !window.playground.state.busy"
        )
        if page.locator(".msg.confirmation").count():
            break
    assert page.locator(".msg.confirmation").count() == 1
    assert page.evaluate("document.activeElement.className") == "confirm-yes"
    assert page.evaluate("document.activeElement.textContent") == "Yes"
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
    assert "Escalated to a human agent" in page.locator("#where").inner_text()
    assert any("escalate" in s for s in steps_of(page, "EVENT_STEP"))
    assert page.locator("#where .node").inner_text() == "escalate_order"


def test_browser_a_turn_after_the_history_was_trimmed_says_so(chrome: Any, tmp_path: Path) -> None:
    """The turn JSON's history_trimmed is drawn as a notice on that turn, and only there."""
    import shutil

    folder = tmp_path / "order_status"
    shutil.copytree(Path(ORDER_STATUS).parent, folder)
    with (folder / "agentscript.toml").open("a", encoding="utf-8") as toml:
        toml.write("\n[limits]\nmax_history_chars = 1500\n")
    agent = str(folder / "order_status.agent")
    with playground_server(options(agent)) as url, checked_page(chrome) as page:
        open_agent(page, url, "Order_Status")
        for number in range(8):
            send(page, f"{number} " + "words " * 40)
        trimmed = page.evaluate(
            """async () => {
                const dropped = [];
                for (let n = 1; n <= 8; n++) {
                    const r = await fetch('/v1/sessions/' + window.playground.state.session + '/turns/' + n + '/trace');
                    const events = (await r.json()).planTrace.steps.filter((s) => s.event === 'history_trimmed');
                    dropped.push(events.length ? events[0].dropped : 0);
                }
                return dropped;
            }"""
        )
        notices = page.locator(".msg.notice.trimmed").all_inner_texts()
    dropped = [n for n in trimmed if n]
    assert dropped and len(notices) == len(dropped), (trimmed, notices)
    for n, notice in zip(dropped, notices, strict=True):
        assert notice.startswith(f"History trimmed: the oldest {n} messages were dropped")


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
        context = chrome.new_context(viewport={"width": 1280, "height": 800}, bypass_csp=True)
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
            # The bubble says the button's title; what it sent is shown under it.
            said = page.locator(".msg.user").last
            assert said.inner_text().splitlines()[0] == "Lost"
            assert said.locator(".sent").inner_text() == '/set_fields {"reason": "lost"}'
            value = page.locator('#variables tr[data-variable="card_replace.reason"] .value')
            assert value.inner_text() == '"lost"'
        finally:
            context.close()


# ---------------------------------------------------------------------- branches, buttons, end

LOUNGE = """\
system:
    instructions: "Be brief."
    messages:
        welcome: "Welcome to the lounge desk."
        error: "Something broke."

config:
    developer_name: "Lounge"

variables:
    tier: mutable string = "gold"
        description: "Membership tier"

start_agent desk:
    description: "The lounge desk"
    reasoning:
        instructions: ->
            | Greet the member.
            if @variables.tier == "gold":
                | Offer the gold lounge.
            else if @variables.tier == "silver":
                | Offer the silver lounge.
            else:
                | Offer a membership.
        actions:
            bye: @utils.end_session
                description: "End the conversation"
"""


def bank_with_buttons(folder: Path) -> Path:
    """examples/card_bank with: an intro whose first variant does not apply (so its buttons
    must not show), buttons on the stolen notice, the card question's buttons supplied by a
    tool (``card_buttons``, from the customer's cards), and a check_balance intro whose button
    tool fails."""
    import shutil

    project = folder / "card_bank"
    shutil.copytree(CARD_BANK, project)
    skill = project / "skills" / "card_replace"
    responses = skill / "responses.yml"
    text = responses.read_text(encoding="utf-8")
    for old, new in (
        (
            "    - text: I can help you replace your card.\n",
            "    - text: I can help Bob replace his card.\n"
            '      condition: session.project.customer_name == "Bob"\n'
            "      buttons:\n"
            "        - {title: Not for Ada, payload: nope}\n"
            "    - text: I can help you replace your card.\n"
            "      buttons:\n"
            '        - {title: Lost, payload: \'/set_fields {"reason": "lost"}\'}\n'
            '        - {title: Damaged, payload: \'/set_fields {"reason": "damaged"}\'}\n',
        ),
        (
            "    - text: I'm sorry your card was stolen. We will block it before ordering a new one.\n",
            "    - text: I'm sorry your card was stolen. We will block it before ordering a new one.\n"
            "      buttons:\n"
            "        - {title: Call the fraud line}\n",
        ),
        (
            "    - text: Which card should we replace?\n",
            "    - text: Which card should we replace?\n      buttons: {source: card_buttons}\n",
        ),
    ):
        assert old in text
        text = text.replace(old, new)
    responses.write_text(text, encoding="utf-8")
    tools = skill / "tools.py"
    tools.write_text(
        tools.read_text(encoding="utf-8")
        + "\n\ndef card_buttons(context: Any = None) -> list[dict[str, str]]:\n"
        '    """One button per card of the verified customer."""\n'
        "    cards = list_cards(context)['cards']\n"
        "    return [\n"
        "        {'title': c['label'], 'payload': f\"set:session.card_replace.card_id={c['card_id']}\"}\n"
        "        for c in cards\n"
        "    ]\n",
        encoding="utf-8",
    )
    # check_balance says an intro whose button tool fails.
    balance = project / "skills" / "check_balance"
    skill_md = balance / "skill.md"
    skill_md.write_text(
        skill_md.read_text(encoding="utf-8").replace(
            "requires: session.project.authenticated\n",
            "requires: session.project.authenticated\n"
            "utter:\n  - utter_check_balance_intro:\n      on: activate\n",
        ),
        encoding="utf-8",
    )
    (balance / "responses.yml").write_text(
        "responses:\n  utter_check_balance_intro:\n    - text: Let me look at your balance.\n"
        "      buttons: {source: broken_buttons}\n",
        encoding="utf-8",
    )
    balance_tools = balance / "tools.py"
    balance_tools.write_text(
        balance_tools.read_text(encoding="utf-8")
        + '\n\n@tool(description="Buttons that never come.")\n'
        + "def broken_buttons(context: Any = None) -> dict[str, Any]:\n"
        '    raise RuntimeError("the card service is down")\n',
        encoding="utf-8",
    )
    return project


@pytest.fixture(scope="module")
def studio_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A second server: the Lounge agent (if / else if / else, end_session) and card_bank
    with response buttons of every kind."""
    folder = tmp_path_factory.mktemp("studio")
    lounge = folder / "lounge.agent"
    lounge.write_text(LOUNGE, encoding="utf-8")
    bank = bank_with_buttons(folder)
    given = ["project.authenticated=true", "project.customer_id=1001", "project.customer_name=Ada"]
    with playground_server(options(str(lounge), str(bank), variables=given)) as url:
        yield url


def instruction_lines(page: Any) -> list[dict[str, Any]]:
    """The instruction lines of the last resolution on the page: text and branch labels."""
    lines: list[dict[str, Any]] = page.evaluate(
        """() => {
            const steps = document.querySelectorAll('#trace .step-RESOLUTION_STEP');
            const last = steps[steps.length - 1];
            return [...last.querySelectorAll('li.iline')].map((li) => ({
                text: li.querySelector('.itext').innerText,
                line: li.getAttribute('data-line'),
                branches: [...li.querySelectorAll('.branch')].map((b) => b.innerText),
                taken: [...li.querySelectorAll('.branch')].map((b) => b.getAttribute('data-taken')),
            }));
        }"""
    )
    return lines


def test_browser_instruction_lines_show_the_if_branch_that_produced_them(
    page: Any, base_url: str, studio_url: str
) -> None:
    # order_status with late_order.yaml's stubs: the order is late, so the `if` adds a line.
    open_agent(page, base_url, "Order_Status")
    send(page, "/go_to_orders")
    lines = instruction_lines(page)
    assert [line["text"] for line in lines] == [
        "Tell the user that the expected delivery date for order number 1234 is February 10, 2026.",
        "Apologize to the customer for the delay in receiving their order.",
    ]
    assert lines[0]["branches"] == []  # not under an `if`
    assert lines[1]["branches"] == ["if @variables.is_late == True → true"]
    assert lines[1]["line"] == "53"
    # else if and else, on the Lounge agent: the tier is edited before the first message.
    open_agent(page, studio_url, "Lounge")
    send(page, "hello")
    assert instruction_lines(page)[1]["branches"] == ['if @variables.tier == "gold" → true']
    for tier, text, label, taken in (
        (
            "silver",
            "Offer the silver lounge.",
            'else if @variables.tier == "silver" → true',
            "elif 1",
        ),
        ("bronze", "Offer a membership.", 'else (@variables.tier == "gold" → false)', "else"),
    ):
        page.click("#new-session")
        page.wait_for_selector('#variables input[data-variable="tier"]')
        field = page.locator('#variables input[data-variable="tier"]')
        field.fill(tier)
        field.press("Tab")
        page.wait_for_function(f"window.playground.state.variables.tier === {tier!r}")
        send(page, "hello")
        lines = instruction_lines(page)
        assert [line["text"] for line in lines] == ["Greet the member.", text]
        assert lines[1]["branches"] == [label] and lines[1]["taken"] == [taken]


def test_browser_end_of_session_disables_the_input_until_a_new_session(
    page: Any, studio_url: str
) -> None:
    open_agent(page, studio_url, "Lounge")
    send(page, "hello")
    send(page, "/bye")
    notice = page.locator(".msg.notice.ended")
    assert notice.inner_text().startswith("The session has ended")
    assert "New session (Alt+N)" in notice.inner_text()
    assert page.locator("#input").is_disabled() and page.locator("#send").is_disabled()
    assert "session has ended" in (page.locator("#input").get_attribute("placeholder") or "")
    assert "Session ended" in page.locator("#where").inner_text()
    assert any("end_session" in s for s in steps_of(page, "EVENT_STEP"))
    # A payload button or script cannot send either: the page refuses while ended.
    page.evaluate("window.playground.send('still there?')")
    assert page.locator(".msg.user").all_inner_texts() == ["hello", "/bye"]
    # New session (Alt+N): the input works again.
    old = page.evaluate("window.playground.state.session")
    page.keyboard.press("Alt+N")
    # Leaving the old session sets none for a moment (leaveSession): wait for the new one.
    page.wait_for_function(f"(s => s && s !== {old!r})(window.playground.state.session)")
    assert not page.locator("#input").is_disabled() and not page.locator("#send").is_disabled()
    assert page.locator(".msg.notice.ended").count() == 0
    send(page, "hello again")
    assert page.locator(".msg.agent").last.inner_text() == "You said: hello again"


def test_browser_buttons_of_the_chosen_variant_several_responses_and_a_tool(
    page: Any, studio_url: str, tmp_path: Path
) -> None:
    open_agent(page, studio_url, "card-bank")
    # --var project.customer_name=Ada (a dotted Mantle name) pre-filled the editor.
    name = page.locator('#variables input[data-variable="project.customer_name"]')
    assert name.input_value() == "Ada"
    send(page, '/activate_skill {"skill": "card_replace"}')
    # The variant chosen for Ada, not the first one listed (Bob's).
    bubble = page.locator(".msg.agent").last
    assert bubble.locator("button.payload").all_inner_texts() == ["Lost", "Damaged"]
    assert "Not for Ada" not in bubble.inner_text()
    response = page.locator("#trace .step-RESPONSE_STEP").first
    assert "Lost" in response.inner_text() and "Damaged" in response.inner_text()
    # Two responses with buttons in one turn (a loaded conversation makes two calls): one
    # row each, named by its response.
    script = tmp_path / "stolen.yaml"
    script.write_text(
        "variables:\n  project.authenticated: true\n  project.customer_id: '1001'\n"
        "  project.customer_name: Ada\n"
        "turns:\n"
        "  - user: My card was stolen\n"
        "    model:\n"
        "      - tool: activate_skill\n        args: {skill: card_replace}\n"
        "      - tool: set_fields\n        args: {reason: stolen}\n"
        "      - say: Let us sort it out.\n",
        encoding="utf-8",
    )
    page.set_input_files("#load-file", str(script))
    page.wait_for_selector("#script li.next")
    page.keyboard.press("Alt+S")
    page.wait_for_selector("#script li.done")
    rows = page.locator(".msg.agent").last.locator(".buttons")
    assert rows.count() == 2
    assert rows.nth(0).get_attribute("data-response") == "utter_card_replace_intro"
    assert rows.nth(1).get_attribute("data-response") == "utter_card_replace_stolen"
    assert rows.nth(1).locator("button").inner_text() == "Call the fraud line"
    assert "utter_card_replace_stolen:" in rows.nth(1).inner_text()
    # A button without a payload sends its title.
    assert rows.nth(1).locator("button").get_attribute("data-payload") == "Call the fraud line"
    # The card question's buttons come from the card_buttons tool, at the end of the turn.
    send(page, '/activate_skill {"skill": "card_replace", "block": "order_card"}')
    tool_buttons = page.locator(".msg.agent").last.locator("button.payload")
    assert tool_buttons.all_inner_texts() == ["Debit ending 1111", "Credit ending 2222"]
    assert any("card_buttons (buttons" in s for s in steps_of(page, "ACTION_STEP"))
    asked = page.locator("#trace .step-RESPONSE_STEP").last.inner_text()
    assert "Which card should we replace?" in asked and "Debit ending 1111" in asked
    # Clicking one sends its payload: the engine writes the card without the model.
    tool_buttons.nth(1).click()
    page.wait_for_function("document.querySelectorAll('.turn-head').length === 3")
    page.wait_for_function("!window.playground.state.busy")
    said = page.locator(".msg.user").last
    assert said.inner_text().splitlines()[0] == "Credit ending 2222"
    assert said.locator(".sent").inner_text() == "set:session.card_replace.card_id=C-12"
    value = page.locator('#variables tr[data-variable="card_replace.card_id"] .value')
    assert value.inner_text() == '"C-12"'
    # The shipping question follows, with its listed buttons.
    shipping = page.locator(".msg.agent").last.locator("button.payload")
    assert shipping.all_inner_texts() == ["Standard (free, 5 days)", "Express (5.00, 1 day)"]


def test_browser_a_real_model_that_cannot_be_reached_is_reported_plainly(chrome: Any) -> None:
    """--model openai:... --base-url at a closed loopback port: the model client's own error
    (after its retries) reaches the page as the turn's failure and on the LLM step."""
    from fakes.ports import refused_port

    with refused_port() as port:
        dead = f"http://127.0.0.1:{port}/v1"
        opts = options(ORDER_STATUS, model="openai:gpt-4o-mini", base_url=dead, stubs=LATE_ORDER)
        with playground_server(opts) as url:
            context = chrome.new_context(viewport={"width": 1280, "height": 800}, bypass_csp=True)
            page = context.new_page()
            try:
                open_agent(page, url, "Order_Status")
                assert "openai:gpt-4o-mini" in page.locator("#model").inner_text()
                send(page, "Where is my order?")
                error = page.locator(".msg.error").last.inner_text()
                assert error.startswith("The turn failed: the model failed: Could not connect")
                assert dead in error
                # The agent's error message is the reply; the failed call is marked in the trace.
                assert page.locator(".msg.agent").last.inner_text() == (
                    "Sorry, something went wrong. Please try again."
                )
                failed = page.locator("#trace .step-LLM_STEP.failed")
                assert failed.count() == 1 and "Could not connect" in failed.inner_text()
                assert not page.locator("#send").is_disabled()  # the session goes on
            finally:
                context.close()


def test_browser_a_failing_button_tool_is_said_under_the_reply(page: Any, studio_url: str) -> None:
    open_agent(page, studio_url, "card-bank")
    send(page, '/activate_skill {"skill": "check_balance"}')
    bubble = page.locator(".msg.agent").last
    assert bubble.inner_text().startswith("Let me look at your balance.")
    problem = bubble.locator(".buttons-error").inner_text()
    assert problem.startswith("Buttons of utter_check_balance_intro are missing:")
    assert "broken_buttons" in problem
    assert bubble.locator("button.payload").count() == 0
    # The trace shows the failed tool and the response's missing buttons.
    failed = page.locator("#trace .step-ACTION_STEP.failed").last.inner_text()
    assert "broken_buttons" in failed and "the card service is down" in failed
    response = page.locator("#trace .step-RESPONSE_STEP").first.inner_text()
    assert "buttons: 'broken_buttons' did not return a list of buttons" in response


def test_browser_page_runs_under_its_own_policy(chrome: Any, base_url: str) -> None:
    context = chrome.new_context(viewport={"width": 1440, "height": 900})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    opened.on(
        "console",
        lambda message: "Content Security Policy" in message.text and errors.append(message.text),
    )
    try:
        open_agent(opened, base_url, "Order_Status")
        opened.focus("#input")
        opened.keyboard.type("/go_to_orders")
        opened.keyboard.press("Enter")
        opened.wait_for_selector("#trace .step-ACTION_STEP", timeout=20_000)
        opened.wait_for_selector("#graph svg", timeout=20_000)
    finally:
        context.close()
    assert not errors, errors


@pytest.mark.parametrize("told", [True, False], ids=["root_path", "prefix_stripped"])
def test_browser_page_under_a_proxy_prefix_runs_a_turn_and_saves_it(
    chrome: Any, told: bool
) -> None:
    """A proxy serves the server at /agents/, with ``root_path`` set or only stripping the
    prefix: the page loads, runs a turn, draws the graph and state, and saves the chat, every
    request of it under the prefix."""
    wrap = functools.partial(BehindProxy, prefix="/agents", told=told)
    with playground_server(options(ORDER_STATUS, stubs=LATE_ORDER), wrap) as url:
        context = chrome.new_context(
            viewport={"width": 1440, "height": 900}, accept_downloads=True, bypass_csp=True
        )
        opened = context.new_page()
        requested: list[str] = []
        errors: list[str] = []
        opened.on("request", lambda request: requested.append(request.url))
        opened.on("pageerror", lambda exc: errors.append(str(exc)))
        try:
            opened.goto(f"{url}/agents/")  # redirected to the page
            opened.wait_for_selector("body[data-ready=true]")
            assert opened.locator(".msg.welcome").inner_text() == "Hi! I can help with your orders."
            send(opened, "/go_to_orders")
            assert opened.locator(".msg.agent").last.inner_text().startswith("done:")
            assert any("get_delivery_date" in s for s in steps_of(opened, "ACTION_STEP"))
            assert opened.locator("#where .node").inner_text() == "Order_Management"
            assert opened.locator("#graph path.gedge").count() == 4  # the graph route's edges
            with opened.expect_download() as saved:
                opened.click("#save")
            text = Path(saved.value.path()).read_text(encoding="utf-8")
            assert "user: /go_to_orders" in text
        finally:
            context.close()
    assert not errors, errors
    fetched = [u for u in requested if u.startswith("http")]
    assert fetched and all(u.startswith(f"{url}/agents/") for u in fetched), fetched


# ---------------------------------------------------------------------- turns, sessions, failures

SCRIPT = """\
variables: {order_ID: "1234"}
turns:
    - user: "first"
      model:
          - say: "scripted answer to turn 1"
    - user: "second"
      model:
          - say: "scripted answer to turn 2"
"""


def session_json(url: str, session_id: str) -> dict[str, Any]:
    """GET /v1/sessions/{id} from the test (the server has no keys: loopback is enough)."""
    import urllib.request

    with urllib.request.urlopen(f"{url}/v1/sessions/{session_id}", timeout=10) as answer:
        data: dict[str, Any] = json.loads(answer.read())
    return data


@pytest.mark.parametrize("key", ["Alt+N", "Alt+R"])
def test_browser_a_turn_still_running_draws_nothing_into_the_next_session(
    chrome: Any, tmp_path: Path, key: str
) -> None:
    """New session (or Restart) while a turn runs (a model that takes a second): the old turn
    is no longer read, so its steps, its end of session and its state never reach the new
    session's panes; the server still commits it, in the old session."""
    from agentscript.server.standin import StandInServer

    lounge = tmp_path / "lounge.agent"
    lounge.write_text(LOUNGE, encoding="utf-8")
    model = StandInServer(delay=1.0).start()
    try:
        opts = options(str(lounge), model="openai:standin", base_url=model.base_url)
        with playground_server(opts) as url:
            context = chrome.new_context(viewport={"width": 1280, "height": 800}, bypass_csp=True)
            page = context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            try:
                open_agent(page, url, "Lounge")
                old = page.evaluate("window.playground.state.session")
                page.focus("#input")
                page.keyboard.type("/bye")  # ends the session, after the model's second
                page.keyboard.press("Enter")
                page.wait_for_function("window.playground.state.busy")
                page.keyboard.press(key)
                page.wait_for_function(
                    f"window.playground.state.session && window.playground.state.session !== {old!r}"
                )
                # The old turn ends on the server (and would have reached the page by now).
                deadline = 40
                while session_json(url, old)["turns"] < 1 and deadline:
                    page.wait_for_timeout(250)
                    deadline -= 1
                assert session_json(url, old)["ended"] is True
                page.wait_for_timeout(500)
                assert page.locator(".msg.notice.ended").count() == 0
                assert not page.locator("#input").is_disabled()
                assert not page.locator("#send").is_disabled()
                assert "Session ended" not in page.locator("#where").inner_text()
                assert page.locator("#trace > li").count() == 0
                assert page.locator(".msg.user").count() == 0
                assert page.evaluate("window.playground.state.turns") == 0
                assert page.locator('#variables input[data-variable="tier"]').count() == 1
                # The new session works, numbered from its own first turn.
                send(page, "hello")
                assert page.locator(".msg.agent").last.inner_text() == "You said: hello"
                assert page.locator(".turn-head").all_inner_texts() == ["Turn 1: hello"]
                assert not steps_of(page, "EVENT_STEP")
                assert page.evaluate("window.playground.state.turns") == 1
            finally:
                context.close()
            assert not errors, errors
    finally:
        model.stop()


def test_browser_a_refused_message_is_not_a_turn_and_the_replay_stays_in_step(
    page: Any, base_url: str
) -> None:
    """A message the server refuses (422 message_too_long) is marked not sent and not
    counted: the loaded conversation's next step is still its turn 1, answered by turn 1's
    moves (the server picks them by its own turn count)."""
    open_agent(page, base_url, "Order_Status")
    page.evaluate("t => window.playground.loadConversation(t)", SCRIPT)
    page.wait_for_selector("#script li.next")
    page.fill("#input", "B" * 20_000)  # past max_message_chars (16,000)
    page.press("#input", "Enter")
    page.wait_for_selector(".msg.error")
    page.wait_for_function("!window.playground.state.busy")
    assert "[message_too_long]" in page.locator(".msg.error").last.inner_text()
    refused = page.locator(".msg.user").last
    assert "unsent" in (refused.get_attribute("class") or "")
    assert refused.locator(".unsent-note").inner_text() == "not sent"
    assert page.locator(".turn-head").last.inner_text().startswith("Not sent: BBB")
    assert page.evaluate("window.playground.state.turns") == 0
    assert page.locator("#script li.next").inner_text() == "first"
    assert page.locator("#variables input").count() > 0  # still before the first turn
    page.click("#step")
    page.wait_for_function("window.playground.state.turns === 1 && !window.playground.state.busy")
    assert page.locator(".msg.agent").last.inner_text() == "scripted answer to turn 1"
    assert page.locator(".turn-head").last.inner_text() == "Turn 1: first"
    assert page.locator("#script li.next").inner_text() == "second"


BIDI_SCRIPT = """\
variables: {order_ID: "12\\u202e34"}
actions:
    get_delivery_date:
        outputs: {delivery_date: "\\u2067evil\\u200f"}
    check_if_late:
        outputs: {is_late: true}
turns:
    - user: "where is it?"
      model:
          - tool: go_to_orders
          - say: "on its way \\u202ereversed"
"""


# LRM, RLM, LRE, RLE, PDF, LRO, RLO, LRI, RLI, FSI, PDI.
BIDI_CONTROLS = "\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


def test_browser_bidi_controls_in_values_are_shown_escaped_and_isolated(
    page: Any, base_url: str
) -> None:
    """A right-to-left override (U+202E) or isolate (U+2067) in a tool's or the model's value
    cannot reorder the fields shown after it: JSON values show it as \\u202e, and values,
    messages and trace pieces are bidi-isolated."""
    open_agent(page, base_url, "Order_Status")
    page.evaluate("t => window.playground.loadConversation(t)", BIDI_SCRIPT)
    page.wait_for_selector("#script li.next")
    page.click("#step")
    page.wait_for_function("window.playground.state.turns === 1 && !window.playground.state.busy")
    actions = " ".join(steps_of(page, "ACTION_STEP"))
    assert '"order_ID":"12\\u202e34"' in actions
    assert '"delivery_date":"\\u2067evil\\u200f"' in actions
    shown = page.evaluate(
        "[...document.querySelectorAll('#trace .io, #variables .value, #trace .change')]"
        ".map((e) => e.textContent).join(' ')"
    )
    assert not any(c in shown for c in BIDI_CONTROLS)
    value = page.locator('#variables tr[data-variable="order_ID"] .value').inner_text()
    assert value == '"12\\u202e34"'
    styles = page.evaluate(
        """() => Object.fromEntries([
            ['message', '.msg.agent'], ['value', '#variables .value'],
            ['trace', '#trace .step-ACTION_STEP .io'], ['name', '#trace .step b'],
        ].map(([k, q]) => [k, getComputedStyle(document.querySelector(q)).unicodeBidi]))"""
    )
    assert styles == {
        "message": "plaintext",
        "value": "isolate",
        "trace": "isolate",
        "name": "isolate",
    }


def test_browser_without_a_session_typed_text_stays_and_the_page_says_why(
    page: Any, base_url: str
) -> None:
    """A session that could not start: Send is disabled, the input says there is no session,
    a typed message stays in the input with the reason in the banner, and a loaded
    conversation whose session cannot start is not announced as loaded."""
    open_agent(page, base_url, "Order_Status")
    refusal = json.dumps({"error": {"code": "down", "message": "sessions are down"}})
    pattern = "**/playground/api/agents/*/sessions"
    page.route(pattern, lambda route: route.fulfill(status=503, body=refusal))
    page.click("#new-session")
    page.wait_for_selector(".msg.error")
    page.wait_for_function("!window.playground.state.starting")
    assert page.locator(".msg.error").inner_text() == (
        "Starting a session failed [down]: sessions are down"
    )
    assert page.evaluate("window.playground.state.session") is None
    assert page.locator("#send").is_disabled()
    assert "no session" in (page.locator("#input").get_attribute("placeholder") or "")
    page.focus("#input")
    page.keyboard.type("is anyone there?")
    page.keyboard.press("Enter")
    assert page.input_value("#input") == "is anyone there?"
    assert page.locator("#banner").inner_text().startswith("There is no session")
    assert page.locator(".msg.user").count() == 0
    # Loading a conversation: its session cannot start either, so it is not "Loaded".
    page.evaluate("t => window.playground.loadConversation(t)", SCRIPT)
    page.wait_for_function(
        "document.querySelectorAll('.msg.error').length === 1 && !window.playground.state.starting"
    )
    assert page.locator(".msg.notice").count() == 0
    assert page.locator("#script").is_hidden()
    # Sessions are back: New session (Alt+N), and the kept text goes.
    page.unroute(pattern)
    page.keyboard.press("Alt+N")
    page.wait_for_function("!!window.playground.state.session")
    page.focus("#input")
    page.keyboard.press("Enter")
    page.wait_for_function(
        "document.querySelectorAll('.turn-head').length === 1 && !window.playground.state.busy"
    )
    assert page.input_value("#input") == ""
    assert page.locator(".msg.agent").last.inner_text() == "You said: is anyone there?"


def test_browser_a_server_that_cannot_be_reached_or_cuts_the_stream_is_said_plainly(
    page: Any, base_url: str
) -> None:
    open_agent(page, base_url, "Order_Status")
    pattern = "**/v1/sessions/*/messages"
    page.route(pattern, lambda route: route.abort("connectionrefused"))
    send(page, "hello")
    error = page.locator(".msg.error").last.inner_text()
    assert error.startswith(
        "The message failed [network]: the playground server cannot be reached"
    ), error
    assert "unsent" in (page.locator(".msg.user").last.get_attribute("class") or "")
    page.unroute(pattern)
    # A stream cut after its first token (the browser's read fails part-way).
    page.evaluate(
        """() => {
            const real = window.fetch;
            window.fetch = (url, init) => {
                if (!String(url).endsWith('/messages')) return real(url, init);
                const body = new ReadableStream({
                    start(c) {
                        c.enqueue(new TextEncoder().encode('event: token\\ndata: {"text": "You sa"}\\n\\n'));
                        setTimeout(() => c.error(new TypeError('network error')), 50);
                    },
                });
                return Promise.resolve(new Response(body, { headers: { 'Content-Type': 'text/event-stream' } }));
            };
        }"""
    )
    send(page, "hello again")
    error = page.locator(".msg.error").last.inner_text()
    assert error.startswith(
        "The message failed [stream_cut]: the connection to the playground server was lost"
    ), error
    assert page.evaluate("window.playground.state.turns") == 0  # the server's count
    assert not page.locator("#send").is_disabled()


def test_browser_a_streamed_reply_appends_each_token_without_rewriting_the_text(
    page: Any, base_url: str
) -> None:
    """Each token is a text node of its own: the bubble's text is not copied again at every
    token (quadratic in the reply's length), and is replaced once, by the final reply."""
    open_agent(page, base_url, "Order_Status")
    page.evaluate(
        """() => {
            window.__tokens = { added: 0, rewrites: 0 };
            new MutationObserver((records) => {
                for (const r of records) {
                    if (!r.target.classList || !r.target.classList.contains('agent')) continue;
                    for (const n of r.addedNodes) if (n.nodeType === Node.TEXT_NODE) window.__tokens.added += 1;
                    if ([...r.removedNodes].some((n) => n.nodeType === Node.TEXT_NODE)) window.__tokens.rewrites += 1;
                }
            }).observe(document.getElementById('messages'), { childList: true, subtree: true });
        }"""
    )
    page.fill("#input", "y" * 200)
    page.press("#input", "Enter")
    page.wait_for_function(
        "document.querySelectorAll('.turn-head').length === 1 && !window.playground.state.busy"
    )
    assert page.locator(".msg.agent").last.inner_text() == "You said: " + "y" * 200
    counts = page.evaluate("window.__tokens")
    assert counts["added"] > 20, counts  # streamed in 8-character tokens
    assert counts["rewrites"] <= 1, counts  # the final reply only


def llm_inputs_shown(page: Any) -> list[str]:
    """The input each LLM step of the trace pane shows when opened, in order."""
    shown = []
    steps = page.locator("#trace .step-LLM_STEP")
    for index in range(steps.count()):
        step = steps.nth(index)
        if step.locator("details pre").count() == 0:
            step.locator("details summary").last.click()
        shown.append(step.locator("details pre").last.inner_text())
    return shown


def test_browser_model_inputs_are_whole_in_every_turn_even_after_a_turn_it_did_not_see(
    page: Any, base_url: str
) -> None:
    """A served turn's first LLM_STEP holds only the messages added since the previous call
    (a delta from the last turn's): the page shows every call's whole input from the steps
    it drew. A turn whose stream it lost (the server still ran it) is read back from the
    stored traces, so the next turn's inputs are whole, not partial nor wrong."""
    open_agent(page, base_url, "Order_Status")
    send(page, "first message")
    send(page, "second message")
    [_, second] = llm_inputs_shown(page)
    assert "first message" in second and "second message" in second
    assert "messagesFrom" not in second and "earlierMessagesNotShown" not in second
    # The third turn runs on the server, but the page gets none of its stream.
    pattern = "**/v1/sessions/*/messages"

    def lost(route: Any) -> None:
        route.fetch()  # the server runs and commits the turn
        route.fulfill(status=200, headers={"Content-Type": "text/event-stream"}, body="")

    page.route(pattern, lost)
    send(page, "third message")
    page.unroute(pattern)
    assert "stream" in page.locator(".msg.error").last.inner_text()
    send(page, "fourth message")
    shown = llm_inputs_shown(page)
    assert len(shown) == 3, shown
    for said in ("first", "second", "third", "fourth"):
        assert f"{said} message" in shown[-1], shown[-1]
    assert "earlierMessagesNotShown" not in shown[-1]
