"""An MCP server's prompts, which a person invokes (never the model: no tool offers them),
and a fetched prompt as the parts of a user's turn.

A prompt is the server's text, not the user's words: from a server that is not trusted it
is outside text (``tether.trust.outside_text``: delimited for the model, the conversation
tainted from the start, never a trusted source for provenance), labelled with its server
and name. Every message of it goes into the one user turn, each labelled with the role the
server gave it, so a prompt cannot forge a turn of the model's. From a trusted server it
is trusted text, labelled the same way.

Plain functions on plain values: no MCP SDK import here.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.errors import ConfigError
from tether.messages import Part, Text
from tether.trust import outside_text

if TYPE_CHECKING:
    from mcp_types import GetPromptResult


@dataclass(frozen=True, slots=True)
class PromptArgument:
    """One argument of a prompt, as the server declared it."""

    name: str
    description: str | None = None
    required: bool = False


@dataclass(frozen=True, slots=True)
class Prompt:
    """One prompt a server listed, as the server wrote it."""

    name: str
    title: str | None = None
    description: str | None = None
    arguments: tuple[PromptArgument, ...] = ()


@dataclass(frozen=True, slots=True)
class PromptInvocation:
    """``SERVER:NAME key=value ...`` as a person typed it."""

    server: str
    name: str
    arguments: dict[str, str]


def parse_invocation(text: str) -> PromptInvocation:
    """``SERVER:NAME [key=value ...]`` (shell quoting: ``topic='the launch plan'``), or a
    ``ConfigError`` saying what is wrong."""
    try:
        words = shlex.split(text)
    except ValueError as e:
        raise ConfigError(f"mcp prompt {text!r}: {e}") from None
    if not words or ":" not in words[0]:
        raise ConfigError(f"mcp prompt {text!r}: give it as SERVER:NAME [key=value ...]")
    server, _, name = words[0].partition(":")
    if not server or not name:
        raise ConfigError(f"mcp prompt {text!r}: give it as SERVER:NAME [key=value ...]")
    arguments: dict[str, str] = {}
    for word in words[1:]:
        key, eq, value = word.partition("=")
        if not eq or not key:
            raise ConfigError(f"mcp prompt {text!r}: {word!r} is not key=value")
        if key in arguments:
            raise ConfigError(f"mcp prompt {text!r}: {key!r} is given twice")
        arguments[key] = value
    return PromptInvocation(server, name, arguments)


def check_arguments(prompt: Prompt, arguments: dict[str, str]) -> str | None:
    """What is wrong with ``arguments`` for ``prompt`` (in words), or None."""
    known = {a.name for a in prompt.arguments}
    unknown = [k for k in arguments if k not in known]
    if unknown:
        return (f"the prompt takes no argument {unknown[0]!r} (it takes "
                f"{', '.join(sorted(known)) or 'none'})")
    missing = [a.name for a in prompt.arguments if a.required and a.name not in arguments]
    if missing:
        return f"the prompt needs {', '.join(missing)}"
    return None


@dataclass(frozen=True, slots=True)
class PromptText:
    """A fetched prompt: the parts of the user's turn it makes."""

    server: str
    name: str
    trusted: bool
    parts: tuple[Part, ...]


def prompt_text(result: GetPromptResult, *, server: str, name: str,
                trusted: bool) -> PromptText:
    """The server's prompt messages as the parts of one user turn (see the module)."""
    label = f"MCP prompt {name} of server {server}"
    pieces = [f"[{_role(m.role)}]\n{_content(m.content)}" for m in result.messages]
    body = "\n\n".join(pieces) or "(the prompt is empty)"
    if trusted:
        part: Part = Text(f"[{label}]\n{body}\n\n")
    else:
        part = outside_text(body, label)
    return PromptText(server, name, trusted, (part,))


def _role(role: Any) -> str:
    return "as the user" if str(role) == "user" else "as the assistant"


def _content(content: Any) -> str:
    kind = getattr(content, "type", "unknown")
    if kind == "text":
        return str(content.text)
    if kind == "resource":
        text = getattr(content.resource, "text", None)
        if isinstance(text, str):
            return text
        return f"[embedded resource omitted: {content.resource.uri}]"
    if kind == "resource_link":
        return f"[resource link, not fetched: {content.uri}]"
    return f"[{kind} content omitted]"
