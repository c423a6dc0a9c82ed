"""The ``agentscript`` command line: one thin module per command over library functions.

Layout:

- ``main.py``: the click group ``main`` (the ``agentscript = "agentscript.cli:main"`` entry
  point) and ``COMMANDS``, the one table of the commands it offers.
- ``options.py``: options shared by several commands, defined once.
- ``common.py``: shared front-end helpers (loading an agent to run, exiting with an
  ``ExitCode``).
- ``validate.py``, ``fmt.py``, ``run.py``, ``chat.py``, ``serve.py``, ``playground.py``,
  ``test.py``: one command each (``authoring.py``: ``prompts``, ``graph``, ``check-gates``,
  ``lsp``).

Exit codes are ``agentscript.commands.ExitCode`` and ``chat --show`` choices are
``agentscript.commands.Show``; no command defines its own. Path discovery
(``agentscript.discover``), checking (``agentscript.validation``) and caret rendering of
diagnostics (``agentscript.render``) live in the library, so the server, the test runner and
the language server reuse them.

Adding a command (``serve``, ``prompts``, ``graph``, ``lsp``, ``playground``,
``mcp-serve``, ...) is one module and one line:

1. Write the logic as a library function in your own package that takes its inputs (and its
   output streams, where it prints) as parameters and returns an ``ExitCode``, e.g.
   ``agentscript/server/command.py: def serve_command(...) -> ExitCode``.
2. Add ``cli/<name>.py`` holding one ``@click.command("<name>")`` function that only parses
   options, imports your package *inside* the function (so ``agentscript --help`` stays fast
   and optional extras stay optional) and ends with ``exit_with(serve_command(...))``.
3. Add the command object to ``COMMANDS`` in ``cli/main.py``.

No command prints a Python traceback: an internal failure is reported as an
``internal-error`` diagnostic naming the file, or as a one-line error.
"""

from __future__ import annotations

from agentscript.cli.main import COMMANDS, main

__all__ = ["COMMANDS", "main"]
