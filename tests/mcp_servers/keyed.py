"""An MCP server whose tool takes an object with any keys: ``move`` moves each item it is
keyed by to the folder it names (destructive, closed world).

``--log PATH`` appends the items of each move that reached the server to PATH, one JSON
line each; ``--http`` serves over streamable HTTP on 127.0.0.1 (prints the port).
"""

from __future__ import annotations

import json
import sys

from _serve import serve_http, wants_http
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

LOG = sys.argv[sys.argv.index("--log") + 1] if "--log" in sys.argv else None
server = MCPServer("keyed")


def move(items: dict[str, str]) -> str:
    if LOG is not None:
        with open(LOG, "a", encoding="utf-8") as f:
            f.write(json.dumps(items) + "\n")
    return "moved"


server.add_tool(move, name="move",
                description="Move items: each item's name, to the folder it goes to.",
                annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True,
                                            open_world_hint=False))

if __name__ == "__main__":
    if wants_http():
        serve_http(server.streamable_http_app())
    else:
        server.run("stdio")
