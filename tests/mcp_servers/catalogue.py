"""A big catalogue: 100 tools, for tool search (docs/extend.md, "Tool search").

97 look-alike tools (``<area>_<action>``, each with a sentence of description, and
``read_inbox``) and three that tests find by words: ``weather_forecast`` (read-only: a
city's forecast),
``purge_archive`` (destructive: it needs approval) and ``post_message`` (open world: it
sends ``text`` to ``channel``; every post is printed to stderr as ``POSTED <channel>``).
``--http`` serves over streamable HTTP on 127.0.0.1 (prints the port).
"""

from __future__ import annotations

import sys

from _serve import serve_http, wants_http
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

AREAS = ("billing", "calendar", "contacts", "crm", "deploy", "docs", "hr", "inventory",
         "ledger", "logs", "metrics", "orders", "payroll", "printer", "tickets", "travel")
ACTIONS = ("list", "get", "create", "update", "archive", "export")

server = MCPServer("catalogue")
READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)


def _filler(area: str, action: str) -> None:
    def run(item_id: str = "") -> str:
        return f"{area} {action} {item_id}: done"

    server.add_tool(run, name=f"{area}_{action}",
                    description=f"{action.capitalize()} {area} records by id in the back office.",
                    annotations=READ)


def weather_forecast(city: str) -> str:
    return f"{city}: sunny, 21 C"


def purge_archive(year: int) -> str:
    return f"purged {year}"


def post_message(channel: str, text: str) -> str:
    print(f"POSTED {channel}", file=sys.stderr, flush=True)
    return "posted"


def read_inbox() -> str:
    return "Nothing new."


server.add_tool(weather_forecast, name="weather_forecast",
                description="Weather forecast for a city: temperature and sky.",
                annotations=READ)
server.add_tool(purge_archive, name="purge_archive",
                description="Permanently delete the archived files of a year.",
                annotations=ToolAnnotations(destructive_hint=True, open_world_hint=False))
server.add_tool(post_message, name="post_message",
                description="Post a message to a public chat channel.",
                annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False,
                                            open_world_hint=True))
server.add_tool(read_inbox, name="read_inbox", description="Read the newest inbox message.",
                annotations=READ)
for _area in AREAS:
    for _action in ACTIONS:
        _filler(_area, _action)  # 16 x 6 = 96, and the four above: 100


if __name__ == "__main__":
    if wants_http():
        serve_http(server.streamable_http_app())
    else:
        server.run("stdio")
