"""Which reader a file needs, from its name and content; :func:`read_spec` reads it."""

from __future__ import annotations

from pathlib import Path

from agentscript.reading import read_file_text
from agentscript.testing.errors import NotASpec, SpecError
from agentscript.testing.readers.conversation_file import is_conversation, read_conversation
from agentscript.testing.readers.eval_payload import read_eval_payload
from agentscript.testing.readers.mantle_scenario import is_mantle_scenario, read_mantle_scenario
from agentscript.testing.readers.metadata_xml import is_metadata_xml, read_metadata_xml
from agentscript.testing.readers.salesforce_yaml import is_salesforce_yaml, read_salesforce_yaml
from agentscript.testing.spec import Suite
from agentscript.testing.yamlmarks import load_yaml

SPEC_SUFFIXES = (".yaml", ".yml", ".json", ".xml")


def is_spec_file(path: Path) -> bool:
    """A file worth trying when a folder is searched (replay files are skipped)."""
    name = path.name
    if name.endswith(".replay.json") or name.startswith("."):
        return False
    if path.suffix == ".xml":
        return is_metadata_xml(path)
    return path.suffix in SPEC_SUFFIXES


def read_spec(path: Path) -> Suite:
    if path.exists() and not path.is_file():
        # A folder, FIFO or device: opening a FIFO would wait for a writer forever.
        raise SpecError(path, None, "not a regular file")
    try:
        text = read_file_text(path)  # regular files only, at most limits.MAX_FILE_BYTES
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(path, None, f"cannot read the spec: {exc}") from None
    if path.suffix == ".xml":
        return read_metadata_xml(text, path)
    if path.suffix == ".json":
        return read_eval_payload(text, path)
    data = load_yaml(text, path)
    if is_salesforce_yaml(data):
        return read_salesforce_yaml(data, path)
    if is_mantle_scenario(data):
        return read_mantle_scenario(data, path)
    if is_conversation(data):
        return read_conversation(data, path)
    raise NotASpec(
        path,
        1,
        "not a test spec: expected Salesforce 'testCases:', a Mantle 'scenario:' or "
        "conversation 'turns:'",
    )
