"""What ``redaction.shown_urls`` hides beyond a whole URL's user, password, query and fragment:

* the query and fragment of a path written without scheme and host, as HTTP clients print the
  URL they called (urllib3's ``Max retries exceeded with url: /api?key=...``), whatever
  precedes the ``/`` but a letter, a digit or ``_`` (``x;/api?key=``, ``=>/api?key=``);
* a password holding a raw blank (any white space but a line break: a no-break space too),
  after a user and a ``:`` and up to the first ``@`` of its line (``https://u:pa ss@host``),
  also when an output cap cut it before its ``@``;

and what it leaves as written: a ``/`` inside a word (``and/or?``), a trailing or bare ``?``,
and a port followed by prose that names an address (``https://h:8080, ask ops@x.org``).
``redaction.shown_head`` cuts a long text before it shows its URLs, keeping no part of a URL
the cut went through.
"""

from __future__ import annotations

import string

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agentscript import redaction
from agentscript.actions.capture import Printed
from agentscript.redaction import shown_head, shown_urls
from fakes.spies import record_lengths

SECRET_KEY = "sk-live-0123456789"


# ------------------------------------------------------------------ paths without a host


def test_the_query_of_a_path_as_urllib3_prints_it_is_hidden() -> None:
    message = (
        "HTTPConnectionPool(host='orders.internal', port=8080): Max retries exceeded with url: "
        f"/api/v1/orders?api_key={SECRET_KEY} (Caused by NewConnectionError('refused'))"
    )
    assert shown_urls(message) == (
        "HTTPConnectionPool(host='orders.internal', port=8080): Max retries exceeded with url: "
        "/api/v1/orders (Caused by NewConnectionError('refused'))"
    )


def test_a_request_line_or_a_quoted_path_loses_its_query_and_prose_keeps_its_own() -> None:
    assert shown_urls(f"GET /orders?token={SECRET_KEY} HTTP/1.1") == "GET /orders HTTP/1.1"
    assert shown_urls(f"request(url='/orders?key={SECRET_KEY}')") == "request(url='/orders')"
    assert shown_urls(f'"path": "/cb#access_token={SECRET_KEY}",') == '"path": "/cb",'
    assert shown_urls(f"url=/x?a=1&key={SECRET_KEY}, retrying") == "url=/x, retrying"
    assert shown_urls(f"[/a/b?k={SECRET_KEY}]") == "[/a/b]"
    # A URL inside a path's query goes with the query; one in its path is shown as a URL is.
    assert shown_urls(f"/go?to=https://h/x?key={SECRET_KEY}") == "/go"
    assert shown_urls(f"/proxy/https://u:{SECRET_KEY}@h/x") == "/proxy/https://h/x"
    # A "/" inside a word starts no path; a "?" or "#" with nothing after it hides nothing.
    for text in (
        "a/b? and/or?",
        "what? ?",
        "Is it in /usr/bin? Or /opt/?",
        "Did you mean '/orders'?",
        'File "/app/orders.py", line 3, in fetch',
        "1/2 # half",
    ):
        assert shown_urls(f"{text} GET /x?key={SECRET_KEY}") == f"{text} GET /x"


# Secrets are made of capital letters (and URL punctuation); everything else of none, so a
# capital letter in the output is a piece of a secret.
SECRET = st.text(alphabet=string.ascii_uppercase + "%!$&'()*+,;=:~-._/?#[]@", min_size=1).filter(
    lambda s: any(c.isupper() for c in s)
)
PUBLIC = st.text(alphabet=string.ascii_lowercase + string.digits + "-._", min_size=1)
FILLER = st.text(st.characters(exclude_characters=string.ascii_uppercase), max_size=12)
# What a path starting a token follows in printed text (or it starts the text: an example):
# anything but a letter, a digit or "_".
BEFORE_PATH = st.one_of(
    st.sampled_from([" ", "\n", "'", '"', "(", "[", "=", ": ", ",", ";", "|", "&", "=>", "->"]),
    st.characters(exclude_characters=string.ascii_uppercase).filter(
        lambda c: not (c.isalnum() or c == "_")
    ),
)


@st.composite
def path_with_secrets(draw: st.DrawFn) -> str:
    segments = draw(st.lists(PUBLIC, max_size=3))
    query = draw(st.one_of(st.just(""), SECRET.map(lambda s: "?" + s)))
    fragment = draw(st.one_of(st.just(""), SECRET.map(lambda s: "#" + s)))
    if not (query or fragment):
        query = "?" + draw(SECRET)
    return "/" + "/".join(segments) + query + fragment


