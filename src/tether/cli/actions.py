"""The ACTIONs of a command that groups some (``tether sessions list|show|...``, ``tether
local``, ``tether config``, ``tether mcp``): one rule for a command given none."""

from __future__ import annotations

import argparse
from typing import Any

# As EXIT_ERROR (tether.cli.common): a command given no action is a usage error.
_USAGE_ERROR = 1


def add_actions(parser: argparse.ArgumentParser, dest: str) -> Any:
    """The subparsers of ``parser``'s actions: given none, every such command prints its
    help and exits 1, as ``tether`` alone does."""
    actions = parser.add_subparsers(dest=dest, metavar="ACTION")

    def usage(_args: argparse.Namespace) -> int:
        parser.print_help()
        return _USAGE_ERROR

    parser.set_defaults(handler=usage)
    return actions


__all__ = ["add_actions"]
