"""Provider-neutral conversation data: messages, their parts, usage and stop reasons.

Plain frozen dataclasses with a ``kind`` discriminator. Adapters translate these to and
from each wire format; nothing here knows about any provider.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

Role: TypeAlias = Literal["system", "user", "assistant", "tool"]

# How deep a tool call's arguments may nest. Real arguments stay far below it; deeper JSON
# is refused before anything walks it (schema validation, the session store, rendering
# and every encoder recurse once per level, and Python's recursion limit is near 1000).
MAX_ARGUMENT_DEPTH = 64
Trust: TypeAlias = Literal["trusted", "untrusted"]

StopReason: TypeAlias = Literal[
    "end_turn",  # the model finished its answer
    "tool_calls",  # the model asked for tools
    "max_tokens",  # the output token limit cut the answer
    "content_filter",  # the provider refused or filtered the answer
    "other",
]


@dataclass(frozen=True, slots=True)
class Text:
    """Text in a message. ``origin`` marks outside text given with a user's prompt (text
    piped to ``tether run``: ``"standard input"``), which the user did not write: it is
    delimited for the model (``tether.trust.outside_text``), taints the conversation as
    untrusted, and is never a trusted source of a call's values. ``None``: the words of
    the message's author (the user's own prompt, the model's answer)."""

    text: str
    kind: Literal["text"] = "text"
    origin: str | None = None


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A model's request to run a tool. ``arguments`` is the JSON text as the model wrote it.

    The raw text is kept (not a parsed dict) so malformed JSON can be shown back to the model
    and replayed to the provider exactly. ``provider_data`` carries opaque wire fields that
    must round-trip to the same provider (Gemini's thought signature, for instance).
    """

    id: str
    name: str
    arguments: str
    provider_data: dict[str, Any] | None = None
    kind: Literal["tool_call"] = "tool_call"

    def parsed_arguments(self) -> Any:
        """The arguments as JSON; raises ``ValueError`` when the model wrote invalid JSON,
        or JSON nested deeper than ``MAX_ARGUMENT_DEPTH`` levels."""
        return loads_bounded(self.arguments) if self.arguments.strip() else {}


def loads_bounded(text: str, max_depth: int = MAX_ARGUMENT_DEPTH) -> Any:
    """``json.loads`` for text from outside: ``ValueError`` for invalid JSON and for JSON
    whose arrays and objects nest deeper than ``max_depth`` (never ``RecursionError``)."""
    if text.count("[") + text.count("{") <= max_depth:
        return json.loads(text)  # too few brackets to nest too deep
    try:
        value = json.loads(text)
    except RecursionError:
        too_deep = True
    else:
        too_deep = _nests_deeper(value, max_depth)
    if too_deep:
        raise ValueError(f"the JSON nests deeper than {max_depth} levels (arrays and objects "
                         f"inside each other)")
    return value


def _nests_deeper(value: Any, limit: int) -> bool:
    """Whether ``value`` has arrays/objects nested more than ``limit`` levels (no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)] if isinstance(value, dict | list) else []
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


Writer: TypeAlias = Literal["user", "service", "others"]
"""Who writes a field of a tool's result: ``user`` (the user's own records: mail they
sent, files they own, their outgoing payments, their address), ``service`` (what the
service mints for the user's records: ids), ``others`` (anything another person can write,
every free-text field; the default of every field not declared)."""

WRITERS: tuple[Writer, ...] = ("user", "service", "others")

# What a saved result's field labels may hold (``FieldLabel.from_dict``): a store is read as
# hostile input, and a label beyond these bounds is dropped (its value is then untrusted).
MAX_FIELD_LABELS = 10_000
MAX_FIELD_CHARS = 10_000


