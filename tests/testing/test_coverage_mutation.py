"""Agent coverage counted exactly on a purpose-built agent (15 items, by hand: 3 subagents,
2 actions, 3 transitions, 1 gate seen open and closed, 5 branches), and mutation testing where
a weak suite lets mutants survive that a stronger suite kills."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import run_test

GATE = Path(__file__).parent / "agents" / "gate"
AGENT = str(GATE / "gate.agent")


def _coverage(tmp_path: Path, suite: str) -> dict[str, object]:
    out = tmp_path / "coverage.json"
    code, _, _ = run_test(str(GATE / suite), "--agent", AGENT, "--coverage-json", str(out))
    assert code == 0
    data: list[dict[str, object]] = json.loads(out.read_text(encoding="utf-8"))
    return data[0]


def test_weak_suite_covers_6_of_15_items(tmp_path: Path) -> None:
    cov = _coverage(tmp_path, "weak")
    assert cov["percent"] == 40.0
    assert cov["byKind"] == {
        "subagent": {"covered": 2, "total": 3},
        "transition": {"covered": 1, "total": 3},
        "action": {"covered": 0, "total": 2},
        "gate_open": {"covered": 0, "total": 1},
        "gate_closed": {"covered": 1, "total": 1},
        "branch": {"covered": 2, "total": 5},
    }
    covered = {item["id"] for item in cov["items"] if item["covered"]}  # type: ignore[attr-defined]
    assert covered == {
        "router",
        "account",
        "router -> account",
        "account.update",
        "account:33 if",
        "account:39 else",
    }


def test_strong_suite_covers_every_item(tmp_path: Path) -> None:
    cov = _coverage(tmp_path, "strong")
    assert cov["percent"] == 100.0
    assert len(cov["items"]) == 15  # type: ignore[arg-type]


def test_coverage_table_html_and_fail_under(tmp_path: Path) -> None:
    page = tmp_path / "coverage.html"
    code, out, err = run_test(
        str(GATE / "weak"),
        "--agent",
        AGENT,
        "--coverage",
        "--coverage-html",
        str(page),
        "--fail-under",
        "50",
    )
    assert code == 1
    assert "coverage of Coverage_Gate: 40.0%" in out
    assert "not covered: gate_open account.update (line 48)" in out
    assert "under --fail-under 50%" in err
    html = page.read_text(encoding="utf-8")
    assert "<tr class='miss'><td>26</td>" in html  # router -> help never taken
    assert "<tr class='part'><td>48</td>" in html  # the gate: seen closed, never open
    assert "<tr class='hit'><td>33</td>" in html  # the gold branch ran
    assert run_test(str(GATE / "weak"), "--agent", AGENT, "--fail-under", "40")[0] == 0


def test_weak_suite_lets_the_dropped_gate_survive_and_strong_suite_kills_it() -> None:
    code, out, _ = run_test(str(GATE / "weak"), "--agent", AGENT, "--mutate")
    assert code == 0
    assert "8 mutants, 1 killed, 7 survived, 0 invalid; mutation score 12.5%" in out
    assert "SURVIVED gate.agent:48 drop_available_when" in out
    code, out, _ = run_test(str(GATE / "strong"), "--agent", AGENT, "--mutate")
    assert code == 0
    assert "8 mutants, 8 killed, 0 survived, 0 invalid; mutation score 100.0%" in out
    assert "SURVIVED" not in out


def test_mantle_coverage_counts_skills_blocks_steps_and_tool_constraints(tmp_path: Path) -> None:
    from conftest import ROOT

    from agentscript import load

    project = ROOT / "examples" / "card_bank"
    model = load(project).project  # type: ignore[attr-defined]
    out = tmp_path / "coverage.json"
    code, _, _ = run_test(str(project / "conversations"), "--coverage-json", str(out))
    assert code == 0
    cov = json.loads(out.read_text(encoding="utf-8"))[0]
    skills = model.skills.values()
    assert cov["byKind"]["skill"]["total"] == len(skills)
    assert cov["byKind"]["step"]["total"] == sum(
        len(b.steps) for s in skills for b in s.blocks.values()
    )
    assert cov["byKind"]["tool_constraint"]["total"] == sum(len(s.tool_constraints) for s in skills)
    ids = {i["id"] for i in cov["items"] if i["covered"]}
    assert "card_replace" in ids and "card_replace.order_card.place_order" in ids


def test_mantle_mutants_drop_constraints_and_block_steps() -> None:
    from conftest import ROOT

    from agentscript.testing.mutation import mantle_mutants

    mutants = mantle_mutants(ROOT / "examples" / "card_bank")
    kinds = {m.kind for m in mutants}
    assert kinds == {"drop_tool_constraint", "drop_block_step"}
    dropped = next(m for m in mutants if m.description == "- id: place_order")
    assert "execute_tool: order_replacement" not in dropped.text
    assert "id: pick_shipping" in dropped.text


def test_mutate_is_not_run_when_the_suite_fails_on_the_unmutated_agent(tmp_path: Path) -> None:
    failing = tmp_path / "failing.yaml"
    text = (GATE / "weak" / "gold.yaml").read_text(encoding="utf-8")
    failing.write_text(text.replace("node: account", "node: nowhere"), encoding="utf-8")
    for extra in ([], ["--no-fail-on-assertion"]):
        code, out, err = run_test(str(failing), "--agent", AGENT, "--mutate", *extra)
        assert code == 1  # a mutation score was asked for and none can be given
        assert "mutation testing of" in err and "not run: 1 case(s) do not pass" in err
        assert "mutation score" not in out + err  # no mutant ran: each would count as killed
