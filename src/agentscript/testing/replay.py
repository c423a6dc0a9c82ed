"""Recorded model answers: ``--record`` saves them, later runs replay them with no network.

Every call is keyed by (test, turn, node, call index): the agent's calls by the node that asked,
the judge's and the simulated user's by the pseudo-nodes ``judge:<check>`` and ``user``. Next to
each answer the file keeps a hash of the resolved prompt (system text but for the time it
states, instructions, messages, tools) and the prompt itself. On replay a different hash means
the agent changed under the recording: the call is reported *stale* with a unified diff of the
prompt, and with ``--refresh-stale`` only those calls go to the live model and are re-recorded.

File: ``<spec>.replay.json`` beside the spec, ``{"format": "agentscript-replay/1",
"calls": {key: {"hash", "prompt", "response"}}}``.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentscript.jsontext import escape_lone_surrogates
from agentscript.mantle.run.prompt import without_moment
from agentscript.models.base import (
    Model,
    ModelError,
    ModelRequest,
    ModelResponse,
    TextSink,
    ToolCall,
)
from agentscript.testing.errors import SpecError
from agentscript.testing.readers.strict_json import JsonProblem, load_json

FORMAT = "agentscript-replay/1"
_FIX = "delete it and re-record with --record --model MODEL"


class RecordingError(SpecError):
    """A recording file that cannot be used; like a spec error it stops the run (usage exit)."""

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(path, None, message)


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    return "null" if value is None else type(value).__name__


def _entry_problem(entry: Any) -> str | None:
    """Why a recorded call cannot be replayed, checked on opening so replay never trips on it."""
    if not isinstance(entry, dict):
        return f"must be an object with hash, prompt and response, not {_kind(entry)}"
    if not isinstance(entry.get("hash"), str):
        return "'hash' must be a string"
    if not isinstance(entry.get("prompt", ""), str):
        return "'prompt' must be a string"
    response = entry.get("response")
    if not isinstance(response, dict):
        return "'response' must be an object"
    if not isinstance(response.get("text"), str | None):
        return "'response.text' must be a string or null"
    calls = response.get("tool_calls")
    if calls is None:
        return None
    if not isinstance(calls, list):
        return "'response.tool_calls' must be a list"
    for call in calls:
        if not isinstance(call, dict) or "id" not in call or "name" not in call:
            return "each tool call must be an object with id and name"
    return None


class ReplayMissing(ModelError):
    """No recorded answer for a call and no live model to ask."""


class ReplayStale(ModelError):
    """The recorded answer was made for a different prompt; ``diff`` shows how it changed."""

    def __init__(self, key: str, diff: str) -> None:
        self.key = key
        self.diff = diff
        super().__init__(
            f"recorded call {key} is stale: the prompt changed since it was recorded "
            "(re-record it with --refresh-stale)\n" + diff
        )


def prompt_text(request: ModelRequest) -> str:
    """The resolved prompt as stable text (what the hash covers and the diff shows). A Mantle
    system prompt's current date and time is left out: the recording stays good next minute."""
    lines = [
        "# system",
        without_moment(request.system),
        "# instructions",
        request.instructions,
        "# messages",
    ]
    lines += [json.dumps(m.to_json(), sort_keys=True, ensure_ascii=False) for m in request.messages]
    lines.append("# tools")
    lines += [
        json.dumps(
            {"name": t.name, "description": t.description, "parameters": t.parameters},
            sort_keys=True,
        )
        for t in request.tools
    ]
    return "\n".join(lines)


def prompt_hash(request: ModelRequest) -> str:
    return hashlib.sha256(prompt_text(request).encode("utf-8")).hexdigest()[:16]


def _response_json(response: ModelResponse) -> dict[str, Any]:
    return {"text": response.text, "tool_calls": [c.to_json() for c in response.tool_calls]}


def _response_of(data: dict[str, Any]) -> ModelResponse:
    calls = [
        ToolCall(str(c["id"]), str(c["name"]), c.get("arguments"))
        for c in data.get("tool_calls") or []
    ]
    return ModelResponse(text=data.get("text"), tool_calls=calls, model="replay")