@dataclass(frozen=True, slots=True)
class FieldLabel:
    """One value of a structured tool result, with who writes its field: ``path`` names it
    (``.files[0].id``), ``value`` is its text as the model reads it, ``by`` its writer,
    ``secret`` whether it must not leave (``tether.fields.Secret``). A result keeps the
    labels of its trusted (user- or service-written) and its secret values; every other
    value is of the untrusted rest."""

    path: str
    value: str
    by: Writer = "others"
    secret: bool = False

    @property
    def trusted(self) -> bool:
        return self.by != "others"

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"path": self.path, "value": self.value, "by": self.by}
        if self.secret:
            d["secret"] = True
        return d

    @classmethod
    def from_dict(cls, d: Any) -> FieldLabel | None:
        """A saved label, or None when it is not one (wrong types, too long). An unknown
        writer is ``others``: a label can only lose trust by being misread."""
        if not isinstance(d, dict):
            return None
        path, value, by = d.get("path"), d.get("value"), d.get("by")
        if not isinstance(path, str) or not isinstance(value, str) or not value \
                or len(value) > MAX_FIELD_CHARS or len(path) > MAX_FIELD_CHARS:
            return None
        writer: Writer = by if by in ("user", "service") else "others"
        return cls(path, value, writer, d.get("secret") is True)


@dataclass(frozen=True, slots=True)
class Labels:
    """What a tool result's text is, as a source of the values a later call may use (see
    ``tether.provenance``). ``private``: it came from a tool that reads the user's data.
    ``untrusted``: it is not a trusted source (outside text, the echo of values that were
    not traced, a text the gate wrote about a call it refused); ``why`` says which. The
    default is the fail-closed one.

    ``fields``: the values of a structured result whose fields are declared written by the
    user or the service (they trace even when the text as a whole is untrusted), and its
    secret values. ``echoes``: the call ran with values that did not all trace, so what it
    wrote (a record, a draft) may come back in a later result: a value it holds does not
    become trusted by being read back. ``written``: values it wrote beyond its arguments
    (a sub-agent's, through its own calls), which count the same. ``readers``: who may
    read the text, as its source said (``None``: no list); a send while the conversation
    holds it goes without asking only to one of them."""

    private: bool = False
    untrusted: bool = True
    why: str = ""
    fields: tuple[FieldLabel, ...] = ()
    echoes: bool = False
    written: tuple[str, ...] = ()
    readers: tuple[str, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"private": self.private, "untrusted": self.untrusted}
        if self.why:
            d["why"] = self.why
        if self.fields:
            d["fields"] = [f.to_dict() for f in self.fields]
        d["echoes"] = self.echoes
        if self.written:
            d["written"] = list(self.written)
        if self.readers is not None:
            d["readers"] = list(self.readers)
        return d

    @classmethod
    def from_dict(cls, d: Any) -> Labels:
        """Labels as saved; anything but an explicit ``untrusted: false`` is untrusted, and
        a field label that is not one is dropped."""
        if not isinstance(d, dict):
            return cls()
        saved = d.get("fields")
        fields: tuple[FieldLabel, ...] = ()
        if isinstance(saved, list):
            fields = tuple(f for f in map(FieldLabel.from_dict, saved[:MAX_FIELD_LABELS])
                           if f is not None)
        untrusted = d.get("untrusted") is not False
        # Saved before echoes were recorded: an untrusted result may have been an echo.
        echoes = d.get("echoes") is True or ("echoes" not in d and untrusted)
        saved_written = d.get("written")
        written = tuple(w for w in saved_written[:MAX_FIELD_LABELS]
                        if isinstance(w, str) and w) if isinstance(saved_written, list) else ()
        return cls(d.get("private") is True, untrusted, str(d.get("why", "")), fields,
                   echoes, written, _readers(d))


def _readers(d: dict[str, Any]) -> tuple[str, ...] | None:
    """Saved readers: a list kept as it was, minus what is not a string; anything else
    saved under the key is nobody (a restriction is never lost by being misread)."""
    if "readers" not in d:
        return None
    saved = d["readers"]
    if not isinstance(saved, list):
        return ()
    return tuple(r for r in saved[:MAX_FIELD_LABELS] if isinstance(r, str) and r)


