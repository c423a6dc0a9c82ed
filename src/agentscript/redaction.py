"""Credentials kept out of messages: every form a configured value may take in an error's text,
and that text with each of them blotted out.

Contract. :func:`secret_forms` takes the configured ``(name, template)`` pairs and their
expanded values; it returns each value as configured (``Bearer sk-...``), the credential of
an ``Authorization``-style value alone (``sk-...``: what a backend answering ``401 invalid
key sk-...`` echoes), the value of each environment variable a ``${VAR}`` names, and all of
these stripped and escaped as Python shows str and bytes. :func:`without_secrets` replaces
them, longest first, so a shorter form never leaves the tail of a longer one. Forms shorter
than :data:`MIN_SECRET_CHARS` are left alone. Redact a whole text before cutting it: a cut
through a credential leaves a part that no form matches.

A URL is shown by :func:`shown_url` (an error naming a server) and :func:`shown_target` (an
action's target, as a trace step, an error and an OpenTelemetry span record it): without its
user, password, query string and fragment, where credentials travel
(``https://u:p@host/x?api_key=sk-...`` is shown as ``https://host/x``). :func:`shown_urls`
shows every URL of a free text so (an exception's message, what an action printed), and the
query string and fragment of a path written without scheme and host, as HTTP clients print
the URL they called (``Max retries exceeded with url: /api?key=sk-...``).

What free text cannot tell apart is left as it is written: a password holding a raw blank (any
white space but a line break: a tab, a no-break space, any Unicode space) is recognised only
after a user and a ``:``, when its first word holds no blank, and up to the first ``@`` of its
line, with no ``/`` before it, and not when its first word is digits (``https://host:8080
down, ask ops@x.org`` is a port, then prose); a ``/`` inside a word (after a letter, a digit
or ``_``: ``and/or?``, ``1/2?``) starts no path.

:func:`shown_head` cuts a long text before showing its URLs, so that scrubbing costs no more
than the part kept, and drops a URL the cut went through (see :func:`url_at_end`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit, urlunsplit

REDACTED = "***"
# "1" or "on" would garble every message and are no secrets.
MIN_SECRET_CHARS = 4
# A `${VAR}` reference in a configured value (agentscript.toml), read from the environment.
ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# An auth scheme, blanks, then one credential (RFC 9110 11.4): "Bearer sk-...", "Basic dXNl...".
_SCHEME_AND_CREDENTIAL = re.compile(r"[A-Za-z][A-Za-z0-9!#$%&'*+.^_`|~-]*[ \t]+(\S+)")


def secret_forms(
    templates: Iterable[tuple[str, str]],
    expanded: Iterable[str],
    env: Mapping[str, str] | None = None,
) -> frozenset[str]:
    """Every way the ``expanded`` values of ``templates`` may show up in a message."""
    source = os.environ if env is None else env
    values = list(expanded)
    for _, template in templates:
        values += [source.get(name, "") for name in ENV_REF.findall(template)]
    values += [credential for value in values if (credential := _credential(value))]
    forms: set[str] = set()
    for value in values:
        for text in (value, value.strip()):
            forms |= {text, repr(text)[1:-1], repr(text.encode("utf-8", "replace"))[2:-1]}
    return frozenset(form for form in forms if len(form.strip()) >= MIN_SECRET_CHARS)


def without_secrets(text: str, forms: Iterable[str], marker: str = REDACTED) -> str:
    """``text`` with each of ``forms`` replaced by ``marker``, longest first."""
    for form in sorted(forms, key=len, reverse=True):
        text = text.replace(form, marker)
    return text


def _credential(value: str) -> str | None:
    match = _SCHEME_AND_CREDENTIAL.fullmatch(value.strip())
    return match.group(1) if match else None


def shown_url(url: str, unreadable: str = "(a URL)") -> str:
    """``url`` without its user, password, query string and fragment; ``unreadable`` when it
    does not parse (an unclosed ``[`` host), or when a ``?`` or ``#`` comes before its last
    ``@``, since no part of it can be told safe then."""
    if _at_after_query(url):
        return unreadable
    try:
        parts = urlsplit(_without_userinfo(url))
    except ValueError:
        return unreadable
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


def _at_after_query(url: str) -> bool:
    """Whether a ``?`` or ``#`` comes before the last ``@`` of ``url``: either a password holds
    a raw ``?`` or ``#`` (all up to the ``@`` is secret), or the ``@`` is in the query or the
    fragment (``?email=a@b.com&key=sk-...``: all after the ``?`` is secret), and no text tells
    which. Every part is secret in one reading or the other."""
    rest = url.partition("://")[2]
    at = rest.rfind("@")
    return at >= 0 and any(0 <= rest.find(mark) < at for mark in "?#")


def _without_userinfo(url: str) -> str:
    """``url`` without anything up to its last ``@``: a password written with a raw ``/``,
    ``?`` or ``#`` (``https://u:p/ss@host``) ends the host part early for a URL parser, which
    then keeps the credential in the path or the host. Dropping more than the user and
    password (an ``@`` in a path) only hides more."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    return f"{scheme}://{rest.rpartition('@')[2]}"


def shown_target(target: str) -> str:
    """An action's ``target`` as it may be recorded: a URL holding a user, password, query
    string or fragment as :func:`shown_url` shows it; any other target as written
    (``python://module:function``, ``flow://Name``, ``mcp://server/tool``)."""
    if "://" not in target:
        return target
    try:
        parts = urlsplit(target)
    except ValueError:
        return f"{target.partition('://')[0]}://(unreadable)"
    if not (parts.query or parts.fragment or "@" in target):
        return target
    return shown_url(target, f"{parts.scheme}://(unreadable)")


# A scheme in free text, started where a run of scheme characters starts (so a long run is
# scanned once), and its "://".
_SCHEME = r"(?<![A-Za-z0-9+.-])[A-Za-z0-9+.-]*://"
# How far a password holding a blank may run to its "@": a bound on the look-ahead from each
# scheme, so a long line of schemes is scanned in linear time.
_BLANK_PASSWORD_CHARS = 128
# A blank inside a password: any white space but a line break ("\t", " ", "\xa0", "\u2003":
# a password may hold any of them; "\S" and "\s" are Unicode-aware, so "[ \t]" here would let
# "u:p\xa0w@" pass as a host). A line break ends the search for the "@" (see _URL_IN_TEXT).
_BLANK = r"[^\S\n]"
# A user, ":", then a password's first word and a blank after it. The word must hold more
# than digits, sentence punctuation and closing brackets, which a port followed by prose does
# ("http://h:8080, ask ops@x.org"); the user no "[" (an IPv6 host's colons are no user).
_USER_AND_BLANK = rf"[^\s/?#@:\[\]]*:(?=[^\s/@]*?[^\s/@0-9'\".,;:!?)\]}}>])[^\s/@]+{_BLANK}"
# A URL in free text: a scheme, then, when a user and a password holding a blank come first
# (``https://u:pa ss@host``), all up to the first "@" of the line with no "/" before it, then
# everything up to whitespace. RFC 3986 allows quotes and brackets inside a URL (a password or
# a query may hold them), so only whitespace surely ends one: ending it at a quote would show
# the rest of the query.
_URL_IN_TEXT = re.compile(
    rf"{_SCHEME}(?:{_USER_AND_BLANK}[^\n/@]{{0,{_BLANK_PASSWORD_CHARS}}}@)?\S*"
)
# The end of a text cut through such a password, before its "@" (see :func:`url_at_end`).
_OPEN_BLANK_PASSWORD = re.compile(
    rf"{_SCHEME}{_USER_AND_BLANK}[^\n/@]{{0,{_BLANK_PASSWORD_CHARS}}}\Z"
)
# A path in free text: a "/" that starts a token, then everything up to whitespace. HTTP
# clients print the URL they called so, without scheme and host (urllib3: "Max retries
# exceeded with url: /api?key=..."; "GET /api?token=... HTTP/1.1"); its query and fragment hold
# the same credentials as a whole URL's. A "/" inside a word, after a letter, a digit or "_"
# ("and/or?", "1/2?"), starts none; one after anything else does: listing the characters that
# may start a token instead missed "x;/api?key=", "|/api?key=", "=>/api?key=", "“/api?key=”".
_PATH_IN_TEXT = re.compile(r"(?<!\w)/\S*")
# What may end a run of text after a URL rather than belong to it: sentence punctuation and
# quotes, and a closing bracket that no bracket of the URL opened.
_TRAILING = frozenset("'\".,;:!?")
_CLOSING = {")": "(", "]": "[", "}": "{", ">": "<"}


def shown_urls(text: str) -> str:
    """``text`` with each URL in it shown as :func:`shown_target` shows a target: without its
    user, password, query string and fragment; and each path that starts a token
    (``url: /api?key=k``) without its query string and fragment. A URL or a path runs to the
    next whitespace (a password holding a blank: see the module docstring), less trailing
    punctuation (``'https://h/x?key=k',`` keeps its ``',``); what follows it without
    whitespace is hidden with its query."""
    # Most texts: a few scans, no regex.
    if "://" in text:
        text = _URL_IN_TEXT.sub(_shown_match, text)
    if "/" in text and ("?" in text or "#" in text):
        # After the URLs: those are shown without "?" and "#" by now.
        text = _PATH_IN_TEXT.sub(_shown_path, text)
    return text


def _shown_match(match: re.Match[str]) -> str:
    run = match.group()
    cut = _url_end(run, run.index("://") + 3)
    return shown_target(run[:cut]) + run[cut:]


def _shown_path(match: re.Match[str]) -> str:
    run = match.group()
    cut = _url_end(run, 1)
    query = min(
        (at for at in (run.find("?", 0, cut), run.find("#", 0, cut)) if at >= 0), default=cut
    )
    return run[:query] + run[cut:]


def _url_end(run: str, start: int) -> int:
    """Where the URL at the start of ``run`` ends, not before ``start``: before the trailing
    punctuation, quotes and unmatched closing brackets of ``run`` (in linear time: ``run`` may
    be a long text)."""
    unmatched = {
        closing: run.count(closing) - run.count(opening) for closing, opening in _CLOSING.items()
    }
    cut = len(run)
    while cut > start:
        char = run[cut - 1]
        if char in _CLOSING and unmatched[char] > 0:
            unmatched[char] -= 1
        elif char not in _TRAILING:
            break
        cut -= 1
    return cut


def url_at_end(text: str) -> int:
    """Where a URL that runs to the end of ``text`` starts (``len(text)`` when none does): a
    cut through a URL may have kept its password and lost the ``@`` after it, so that
    :func:`shown_urls` could not tell it from a host. A password holding a blank
    (``https://u:pa ss``, cut before its ``@``) counts as running to the end too."""
    if "://" not in text:
        return len(text)
    # The end of the last line, as far back as a user, a first word and a blank password may
    # reach (one much longer is missed: its first word shows).
    line = text[text.rfind("\n") + 1 :][-4 * _BLANK_PASSWORD_CHARS :]
    opened = _OPEN_BLANK_PASSWORD.search(line)
    start = len(text) - len(line) + opened.start() if opened else len(text)
    if text[-1:].isspace():
        return start
    tail = text.rsplit(None, 1)[-1]  # from the right, at C speed
    found = _URL_IN_TEXT.search(tail)
    return min(start, len(text) - len(tail) + found.start()) if found else start


def shown_head(text: str, limit: int) -> str:
    """``text`` as :func:`shown_urls` shows it, when it is at most ``limit`` characters long;
    otherwise its first ``limit`` characters so shown, less a URL the cut went through (its
    password may be all that was kept of it: :func:`url_at_end`), and a note of how many
    characters were not kept. Cut before showing: scrubbing costs a few microseconds per URL
    or path, so a text of megabytes would hold the caller for seconds."""
    if len(text) <= limit:
        return shown_urls(text)
    kept = text[:limit]
    kept = kept[: url_at_end(kept)]
    return f"{shown_urls(kept)} [... {len(text) - len(kept)} more characters not kept]"
