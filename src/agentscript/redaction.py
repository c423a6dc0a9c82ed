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
shows every URL of a free text so (an exception's message, what an action printed).
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


# A URL in free text: a scheme (started where a run of scheme characters starts, so a long
# run is scanned once), "://", then everything up to whitespace. RFC 3986 allows quotes and
# brackets inside a URL (a password or a query may hold them), so only whitespace surely ends
# one: ending it at a quote would show the rest of the query.
_URL_IN_TEXT = re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z0-9+.-]*://\S*")
# What may end a run of text after a URL rather than belong to it: sentence punctuation and
# quotes, and a closing bracket that no bracket of the URL opened.
_TRAILING = frozenset("'\".,;:!?")
_CLOSING = {")": "(", "]": "[", "}": "{", ">": "<"}


def shown_urls(text: str) -> str:
    """``text`` with each URL in it shown as :func:`shown_target` shows a target: without its
    user, password, query string and fragment. A URL runs from its scheme to the next
    whitespace, less trailing punctuation (``'https://h/x?key=k',`` keeps its ``',``); what
    follows a URL without whitespace is hidden with its query."""
    if "://" not in text:  # most texts: one scan, no regex
        return text
    return _URL_IN_TEXT.sub(_shown_match, text)


def _shown_match(match: re.Match[str]) -> str:
    run = match.group()
    cut = _url_end(run)
    return shown_target(run[:cut]) + run[cut:]


def _url_end(run: str) -> int:
    """Where the URL at the start of ``run`` ends: before the trailing punctuation, quotes and
    unmatched closing brackets of ``run`` (in linear time: ``run`` may be a long text)."""
    unmatched = {
        closing: run.count(closing) - run.count(opening) for closing, opening in _CLOSING.items()
    }
    start, cut = run.index("://") + 3, len(run)
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
    :func:`shown_urls` could not tell it from a host."""
    if "://" not in text or text[-1:].isspace():
        return len(text)
    tail = text.rsplit(None, 1)[-1]  # from the right, at C speed
    found = _URL_IN_TEXT.search(tail)
    return len(text) - len(tail) + found.start() if found else len(text)
