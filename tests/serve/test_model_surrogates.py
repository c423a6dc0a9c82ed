"""A lone surrogate a model says (JSON's ``"\\ud800"`` in its answer or its tool call) is kept
as said and written as its escape by every answer: the session stays readable and usable. It
is no Unicode text, so FastAPI's own writer failed on it: every read of the session was a 500."""

from __future__ import annotations

from typing import Any

from .harness import new_session, run

# The stand-in model calls the note tool with these arguments: the JSON escape becomes a lone
# surrogate in the tool call, the variable it sets and the history, as from a real model.
NOTE = '/note {"text": "a\\ud800b"}'


def test_a_lone_surrogate_said_by_the_model_leaves_every_read_of_the_session_working(
    api_store: str,
) -> None:
    async def scenario(client: Any) -> dict[str, Any]:
        sid = await new_session(client)
        seen: dict[str, Any] = {"sends": []}
        for _ in range(2):  # the second turn restores or reuses the state holding it
            sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": NOTE})
            seen["sends"].append(sent.status_code)
        for name, path in {
            "session": f"/v1/sessions/{sid}",
            "turns": f"/v1/sessions/{sid}/turns",
            "trace": f"/v1/sessions/{sid}/turns/1/trace",
            "list": "/v1/sessions",
        }.items():
            got = await client.get(path)
            seen[name] = got.status_code, got.text
        return seen

    seen = run(api_store, scenario)
    assert seen["sends"] == [200, 200]
    for name in ("session", "turns", "trace", "list"):
        assert seen[name][0] == 200, seen[name]
    assert '"last_note":"a\\ud800b"' in seen["session"][1]  # written as its escape
    assert "\\ud800" in seen["trace"][1]
