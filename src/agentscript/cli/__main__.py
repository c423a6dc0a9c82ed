"""``python -m agentscript.cli``: the same as the ``agentscript`` command."""

from agentscript.cli.main import main

main()
