"""Issue 13 item 7: knowledge. Markdown under references/ is chunked and indexed (SQLite
FTS5, BM25), cached by content hash; ``search_knowledge`` returns ranked passages with file
and heading, traced as KNOWLEDGE_STEP; skill tools are withheld after a search in the turn.
One test per conformance project that ships references/."""

from __future__ import annotations

from pathlib import Path

import pytest
from mantle_helpers import SIGNED_IN, clean, copy_bank, load, run_text, steps

import agentscript
from agentscript.mantle import load_project
from agentscript.mantle.knowledge import chunk_markdown
from agentscript.mantle.runtime import MantleAgent

CORPUS = Path("/work/shared/conformance/mantle")
PREFIX = "RasaHQ__rasa-community-resources__"

# project -> (query, file, words the best passage's heading or text must hold)
QUERIES = {
    "maestro-voice-agent": (
        "how heavy can my checked bag be",
        "skills/trip_faq/references/horizon_travel_faq.md",
        "Baggage",
    ),
    "rasa-voice-agent-tutorial": (
        "how heavy can my checked bag be",
        "skills/trip_faq/references/horizon_travel_faq.md",
        "Baggage",
    ),
    "maestro-voice-appointment-skills": (
        "when is the clinic open",
        "skills/clinic_faq/references/clinic_faq.md",
        "Opening Hours",
    ),
    "maestro-voice-banking-skills": (
        "what should I do if I suspect fraud on my card",
        "skills/banking_faq/references/bank_of_rasa_faq.md",
        "Card Fraud",
    ),
    "maestro-voice-car-purchase-skills": (
        "which finance terms do you offer",
        "skills/car_faq/references/car_faq.md",
        "Financing",
    ),
    "maestro-voice-insurance-skills": (
        "am I covered when I drive someone else's car",
        "skills/insurance_faq/references/universal_insurance_faq.md",
        "follows the car",
    ),
    "maestro-voice-telco-skills": (
        "difference between rebooting and resetting the router",
        "skills/telco_faq/references/telco_faq.md",
        "Reboot versus reset",
    ),
}


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("AGENTSCRIPT_CACHE_DIR", str(folder))
    return folder


def search_turn(query: str) -> str:
    return f"""
turns:
  - user: "{query}?"
    model:
      - tool: search_knowledge
        args: {{query: "{query}"}}
      - say: "Here is what I found."
"""


@pytest.mark.skipif(not CORPUS.is_dir(), reason="conformance corpus not present")
@pytest.mark.parametrize("name", sorted(QUERIES))
def test_conformance_project_answers_a_search_from_the_right_file(name: str) -> None:
    query, file, words = QUERIES[name]
    agent = agentscript.load(CORPUS / (PREFIX + name), stub_missing_tools=True)
    assert isinstance(agent, MantleAgent) and agent.project.knowledge is not None
    playback = clean(run_text(agent, search_turn(query)))
    knowledge = steps(playback, 1, "KNOWLEDGE_STEP")
    assert [k["query"] for k in knowledge] == [query]
    best = knowledge[0]["passages"][0]
    assert best["file"] == file
    assert words in best["heading"] or words in best["text"]
    scores = [p["score"] for p in knowledge[0]["passages"]]
    assert scores == sorted(scores, reverse=True)
    # The model received the same passages as the tool result.
    messages = steps(playback, 1, "LLM_STEP")[-1]["input"]["messages"]
    assert any(file in str(m.get("content")) for m in messages)


def bank_with_references(tmp_path: Path) -> Path:
    project = copy_bank(tmp_path)
    (project / "references").mkdir()
    (project / "references" / "fees.md").write_text(
        "# Fees\n\n## Card replacement\n\nStandard delivery is free. Express delivery costs "
        "5.00 and arrives the next day.\n\n## Foreign transactions\n\nPayments abroad cost 1%.\n"
    )
    skill_refs = project / "skills" / "check_balance" / "references"
    skill_refs.mkdir()
    (skill_refs / "limits.md").write_text(
        "# Limits\n\nThe daily withdrawal limit at cash machines is 500.00.\n"
    )
    return project


