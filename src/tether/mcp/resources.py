"""An MCP server's resources as tools that pass the gate, and what a read returns.

A server's resources are offered to the model as tools, never put into the context by
tether: one ``read_resource`` tool whose ``uri`` is one of the URIs the server listed (an
``enum``: the model cannot make up a URI, so no value of the conversation reaches the
server through it), and one ``resource_<name>`` tool per resource template, whose
parameters are the template's variables. A template fills a URI the server sees: for a
server that is not trusted, that is a send of the arguments (``external_send``), judged by
the gate like any other send. Every parameter is control (no parameter roles), so under
the provenance rule a template's arguments must come from trusted text once the
conversation holds untrusted text.

What a read returns is the server's text: untrusted input unless the server is trusted.

Plain functions on plain values, but for the SDK's RFC 6570 templates (imported when a
template tool is built).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.display import inline
from tether.mcp.mapping import image_from_base64
from tether.messages import Image
from tether.tools.tool import Tool, ToolContext, ToolOutput
from tether.trust import Capabilities

if TYPE_CHECKING:
    from mcp_types import ReadResourceResult

READ_TOOL = "read_resource"
TEMPLATE_PREFIX = "resource_"
_NOT_NAME_CHAR = re.compile(r"[^A-Za-z0-9_-]")
_MAX_LISTED = 500  # URIs offered in the read tool's enum; the rest are named as left out
_MAX_DESCRIBED = 50  # URIs described one per line in the read tool's description
_MAX_SHOWN = 120  # characters of a server's description in a tool's description


@dataclass(frozen=True, slots=True)
class Resource:
    """One resource a server listed, as the server wrote it."""

    uri: str
    name: str
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None


@dataclass(frozen=True, slots=True)
class ResourceTemplate:
    """One resource template a server listed (RFC 6570), as the server wrote it."""

    uri_template: str
    name: str
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None


# A read of one URI; the context is the call's (a request for input the server makes during
# the read goes to that run's person, as during a tool call).
Reader = Callable[[str, ToolContext], Awaitable[ToolOutput]]


def resource_tools(resources: Sequence[Resource], templates: Sequence[ResourceTemplate],
                   read: Reader, *, server: str, trusted: bool,
                   widen: Capabilities) -> tuple[list[Tool], list[str]]:
    """The tools that read ``resources`` and fill ``templates``, and the problems of the
    templates that could not be offered (in words for a notice)."""
    tools: list[Tool] = []
    problems: list[str] = []
    if resources:
        tools.append(_read_tool(resources, read, server=server, trusted=trusted, widen=widen))
    names: set[str] = set()
    for template in templates:
        name = TEMPLATE_PREFIX + _NOT_NAME_CHAR.sub("_", template.name)
        try:
            variables = _variables(template.uri_template)
        except ValueError as e:
            problems.append(f"resource template {inline(repr(template.name))}: {inline(e)}")
            continue
        if name in names:
            problems.append(f"resource template {inline(repr(template.name))}: its tool name "
                            f"{name!r} is taken by another template")
            continue
        names.add(name)
        tools.append(_template_tool(name, template, variables, read, server=server,
                                    trusted=trusted, widen=widen))
    return tools, problems


def _capabilities(trusted: bool, *, sends: bool, widen: Capabilities) -> Capabilities:
    # The server may hold anything (private data); what it returns is outside text unless
    # it is trusted; a URI an untrusted server sees built from the model's values is a send.
    return Capabilities(private_data=True, untrusted_input=not trusted,
                        external_send=sends and not trusted) | widen


def _read_tool(resources: Sequence[Resource], read: Reader, *, server: str, trusted: bool,
               widen: Capabilities) -> Tool:
    listed = list(dict.fromkeys(r.uri for r in resources))[:_MAX_LISTED]
    lines = [f"- {r.uri}" + (f": {_short(r.title or r.description or r.name)}")
             for r in resources[:_MAX_DESCRIBED]]
    more = len(resources) - _MAX_DESCRIBED
    if more > 0:
        lines.append(f"(and {more} more)")
    description = (f"Read one resource of the MCP server {server!r} by its URI, one of:\n"
                   + "\n".join(lines))
    schema = {"type": "object", "properties": {"uri": {"type": "string", "enum": listed}},
              "required": ["uri"], "additionalProperties": False}

    async def handler(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        return await read(str(arguments["uri"]), ctx)

    caps = _capabilities(trusted, sends=False, widen=widen)
    return Tool.from_schema(READ_TOOL, description, schema, handler,
                            title="Read a resource", needs_approval=caps.destructive,
                            capabilities=caps, origin="mcp", cache_approval=False,
                            read_only_hint=not caps.destructive, server=server,
                            spec_from_outside=not trusted)


def _template_tool(name: str, template: ResourceTemplate, variables: list[str], read: Reader,
                   *, server: str, trusted: bool, widen: Capabilities) -> Tool:
    description = (f"Read the resource of the MCP server {server!r} at "
                   f"{template.uri_template} (RFC 6570), its variables filled from the "
                   f"arguments. {_short(template.description or template.title or '')}")
    schema = {"type": "object",
              "properties": {v: {"type": "string"} for v in variables},
              "required": [v for v in variables if v in _path_variables(template.uri_template)],
              "additionalProperties": False}
    uri_template = template.uri_template

    async def handler(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        return await read(expand(uri_template, {k: str(v) for k, v in arguments.items()}), ctx)

    caps = _capabilities(trusted, sends=True, widen=widen)
    return Tool.from_schema(name, description.strip(), schema, handler,
                            title=f"Resource: {template.title or template.name}",
                            needs_approval=caps.destructive, capabilities=caps,
                            origin="mcp", cache_approval=False,
                            read_only_hint=not caps.destructive and not caps.external_send,
                            server=server, spec_from_outside=not trusted)


def _variables(uri_template: str) -> list[str]:
    from mcp.shared.uri_template import InvalidUriTemplate, UriTemplate

    try:
        names = UriTemplate.parse(uri_template).variable_names
    except InvalidUriTemplate as e:
        raise ValueError(f"its URI template is invalid: {e}") from None
    bad = [n for n in names if not re.fullmatch(r"[A-Za-z0-9_]{1,64}", n)]
    if bad:
        raise ValueError(f"its variable {bad[0]!r} cannot be a parameter name")
    return list(names)


def _path_variables(uri_template: str) -> set[str]:
    """The variables outside a query part (``{?a,b}``, ``{&c}``): required."""
    from mcp.shared.uri_template import UriTemplate

    parsed = UriTemplate.parse(uri_template)
    return set(parsed.variable_names) - set(parsed.query_variable_names)


def expand(uri_template: str, variables: dict[str, str]) -> str:
    """The URI ``uri_template`` names with ``variables`` filled in (RFC 6570, each value
    percent-encoded as its operator says)."""
    from mcp.shared.uri_template import UriTemplate

    return UriTemplate.parse(uri_template).expand(variables)


def _short(text: str) -> str:
    text = inline(text)
    return text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN - 1] + "…"


# --- a read's result ------------------------------------------------------------------------


def output_from_read(result: ReadResourceResult, *, trusted: bool) -> ToolOutput:
    """A ``resources/read`` result as the model sees it: each text content in order, each
    image as an image of the result, other binary contents named, never decoded."""
    pieces: list[str] = []
    images: list[Image] = []
    for content in result.contents:
        text = getattr(content, "text", None)
        mime = content.mime_type or ""
        if isinstance(text, str):
            pieces.append(text)
        elif mime.startswith("image/"):
            image = image_from_base64(getattr(content, "blob", ""), mime)
            if image is None:
                pieces.append(f"[unreadable image: {content.uri}]")
            else:
                images.append(image)
                pieces.append(f"[image: {content.uri}, {mime}]")
        else:
            pieces.append(f"[binary resource omitted: {content.uri}"
                          f"{', ' + mime if mime else ''}]")
    return ToolOutput("\n".join(pieces) or "(the resource is empty)",
                      from_outside=not trusted, images=tuple(images))
