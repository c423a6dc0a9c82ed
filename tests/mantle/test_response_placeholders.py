"""Which memory a response's bare ``{entry}`` placeholder reads (mantle.md A.4: "skill-local
first, then project"): a skill's response reads its own skill, a project-root response the
skill active when it is delivered; then project memory; an unset placeholder stays as written.
Private entries stay private: a response reads those of its own skill, or, for a root
response, of the active skill, never another's (M6: a refused read fails closed, traced)."""

from __future__ import annotations

from pathlib import Path

from mantle_helpers import clean, load, make, run_text, said, steps

from agentscript.playback import Playback

ROOT_RESPONSES = """responses:
  utter_where:
    - text: "Off to {city}."
  utter_pin:
    - text: "Your pin is {pin}."
  utter_trip_pin_by_name:
    - text: "Pin: {session.trip.pin}."
  utter_ask_passport:
    - text: "Your passport number, {traveller}?"
"""


def skill(name: str, speaks: str) -> str:
    """A prose skill that says ``speaks`` when it starts."""
    return (
        f"---\nname: {name.title()}\ndescription: Help with {name}.\n"
        f"utter:\n  - {speaks}:\n      on: activate\n---\nHelp with {name}.\n"
    )


def project(
    tmp_path: Path, *, trip_says: str = "utter_where", shop_says: str = "utter_where"
) -> Path:
    return make(
        tmp_path,
        {
            "memory.yml": "city:\n  type: text\n",
            "responses.yml": ROOT_RESPONSES,
            "skills/trip/skill.md": skill("trip", trip_says),
            "skills/trip/memory.yml": "schema:\n  public:\n    city: {type: text}\n"
            "  private:\n    pin: {type: text}\n",
            "skills/trip/responses.yml": "responses:\n  utter_trip_where:\n"
            '    - text: "Trip to {city}, pin {pin}."\n'
            "  utter_trip_and_shop:\n"
            '    - text: "Trip {city}; shop secret {session.shop.secret}."\n',
            "skills/shop/skill.md": skill("shop", shop_says),
            "skills/shop/memory.yml": "schema:\n  public:\n    city: {type: text}\n"
            "  private:\n    secret: {type: text}\n",
            "skills/visa/skill.md": "---\nname: Visa\ndescription: Apply for a visa.\n---\n"
            ":::ordered_block id=main\nsteps:\n  - id: ask\n    collect: passport\n:::\n",
            "skills/visa/memory.yml": "schema:\n  public:\n    passport: {type: text}\n"
            "  private:\n    traveller: {type: text}\n",
        },
    )


def start(skill_id: str, seeds: str) -> str:
    """A conversation whose one turn starts ``skill_id`` with memory ``seeds``."""
    return f"""variables:
{seeds}
turns:
  - user: "go"
    model:
      - tool: activate_skill
        args: {{skill: {skill_id}}}
      - say: "ok"
"""


def uttered(playback: Playback) -> list[str]:
    return said(playback, 1, "utter")


def memory_refusals(playback: Playback) -> list[tuple[str, str | None, str | None]]:
    return [
        (s["name"], s["reader"], s["response"])
        for s in steps(playback, 1, "REFUSED_STEP")
        if s["source"] == "memory"
    ]


# --- a project-root response reads the active skill, then project memory ------------------


def test_a_root_response_fills_a_bare_placeholder_from_the_active_skill(tmp_path: Path) -> None:
    seeds = "  trip.city: Paris\n  project.city: Rome\n  shop.city: Berlin\n"
    playback = clean(run_text(load(project(tmp_path)), start("trip", seeds)))
    assert uttered(playback) == ["Off to Paris."]


def test_a_root_response_falls_back_to_project_memory(tmp_path: Path) -> None:
    seeds = "  project.city: Rome\n  shop.city: Berlin\n"
    playback = clean(run_text(load(project(tmp_path)), start("trip", seeds)))
    assert uttered(playback) == ["Off to Rome."]


def test_an_unset_bare_placeholder_stays_as_written(tmp_path: Path) -> None:
    playback = clean(run_text(load(project(tmp_path)), start("trip", "  shop.city: Berlin\n")))
    assert uttered(playback) == ["Off to {city}."]


