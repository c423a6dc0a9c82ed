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
(``https://u:p@host/x?api_key=sk-...`` is shown as ``https://host/x``).
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
    does not parse (an unclosed ``[`` host), since no part of it can be told safe."""
    try:
        parts = urlsplit(_without_userinfo(url))
    except ValueError:
        return unreadable
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


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