@settings(deadline=None)
@given(FILLER, BEFORE_PATH, path_with_secrets(), FILLER)
@example("", "", f"/api?key={SECRET_KEY.upper()}", "")
@example("with url:", " ", "/a#F?Q", " (Caused by X)".lower())
@example("x", ";", "/api?KEY", "")
@example("url", "=>", "/api?KEY", "")
@example("", "\u201c", "/api?KEY", "\u201d")
def test_a_path_starting_a_token_never_shows_its_query_or_fragment(
    before: str, start: str, path: str, after: str
) -> None:
    text = before + start + path + after
    shown = shown_urls(text)
    assert not any(c in string.ascii_uppercase for c in shown), (text, shown)


def test_a_path_after_punctuation_loses_its_query() -> None:
    for before in ("x;", "x|", "x&", "url=>", "url->", "\u201c", "\u00ab", "*", "!", "~", "."):
        assert shown_urls(f"{before}/api?key={SECRET_KEY}") == f"{before}/api", before
    assert shown_urls(f"curl x|/api?key={SECRET_KEY}|y") == "curl x|/api"


ALNUM = string.ascii_letters + string.digits
# Words whose every "/" follows a letter or a digit: such a "/" never starts a token.
PIECE = st.builds(
    str.__add__, st.text(alphabet=ALNUM + "?#.,!:'", max_size=6), st.sampled_from(ALNUM)
)
WORD = st.builds(
    lambda first, pieces, end: "/".join([first, *pieces]) + end,
    st.builds(str.__add__, st.sampled_from(string.ascii_letters), PIECE),
    st.lists(PIECE, max_size=3),
    st.text(alphabet="?#.,!:'", max_size=2),
)


@settings(deadline=None)
@given(st.lists(WORD, max_size=8), st.sampled_from([" ", "\n", "  ", "\xa0"]))
@example(["a/b?", "and/or?", "what?"], " ")
@example(["1/2?", "a1/b2#c", "x:y/z?w"], " ")
def test_text_whose_slashes_are_inside_words_is_left_as_written(
    words: list[str], blank: str
) -> None:
    text = blank.join(words)
    assert shown_urls(text) == text


# ------------------------------------------------------------------ passwords holding blanks


def test_a_password_holding_a_blank_is_hidden_up_to_its_at_and_prose_is_not() -> None:
    assert (
        shown_urls("POST https://svc:pa ss@orders.internal/api?key=k -> 503")
        == "POST https://orders.internal/api -> 503"
    )
    assert shown_urls("redis://default:two\tword pass@cache:6379/0 down") == (
        "redis://cache:6379/0 down"
    )
    # A "?" before the "@": no part can be told safe, as for a password without blanks.
    assert shown_urls("'https://u:a b?c@h/x'") == "'https://(unreadable)'"
    # A port, a host or a first word followed by prose that names an address, an "@" on
    # another line or after a "/": no password, as written.
    for text in (
        "https://orders.internal:8080 is down, ask ops@example.com",
        "http://localhost:3000, then mail dev@example.com",
        "http://localhost:3000). Mail dev@example.com",
        "https://[::1]:8080 unreachable; ops@example.com",
        "https://orders.internal: refused, ask ops@example.com",
        "https://h:abc\nnext line: ops@example.com",
        "https://h:abc def/x ops@example.com",
        "see https://example.com or mail me@example.com",
    ):
        assert shown_urls(f"{text} https://u:pa ss@h") == f"{text} https://h"


def test_a_password_holding_a_unicode_blank_is_hidden_and_prose_is_not() -> None:
    for blank in ("\xa0", "\u2003", "\u202f", "\u3000", "\x0b", "\r"):
        assert shown_urls(f"ftp://u:p{blank}w@files.internal/x down") == (
            "ftp://files.internal/x down"
        ), repr(blank)
        # A port, then prose naming an address: as written.
        text = f"https://orders.internal:8080{blank}is down, ask ops@example.com"
        assert shown_urls(text) == text, repr(blank)
    # A line break ends the search for the "@".
    assert shown_urls("https://h:abc\r\nops@example.com") == "https://h:abc\r\nops@example.com"


def test_an_output_cap_that_cut_a_password_before_its_at_keeps_no_part_of_it() -> None:
    text = "connecting to https://svc:PASS WORD@orders.internal/api\n"
    for limit in range(len("connecting to https://svc:PA"), text.index("@")):
        printed = Printed(limit)
        printed.add(0, text)
        shown = printed.to_json()["stdout"]
        assert not any(c in "PASWORD" for c in shown), (limit, shown)
        assert shown.startswith("connecting to \n[... ")


