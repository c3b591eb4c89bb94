"""Which tools a command offers the model: ``--tools FILE.py`` adds a file's tools,
``--no-tools`` offers none, ``-T NAME`` (repeatable) just the named ones.

``-T`` picks by name among every tool the command would offer (the enabled built-ins, the
tools of ``[tools] python`` and ``--tools`` files, MCP tools named ``server__tool``,
sub-agents by their profile's name) and any other built-in, unless ``[tools] disabled``
refuses it. It limits what the model of the run is offered: a sub-agent it offers keeps
the tools its profile lists (its own allowlist, taken from the configured tools). A name
that names nothing is an error listing the tools there are; an MCP tool's name is checked
once its server has started. ``--no-tools`` offers nothing at all: no built-in, no tool
file is loaded, no MCP server is started, no sub-agent is offered.

The flags are read here; the selection itself (``offer_only``) is ``tether.cli.offer_only``,
imported once a selection is made, not to parse flags.
"""

from __future__ import annotations

import argparse
from typing import Any

from tether.errors import ConfigError


def add_tool_flags(p: argparse.ArgumentParser) -> None:
    """``--tools FILE.py[:NAME]``, ``--no-tools``, ``-T NAME``."""
    p.add_argument("--tools", dest="tool_files", action="append", metavar="FILE.py[:NAME]",
                   help="offer the @tool functions of a Python file or module:attr "
                        "(repeatable)")
    p.add_argument("--no-tools", action="store_true",
                   help="offer the model no tools at all (no built-in, tool file, MCP "
                        "server or sub-agent)")
    p.add_argument("-T", "--tool", dest="only_tools", action="append", metavar="NAME",
                   help="offer just this tool (repeatable): a built-in, a tool of a tool "
                        "file, an MCP tool (server__tool) or a sub-agent")


def tool_overrides(args: argparse.Namespace, out: dict[str, Any]) -> None:
    """Add to the flags' configuration layer ``out`` what ``--no-tools`` and ``-T`` change:
    nothing enabled, loaded or started for ``--no-tools``; for ``-T``, the built-ins it
    names that the configuration does not enable."""
    none, only = bool(getattr(args, "no_tools", False)), getattr(args, "only_tools", None)
    if none and only:
        raise ConfigError("--no-tools offers no tools and -T NAME offers some; choose one")
    if none and getattr(args, "tool_files", None):
        raise ConfigError("--no-tools offers no tools, so --tools FILE.py has nothing to do; "
                          "choose one")
    if none:
        tools = out.setdefault("tools", {})
        tools["enabled"], tools["python"] = [], []
        out["mcp"], out["subagents"] = [], []
        return
    if not only:
        return
    from tether.builtins import DEFAULT_ENABLED, builtin_names
    from tether.config.layers import load_config

    cfg = load_config(args.workspace, out or None)
    enabled = list(DEFAULT_ENABLED if cfg.tools.enabled is None else cfg.tools.enabled)
    for name in only:
        if name in cfg.tools.disabled:
            raise ConfigError(f"-T {name}: [tools] disabled refuses this built-in; remove it "
                              f"there to offer it")
        if name in builtin_names() and name not in enabled:
            enabled.append(name)
    out.setdefault("tools", {})["enabled"] = enabled


__all__ = ["add_tool_flags", "tool_overrides"]
