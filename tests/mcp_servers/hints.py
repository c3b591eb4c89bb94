"""An MCP server (the SDK's MCPServer) with one tool per combination of the three hints
that decide the gate (readOnlyHint, destructiveHint, openWorldHint: true, false or absent),
one tool without annotations, and tools that pin the title mapping.

Tool ``ro_T_de_N_ow_F`` has readOnlyHint true, destructiveHint absent, openWorldHint false.
"""

from __future__ import annotations

import itertools

from _serve import serve_http, wants_http
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("hints")
VALUES = {"T": True, "F": False, "N": None}


def _make(label: str):
    def fn(text: str = "") -> str:
        return f"{label}:{text}"

    return fn


for ro, de, ow in itertools.product(VALUES, repeat=3):
    name = f"ro_{ro}_de_{de}_ow_{ow}"
    server.add_tool(_make(name), name=name, description=f"hint combination {name}",
                    annotations=ToolAnnotations(read_only_hint=VALUES[ro],
                                                destructive_hint=VALUES[de],
                                                open_world_hint=VALUES[ow]))

server.add_tool(_make("bare"), name="bare", description="no annotations at all")
server.add_tool(_make("both_titles"), name="both_titles", title="Tool title",
                description="titled twice", annotations=ToolAnnotations(title="Annotation title"))
server.add_tool(_make("tool_title"), name="tool_title", title="Tool title only",
                description="titled by the tool")

if __name__ == "__main__":
    if wants_http():
        serve_http(server.streamable_http_app())
    else:
        server.run("stdio")
