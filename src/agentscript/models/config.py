"""From a model spec (``openai:gpt-4o-mini``) or an agent's ``model://`` id to a :class:`Model`.

Resolution of an agent's model id, first match wins:

1. the id is itself a spec (``openai:gpt-4o``);
2. ``agentscript.toml``: ``[models]`` maps the id to a spec;
3. the ``AGENTSCRIPT_MODEL`` environment variable;
4. ``agentscript.toml``: ``[models] default``.

An explicit ``--model`` on the command line bypasses all of this (call :func:`model_from_spec`).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentscript.models.base import Model, ModelError
from agentscript.reading import read_file_text

# agentscript.toml holds a few tables of model settings; a megabyte is far beyond any real one.
MAX_CONFIG_BYTES = 1024 * 1024

CONFIG_FILE = "agentscript.toml"


def read_toml(path: Path) -> dict[str, Any]:
    """``agentscript.toml`` at ``path``, read within MAX_CONFIG_BYTES. OSError and
    UnicodeDecodeError for the file, ``tomllib.TOMLDecodeError`` for its text: a document nested
    too deeply for the parser included (``tomllib`` recurses, and 100,000 nested arrays, 200 kB,
    ended in a RecursionError traceback)."""
    text = read_file_text(path, max_bytes=MAX_CONFIG_BYTES, encoding="utf-8")
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise tomllib.TOMLDecodeError("values nested too deeply") from None


DEFAULT_ENV = "AGENTSCRIPT_MODEL"
CONFIG_ENV = "AGENTSCRIPT_CONFIG"

KNOWN_PROVIDERS = ("openai", "anthropic", "openai-lean")
# Built by the engine from a conversation file, never from a spec string.
RESERVED_PROVIDERS = ("scripted",)


@dataclass(frozen=True, slots=True)
class ModelEntry:
    """A configured model: its spec and optional per-model settings."""

    spec: str
    base_url: str | None = None
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class ModelConfig:
    """The ``[models]`` table of an ``agentscript.toml`` file."""

    models: dict[str, ModelEntry] = field(default_factory=dict)
    default: ModelEntry | None = None
    path: Path | None = None


def split_spec(spec: str) -> tuple[str, str]:
    """``"openai:gpt-4o"`` -> ``("openai", "gpt-4o")``.

    Only the first colon separates, so model names may contain colons (Ollama tags such as
    ``openai:llama3.1:8b``).
    """
    text = spec.strip()
    provider, sep, name = text.partition(":")
    provider = provider.strip().lower()
    name = name.strip()
    if not sep or not provider or not name or text.startswith("model://"):
        raise ModelError(
            f"'{spec}' is not a model spec: write PROVIDER:MODEL, e.g. openai:gpt-4o-mini "
            f"(providers: {', '.join(KNOWN_PROVIDERS)})"
        )
    return provider, name


def model_from_spec(
    spec: str,
    *,
    base_url: str | None = None,
    params: dict[str, Any] | None = None,
    **options: Any,
) -> Model:
    """Build the model a spec names. ``options`` (timeout, max_retries, api_key, ...) go to
    the provider's constructor."""
    provider, name = split_spec(spec)
    if provider == "openai":
        from agentscript.models.openai_provider import OpenAIModel

        return OpenAIModel(name, base_url=base_url, params=params, **options)
    if provider == "openai-lean":  # the same API without the SDK: docs/models.md
        from agentscript.models.openai_lean import LeanOpenAIModel

        return LeanOpenAIModel(name, base_url=base_url, params=params, **options)
    if provider == "anthropic":
        from agentscript.models.anthropic_provider import AnthropicModel

        return AnthropicModel(name, base_url=base_url, params=params, **options)
    if provider in RESERVED_PROVIDERS:
        raise ModelError(
            f"'{spec}': the scripted model plays the replies of a conversation file; "
            "use `agentscript run AGENT --conversation FILE` instead"
        )
    raise ModelError(
        f"Unknown model provider '{provider}' in '{spec}'; known providers: "
        f"{', '.join(KNOWN_PROVIDERS)}"
    )


def find_config(start: Path | None = None) -> Path | None:
    """The ``agentscript.toml`` that applies: ``$AGENTSCRIPT_CONFIG``, else the nearest one in
    ``start`` (default: the current directory) or a parent of it."""
    explicit = os.environ.get(CONFIG_ENV)
    if explicit:
        return Path(explicit)
    here = (start or Path.cwd()).resolve()
    if here.is_file():
        here = here.parent
    for folder in (here, *here.parents):
        candidate = folder / CONFIG_FILE
        if candidate.is_file():
            return candidate
    return None


