"""A server's request for input, asked at the terminal: what the person is shown
(``elicitation_text``: who asks, with its trust, the server's message behind a gutter,
tether's warning, a URL in full with its host marked) and the form, field by field, each
answer read again until it fits (``ask_form``). Every piece the server wrote is shown
literally. tether never opens a URL: the person may, themselves.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from rich.text import Text

from tether.approval import ElicitationAnswer, ElicitationRequest, FormField
from tether.display import inline, literal, shown

ReadLine = Callable[[Text], Awaitable[str]]
Say = Callable[[Text], None]

_YES = ("y", "yes", "true", "1")
_NO = ("n", "no", "false", "0")


def elicitation_text(request: ElicitationRequest) -> Text:
    """What the person reads before answering, every piece of it literal."""
    body = Text()
    trust = "trusted" if request.trusted else "untrusted"
    body.append_text(shown(("MCP server ", "bold"), (inline(request.server), "bold"),
                           (f" ({trust}) asks ", "bold"),
                           ("you to open a URL" if request.url is not None
                            else "you to fill in a form", "bold")))
    body.append("\n")
    body.append("its message:\n", style="dim")
    for line in request.message.split("\n"):
        body.append("│ ", style="dim")
        body.append(literal(line))
        body.append("\n")
    if request.url is not None:
        # The URL itself is printed below the frame, unwrapped (``url_text``).
        body.append("the URL is below; tether will not open it: open it yourself only if "
                    "you trust where it goes\n", style="dim")
    for f in request.fields:
        body.append_text(shown(("• ", "dim"), field_label(f)))
        if f.description:
            body.append_text(shown((f": {inline(f.description)}", "dim")))
        body.append("\n")
    if request.warning:
        body.append_text(shown(("⚠ " + inline(request.warning), "bold red")))
        body.append("\n")
    return body


def url_text(url: str) -> Text:
    """``url`` in full, its host marked (and spelt in ASCII when it is not: a look-alike
    letter shows as ``xn--``), so the person sees where it goes before they go."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError:
        host = ""
    line = Text()
    at = url.lower().find(host) if host else -1
    # inline, not literal: a newline in the URL (which urlsplit drops when it reads the
    # host) would otherwise start a line of its own, a forged "goes to: bank.example".
    if at < 0:
        line.append(inline(url), style="underline")
        line.append("\n  (no host could be read from it)", style="red")
        return line
    line.append(inline(url[:at]), style="dim")
    line.append(inline(url[at:at + len(host)]), style="bold reverse")
    line.append(inline(url[at + len(host):]), style="dim")
    line.append_text(shown(("\n  goes to: ", "dim"), (_ascii_host(host), "bold")))
    return line


def _ascii_host(host: str) -> str:
    if host.isascii():
        return host
    try:
        return host.encode("idna").decode("ascii") + f" (written {host!a})"
    except UnicodeError:
        return f"{host!a} (not a valid host name)"


def field_label(f: FormField) -> str:
    """A field as the prompt names it: its title (or name), its kind, whether required."""
    title = inline(f.title or f.name)
    if f.title and f.title != f.name:
        title += f" [{inline(f.name)}]"
    kind: str = f.kind
    if f.kind in ("choice", "choices"):
        listed = ", ".join(f"{i}={inline(label)}" for i, label in
                           enumerate(f.choice_titles or f.choices, 1))
        kind = ("one of: " if f.kind == "choice" else "any of (comma-separated): ") + listed
    elif f.kind == "boolean":
        kind = "y/n"
    elif f.format:
        kind = f"{f.kind}, {f.format}"
    bounds = [f"≥ {f.minimum:g}" if f.minimum is not None else "",
              f"≤ {f.maximum:g}" if f.maximum is not None else ""]
    if any(bounds):
        kind += ", " + " ".join(b for b in bounds if b)
    return f"{title} ({kind}{', required' if f.required else ''})"


def parse(f: FormField, typed: str) -> Any:
    """The value ``typed`` stands for in field ``f``; raises ValueError (in words for the
    person) when it stands for none."""
    text = typed.strip()
    if f.kind == "boolean":
        if text.lower() in _YES:
            return True
        if text.lower() in _NO:
            return False
        raise ValueError("answer y or n")
    if f.kind == "integer":
        try:
            return int(text)
        except ValueError:
            raise ValueError("a whole number, please") from None
    if f.kind == "number":
        try:
            return float(text) if any(c in text for c in ".eE") else int(text)
        except ValueError:
            raise ValueError("a number, please") from None
    if f.kind == "choice":
        return _choice(f, text)
    if f.kind == "choices":
        return [_choice(f, part.strip()) for part in text.split(",") if part.strip()]
    return typed


def _choice(f: FormField, text: str) -> str:
    if text.isdigit() and 1 <= int(text) <= len(f.choices):
        return f.choices[int(text) - 1]
    if text in f.choices:
        return text
    raise ValueError(f"one of 1-{len(f.choices)}, please")


async def ask_form(request: ElicitationRequest, read: ReadLine, say: Say) -> ElicitationAnswer:
    """Ask for each field in turn (empty keeps the default, or leaves an optional field
    out), then whether to send the values; ``n`` at the first question declines."""
    first = "Open it yourself and go on? y=yes, n=decline" if request.url is not None \
        else "Fill in the form? y=yes, n=decline"
    if not await _yes(read, say, Text(f"{first} [y/n] (n): ")):
        return ElicitationAnswer.decline()
    if request.url is not None:
        return ElicitationAnswer.accept()
    values: dict[str, Any] = {}
    for f in request.fields:
        while True:
            default = "" if f.default is None else f" [{inline(_shown_value(f.default))}]"
            typed = await read(Text(f"{field_label(f)}{default}: "))
            if typed == "":
                if f.default is not None:
                    values[f.name] = f.default
                    break
                if not f.required:
                    break
                say(Text("This field is required.", style="yellow"))
                continue
            try:
                value = parse(f, typed)
            except ValueError as e:
                say(Text(str(e), style="yellow"))
                continue
            why = f.problem(value)
            if why is None:
                values[f.name] = value
                break
            say(Text(f"That is {why}.", style="yellow"))
    say(shown(("Send to ", "bold"), (inline(request.server), "bold"), ": ",
              inline(", ".join(f"{k}={_shown_value(v)}" for k, v in values.items()))))
    if not await _yes(read, say, Text("Send? [y/n] (n): ")):
        return ElicitationAnswer.decline()
    return ElicitationAnswer.accept(values)


def _shown_value(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


async def _yes(read: ReadLine, say: Say, question: Text) -> bool:
    while True:
        word = (await read(question)).strip().lower() or "n"
        if word in ("y", "yes"):
            return True
        if word in ("n", "no"):
            return False
        say(Text("Please answer y or n"))
