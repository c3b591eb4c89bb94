"""``tether mcp login NAME`` (a fresh sign-in to a remote MCP server, the URL printed by
``cli/sign_in.py``) and ``tether mcp logout NAME`` (its tokens and registration
forgotten)."""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any

from tether.cli.common import EXIT_ERROR, EXIT_OK, error
from tether.cli.sign_in import allow_sign_in


def add_login_commands(group: Any) -> None:
    """``login`` and ``logout`` under ``tether mcp``."""
    login = group.add_parser("login", help="sign in to a remote MCP server (OAuth)")
    login.add_argument("name", help="the [[mcp]] server's name")
    login.set_defaults(handler=cmd_login)
    logout = group.add_parser("logout", help="forget a remote MCP server's OAuth tokens")
    logout.add_argument("name", help="the [[mcp]] server's name")
    logout.set_defaults(handler=cmd_logout)


def _oauth_server(args: argparse.Namespace) -> Any:
    from tether.config.build import servers_from_config
    from tether.config.layers import load_config

    cfg = load_config(args.workspace)
    sections = [s for s in cfg.mcp if s.name == args.name]
    if not sections:
        error(f"no [[mcp]] server is named {args.name!r}")
        return None
    if sections[0].auth != "oauth":
        error(f"the [[mcp]] server {args.name!r} does not sign in with OAuth "
              f"(set auth = \"oauth\")")
        return None
    [server] = servers_from_config([sections[0].model_copy(update={"disabled": False})])
    return server


def _token_file(server: Any) -> Any:
    from mcp.shared.auth_utils import resource_url_from_server_url

    from tether.mcp.oauth import TokenFile
    from tether.paths import oauth_dir

    oauth = server.transport.oauth
    return TokenFile(oauth.token_dir or oauth_dir(os.environ),
                     resource_url_from_server_url(server.transport.url))


def cmd_login(args: argparse.Namespace) -> int:
    from tether.cli.render import stderr_console
    from tether.display import shown

    server = _oauth_server(args)
    if server is None:
        return EXIT_ERROR
    _token_file(server).remove()  # a fresh sign-in (another account, new scopes)
    allow_sign_in([server], stderr_console())

    async def start() -> None:
        try:
            await server.start()
        finally:
            await server.aclose()

    asyncio.run(start())
    if server.error is not None:
        error(f"could not sign in to {args.name!r}: {server.error}")
        return EXIT_ERROR
    stderr_console().print(shown(("✓", "green"), f" signed in to {args.name}"))
    return EXIT_OK


def cmd_logout(args: argparse.Namespace) -> int:
    from tether.cli.render import stderr_console
    from tether.display import shown

    server = _oauth_server(args)
    if server is None:
        return EXIT_ERROR
    removed = _token_file(server).remove()
    stderr_console().print(shown(f"{args.name}: its tokens and registration were removed"
                                 if removed else f"{args.name}: no tokens were kept"))
    return EXIT_OK
