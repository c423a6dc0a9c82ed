"""Saved sessions from outside: signed, identified, and checked in full before they run.

A saved session (:meth:`Session.to_json`) is data a caller stores and gives back later, so
on :meth:`AgentBase.restore` it is outside input like any other. This module holds what every
agent kind shares:

- :class:`SessionRestoreError`, the one error a bad saved session raises (``field`` names the
  first problem, ``reason`` says what is wrong with it);
- the agent's identity in the saved data (``agent: {"name", "hash"}``, the hash of the
  compiled agent's state-relevant shape), compared on restore;
- optional HMAC-SHA256 signing: when ``AGENTSCRIPT_SESSION_KEY`` is set, ``to_json`` adds a
  ``signature`` over the whole canonical JSON and ``restore`` refuses data whose signature is
  missing or does not match, so an edited session (``is_verified: true``) cannot open a gate;
- :class:`Checker`, small typed readers that raise :class:`SessionRestoreError` with the path
  of the offending field, used by each agent kind to check its own state (variables, node or
  skill stack, pending confirmation, history).

Nothing here trusts the data: no value is used before its type is checked, so a malformed
session fails here, never later as a KeyError inside a turn.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from agentscript.errors import SessionRestoreError as SessionRestoreError  # re-exported
from agentscript.expr.values import nested_deeper_than
from agentscript.jsonsafe import UnsafeValue, json_safe
from agentscript.limits import MAX_KEPT_ARGUMENT_DEPTH, Limits
from agentscript.models.base import Message, ToolCall

SESSION_KEY_ENV = "AGENTSCRIPT_SESSION_KEY"
# Saved sessions are bounded like the rest of the state; this is far above any real one.
MAX_SESSION_CHARS = 64_000_000
ROLES = frozenset({"user", "assistant", "tool"})
# Sessions get 16-character ids (``uuid4().hex[:16]``), and the server takes at most 64; a
# host may choose its own. A trace file is named after the id, and a file name longer than
# 255 bytes cannot be written, so a longer one is no id this runtime could have used.
MAX_SESSION_ID_CHARS = 200
# A lone UTF-16 surrogate (U+D800 to U+DFFF): no character, and UTF-8 has no form for it.
_SURROGATE = re.compile("[\ud800-\udfff]")


def fingerprint(shape: Any) -> str:
    """A stable hash of an agent's state-relevant shape (plain JSON data)."""
    text = json.dumps(shape, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def session_key() -> bytes | None:
    """The signing key from the environment, or None when sessions are not signed."""
    key = os.environ.get(SESSION_KEY_ENV)
    return key.encode("utf-8") if key else None


def _signature(data: Mapping[str, Any], key: bytes) -> str:
    body = {k: v for k, v in data.items() if k != "signature"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    # "surrogatepass": the same bytes as strict UTF-8 for any text, and one encoding still
    # (no two values share it) for a string with a lone surrogate, which a session may hold
    # (a model's reply can escape one); strict UTF-8 raised UnicodeEncodeError out of
    # to_json and restore for such a session.
    return (
        "hmac-sha256:"
        + hmac.new(key, text.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()
    )


def sign(data: dict[str, Any], key: bytes | None = None) -> dict[str, Any]:
    """``data`` with a ``signature`` when a key is given or set in the environment."""
    key = key if key is not None else session_key()
    if key is not None:
        data["signature"] = _signature(data, key)
    return data


def verify(data: Mapping[str, Any], key: bytes | None = None) -> None:
    """Refuse unsigned or edited data when a key is given or set in the environment."""
    key = key if key is not None else session_key()
    if key is None:
        return
    given = data.get("signature")
    if not isinstance(given, str):
        raise SessionRestoreError(
            "signature", f"missing; sessions must be signed ({SESSION_KEY_ENV} is set)"
        )
    # compare_digest takes ASCII text only (TypeError otherwise); a real signature is ASCII
    if not given.isascii() or not hmac.compare_digest(given, _signature(data, key)):
        raise SessionRestoreError(
            "signature", "does not match: the session was changed after it was saved"
        )


# A session keeps tool-call arguments up to MAX_KEPT_ARGUMENT_DEPTH levels deep, and they sit
# five levels down (history[i].tool_calls[j].arguments): a saved session must be read back
# whatever the engine kept (a hostile-model fuzz run found 64 too tight).
SESSION_MAX_DEPTH = MAX_KEPT_ARGUMENT_DEPTH + 16


def decode(data: Mapping[str, Any] | str) -> dict[str, Any]:
    """The saved session as a dict (JSON text parsed, strictly: no NaN or Infinity).

    JSON text, once parsed within the size cap and without NaN or Infinity (an integer too long
    for Python to print is refused by the parser too), holds only JSON values: only its depth is
    left to check, without the walk and copy a mapping from elsewhere needs. The server hands
    its stored text here, so restoring a long session before each turn costs a parse, not a
    walk of its history in Python."""
    if isinstance(data, str):
        if len(data) > MAX_SESSION_CHARS:
            raise SessionRestoreError("(session)", f"larger than {MAX_SESSION_CHARS} characters")
        try:
            parsed = json.loads(data, parse_constant=_no_constant)
        except (ValueError, RecursionError) as exc:
            raise SessionRestoreError("(session)", f"not valid JSON: {exc}") from None
        if not isinstance(parsed, dict):
            raise SessionRestoreError("(session)", f"expected a JSON object, got {_kind(parsed)}")
        if nested_deeper_than(parsed, SESSION_MAX_DEPTH):
            raise SessionRestoreError(
                "(session)", f"nested more than {SESSION_MAX_DEPTH} levels deep"
            )
        return parsed
    if not isinstance(data, Mapping):
        raise SessionRestoreError("(session)", f"expected a JSON object, got {_kind(data)}")
    try:
        safe: dict[str, Any] = json_safe(
            dict(data), max_chars=MAX_SESSION_CHARS, max_depth=SESSION_MAX_DEPTH
        )
    except UnsafeValue as exc:
        raise SessionRestoreError(exc.path or "(session)", exc.reason) from None
    return safe


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


class Checker:
    """Typed reads of untrusted data; each failure is a SessionRestoreError at its path.

    ``limits`` are the bounds the restored session will run with (``Limits()`` when not
    given): what a turn would not let into the state is not let in by restore either."""

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()

    def fail(self, field: str, reason: str) -> NoReturn:
        raise SessionRestoreError(field, reason)

    def mapping(self, value: Any, field: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(field, f"expected an object, got {_kind(value)}")
        return value

    def keys(
        self, value: dict[str, Any], field: str, allowed: set[str], required: set[str]
    ) -> None:
        unknown = sorted(set(value) - allowed)
        if unknown:
            self.fail(f"{field}.{unknown[0]}" if field else unknown[0], "unknown field")
        missing = sorted(required - set(value))
        if missing:
            self.fail(f"{field}.{missing[0]}" if field else missing[0], "missing")

    def string(self, value: Any, field: str, *, optional: bool = False) -> str | None:
        if value is None and optional:
            return None
        if not isinstance(value, str):
            self.fail(field, f"expected a string, got {_kind(value)}")
        return value

    def boolean(self, value: Any, field: str) -> bool:
        if not isinstance(value, bool):
            self.fail(field, f"expected true or false, got {_kind(value)} {value!r}")
        return value

    def count(self, value: Any, field: str) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            self.fail(field, f"expected a non-negative integer, got {_kind(value)} {value!r}")
        return value

    def listing(self, value: Any, field: str) -> list[Any]:
        if not isinstance(value, list):
            self.fail(field, f"expected a list, got {_kind(value)}")
        return value

    def one_of(
        self, value: Any, field: str, allowed: Mapping[str, Any] | set[str] | frozenset[str]
    ) -> str:
        text = self.string(value, field)
        assert text is not None
        if text not in allowed:
            self.fail(field, f"'{text}' is not one of {sorted(allowed)[:20]}")
        return text

    def variables(
        self,
        value: Any,
        declared: Mapping[str, str],
        coerce: Callable[[str, Any], Any],
        field: str = "variables",
    ) -> dict[str, Any]:
        """Exactly the declared names, each value accepted by ``coerce(name, value)``
        (which raises ValueError with the reason)."""
        values = self.mapping(value, field)
        self.keys(values, field, set(declared), set(declared))
        out: dict[str, Any] = {}
        # No size bound here beyond the whole session's (MAX_SESSION_CHARS): a variable given at
        # creation is not held to Limits.max_variable_chars, and limits lowered since the save
        # must not strand the sessions saved under them.
        for name, item in values.items():
            try:
                out[name] = coerce(name, item)
            except ValueError as exc:
                self.fail(f"{field}.{name}", str(exc))
        return out

    def history(self, value: Any) -> list[Message]:
        """Messages of the provider-neutral shape, tool calls answered in order (the last
        ones too). Its size is not held to ``Limits.max_history_chars``: the next turn trims
        it, as it trims any history, and limits lowered since the save must not strand the
        sessions saved under them (MAX_SESSION_CHARS bounds the whole session)."""
        messages: list[Message] = []
        open_calls: list[str] = []
        opened_at: dict[str, str] = {}  # call id -> where it was made
        for index, raw in enumerate(self.listing(value, "history")):
            where = f"history[{index}]"
            item = self.mapping(raw, where)
            self.keys(
                item, where, {"role", "content", "tool_calls", "tool_call_id", "name"}, {"role"}
            )
            role = self.one_of(item["role"], f"{where}.role", ROLES)
            content = self.string(item.get("content", ""), f"{where}.content")
            calls: list[ToolCall] = []
            for position, call in enumerate(self.listing(item.get("tool_calls", []), where)):
                at = f"{where}.tool_calls[{position}]"
                data = self.mapping(call, at)
                self.keys(data, at, {"id", "name", "arguments"}, {"id", "name"})
                arguments = data.get("arguments")
                if arguments is not None:
                    self.mapping(arguments, f"{at}.arguments")
                calls.append(
                    ToolCall(
                        str(self.string(data["id"], f"{at}.id")),
                        str(self.string(data["name"], f"{at}.name")),
                        arguments,
                    )
                )
            if calls and role != "assistant":
                self.fail(f"{where}.tool_calls", "only assistant messages call tools")
            call_id = self.string(item.get("tool_call_id"), f"{where}.tool_call_id", optional=True)
            name = self.string(item.get("name"), f"{where}.name", optional=True)
            if role == "tool":
                if not open_calls or call_id != open_calls[0]:
                    self.fail(f"{where}.tool_call_id", "answers no open tool call")
                open_calls.pop(0)
            elif open_calls:
                self.fail(where, f"tool call '{open_calls[0]}' has no result before this message")
            open_calls.extend(c.id for c in calls)
            for position, c in enumerate(calls):
                opened_at[c.id] = f"{where}.tool_calls[{position}]"
            messages.append(Message(role, content or "", calls, call_id, name))
        if open_calls:
            # Every turn answers its calls before it ends (a failed one with an error); an
            # open call would fail the next turn before its model call.
            self.fail(
                opened_at.get(open_calls[0], "history"),
                f"tool call '{open_calls[0]}' has no result: the history ends before it",
            )
        return messages


# --- the parts every saved session has ------------------------------------------------------

TOP_FIELDS = {
    "format",
    "agent",
    "session_id",
    "variables",
    "history",
    "current_node",
    "resume_node",
    "pending_confirmation",
    "turn",
    "ended",
    "stub_usage",
    "extra",
    "llm_input",  # what the next LLM_STEP's delta needs (trace_inputs.py); absent before
    "signature",
}
REQUIRED_FIELDS = {"format", "session_id", "variables"}


def check_common(
    c: Checker, payload: dict[str, Any], formats: set[str], name: str, shape_hash: str
) -> None:
    """Format, agent identity and the scalar fields shared by every agent kind."""
    fmt = payload.get("format")
    if not isinstance(fmt, str) or fmt not in formats:
        c.fail("format", f"not a saved session (expected format {max(formats)!r})")
    c.keys(payload, "", TOP_FIELDS, REQUIRED_FIELDS)
    agent = payload.get("agent")
    if agent is None:
        if fmt == max(formats):
            c.fail("agent", "missing (saved sessions name the agent they belong to)")
    else:
        identity = c.mapping(agent, "agent")
        c.keys(identity, "agent", {"name", "hash"}, {"name", "hash"})
        if identity["name"] != name:
            c.fail("agent.name", f"the session belongs to agent {identity['name']!r}, not {name!r}")
        if identity["hash"] != shape_hash:
            c.fail(
                "agent.hash",
                "the agent changed since the session was saved (its variables, subagents, "
                "skills or actions differ); start a new session",
            )
    session_id = c.string(payload["session_id"], "session_id")
    if not session_id:
        c.fail("session_id", "empty")
    if len(session_id) > MAX_SESSION_ID_CHARS:
        c.fail("session_id", f"longer than {MAX_SESSION_ID_CHARS} characters")
    if not session_id.isascii() and _SURROGATE.search(session_id) is not None:
        # No session gets such an id (a new one is hex; the server's are ASCII): it names
        # the session's trace files and its stored row, which are UTF-8.
        c.fail("session_id", "holds a lone surrogate (U+D800 to U+DFFF), which is no text")
    c.count(payload.get("turn", 0), "turn")
    c.boolean(payload.get("ended", False), "ended")
    usage = c.mapping(payload.get("stub_usage", {}), "stub_usage")
    for key, value in usage.items():
        c.count(value, f"stub_usage.{key}")
    c.mapping(payload.get("extra", {}), "extra")
    check_llm_input(c, payload.get("llm_input"))


# A digest longer than this is none a session wrote (``sha256:`` and 64 hex digits); any
# shorter text is let in and only matches if it is the restored messages' digest, so a later
# digest kind reads as a mismatch (a complete step), not as a damaged session.
MAX_DIGEST_CHARS = 200


def check_llm_input(c: Checker, value: Any) -> None:
    """``llm_input`` (``Session.to_json``): ``{"messages": n, "digest": text, "dropped"?: n}``,
    what the session's previous LLM call was given, for the delta of the next ``LLM_STEP``.
    Only its shape is checked here: counts that do not fit the history, or a digest that does
    not match its messages, make the next step complete (``MessageLog.expect``), never an
    error."""
    if value is None:
        return
    data = c.mapping(value, "llm_input")
    c.keys(data, "llm_input", {"messages", "digest", "dropped"}, {"messages", "digest"})
    c.count(data["messages"], "llm_input.messages")
    c.count(data.get("dropped", 0), "llm_input.dropped")
    digest = c.string(data["digest"], "llm_input.digest")
    if digest is not None and len(digest) > MAX_DIGEST_CHARS:
        c.fail("llm_input.digest", f"longer than {MAX_DIGEST_CHARS} characters")


def check_usage(c: Checker, extra: dict[str, Any]) -> None:
    """``extra.usage``: the session's budget totals (:mod:`agentscript.engine.budgets`), the
    one extension state both formats keep."""
    if "usage" not in extra:
        return
    usage = c.mapping(extra["usage"], "extra.usage")
    c.keys(usage, "extra.usage", {"llm_calls", "input_tokens", "output_tokens", "cost"}, set())
    for name in ("llm_calls", "input_tokens", "output_tokens"):
        if name in usage:
            c.count(usage[name], f"extra.usage.{name}")
    cost = usage.get("cost")
    if cost is not None and (
        isinstance(cost, bool) or not isinstance(cost, int | float) or not cost >= 0
    ):
        c.fail("extra.usage.cost", "must be a number of at least 0, or null")