def load_config(path: Path | None = None, *, start: Path | None = None) -> ModelConfig:
    """Read the ``[models]`` table of ``path`` (or of :func:`find_config`'s file).

    No file gives an empty configuration; an unreadable or malformed one a ModelError that
    names the file and the problem.
    """
    path = path or find_config(start)
    if path is None:
        return ModelConfig()
    try:
        data = read_toml(path)
    except OSError as exc:
        raise ModelError(
            f"{path}: cannot read model configuration: {exc.strerror or exc}"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ModelError(f"{path}: invalid TOML: {exc}") from None
    return parse_config(data, path=path)


def parse_config(data: Mapping[str, Any], *, path: Path | None = None) -> ModelConfig:
    """Validate a decoded TOML document's ``[models]`` table.

    Each value is a spec string or a table ``{spec = "...", base_url = "...", params = {...}}``.
    """
    where = str(path) if path else CONFIG_FILE
    table = data.get("models", {})
    if not isinstance(table, Mapping):
        raise ModelError(f"{where}: 'models' must be a table, e.g. [models]")
    config = ModelConfig(path=path)
    for key, value in table.items():
        entry = _entry(where, str(key), value)
        if key == "default":
            config.default = entry
        else:
            config.models[str(key)] = entry
    return config


def _entry(where: str, key: str, value: Any) -> ModelEntry:
    if isinstance(value, str):
        entry = ModelEntry(value)
    elif isinstance(value, Mapping):
        unknown = sorted(set(value) - {"spec", "base_url", "params"})
        spec, base_url, params = value.get("spec"), value.get("base_url"), value.get("params", {})
        if (
            unknown
            or not isinstance(spec, str)
            or not isinstance(base_url, str | None)
            or not isinstance(params, Mapping)
        ):
            raise ModelError(
                f"{where}: models.{_quote(key)} must be a spec string or a table with "
                "spec (string), and optionally base_url (string) and params (table)"
                + (f"; unknown keys: {', '.join(unknown)}" if unknown else "")
            )
        entry = ModelEntry(spec, base_url, dict(params))
    else:
        raise ModelError(
            f'{where}: models.{_quote(key)} must be a spec string like "openai:gpt-4o-mini"'
        )
    try:
        provider, _ = split_spec(entry.spec)
    except ModelError as exc:
        raise ModelError(f"{where}: models.{_quote(key)}: {exc}") from None
    if provider not in KNOWN_PROVIDERS:
        raise ModelError(
            f"{where}: models.{_quote(key)}: unknown provider '{provider}'; known providers: "
            f"{', '.join(KNOWN_PROVIDERS)}"
        )
    return entry


def _quote(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() else f'"{key}"'


def resolve_spec(
    model_id: str | None,
    config: ModelConfig | None = None,
    *,
    env: Mapping[str, str] | None = None,
) -> ModelEntry | None:
    """The configured entry for ``model_id`` (see the module docstring for the order), or
    None when nothing is configured."""
    env = os.environ if env is None else env
    config = config or ModelConfig()
    if model_id:
        model_id = model_id.strip()
        if not model_id.startswith("model://") and ":" in model_id:
            provider = model_id.partition(":")[0].strip().lower()
            if provider in KNOWN_PROVIDERS:
                return ModelEntry(model_id)
        if model_id in config.models:
            return config.models[model_id]
    default_spec = (env.get(DEFAULT_ENV) or "").strip()
    if default_spec:
        return ModelEntry(default_spec)
    return config.default


def resolve_model(
    model_id: str | None = None,
    config: ModelConfig | None = None,
    *,
    base_url: str | None = None,
    params: dict[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    **options: Any,
) -> Model:
    """Build the model an agent asks for by id (``model://...``) or the default one.

    ``base_url`` and ``params`` given here win over the configured ones. Raises ModelError
    with :func:`describe_configuration_help` when no model is configured.
    """
    entry = resolve_spec(model_id, config, env=env)
    if entry is None:
        asked = (
            f"The agent asks for model '{model_id}', but no model is configured.\n\n"
            if model_id
            else "No model is configured.\n\n"
        )
        raise ModelError(asked + describe_configuration_help(model_id))
    merged = {**entry.params, **(params or {})}
    return model_from_spec(
        entry.spec, base_url=base_url or entry.base_url, params=merged or None, **options
    )


def describe_configuration_help(model_id: str | None = None) -> str:
    """How to configure a model, for a user who has none configured."""
    key = f'"{model_id}"' if model_id else '"model://sfdc_ai__DefaultGPT4Omni"'
    return f"""\
Choose a model in one of these ways (first match wins):

  1. On the command line:   --model openai:gpt-4o-mini   (chat, serve and test take it)
  2. In agentscript.toml (current folder or a parent), map the agent's model id:
         [models]
         {key} = "openai:gpt-4o-mini"
         default = "anthropic:claude-sonnet-4-5"
  3. In the environment:    export {DEFAULT_ENV}=openai:gpt-4o-mini

Model specs are PROVIDER:MODEL with provider one of: {", ".join(KNOWN_PROVIDERS)}.
Credentials come from OPENAI_API_KEY or ANTHROPIC_API_KEY. For a local OpenAI-compatible
server (Ollama, vLLM, llama.cpp, LM Studio) no key is needed: set OPENAI_BASE_URL, e.g.
  export OPENAI_BASE_URL=http://localhost:11434/v1   # Ollama
  agentscript chat AGENT --model openai:llama3.1
"""