def test_root_and_skill_references_form_one_index_ranked_by_bm25(tmp_path: Path) -> None:
    project, _ = load_project(bank_with_references(tmp_path))
    assert project is not None and project.knowledge is not None
    assert project.knowledge.files == [
        "references/fees.md",
        "skills/check_balance/references/limits.md",
    ]
    hits = project.knowledge.search("how much does express delivery cost")
    assert (hits[0].file, hits[0].heading) == ("references/fees.md", "Fees > Card replacement")
    hits = project.knowledge.search("withdrawal limit")
    assert hits[0].file == "skills/check_balance/references/limits.md"
    assert project.knowledge.search("!!! ***") == []  # no terms, no FTS5 syntax error


def test_index_is_cached_by_content_hash(tmp_path: Path, cache: Path) -> None:
    root = bank_with_references(tmp_path)
    first, _ = load_project(root)
    second, _ = load_project(root)
    assert first is not None and second is not None and first.knowledge and second.knowledge
    assert first.knowledge.path == second.knowledge.path
    assert len(list((cache / "knowledge").glob("*.sqlite"))) == 1
    (root / "references" / "fees.md").write_text("# Fees\n\nEverything is free now.\n")
    third, _ = load_project(root)
    assert third is not None and third.knowledge is not None
    assert third.knowledge.path != first.knowledge.path


def test_skill_tools_are_withheld_after_a_search_in_the_same_turn(tmp_path: Path) -> None:
    agent = load(bank_with_references(tmp_path))
    playback = clean(
        run_text(
            agent,
            SIGNED_IN
            + """
turns:
  - user: "balance, and what is the withdrawal limit?"
    model:
      - tool: activate_skill
        args: {skill: check_balance}
      - tool: search_knowledge
        args: {query: withdrawal limit}
      - tool: get_balance
      - say: "The limit is 500.00."
  - user: "and my balance?"
    model:
      - tool: get_balance
      - say: "1250.75"
""",
        )
    )
    resolutions = steps(playback, 1, "RESOLUTION_STEP")
    assert "get_balance" in resolutions[1]["tools"]
    assert "get_balance" in resolutions[2]["hiddenTools"]
    assert "answer from the passages" in resolutions[2]["instructions"]
    refused = steps(playback, 1, "REFUSED_STEP")
    assert refused[0]["name"] == "get_balance" and "knowledge search" in refused[0]["reason"]
    # A new turn offers them again.
    assert [s["name"] for s in steps(playback, 2, "ACTION_STEP")] == ["get_balance"]


def test_cannot_help_waits_for_a_search_when_there_is_a_knowledge_base(tmp_path: Path) -> None:
    agent = load(bank_with_references(tmp_path))
    playback = clean(
        run_text(
            agent,
            SIGNED_IN
            + """
turns:
  - user: "book me a flight"
    model:
      - tool: search_knowledge
        args: {query: flight booking}
      - tool: cannot_help
""",
        )
    )
    resolutions = steps(playback, 1, "RESOLUTION_STEP")
    assert "cannot_help" not in resolutions[0]["tools"]
    assert "cannot_help" in resolutions[1]["tools"]


def test_long_sections_are_split_with_overlap() -> None:
    text = "# A\n\n" + "\n\n".join(f"paragraph {i} " + "x" * 40 for i in range(10))
    chunks = list(chunk_markdown("f.md", text, 120, 20))
    assert len(chunks) > 3 and all(len(c.text) <= 120 + 20 + 2 for c in chunks)
    assert all(c.heading == "A" for c in chunks)


def test_bad_references_are_validate_diagnostics(tmp_path: Path) -> None:
    project = bank_with_references(tmp_path)
    (project / "references" / "broken.md").write_bytes(b"\xff\xfe not utf-8")
    (project / "agent.yml").write_text(
        (project / "agent.yml").read_text() + "references:\n  chunking:\n    chunk_size: 0\n"
    )
    _, diagnostics = load_project(project)
    problems = [d for d in diagnostics if d.code == "mantle-references"]
    assert any(d.is_error and d.file.endswith("broken.md") for d in problems)
    assert any("chunk_size must be a positive integer" in d.message for d in problems)
