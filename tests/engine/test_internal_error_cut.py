"""An internal error's text is cut before its URLs are scrubbed (engine/kernel.py): scrubbing
costs microseconds a URL or path, so an exception text of megabytes held the event loop for
seconds; a URL the cut goes through is dropped whole, never shown in part."""

from __future__ import annotations

import pytest
from tests.fakes.spies import record_lengths

from agentscript.engine import kernel
from agentscript.engine.kernel import MAX_INTERNAL_ERROR_CHARS, SCRUBBED_CHARS, internal_error


def test_a_huge_text_is_cut_before_it_is_scrubbed(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = record_lengths(monkeypatch, kernel, "shown_urls")
    error = internal_error(RuntimeError("GET /api?key=s3cret " * 200_000))
    assert seen and max(seen) <= SCRUBBED_CHARS
    text = str(error)
    assert "s3cret" not in text and text.endswith("...")
    assert len(text) <= len("internal error: RuntimeError: ") + MAX_INTERNAL_ERROR_CHARS + 3


def test_a_url_the_cut_goes_through_is_not_shown_in_part() -> None:
    # URLs whose long queries scrubbing removes: what the cut kept then falls within the part
    # shown, so a cut through a password before its "@" (kept, it reads as a host) would show.
    queries = ("https://h.example/?q=" + "a" * 170 + " ") * 10
    password = "hunter2" * 20
    text = queries + "cannot reach https://svc:" + password + "@db.example/x"
    assert len(queries) < SCRUBBED_CHARS < text.index("@db.example")
    shown = str(internal_error(ValueError(text)))
    assert "hunter2" not in shown and "svc" not in shown
    assert shown.count("https://h.example/") == 10 and "cannot reach" in shown


def test_a_short_text_is_scrubbed_and_kept_whole() -> None:
    error = internal_error(ValueError("cannot reach https://u:pw@host/api?key=1"))
    assert str(error) == "internal error: ValueError: cannot reach https://host/api"