# Every white space character but a line break: a tab, a space, a no-break space, a thin
# space, an ideographic space, a vertical tab...
ONE_BLANK = st.sampled_from([c for c in map(chr, range(0x3001)) if c.isspace() and c != "\n"])
BLANKS = st.one_of(st.sampled_from([" ", "\t", "  "]), ONE_BLANK)
# Words of a password: no blank, "/", "@" or line break, each with a capital letter.
PASSWORD_WORD = st.text(
    alphabet=string.ascii_uppercase + "%!$&'()*+,;=:~-._?#[]", min_size=1, max_size=12
).filter(lambda s: any(c.isupper() for c in s))


@st.composite
def url_with_blank_password(draw: st.DrawFn) -> str:
    scheme = draw(st.sampled_from(["http", "https", "postgres", "redis", "x"]))
    user = draw(st.one_of(st.just(""), PUBLIC))
    words = draw(st.lists(PASSWORD_WORD, min_size=2, max_size=4))
    password = words[0] + "".join(draw(BLANKS) + word for word in words[1:])
    host = draw(PUBLIC)
    path = "".join("/" + part for part in draw(st.lists(PUBLIC, max_size=2)))
    query = draw(st.one_of(st.just(""), SECRET.map(lambda s: "?" + s)))
    return f"{scheme}://{user}:{password}@{host}{path}{query}"


@settings(deadline=None)
@given(FILLER, url_with_blank_password(), FILLER)
@example("failed: ", "https://svc:PA SS@h/x?KEY", " -> 503")
@example("'", "https://u:A' B@h", "'")
@example("", "ftp://u:P\xa0W@h", "")
@example("", "https://u:PA\u3000SS@h", "")
def test_a_password_holding_blanks_is_never_shown(before: str, url: str, after: str) -> None:
    text = before + url + after
    shown = shown_urls(text)
    assert not any(c in string.ascii_uppercase for c in shown), (text, shown)


# ------------------------------------------------------------------ long texts


@pytest.fixture
def shown_lengths(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The length of every text ``redaction.shown_urls`` is given."""
    return record_lengths(monkeypatch, redaction, "shown_urls")


def test_a_long_text_is_cut_before_its_urls_and_paths_are_shown(shown_lengths: list[int]) -> None:
    text = f" /api?key={SECRET_KEY}" * 200_000
    shown = shown_head(text, 4_000)
    assert shown_lengths and max(shown_lengths) <= 4_000
    assert SECRET_KEY[:4] not in shown
    kept = text[:4_000]
    assert shown == f"{shown_urls(kept)} [... {len(text) - len(kept)} more characters not kept]"
    assert shown_head("GET /a?k=v", 10) == shown_urls("GET /a?k=v") == "GET /a"


@st.composite
def url_with_password(draw: st.DrawFn) -> str:
    scheme = draw(st.sampled_from(["http", "https", "postgres", "x"]))
    user = draw(st.one_of(st.just(""), PUBLIC))
    password = draw(SECRET.filter(lambda s: not s.startswith("@")))
    path = "".join("/" + part for part in draw(st.lists(PUBLIC, max_size=2)))
    query = draw(st.one_of(st.just(""), SECRET.map(lambda s: "?" + s)))
    return f"{scheme}://{user}:{password}@{draw(PUBLIC)}{path}{query}"


@settings(deadline=None)
@given(
    st.lists(
        st.tuples(
            FILLER,
            st.one_of(
                url_with_password(),
                url_with_blank_password(),
                st.builds(str.__add__, BEFORE_PATH, path_with_secrets()),
            ),
        ),
        min_size=1,
        max_size=3,
    ),
    st.integers(min_value=0, max_value=120),
)
@example([("calling ", "https://svc:PASS@h/x?KEY")], len("calling https://svc:PA"))
@example([("calling ", "https://svc:PASS WORD@h")], len("calling https://svc:PASS W"))
@example([("", "\xa0/api?KEY")], len("\xa0/api?KE"))
def test_a_cut_through_a_url_or_a_path_keeps_no_part_of_its_secrets(
    parts: list[tuple[str, str]], limit: int
) -> None:
    # Each URL after a blank: two written without one between are one token.
    text = "".join(f"{filler} {url}" for filler, url in parts)
    shown = shown_head(text, limit)
    assert not any(c in string.ascii_uppercase for c in shown), (text, limit, shown)
