"""Model specs, agentscript.toml and the resolution of an agent's model:// ids."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentscript.models.anthropic_provider import AnthropicModel
from agentscript.models.base import Model, ModelError
from agentscript.models.config import (
    CONFIG_FILE,
    KNOWN_PROVIDERS,
    ModelConfig,
    ModelEntry,
    describe_configuration_help,
    find_config,
    load_config,
    model_from_spec,
    parse_config,
    resolve_model,
    resolve_spec,
    split_spec,
)
from agentscript.models.openai_provider import OpenAIModel

GPT_ID = "model://sfdc_ai__DefaultGPT4Omni"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_BASE_URL",
        "AGENTSCRIPT_MODEL",
        "AGENTSCRIPT_CONFIG",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path / "anthropic"))
    monkeypatch.chdir(tmp_path)


def write_config(folder: Path, text: str) -> Path:
    path = folder / CONFIG_FILE
    path.write_text(text, encoding="utf-8")
    return path


# -- specs -----------------------------------------------------------------------------------


def test_split_spec() -> None:
    assert split_spec("openai:gpt-4o-mini") == ("openai", "gpt-4o-mini")
    assert split_spec(" OpenAI : gpt-4o ") == ("openai", "gpt-4o")
    # Only the first colon separates: Ollama tags keep theirs.
    assert split_spec("openai:llama3.1:8b") == ("openai", "llama3.1:8b")
    for bad in ("gpt-4o", "openai:", ":gpt-4o", "", GPT_ID):
        with pytest.raises(ModelError, match="PROVIDER:MODEL"):
            split_spec(bad)


def test_model_from_spec_builds_providers() -> None:
    openai = model_from_spec("openai:gpt-4o-mini", params={"temperature": 0})
    assert isinstance(openai, OpenAIModel)
    assert isinstance(openai, Model)
    assert openai.name == "openai:gpt-4o-mini"
    assert openai.params == {"temperature": 0}
    claude = model_from_spec("anthropic:claude-sonnet-4-5", timeout=5.0, max_retries=0)
    assert isinstance(claude, AnthropicModel)
    assert claude.timeout == 5.0
    assert claude.retry.max_retries == 0


def test_model_from_spec_base_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    local = model_from_spec("openai:qwen2.5:7b", base_url="http://localhost:11434/v1")
    assert isinstance(local, OpenAIModel)
    assert local.base_url == "http://localhost:11434/v1"
    assert local.model == "qwen2.5:7b"


def test_unknown_and_reserved_providers() -> None:
    with pytest.raises(ModelError) as info:
        model_from_spec("gemini:pro")
    assert "Unknown model provider 'gemini'" in str(info.value)
    for provider in KNOWN_PROVIDERS:
        assert provider in str(info.value)
    with pytest.raises(ModelError, match="agentscript run"):
        model_from_spec("scripted:anything")


def test_missing_key_surfaces_from_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(ModelError, match="set OPENAI_API_KEY"):
        model_from_spec("openai:gpt-4o")


# -- agentscript.toml ------------------------------------------------------------------------


def test_load_config(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        f"""
[models]
default = "anthropic:claude-sonnet-4-5"
"{GPT_ID}" = "openai:gpt-4o-mini"
"model://local" = {{ spec = "openai:llama3.1", base_url = "http://localhost:11434/v1", params = {{ temperature = 0.1 }} }}
""",
    )
    config = load_config(path)
    assert config.path == path
    assert config.default == ModelEntry("anthropic:claude-sonnet-4-5")
    assert config.models == {
        GPT_ID: ModelEntry("openai:gpt-4o-mini"),
        "model://local": ModelEntry(
            "openai:llama3.1", "http://localhost:11434/v1", {"temperature": 0.1}
        ),
    }


def test_no_config_file_is_an_empty_config() -> None:
    assert load_config() == ModelConfig()
    assert parse_config({}) == ModelConfig()


def test_find_config_walks_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_config(tmp_path, "[models]\n")
    nested = tmp_path / "agents" / "support"
    nested.mkdir(parents=True)
    agent = nested / "Support.agent"
    agent.write_text("", encoding="utf-8")
    assert find_config(nested) == path.resolve()
    assert find_config(agent) == path.resolve()
    monkeypatch.setenv("AGENTSCRIPT_CONFIG", str(tmp_path / "elsewhere.toml"))
    assert find_config(nested) == tmp_path / "elsewhere.toml"


def test_config_errors_name_the_file_and_problem(tmp_path: Path) -> None:
    bad_toml = write_config(tmp_path, "[models\n")
    with pytest.raises(ModelError, match=r"agentscript\.toml: invalid TOML"):
        load_config(bad_toml)
    with pytest.raises(ModelError, match="cannot read model configuration"):
        load_config(tmp_path / "missing.toml")
    cases = {
        "models = 3": "'models' must be a table",
        "[models]\ndefault = 3": "models.default must be a spec string",
        '[models]\n"model://x" = "gpt-4o"': 'models."model://x": .*PROVIDER:MODEL',
        '[models]\n"model://x" = "gemini:pro"': "unknown provider 'gemini'",
        '[models]\n"model://x" = { spec = "openai:a", colour = "red" }': "unknown keys: colour",
        '[models]\n"model://x" = { base_url = "http://x" }': "must be a spec string or a table",
    }
    for text, expected in cases.items():
        write_config(tmp_path, text)
        with pytest.raises(ModelError, match=expected):
            load_config(bad_toml)


# -- resolution ------------------------------------------------------------------------------


def test_resolution_order() -> None:
    config = parse_config(
        {"models": {GPT_ID: "openai:gpt-4o-mini", "default": "anthropic:claude-haiku-4-5"}}
    )
    env = {"AGENTSCRIPT_MODEL": "openai:gpt-4.1"}
    # 1. a spec used as the id
    assert resolve_spec("anthropic:claude-opus-4-1", config, env=env) == ModelEntry(
        "anthropic:claude-opus-4-1"
    )
    # 2. the id's mapping in agentscript.toml
    assert resolve_spec(GPT_ID, config, env=env) == ModelEntry("openai:gpt-4o-mini")
    # 3. AGENTSCRIPT_MODEL
    assert resolve_spec("model://other", config, env=env) == ModelEntry("openai:gpt-4.1")
    assert resolve_spec(None, config, env=env) == ModelEntry("openai:gpt-4.1")
    # 4. the file's default
    assert resolve_spec("model://other", config, env={}) == ModelEntry("anthropic:claude-haiku-4-5")
    assert resolve_spec("model://other", ModelConfig(), env={}) is None


def test_resolve_model_merges_entry_settings() -> None:
    config = parse_config(
        {
            "models": {
                "model://local": {
                    "spec": "openai:llama3.1",
                    "base_url": "http://localhost:8000/v1",
                    "params": {"temperature": 0.1, "top_p": 0.5},
                }
            }
        }
    )
    model = resolve_model("model://local", config, params={"temperature": 0.7}, env={})
    assert isinstance(model, OpenAIModel)
    assert model.base_url == "http://localhost:8000/v1"
    assert model.params == {"temperature": 0.7, "top_p": 0.5}
    overridden = resolve_model("model://local", config, base_url="http://gpu:9000/v1", env={})
    assert isinstance(overridden, OpenAIModel)
    assert overridden.base_url == "http://gpu:9000/v1"


def test_resolve_model_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTSCRIPT_MODEL", "anthropic:claude-sonnet-4-5")
    model = resolve_model(GPT_ID)
    assert isinstance(model, AnthropicModel)
    assert model.model == "claude-sonnet-4-5"


def test_resolve_model_without_configuration_explains_how() -> None:
    with pytest.raises(ModelError) as info:
        resolve_model(GPT_ID, ModelConfig(), env={})
    message = str(info.value)
    assert f"The agent asks for model '{GPT_ID}', but no model is configured." in message
    assert f'"{GPT_ID}" = "openai:gpt-4o-mini"' in message
    with pytest.raises(ModelError, match="No model is configured"):
        resolve_model(None, ModelConfig(), env={})


def test_describe_configuration_help() -> None:
    text = describe_configuration_help()
    for needle in (
        "--model openai:gpt-4o-mini",
        "agentscript.toml",
        "[models]",
        "default =",
        "AGENTSCRIPT_MODEL",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "OPENAI_BASE_URL",
        "openai, anthropic",
    ):
        assert needle in text


def test_tool_arguments_with_nan_or_infinity_are_not_json() -> None:
    from agentscript.models.openai_provider import parse_tool_arguments

    assert parse_tool_arguments('{"x": NaN}') == (None, '{"x": NaN}')
    assert parse_tool_arguments('{"x": -Infinity}')[0] is None
    assert parse_tool_arguments('{"x": 1.5}')[0] == {"x": 1.5}
    deep = "[" * 100_000 + "]" * 100_000
    assert parse_tool_arguments('{"x": ' + deep + "}")[0] is None
