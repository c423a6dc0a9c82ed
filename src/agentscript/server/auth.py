"""API keys: loaded from ``AGENTSCRIPT_API_KEYS``, kept and compared only as SHA-256 hashes.

``AGENTSCRIPT_API_KEYS`` holds comma-separated keys, or the path of a file (one key per line;
``#`` starts a comment at the start of a line or after a space or tab, as in pip's requirement
files: a ``#`` within a key is part of it). A line ``sha256:<hex>`` gives a key by its hash, so
the file need not hold the key itself. A key itself is at least :data:`MIN_KEY_CHARS` long. A
request authenticates with ``Authorization: Bearer <key>``; its owner id is the key's hash,
which is what sessions record (never the key).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

ENV = "AGENTSCRIPT_API_KEYS"
# A key shorter than this can be guessed by anyone who can reach the server (a hash given as
# ``sha256:<hex>`` cannot be measured, and is taken as it is).
MIN_KEY_CHARS = 16
MAKE_A_KEY = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
# Where a comment begins on a line of a key file: a ``#`` first on the line or after a space
# or tab. Keys hold no spaces, so such a ``#`` can never be part of one; any other ``#`` is
# (a key ``Xy#9kQ...`` cut at its ``#`` would have let ``Bearer Xy`` in).
COMMENT = re.compile(r"(?:^|\s)#")


class KeyConfigError(ValueError):
    """The key configuration cannot be read (the message says what to fix)."""


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def uncommented(line: str) -> str:
    """A line of a key file without its comment (:data:`COMMENT`)."""
    found = COMMENT.search(line)
    return line if found is None else line[: found.start()]


class ApiKeys:
    """The accepted keys, by hash. Empty: the server runs without authentication."""

    def __init__(self, hashes: Iterable[str] = ()) -> None:
        self.hashes = frozenset(hashes)

    @property
    def enabled(self) -> bool:
        return bool(self.hashes)

    @staticmethod
    def of(*keys: str) -> ApiKeys:
        return ApiKeys(key_hash(k) for k in keys)

    @staticmethod
    def from_env(env: Mapping[str, str] | None = None) -> ApiKeys:
        raw = (os.environ if env is None else env).get(ENV, "").strip()
        if not raw:
            return ApiKeys()
        path = Path(raw)
        if "," not in raw and (raw.startswith(("/", ".", "~")) or path.is_file()):
            try:
                # utf-8-sig: a byte-order mark (Notepad writes one) must not become part of
                # the first key, which would then never match.
                text = path.expanduser().read_text(encoding="utf-8-sig")
            except OSError as exc:
                raise KeyConfigError(f"{ENV}: cannot read {raw}: {exc.strerror or exc}") from None
            entries = [
                (f"the key on line {number} of {raw}", uncommented(line).strip())
                for number, line in enumerate(text.splitlines(), 1)
            ]
        else:
            parts = raw.split(",")
            entries = [
                (f"key {number}" if len(parts) > 1 else "the key", part.strip())
                for number, part in enumerate(parts, 1)
            ]
        hashes = []
        for where, entry in entries:
            if not entry:
                continue
            if entry.startswith("sha256:"):
                digest = entry[len("sha256:") :].lower()
                if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                    raise KeyConfigError(f"{ENV}: 'sha256:' must be followed by 64 hex digits")
                hashes.append(digest)
            elif not entry.isascii() or not entry.isprintable() or " " in entry:
                # A header carries visible ASCII only: such a key could never be sent.
                raise KeyConfigError(
                    f"{ENV}: a key must be visible ASCII characters without spaces "
                    "(a key with others could never be sent in an Authorization header)"
                )
            elif len(entry) < MIN_KEY_CHARS:
                # Never the key itself: this line is printed and may be logged.
                raise KeyConfigError(
                    f"{ENV}: {where} is too short to resist guessing ({len(entry)} "
                    f"character{'' if len(entry) == 1 else 's'}): use at least {MIN_KEY_CHARS} random characters, made for "
                    f"instance with: {MAKE_A_KEY}"
                )
            else:
                hashes.append(key_hash(entry))
        if not hashes:
            raise KeyConfigError(f"{ENV} is set but holds no key")
        return ApiKeys(hashes)

    def owner(self, authorization: str | None) -> str | None:
        """The owner id for an ``Authorization`` header, "" when keys are off, None when the
        header is missing or the key unknown."""
        if not self.enabled:
            return ""
        if not authorization:
            return None
        scheme, _, key = authorization.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            return None
        digest = key_hash(key.strip())
        # Compare against every hash, so timing says nothing about which keys exist.
        found = False
        for known in self.hashes:
            found |= hmac.compare_digest(known, digest)
        return digest if found else None
