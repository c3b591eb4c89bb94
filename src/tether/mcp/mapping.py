"""How an MCP tool meets the gate: its annotations as capabilities, approval and read-only;
its results as what the model sees; which input schemas can be offered at all.

Plain functions on plain values: no MCP SDK import here.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.mcp.labels import ServerLabel, read_label, result_trusted
from tether.messages import Image
from tether.tools.tool import ToolOutput
from tether.trust import NO_CAPABILITIES, Capabilities, Taint

if TYPE_CHECKING:
    from mcp_types import CallToolResult


# --- annotations -> the gate ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Hints:
    """The three MCP annotation hints that decide a tool's gate flags; ``None`` = absent."""

    read_only: bool | None = None
    destructive: bool | None = None
    open_world: bool | None = None


@dataclass(frozen=True, slots=True)
class GateFlags:
    """What a tool declares to the gate: capabilities, approval, and read-only."""

    capabilities: Capabilities
    needs_approval: bool
    read_only: bool


def believed(hints: Hints, *, trusted: bool) -> Hints:
    """The hints tether acts on. A trusted server's, as given. An untrusted server's can
    only add caution (the MCP specification: annotations from untrusted servers are
    untrusted): ``readOnlyHint: true``, ``destructiveHint: false`` and ``openWorldHint:
    false`` are dropped, so its tools are open world and destructive (approval) by the
    specification's defaults, and never read-only; ``destructiveHint: true`` and
    ``openWorldHint: true`` are kept."""
    if trusted:
        return hints
    return Hints(read_only=None, destructive=True if hints.destructive is True else None,
                 open_world=True if hints.open_world is True else None)


def map_hints(hints: Hints, widen: Capabilities = NO_CAPABILITIES, *,
              offline: bool = False) -> GateFlags:
    """The gate flags of an MCP tool.

    - ``private_data`` always: the server sees the arguments and may hold anything.
    - ``untrusted_input`` and ``external_send`` from ``openWorldHint`` (spec default: true).
    - ``destructive`` (and so ``needs_approval``) from ``destructiveHint`` (spec default:
      true). The spec makes destructiveHint "meaningful only when readOnlyHint == false": a
      tool that says it does not modify its environment is not destructive unless it also
      says ``destructiveHint: true`` explicitly (then destructive wins).
    - read-only only from ``readOnlyHint: true`` (spec default: false), never when
      destructive.
    - ``offline``: the server runs in a sandbox without network, so no tool of it can send
      (``external_send`` off whatever ``openWorldHint`` says).
    - ``widen`` (the configuration's capabilities) is ORed in: it can add, never remove.
    """
    read_only_claim = hints.read_only is True
    destructive = hints.destructive if hints.destructive is not None else not read_only_claim
    open_world = hints.open_world if hints.open_world is not None else True
    caps = Capabilities(private_data=True, untrusted_input=open_world,
                        external_send=open_world and not offline,
                        destructive=destructive) | widen
    return GateFlags(caps, caps.destructive, read_only_claim and not caps.destructive)


# --- results --------------------------------------------------------------------------------


def output_from_result(result: CallToolResult, *, server_trusted: bool = False) -> ToolOutput:
    """An MCP ``CallToolResult`` as the model will see it.

    Text parts are joined in order. An image is carried beside the text (``images``),
    marked in its place (``[image 1: image/png]``), for a model that accepts images; an
    embedded text resource is text like any other; a resource link is named, never
    fetched; audio and binary resources are named as omitted. Nothing disappears silently.
    ``structuredContent`` is kept; ``isError`` makes an error result. The content came from
    the server, so it is outside text whatever the tool's hints say (a server that says a
    tool is closed world is believed about where the tool reaches, not about the text it
    returns): shown to the model as untrusted data, and so it taints the conversation.
    The server's own label on the result narrows that (``labelled``): only a server the
    user marked trusted (``server_trusted``) can say its result is trusted.
    """
    images: list[Image] = []
    pieces = [_render_part(part, images) for part in result.content]
    content = "\n".join(pieces)
    if not content and result.structured_content is not None:
        content = json.dumps(result.structured_content, ensure_ascii=False)
    if not content:
        content = ("Error: the tool failed without saying why." if result.is_error
                   else "(no output)")
    output = ToolOutput(content, is_error=bool(result.is_error),
                        structured=result.structured_content, from_outside=True,
                        images=tuple(images))
    return labelled(output, result, server_trusted=server_trusted)


def labelled(output: ToolOutput, result: CallToolResult, *, server_trusted: bool) -> ToolOutput:
    """The output with what its server's label says (``tether.mcp.labels``), narrowing
    only: it stays outside text unless a trusted server says the result is trusted; a
    private claim adds private exposure; a readers list goes with it to the gate."""
    label = read_label(getattr(result, "meta", None))
    if not label.said_anything:
        return output
    return apply_label(output, label, server_trusted=server_trusted)


def apply_label(output: ToolOutput, label: ServerLabel, *, server_trusted: bool) -> ToolOutput:
    """``output`` under ``label`` (see ``labelled``)."""
    outside = output.from_outside is not False and not (
        result_trusted(label, server_trusted=server_trusted) and not output.images)
    taint = output.taint
    if label.private:
        taint = Taint(private=True) if taint is None else taint | Taint(private=True)
    readers = output.readers
    if label.readers is not None:
        readers = label.readers if readers is None else \
            tuple(r for r in readers if r in label.readers)
    return dataclasses.replace(output, from_outside=outside, taint=taint, readers=readers)


def _render_part(part: Any, images: list[Image]) -> str:
    kind = getattr(part, "type", "unknown")
    if kind == "text":
        return str(part.text)
    if kind == "image":
        return _image(part.data, str(part.mime_type), images)
    if kind == "audio":
        return f"[audio omitted: {part.mime_type}]"
    if kind == "resource":
        resource = part.resource
        mime = str(resource.mime_type or "")
        text = getattr(resource, "text", None)
        if isinstance(text, str):
            return text
        if mime.startswith("image/"):
            return _image(getattr(resource, "blob", None), mime, images)
        return f"[embedded resource omitted: {resource.uri}{', ' + mime if mime else ''}]"
    if kind == "resource_link":
        name = f" ({part.name})" if getattr(part, "name", None) else ""
        return f"[resource link, not fetched: {part.uri}{name}]"
    return f"[{kind} content omitted]"


def _image(data: Any, mime: str, images: list[Image]) -> str:
    image = image_from_base64(data, mime)
    if image is None:
        return f"[unreadable image omitted: {mime}]"
    images.append(image)
    return f"[image {len(images)}: {mime}]"


def image_from_base64(data: Any, mime: str) -> Image | None:
    """An image from a server's base64 text, or None when it is not base64."""
    if not isinstance(data, str):
        return None
    try:
        raw = base64.b64decode(data, validate=True)
    except ValueError:
        return None
    return Image(mime, raw) if raw else None


# --- input schemas -------------------------------------------------------------------------


def schema_problem(schema: Any) -> str | None:
    """Why an input schema cannot be offered to a model, or None."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return "its input schema is not a JSON Schema of type \"object\""
    import jsonschema

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as e:
        return f"its input schema is invalid: {e.message}"
    return None
