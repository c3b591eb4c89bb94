"""MCP servers' tools as tether Tools: every call still passes the one gate.

An ``McpServer`` is a ``Toolset``. ``start()`` connects (stdio or streamable HTTP),
initializes, and lists the server's tools (all pages); each becomes a ``Tool`` whose
capabilities and approval flag come from the tool's annotations (see ``map_hints``), never
narrower than the configured ``capabilities``. ``aclose()`` ends the session and the child
process. ``async with agent:`` does both for every server it was given, starting them in
parallel::

    server = McpServer.stdio("files", "python", ["-m", "my_mcp_server"])
    async with Agent(model, tools=[server]) as agent:
        await agent.run("...")   # the model sees files__read, files__write, ...

A server that fails to start is not raised: ``start()`` returns a ``Notice`` (the agent
emits it at the start of its next run), ``server.error`` says why, and the server offers no
tools. The run goes on without it.

Beyond tools: ``start()`` agrees on the protocol revision (``server.protocol_version``), a
server's resources are offered as tools (``read_resource``, ``resource_<template>``; the
listings in ``server.resources`` and ``server.resource_templates``), its prompts are for a
person (``server.prompts``; ``await server.get_prompt(name, arguments)`` gives the parts of
a user's turn), and a call's progress becomes ``ToolProgress`` events.

A server's request for input goes to the run's approver (``elicitation``); a remote one may
sign in with OAuth 2.1 (``McpServer.http(..., oauth=OAuth(...))``: ``oauth``).

The official ``mcp`` SDK (the ``tether[mcp]`` extra) is imported only when a server starts.
"""

from __future__ import annotations

from tether.mcp.environment import ALLOWED_ENV, child_environment
from tether.mcp.mapping import GateFlags, Hints, map_hints, output_from_result
from tether.mcp.oauth import OAuth
from tether.mcp.prompts import Prompt, PromptArgument, PromptText, parse_invocation
from tether.mcp.resources import Resource, ResourceTemplate
from tether.mcp.server import McpServer

__all__ = [
    "ALLOWED_ENV",
    "GateFlags",
    "Hints",
    "McpServer",
    "OAuth",
    "Prompt",
    "PromptArgument",
    "PromptText",
    "Resource",
    "ResourceTemplate",
    "child_environment",
    "map_hints",
    "output_from_result",
    "parse_invocation",
]
