"""A small MCP server for the tests, written with the official SDK.

Run as ``python mcp_demo_server.py stdio`` or ``python mcp_demo_server.py http PORT``.
Tools: ``get_weather`` (structured output), ``fail`` (a tool error), ``crash`` (the process
exits), ``slow`` (sleeps), ``pid`` (the server's process id, to see restarts).
"""

from __future__ import annotations

import os
import sys
import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("demo")


@server.tool()
def get_weather(city: str, days: int = 1) -> dict[str, object]:
    """The forecast for a city."""
    return {"city": city, "forecast": f"sunny for {days} day(s)", "temperature": 21}


@server.tool()
def fail(reason: str) -> str:
    """Always fails."""
    raise ToolError(f"cannot do that: {reason}")


@server.tool()
def crash() -> str:
    """Ends the server process without answering."""
    os._exit(3)


@server.tool()
def slow(seconds: float) -> str:
    """Answers after ``seconds``."""
    time.sleep(seconds)
    return "done"


@server.tool()
def pid() -> dict[str, int]:
    """The server's process id."""
    return {"pid": os.getpid()}


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