def test_a_root_response_reads_the_active_skills_private_entry(tmp_path: Path) -> None:
    agent = load(project(tmp_path, trip_says="utter_pin"))
    playback = clean(run_text(agent, start("trip", "  trip.pin: '1234'\n")))
    assert uttered(playback) == ["Your pin is 1234."]
    assert memory_refusals(playback) == []


def test_M6_a_root_response_never_reads_another_skills_private_entry(tmp_path: Path) -> None:
    bare = load(project(tmp_path / "bare", shop_says="utter_pin"))
    playback = clean(run_text(bare, start("shop", "  trip.pin: '1234'\n")))
    assert uttered(playback) == ["Your pin is {pin}."]  # the bare name is shop's: none
    by_name = load(project(tmp_path / "by_name", shop_says="utter_trip_pin_by_name"))
    playback = clean(run_text(by_name, start("shop", "  trip.pin: '1234'\n")))
    assert uttered(playback) == ["Pin: {session.trip.pin}."]
    assert memory_refusals(playback) == [("trip.pin", "shop", "utter_trip_pin_by_name")]


# --- a skill's own response reads its skill, whoever is active --------------------------


def test_a_skill_response_delivered_by_its_skill_reads_that_skill(tmp_path: Path) -> None:
    agent = load(project(tmp_path, trip_says="utter_trip_where"))
    seeds = "  trip.city: Paris\n  trip.pin: '1234'\n  project.city: Rome\n"
    playback = clean(run_text(agent, start("trip", seeds)))
    assert uttered(playback) == ["Trip to Paris, pin 1234."]


def test_a_skill_response_delivered_while_another_skill_is_active_reads_its_owner(
    tmp_path: Path,
) -> None:
    agent = load(project(tmp_path, shop_says="utter_trip_where"))
    seeds = "  trip.city: Paris\n  trip.pin: '1234'\n  shop.city: Berlin\n"
    playback = clean(run_text(agent, start("shop", seeds)))
    assert uttered(playback) == ["Trip to Paris, pin 1234."]


def test_M6_a_skill_response_never_reads_the_active_skills_private_entry(tmp_path: Path) -> None:
    agent = load(project(tmp_path, shop_says="utter_trip_and_shop"))
    seeds = "  trip.city: Paris\n  shop.secret: s3cr3t\n"
    playback = clean(run_text(agent, start("shop", seeds)))
    assert uttered(playback) == ["Trip Paris; shop secret {session.shop.secret}."]
    assert memory_refusals(playback) == [("shop.secret", "trip", "utter_trip_and_shop")]


# --- the prompt's copy of a collect question is the question as said ----------------------

VISA = """variables:
  visa.traveller: Ada
turns:
  - user: "visa please"
    model:
      - tool: activate_skill
        args: {skill: visa}
  - user: "one moment"
    model:
      - say: "Take your time."
"""


def test_the_prompt_quotes_a_root_question_filled_from_the_active_skill(tmp_path: Path) -> None:
    playback = clean(run_text(load(project(tmp_path)), VISA))
    assert said(playback, 1, "collect") == ["Your passport number, Ada?"]
    instructions = steps(playback, 2, "LLM_STEP")[0]["input"]["instructions"]
    assert 'The user has been asked: "Your passport number, Ada?"' in instructions


def test_M6_the_prompts_copy_of_a_question_never_shows_another_skills_private_entry(
    tmp_path: Path,
) -> None:
    root = project(tmp_path)
    responses = root / "responses.yml"
    responses.write_text(
        responses.read_text().replace(
            "Your passport number, {traveller}?", "Passport? ({session.shop.secret})"
        )
    )
    playback = clean(run_text(load(root), VISA.replace("visa.traveller: Ada", "shop.secret: s3")))
    assert said(playback, 1, "collect") == ["Passport? ({session.shop.secret})"]
    instructions = steps(playback, 2, "LLM_STEP")[0]["input"]["instructions"]
    assert "s3" not in instructions
    assert 'The user has been asked: "Passport? ({session.shop.secret})"' in instructions
