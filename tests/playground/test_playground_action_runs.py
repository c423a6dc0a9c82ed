"""How an action ran, in the playground's trace pane: the ``python://`` target that
``[actions.targets]`` ran instead of the agent's own (ACTION_STEP ``ranTarget``) and what the
action printed (``printed``), both shown as text, never as markup."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest
from tests.playground.browser import browser, checked_page, chromium_path, playground_server
from tests.playground.harness import ROOT, options

# The example's backend, printing: one line to stdout, one with markup to stderr (the page
# must show it as characters, not run it).
BACKEND = """
import sys


def get_delivery_date(order_ID: str) -> dict[str, object]:
    print("looked up the delivery date")
    print("<img src=x onerror=\\"window.pwned=1\\">", file=sys.stderr)
    return {"delivery_date": "February 10, 2026"}


def check_if_late(order_ID: str, delivery_date: str) -> dict[str, object]:
    return {"is_late": True}
"""


@pytest.fixture(scope="module")
def chrome() -> Iterator[Any]:
    with browser(chromium_path()) as launched:
        yield launched


@pytest.fixture(scope="module")
def mapped_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The Order Status example served with no stubs: its agentscript.toml maps both flows
    to the printing backend above."""
    folder = tmp_path_factory.mktemp("mapped") / "order_status"
    shutil.copytree(ROOT / "examples" / "order_status", folder)
    (folder / "orders_backend.py").write_text(BACKEND, encoding="utf-8")
    with playground_server(options(str(folder / "order_status.agent"))) as url:
        yield url


@pytest.fixture
def page(chrome: Any) -> Iterator[Any]:
    with checked_page(chrome) as opened:
        yield opened


def _action(page: Any, name: str) -> Any:
    return page.locator("#trace .step-ACTION_STEP").filter(has=page.locator(f"b:text-is('{name}')"))


def test_browser_a_mapped_action_says_which_target_ran_and_shows_what_it_printed(
    page: Any, mapped_url: str
) -> None:
    page.goto(f"{mapped_url}/playground/?agent=Order_Status")
    page.wait_for_selector("body[data-ready=true]")
    page.focus("#input")
    page.keyboard.type("/go_to_orders")
    page.keyboard.press("Enter")
    page.wait_for_function(
        "document.querySelectorAll('.turn-head').length > 0 && !window.playground.state.busy"
    )
    delivery = _action(page, "get_delivery_date")
    assert delivery.locator(".ran-target").inner_text() == (
        "flow://Get_Delivery_Date → ran python://orders_backend:get_delivery_date"
    )
    # Collapsed until opened, one box per stream.
    printed = delivery.locator("details.printed")
    assert printed.locator("summary").inner_text() == "printed (stdout, stderr)"
    assert not printed.locator("pre").first.is_visible()
    printed.locator("summary").click()
    assert (
        printed.locator("pre[data-stream=stdout]").inner_text() == "looked up the delivery date\n"
    )
    # The markup an action printed is text: no element made of it, no handler run.
    stderr = printed.locator("pre[data-stream=stderr]")
    assert stderr.inner_text() == '<img src=x onerror="window.pwned=1">\n'
    assert page.locator("#trace img").count() == 0
    assert page.evaluate("window.pwned") is None
    # An action that printed nothing has no box; its mapping is still said.
    late = _action(page, "check_if_late")
    assert late.locator("details.printed").count() == 0
    assert "ran python://orders_backend:check_if_late" in late.locator(".ran-target").inner_text()


def test_browser_ran_target_and_printed_of_a_step_are_drawn_as_text(
    page: Any, mapped_url: str
) -> None:
    """The page's ACTION_STEP drawing on its own, with markup in every field it adds; a step
    without the two fields (a stub, or a trace older than them) shows neither."""
    page.goto(f"{mapped_url}/playground/?agent=Order_Status")
    page.wait_for_selector("body[data-ready=true]")
    drawn = page.evaluate(
        """() => {
            const step = (name, extra) => Object.assign({type: "ACTION_STEP", name, source: "llm",
                target: "flow://<b>X</b>", input: {}, output: {}}, extra);
            const [mapped, plain, stubbed] = window.playground.renderSteps([
                step("mapped", {ranTarget: "python://m:<script>window.pwned=1</script>",
                                printed: {stderr: "<i>oops</i>"}, stubbed: false}),
                step("plain", {ranTarget: null, printed: null}),
                step("stubbed", {ranTarget: null, printed: null, stubbed: true}),
            ]);
            return {
                ran: mapped.querySelector(".ran-target").textContent,
                printed: mapped.querySelector("details.printed pre").textContent,
                summary: mapped.querySelector("details.printed summary").textContent,
                markup: mapped.querySelectorAll("script, i").length,
                bold: mapped.querySelectorAll("b").length,
                plain: plain.querySelectorAll(".ran-target, details.printed, .stubbed").length,
                unstubbed: mapped.querySelectorAll(".stubbed").length,
                stub: stubbed.querySelector(".stubbed").textContent,
            };
        }"""
    )
    assert drawn == {
        "ran": "flow://<b>X</b> → ran python://m:<script>window.pwned=1</script>",
        "printed": "<i>oops</i>",
        "summary": "printed (stderr)",
        "markup": 0,
        "bold": 1,  # the step's name; the target's <b> is text
        "plain": 0,
        "unstubbed": 0,
        "stub": "stub",  # ACTION_STEP.stubbed: a stub answered, no code ran
    }
    assert page.evaluate("window.pwned") is None
