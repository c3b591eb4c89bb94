"""How big is the first request with 100 tools offered, deferred and not?

The 100 tools are an MCP server's (``tests/mcp_servers/catalogue.py``, the official SDK's
server over stdio: one-sentence descriptions, small schemas; a real server's tools are
often longer, so this is the low end), beside tether's default built-ins. The first
request of a run is captured (a scripted model answers it) and encoded as the Chat
Completions body tether sends a llama-server (``request_body``, the JSON bytes), once with
every tool offered (``defer_after=None``) and once deferred (the default, 30). Tokens are
estimated at 4 bytes a token (a JSON schema's punctuation tokenizes densely: a rough
figure, for comparison only).

usage: python benchmarks/tool_search.py
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from tether import Agent
from tether.builtins import select_builtins
from tether.mcp import McpServer
from tether.providers import Scripted
from tether.providers.openai_chat import request_body
from tether.providers.profiles import profile_for

SERVER = Path(__file__).parents[1] / "tests" / "mcp_servers" / "catalogue.py"
BYTES_PER_TOKEN = 4


async def first_request(defer_after: int | None) -> tuple[int, int]:
    """The first request's tool count and its body's size in bytes."""
    model = Scripted(["Hi."])
    server = McpServer.stdio("catalogue", sys.executable, [str(SERVER)])
    async with Agent(model, [*select_builtins(None), server], defer_after=defer_after) as agent:
        await agent.run("Hello.")
    request = model.requests[0]
    body = request_body(request, "qwen", profile_for("llama-server", "http://127.0.0.1:8080"))
    return len(request.tools), len(json.dumps(body).encode())


async def main() -> None:
    print(f"{'offered':<26}{'tools':>6}{'bytes':>9}{'~tokens':>9}")
    for label, defer_after in (("every tool", None), ("deferred (defer_after=30)", 30)):
        count, size = await first_request(defer_after)
        print(f"{label:<26}{count:>6}{size:>9}{size // BYTES_PER_TOKEN:>9}")


if __name__ == "__main__":
    asyncio.run(main())
