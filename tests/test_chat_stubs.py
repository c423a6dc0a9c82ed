"""`chat --stubs FILE`: actions with no local backend answer from a conversation file."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from agentscript.cli import main
from fakes.llm_servers import FakeCall, OpenAIServer, Reply

ROOT = Path(__file__).resolve().parents[1]
AGENT = ROOT / "examples/security_gate/security_gate.agent"
STUBS = """\
variables:
    email: ""
actions:
    verify_identity:
        outputs: {verified: true, email: "ann@example.com"}
"""


def test_chat_answers_flow_actions_from_the_stub_file(tmp_path: Path) -> None:
    stubs = tmp_path / "stubs.yaml"
    stubs.write_text(STUBS)
    script = [
        Reply(calls=[FakeCall.of("go_account", {})]),
        Reply(calls=[FakeCall.of("verify", {"email": "ann@example.com"})]),
        Reply(text="You're verified."),
    ]
    with OpenAIServer(script) as server:
        result = CliRunner().invoke(
            main,
            [
                "chat",
                str(AGENT),
                "--model",
                "openai:gpt-test",
                "--base-url",
                server.base_url,
                "--stubs",
                str(stubs),
                "--show",
                "trace",
            ],
            input="ann@example.com\n",
        )
        assert result.exit_code == 0, result.output
        assert "You're verified." in result.stdout
        assert "set is_verified: false -> true" in result.stderr
        # The model saw the stubbed outputs as the tool result.
        tool_messages = [m for m in server.last.body["messages"] if m["role"] == "tool"]
        assert '"verified": true' in tool_messages[-1]["content"]


def test_a_bad_stub_file_is_a_usage_error(tmp_path: Path) -> None:
    stubs = tmp_path / "stubs.yaml"
    stubs.write_text("actions: [not, a, mapping]\n")
    result = CliRunner().invoke(
        main,
        [
            "chat",
            str(AGENT),
            "--model",
            "openai:gpt-test",
            "--base-url",
            "http://127.0.0.1:9",
            "--stubs",
            str(stubs),
        ],
        input="hi\n",
    )
    assert result.exit_code == 2
    assert "--stubs:" in result.stderr and "'actions' must be a mapping" in result.stderr
    assert "Traceback" not in result.output
