"""An MCP server (the SDK's low-level ``Server``) whose tool takes an object with any keys,
and further arguments of any name (its schema says ``additionalProperties: true``): ``move``
moves each item it is keyed by to the folder it names (destructive, closed world).

``--log PATH`` appends the arguments of each move that reached the server to PATH, one JSON
line each; ``--http`` serves over streamable HTTP on 127.0.0.1 (prints the port).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import mcp_types as types
from _serve import serve_http, wants_http
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

LOG = sys.argv[sys.argv.index("--log") + 1] if "--log" in sys.argv else None

MOVE = types.Tool(
    name="move", description="Move items: each item's name, to the folder it goes to.",
    input_schema={"type": "object", "additionalProperties": True, "required": ["items"],
                  "properties": {"items": {"type": "object",
                                           "additionalProperties": {"type": "string"}}}},
    annotations=types.ToolAnnotations(read_only_hint=False, destructive_hint=True,
                                      open_world_hint=False))


async def list_tools(ctx: object,
                     params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[MOVE])


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    if LOG is not None:
        with open(LOG, "a", encoding="utf-8") as f:
            f.write(json.dumps(params.arguments or {}) + "\n")
    return types.CallToolResult(content=[types.TextContent(type="text", text="moved")])


server = Server("keyed", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    if wants_http():
        serve_http(server.streamable_http_app())
    else:
        anyio.run(main)