@dataclass
class ReplayStore:
    """The recorded calls of one spec file, and what this run did with them."""

    path: Path
    calls: dict[str, dict[str, Any]] = field(default_factory=dict)
    record: bool = False  # every call goes to the live model and is saved
    refresh_stale: bool = False  # stale calls go to the live model and are re-saved
    stale: dict[str, str] = field(default_factory=dict)  # key -> prompt diff
    # Stale calls that --refresh-stale re-recorded from the live model: key -> prompt diff.
    refreshed: dict[str, str] = field(default_factory=dict)
    dirty: bool = False

    @staticmethod
    def open(path: Path, *, record: bool = False, refresh_stale: bool = False) -> ReplayStore:
        """The store of ``path`` (empty when the file does not exist yet).

        Raises :class:`RecordingError` when the file is there but is not a usable recording."""
        store = ReplayStore(path, record=record, refresh_stale=refresh_stale)
        if not path.exists() and not path.is_symlink():
            return store
        if not path.is_file():
            raise RecordingError(path, "is not a regular file; " + _FIX)
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise RecordingError(
                path, f"cannot read the recording: {exc.strerror or exc}"
            ) from None
        try:
            # A key twice (a hand-edited call, the second silently winning) or an integer
            # longer than Python reads is refused; NaN and lone surrogates a model answered
            # are kept, as they were recorded.
            data = load_json(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise RecordingError(
                path, "not a recording: the file is not UTF-8 text; " + _FIX
            ) from None
        except JsonProblem as exc:
            at = f" at line {exc.line}" if exc.line is not None else ""
            raise RecordingError(
                path, f"not a recording: invalid JSON{at}: {exc.problem}; " + _FIX
            ) from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise RecordingError(path, f"not a recording (expected format {FORMAT}); " + _FIX)
        calls = data.get("calls")
        if calls is None:
            calls = {}
        if not isinstance(calls, dict):
            raise RecordingError(
                path, f"'calls' must be an object of recorded calls, not {_kind(calls)}; " + _FIX
            )
        for key, entry in calls.items():
            problem = _entry_problem(entry)
            if problem is not None:
                shown = key if len(key) <= 80 else key[:80] + "..."
                raise RecordingError(path, f"recorded call {shown!r}: {problem}; " + _FIX)
        store.calls = dict(calls)
        return store

    def save(self) -> None:
        """Write the recording if this run changed it.

        Atomically (a temporary file beside it, then ``os.replace``): a run stopped mid-write
        must never leave a truncated recording that the next run cannot read."""
        if not self.dirty:
            return
        data = {"format": FORMAT, "calls": dict(sorted(self.calls.items()))}
        # A model's answer may hold a lone surrogate, which UTF-8 cannot write.
        text = escape_lone_surrogates(json.dumps(data, indent=1, ensure_ascii=False)) + "\n"
        folder = self.path.parent
        try:
            handle, temporary = tempfile.mkstemp(
                prefix=f".{self.path.name}.", suffix=".tmp", dir=folder
            )
            try:
                with os.fdopen(handle, "w", encoding="utf-8") as out:
                    out.write(text)
                os.replace(temporary, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
                raise
        except OSError as exc:
            raise RecordingError(
                self.path, f"cannot save the recording: {exc.strerror or exc}"
            ) from None
        self.dirty = False

    async def answer(self, key: str, request: ModelRequest, live: Model | None) -> ModelResponse:
        digest = prompt_hash(request)
        saved = self.calls.get(key)
        if saved is not None and not self.record:
            if saved.get("hash") == digest:
                return _response_of(saved["response"])
            diff = "\n".join(
                difflib.unified_diff(
                    str(saved.get("prompt", "")).splitlines(),
                    prompt_text(request).splitlines(),
                    "recorded",
                    "now",
                    lineterm="",
                )
            )
            if not (self.refresh_stale and live is not None):
                self.stale[key] = diff
                raise ReplayStale(key, diff)
            refreshing: str | None = diff
        else:
            refreshing = None
        if live is None:
            raise ReplayMissing(
                f"no recorded answer for call {key}: record one with --record and --model"
            )
        try:
            response = await live.complete(request)
        except BaseException:
            if refreshing is not None:  # still stale: its re-recording failed
                self.stale[key] = refreshing
            raise
        self.calls[key] = {
            "hash": digest,
            "prompt": prompt_text(request),
            "response": _response_json(response),
        }
        self.dirty = True
        if refreshing is not None:  # listed once it is re-recorded, not when it was asked
            self.refreshed[key] = refreshing
        return response


class ReplayModel:
    """The agent's model during a case: replays, or asks ``live`` and records.

    The runner sets :attr:`case` and :attr:`turn`; the call index counts per (turn, node)."""

    def __init__(self, store: ReplayStore, live: Model | None, case: str) -> None:
        self.store = store
        self.live = live
        self.name = live.name if live is not None else "replay"
        self.case = case
        self.turn = 0
        self._counts: dict[tuple[int, str], int] = {}
        # The engine turns a model failure into a failed turn; the runner needs to know it was
        # the recording (missing or stale) so the case is an ERROR, not a wrong answer.
        self.failure: str | None = None

    def key(self, node: str) -> str:
        index = self._counts.get((self.turn, node), 0)
        self._counts[(self.turn, node)] = index + 1
        return f"{self.case}|{self.turn}|{node}|{index}"

    async def complete(
        self, request: ModelRequest, *, stream: TextSink | None = None
    ) -> ModelResponse:
        try:
            return await self.store.answer(self.key(request.node or "agent"), request, self.live)
        except ModelError as exc:
            # The first line only: a stale call's prompt diff is listed once, in the report.
            self.failure = self.failure or str(exc).splitlines()[0]
            raise