@dataclass(frozen=True, slots=True)
class Image:
    """An image given to the model: inline bytes (``data``) or a ``url``."""

    media_type: str = "image/png"
    data: bytes | None = None
    url: str | None = None
    kind: Literal["image"] = "image"

    def base64(self) -> str:
        return base64.b64encode(self.data or b"").decode("ascii")


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The outcome of one tool call as the model will see it.

    ``trust`` records where the content came from: ``untrusted`` when it carries text from
    outside (a web page, an MCP server, a child agent that read such text). ``labels``
    record what the text is as a source of later calls' values (``None``: unknown, which
    counts as untrusted). ``images`` are images the result carries beside its text (an MCP
    tool's image content), with the same trust as the text.
    """

    call_id: str
    name: str
    content: str
    is_error: bool = False
    trust: Trust = "trusted"
    structured: Any = None
    kind: Literal["tool_result"] = "tool_result"
    labels: Labels | None = None
    images: tuple[Image, ...] = ()


@dataclass(frozen=True, slots=True)
class Reasoning:
    """A model's thinking, kept so it can be replayed to the provider that produced it.

    ``provider`` names the wire it came from; other providers never see it. ``signature``
    and ``redacted`` carry the opaque fields some providers require back verbatim.
    """

    text: str
    provider: str
    signature: str | None = None
    redacted: str | None = None
    provider_data: dict[str, Any] | None = None
    kind: Literal["reasoning"] = "reasoning"


Part: TypeAlias = Text | ToolCall | ToolResult | Image | Reasoning


@dataclass(frozen=True, slots=True)
class Message:
    role: Role
    parts: tuple[Part, ...]

    @classmethod
    def user(cls, text: str) -> Message:
        return cls("user", (Text(text),))

    @classmethod
    def assistant(cls, text: str) -> Message:
        return cls("assistant", (Text(text),))

    @property
    def text(self) -> str:
        """All text parts joined."""
        return "".join(p.text for p in self.parts if isinstance(p, Text))

    @property
    def outside_sources(self) -> tuple[str, ...]:
        """Where the outside text in this message came from (its texts' ``origin``), each
        once, sorted: empty for a message that is all its author's words."""
        return tuple(sorted({p.origin for p in self.parts
                             if isinstance(p, Text) and p.origin is not None}))

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [p for p in self.parts if isinstance(p, ToolCall)]

    @property
    def tool_results(self) -> list[ToolResult]:
        return [p for p in self.parts if isinstance(p, ToolResult)]


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens spent. ``input_tokens`` counts the whole prompt on every provider, cached or
    not; ``cache_read_tokens`` / ``cache_write_tokens`` say how much of it hit or filled a
    cache. ``details`` holds provider extras (reasoning tokens...).

    ``unreported_requests`` counts the requests whose tokens nobody reported (a server that
    sends no usage, an attempt that failed before its answer): their tokens are unknown, not
    zero. When no request reported any, ``input_tokens`` and ``output_tokens`` are None
    (unknown); when some did, they are the sum of what was reported and
    ``unreported_requests`` says how many requests it leaves out."""

    input_tokens: int | None = 0
    output_tokens: int | None = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    requests: int = 0
    details: dict[str, int] = field(default_factory=dict)
    unreported_requests: int = 0

    @classmethod
    def unreported(cls, requests: int = 1) -> Usage:
        """``requests`` requests whose tokens are unknown."""
        return cls(None, None, requests=requests, unreported_requests=requests)

    def __add__(self, other: Usage) -> Usage:
        details = dict(self.details)
        for k, v in other.details.items():
            details[k] = details.get(k, 0) + v
        requests = self.requests + other.requests
        unreported = self.unreported_requests + other.unreported_requests
        # Known where some request reported tokens: the sum of nothing reported is unknown,
        # not the 0 of an empty Usage it was added to.
        known = _reported(self) or _reported(other) or not unreported
        return Usage(
            _plus(self.input_tokens, other.input_tokens) if known else None,
            _plus(self.output_tokens, other.output_tokens) if known else None,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            requests,
            details,
            unreported,
        )

    @property
    def total_tokens(self) -> int | None:
        if self.input_tokens is None or self.output_tokens is None:
            return None
        return self.input_tokens + self.output_tokens


def _reported(usage: Usage) -> bool:
    """Whether ``usage`` holds tokens some request reported (not only an empty start)."""
    return usage.input_tokens is not None and (
        usage.requests > usage.unreported_requests or bool(usage.input_tokens)
        or bool(usage.output_tokens))


def _plus(a: int | None, b: int | None) -> int | None:
    """Two token counts added, an unknown one counting as nothing known."""
    if a is None:
        return b
    if b is None:
        return a
    return a + b


# --- serialization (sessions, pending states, --json) -------------------------------------


def part_to_dict(part: Part) -> dict[str, Any]:
    if isinstance(part, Text):
        if part.origin is not None:
            return {"kind": "text", "text": part.text, "origin": part.origin}
        return {"kind": "text", "text": part.text}
    if isinstance(part, ToolCall):
        d: dict[str, Any] = {
            "kind": "tool_call", "id": part.id, "name": part.name, "arguments": part.arguments,
        }
        if part.provider_data:
            d["provider_data"] = part.provider_data
        return d
    if isinstance(part, ToolResult):
        d = {
            "kind": "tool_result", "call_id": part.call_id, "name": part.name,
            "content": part.content, "is_error": part.is_error, "trust": part.trust,
        }
        if part.structured is not None:
            d["structured"] = part.structured
        if part.labels is not None:
            d["labels"] = part.labels.to_dict()
        if part.images:
            d["images"] = [part_to_dict(image) for image in part.images]
        return d
    if isinstance(part, Image):
        return {
            "kind": "image", "media_type": part.media_type, "url": part.url,
            "data": part.base64() if part.data is not None else None,
        }
    return {
        "kind": "reasoning", "text": part.text, "provider": part.provider,
        "signature": part.signature, "redacted": part.redacted,
        "provider_data": part.provider_data,
    }


def part_from_dict(d: dict[str, Any]) -> Part:
    kind = d.get("kind")
    if kind == "text":
        origin = d.get("origin")
        return Text(d["text"], origin=str(origin) if origin is not None else None)
    if kind == "tool_call":
        return ToolCall(d["id"], d["name"], d["arguments"], d.get("provider_data"))
    if kind == "tool_result":
        return ToolResult(
            d["call_id"], d["name"], d["content"], bool(d.get("is_error", False)),
            d.get("trust", "untrusted"), d.get("structured"),
            labels=Labels.from_dict(d["labels"]) if "labels" in d else None,
            images=tuple(_image_from_dict(i) for i in d.get("images", ())),
        )
    if kind == "image":
        return _image_from_dict(d)
    if kind == "reasoning":
        return Reasoning(d.get("text", ""), d["provider"], d.get("signature"),
                         d.get("redacted"), d.get("provider_data"))
    raise ValueError(f"unknown message part kind: {kind!r}")


def _image_from_dict(d: dict[str, Any]) -> Image:
    data = d.get("data")
    return Image(d.get("media_type", "image/png"),
                 base64.b64decode(data) if data is not None else None, d.get("url"))


def message_to_dict(message: Message) -> dict[str, Any]:
    return {"role": message.role, "parts": [part_to_dict(p) for p in message.parts]}


def message_from_dict(d: dict[str, Any]) -> Message:
    return Message(d["role"], tuple(part_from_dict(p) for p in d["parts"]))


def usage_to_dict(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens, "requests": usage.requests,
        **({"details": usage.details} if usage.details else {}),
        **({"unreported_requests": usage.unreported_requests}
           if usage.unreported_requests else {}),
    }


def usage_from_dict(d: dict[str, Any]) -> Usage:
    return Usage(
        d.get("input_tokens", 0), d.get("output_tokens", 0), d.get("cache_read_tokens", 0),
        d.get("cache_write_tokens", 0), d.get("requests", 0), dict(d.get("details", {})),
        d.get("unreported_requests", 0),
    )
