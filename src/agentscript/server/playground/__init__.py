"""``agentscript playground``: chat with an agent in the browser and watch every decision.

The page (``static/``: plain HTML, CSS and JavaScript, no build step, no network) is served by
the ``serve`` app (:func:`agentscript.server.playground.routes.mount_playground`) and talks to
the same session API, streaming turns over SSE. ``command.py`` is the CLI entry point,
``sessions.py`` the per-session overrides (stubs, scripted replays), ``export.py`` the
conversation-file and trace-zip downloads, ``info.py`` guards and the graph.
"""
