"""A tiny MCP weather server (official ``mcp`` SDK), for the weather_mcp example.

Started by the runtime over stdio as declared in ``agentscript.toml``; the forecasts are made
up, so the example runs offline.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("weather")
FORECASTS = {"paris": "sunny, 21 °C", "oslo": "snow, -3 °C", "lima": "cloudy, 18 °C"}


@server.tool()
def get_forecast(city: str) -> dict[str, str]:
    """Tomorrow's forecast for a city."""
    forecast = FORECASTS.get(city.strip().lower())
    if forecast is None:
        raise ToolError(f"no forecast for {city}")
    return {"city": city, "forecast": forecast}


if __name__ == "__main__":
    server.run("stdio")
