"""A name is one path component, never a relative reference: an agent named ``..`` is refused
by serve, and the trace files and the playground's zip map a name of dots only to ``_``."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

import agentscript
from agentscript.models.scripted import Move, ScriptedModel
from agentscript.server.playground.export import traces_zip
from agentscript.store import TurnRecord
from agentscript.trace import path_component

from .harness import NOTES
from .test_command import serve

DOTS = [".", "..", "..."]


def _renamed(tmp_path: Path, name: str) -> Path:
    agent = tmp_path / "dots.agent"
    text = Path(NOTES).read_text(encoding="utf-8")
    agent.write_text(text.replace('developer_name: "Notes"', f'developer_name: "{name}"'))
    return agent


@pytest.mark.parametrize("name", DOTS)
def test_serve_refuses_an_agent_named_only_dots_in_one_line(tmp_path: Path, name: str) -> None:
    # No model: were the name taken, serve would stop at the model, not listen.
    code, out = serve(str(_renamed(tmp_path, name)), env={"AGENTSCRIPT_MODEL": ""})
    assert code == 2 and out.count("\n") == 1 and "Traceback" not in out
    assert f"the agent's name '{name}' cannot be part of a URL" in out and "not dots only" in out


def test_serve_still_takes_a_name_with_dots_and_more(tmp_path: Path) -> None:
    from agentscript.server.agents import load_agents

    [agent] = load_agents([str(_renamed(tmp_path, "notes.v2"))])
    assert agent.name == "notes.v2"


def test_an_agent_named_dot_dot_writes_its_traces_inside_the_trace_dir(tmp_path: Path) -> None:
    agent = agentscript.load(_renamed(tmp_path, ".."))
    assert agent.name == ".."
    trace_dir = tmp_path / "td" / "inner"
    session = agent.session(model=ScriptedModel([Move(text="hello")]), trace_dir=trace_dir)
    reply = session.send("hi")
    written = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.json"))
    assert written == [Path("td/inner/_/sessions", session.id, "traces", f"{session.id}-1.json")]
    assert reply.trace_file is not None
    assert Path(reply.trace_file).resolve().is_relative_to(trace_dir.resolve())


@pytest.mark.parametrize("name", [*DOTS, ""])
def test_a_name_of_dots_only_or_nothing_is_one_safe_path_component(name: str) -> None:
    assert path_component(name) == "_"


@pytest.mark.parametrize(
    ("name", "component"),
    [
        ("Notes", "Notes"),
        ("notes.v2", "notes.v2"),
        (".hidden", ".hidden"),
        ("a b/../c", "a_b_.._c"),
    ],
)
def test_a_name_with_other_characters_keeps_its_dots(name: str, component: str) -> None:
    assert path_component(name) == component


def test_the_playground_zip_names_no_folder_above_its_root() -> None:
    record = TurnRecord("..", 1, {"user": "hi"}, {"planId": ".."})
    archive = zipfile.ZipFile(io.BytesIO(traces_zip("..", "..", [record])))
    assert archive.namelist() == ["_/sessions/_/traces/_.json"]
