"""A real playground server on 127.0.0.1 (uvicorn in a thread) and Debian's Chromium driven by
Playwright, for the browser tests.

Chromium is Debian's ``/usr/bin/chromium`` (never a downloaded browser). Without it, or without
the ``playwright`` package, the tests are skipped with one line saying how to enable them,
except under ``CI=true``, where that is a failure.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from starlette.types import ASGIApp

from agentscript.server.command import ServeOptions, build_app

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ENABLE = (
    "browser tests need Debian's Chromium and the playwright package: "
    "apt-get install -y chromium && pip install -r requirements-dev.lock"
)


def chromium_path() -> str:
    """The Chromium executable, or skip (fail under CI=true) saying how to get one."""
    found = shutil.which("chromium") or (
        "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None
    )
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        found = None
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail(ENABLE)
        pytest.skip(ENABLE)
    return found


@contextmanager
def playground_server(
    options: ServeOptions, wrap: Callable[[ASGIApp], ASGIApp] | None = None
) -> Iterator[str]:
    """Serve ``options`` (playground on) on a free loopback port; yields the base URL.
    ``wrap``: what stands between the server and the app (a proxy, say). uvicorn serves on a
    socket bound and listening before the app is built (which is told its port), as ``serve``
    does: a port probed, let go and bound again could be taken by another process between."""
    import uvicorn

    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        options.port = int(sock.getsockname()[1])
        options.host = "127.0.0.1"
        app, _lines = build_app(options)
        served = wrap(app) if wrap is not None else app
        server = uvicorn.Server(
            uvicorn.Config(served, host="127.0.0.1", port=options.port, log_level="warning")
        )
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        try:
            deadline = time.monotonic() + 20
            while not server.started:
                if time.monotonic() > deadline or not thread.is_alive():
                    raise RuntimeError("the playground server did not start")
                time.sleep(0.02)
            yield f"http://127.0.0.1:{options.port}"
        finally:
            server.should_exit = True
            thread.join(timeout=10)
    finally:
        sock.close()


@contextmanager
def browser(executable: str) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@contextmanager
def checked_page(launched: Any, **context: Any) -> Iterator[Any]:
    """A page of a new 1440x900 browser context (``context``: more of its options) that
    fails the test if the page raised a JavaScript error. The tests' own probes
    (``wait_for_function``) are evaluated strings, which the page's Content-Security-Policy
    forbids: the context bypasses it (test_browser_page_runs_under_its_own_policy runs the
    page under it)."""
    opened_context = launched.new_context(
        viewport={"width": 1440, "height": 900}, bypass_csp=True, **context
    )
    opened = opened_context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield opened
    finally:
        opened_context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"
