"""The sign-in a remote MCP server asks for, at the terminal: the sign-in URL printed with
its host marked (``terminal_sign_in``), for every OAuth server of a run a person is at
(``allow_sign_in``). tether never opens a browser: a person opens the URL they have read,
in the browser they choose.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any


def terminal_sign_in(name: str, console: Any) -> Any:
    """An ``OAuth.sign_in`` that prints the URL for the person to open."""
    from rich.text import Text

    from tether.cli.elicit import url_text
    from tether.display import inline, shown

    async def sign_in(url: str) -> None:
        console.print(shown(("MCP server ", "bold yellow"), (inline(name), "bold yellow"),
                            (" needs you to sign in. Open this URL in your browser (tether "
                             "does not open it):", "bold yellow")))
        # Unwrapped and unframed: the URL is copied whole from the terminal.
        console.print(url_text(url), soft_wrap=True)
        console.print(Text("Waiting for the sign-in to finish (Ctrl-C stops).", "dim"))

    return sign_in


def allow_sign_in(toolsets: Iterable[Any], console: Any) -> None:
    """Let every OAuth server among ``toolsets`` ask the person at this terminal to sign in
    when its tokens are missing (by default such a server does not start)."""
    from tether.mcp.server import McpServer

    for server in toolsets:
        oauth = getattr(getattr(server, "transport", None), "oauth", None)
        if isinstance(server, McpServer) and oauth is not None and oauth.sign_in is None:
            server.transport = dataclasses.replace(
                server.transport, oauth=dataclasses.replace(
                    oauth, sign_in=terminal_sign_in(server.name, console)))
