"""The README's conversation-file example runs as printed, its expectations met: a newcomer
copies it first (it once expected `num_turns: 3` from an agent that starts at 0)."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from agentscript.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_the_readmes_conversation_file_passes_against_the_order_status_example(
    tmp_path: Path,
) -> None:
    readme = (ROOT / "README.md").read_text()
    found = re.search(r"## Conversation files\n\n```yaml\n(.*?)```", readme, re.S)
    assert found, "the README's conversation-file example moved"
    conversation = tmp_path / "conversation.yaml"
    conversation.write_text(found.group(1))
    agent = ROOT / "examples" / "order_status" / "order_status.agent"
    result = CliRunner().invoke(main, ["run", str(agent), "--conversation", str(conversation)])
    assert result.exit_code == 0, result.output
    assert "expect failed" not in result.output
