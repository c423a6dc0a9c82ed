"""Every form a configured credential may take in a message is blotted out
(``agentscript.redaction``)."""

from __future__ import annotations

from agentscript.redaction import secret_forms, without_secrets

TOKEN = "sk-live-0123456789"


def test_the_credential_of_a_scheme_and_credential_value_is_a_form_of_its_own() -> None:
    forms = secret_forms((), [f"Bearer {TOKEN}"])
    assert without_secrets(f"Incorrect API key provided: {TOKEN}", forms) == (
        "Incorrect API key provided: ***"
    )
    assert without_secrets(f"got 'Bearer {TOKEN}'", forms) == "got '***'"


def test_the_value_an_env_reference_names_is_a_form_even_inside_a_longer_template() -> None:
    templates = (("X-Key", "key=${API_KEY};region=eu"),)
    forms = secret_forms(templates, [f"key={TOKEN};region=eu"], env={"API_KEY": TOKEN})
    assert without_secrets(f"unknown key {TOKEN}", forms) == "unknown key ***"


def test_stripped_and_escaped_forms_are_blotted_out() -> None:
    forms = secret_forms((), [f"{TOKEN}\n", "tök3n-ü"])
    assert without_secrets(f"header {TOKEN!r}", forms) == "header '***'"
    assert without_secrets(repr("tök3n-ü".encode()), forms) == "b'***'"


def test_a_longer_form_is_blotted_out_before_a_shorter_one_inside_it() -> None:
    forms = secret_forms((), ["abcd", "abcd-rest-of-it"])
    assert without_secrets("abcd-rest-of-it", forms) == "***"


def test_short_values_are_no_secrets() -> None:
    assert secret_forms((), ["on", "Bearer 1"]) == frozenset({"Bearer 1"})
