"""Per-value provenance: which texts the model has seen could a value of a call come from?

Every text the model has seen is a ``Source`` with labels: the user's messages and the
system prompt are trusted; each tool result carries the labels recorded with it
(``ToolResult.labels``: private, and whether it is a trusted source); a child agent's
answer carries its trust verdict. What the model writes (its text, its reasoning, its
calls) is never a source: a value the model wrote is only as good as a source that holds
it.

``trace(value, sources)`` names the sources whose text holds the exact value. Matching is
exact and literal, never fuzzy: a string must occur as written (not inside a longer word
or number), a number as it would be written (``100``, ``100.0``, ``100.00``). A value that
was split, re-encoded, re-cased or paraphrased traces to nothing, and a value that traces
to no trusted source counts as untrusted: the gate fails closed.
"""

from __future__ import annotations

import math
from collections.abc import Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from tether.addresses import named, places
from tether.display import inline
from tether.messages import Labels, Message, Text, ToolResult

Role: TypeAlias = Literal["content", "destination", "control"]


@dataclass(frozen=True, slots=True)
class Source:
    """One text the model has seen. ``trusted``: nothing untrusted could have chosen it
    (the user's words, the system prompt, the result of a call whose values all traced to
    trusted text); ``private``: it came from a tool that reads the user's data."""

    name: str
    text: str
    trusted: bool
    private: bool = False


@dataclass(frozen=True, slots=True)
class Trace:
    """Where one value of a call could have come from.

    ``argument`` names it (``recipients[0]``, ``body (a link in it)``), ``role`` is its
    parameter's (a link inside content counts as ``control``), ``value`` is the value as
    traced (shortened in ``shown``), ``trusted_sources`` and ``untrusted_sources`` name the
    sources that hold it."""

    argument: str
    role: Role
    value: str
    trusted_sources: tuple[str, ...]
    untrusted_sources: tuple[str, ...]

    @property
    def traced(self) -> bool:
        """The value occurs in a trusted source."""
        return bool(self.trusted_sources)

    @property
    def shown(self) -> str:
        return self.value if len(self.value) <= 80 else self.value[:77] + "..."

    def describe(self, *, with_value: bool = True) -> str:
        """One line: the argument, its value, and where it was (or was not) found. The
        model wrote the argument's path (an object's keys) and the value, and call ids
        name the sources: each is shown with newlines and hidden characters made visible,
        so none can start a line of its own in the explanation a person reads."""
        if self.trusted_sources:
            where = "traced to " + ", ".join(inline(s) for s in self.trusted_sources)
        elif self.untrusted_sources:
            where = "found only in untrusted text: " + ", ".join(
                inline(s) for s in self.untrusted_sources)
        else:
            where = "found in no text the model has seen (written by the model)"
        if not with_value:
            return f"{inline(self.argument)} ({where})"
        return f"{inline(self.argument)} = {inline(repr(self.shown))} ({where})"


# --- the sources of a conversation --------------------------------------------------------


SYSTEM_PROMPT = "the system prompt"
USER_PROMPT = "the user's prompt"
OUTSIDE_TEXT = "outside text given with the prompt"
UNKNOWN_ORIGIN = "a result of unknown origin"


def sources_of(messages: Sequence[Message], system_prompt: str | None = None, *,
               prompts_trusted: bool = True,
               inherited: Iterable[Source] = ()) -> tuple[Source, ...]:
    """The sources in ``messages``: the system prompt, the user's messages (trusted unless
    ``prompts_trusted`` is false: a child's task, which a model wrote; outside text given
    with a prompt, ``Text.origin``, never), and each tool result
    with its labels (a result without labels, saved by an older tether, is untrusted).
    ``inherited`` are sources a delegating run hands its child (the parent's trusted
    texts)."""
    out = list(inherited)
    if system_prompt:
        out.append(Source(SYSTEM_PROMPT, system_prompt, True))
    for message in messages:
        if message.role == "user":
            # Each text apart: two are never one token by being written side by side.
            own = "\n".join(p.text for p in message.parts
                             if isinstance(p, Text) and p.origin is None)
            if own:
                out.append(Source(USER_PROMPT if prompts_trusted else
                                  "the task the delegating model wrote", own, prompts_trusted))
            # Outside text given with the prompt (piped to tether run) is not the user's.
            out.extend(Source(f"{OUTSIDE_TEXT} ({p.origin})", p.text, False)
                       for p in message.parts if isinstance(p, Text) and p.origin is not None)
        elif message.role == "tool":
            for part in message.parts:
                if isinstance(part, ToolResult):
                    out.append(result_source(part))
    return tuple(out)


def result_source(result: ToolResult) -> Source:
    labels = result.labels
    name = f"the result of {result.name} ({result.call_id})"
    if labels is None:
        return Source(f"{name}, {UNKNOWN_ORIGIN}", result.content, False)
    return Source(name, result.content, not labels.untrusted, labels.private)


def result_labels(*, private: bool, from_outside: bool, arguments_traced: bool,
                  delegated: bool = False) -> Labels:
    """The labels of a tool result: a trusted source unless it carries outside text, or
    the call's own values were not all traced to trusted text (a tool can echo what it was
    given: ``create_file`` returns its content). A delegation's answer carries the child's
    verdict alone (the child ran under its own gate)."""
    if from_outside:
        return Labels(private=private, untrusted=True, why="outside text")
    if not arguments_traced and not delegated:
        return Labels(private=private, untrusted=True,
                      why="the call's arguments were not all traced to trusted text")
    return Labels(private=private, untrusted=False)


GATE_LABELS = Labels(untrusted=True, why="written by the gate about a call it did not run")


# --- tracing -----------------------------------------------------------------------------


def trace_value(value: str | int | float, sources: Sequence[Source]) -> tuple[
        tuple[str, ...], tuple[str, ...]]:
    """The names of the trusted and the untrusted sources that hold ``value`` exactly."""
    spellings = _spellings(value)
    trusted: list[str] = []
    untrusted: list[str] = []
    for source in sources:
        if any(_occurs(s, source.text) for s in spellings):
            (trusted if source.trusted else untrusted).append(source.name)
    return tuple(dict.fromkeys(trusted)), tuple(dict.fromkeys(untrusted))


def trace(argument: str, role: Role, value: str | int | float,
          sources: Sequence[Source]) -> Trace:
    trusted, untrusted = trace_value(value, sources)
    return Trace(argument, role, str(value), trusted, untrusted)


def _spellings(value: str | int | float) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, bool):  # never traced: see leaves()
        return ()
    if isinstance(value, int):
        return (str(value),)
    if not math.isfinite(value):
        return (repr(value),)
    out = [repr(value), f"{value:.2f}"]
    if value.is_integer():
        out.append(str(int(value)))
    # Two decimals is how money is written; a spelling that changes the value is not one.
    return tuple(s for s in dict.fromkeys(out) if float(s) == value)


# A value counts only as a whole token: what stands right before and after it must end a
# token (a space, a quote, a bracket, a comma...), so a value is never a piece of a longer
# word, number, address or link ("evil.example" does not trace to "evil.example.org",
# "https://x.example/leak?d=" does not trace to "https://x.example/leak?d={data}").
_BEFORE = frozenset(" \t\n\r\"'`([{<,;:=|*$#")
_AFTER = frozenset(" \t\n\r\"'`)]}>,;|*")
_ENDS_SENTENCE = frozenset(".,:;!?")


def _occurs(needle: str, text: str) -> bool:
    """``needle`` occurs in ``text`` as a whole token (see ``_BEFORE`` and ``_AFTER``;
    sentence punctuation after it counts as an end when a token end or the text's end
    follows)."""
    if not needle:
        return False
    start = text.find(needle)
    while start != -1:
        end = start + len(needle)
        before_ok = start == 0 or text[start - 1] in _BEFORE
        after = text[end] if end < len(text) else ""
        after_ok = not after or after in _AFTER or (
            after in _ENDS_SENTENCE and (end + 1 == len(text) or text[end + 1] in _AFTER))
        if before_ok and after_ok:
            return True
        start = text.find(needle, start + 1)
    return False


# --- a call's values -----------------------------------------------------------------------


KEY = " (a key)"


def leaves(value: Any, path: str, names: Container[Any] = frozenset()) -> Iterator[
        tuple[str, str | int | float]]:
    """The strings and numbers inside an argument, each with its path. An object's keys
    are values too (a model can put an address in a key as well as in a value), each with
    its object's path and ``(a key)``, unless ``names`` holds it: the names a tool's schema
    declares for its properties are the tool author's words, not values. Booleans and nulls
    are left out (a flag says yes or no; it names nothing), as are empty strings."""
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, str):
        if value:
            yield path, value
    elif isinstance(value, int | float):
        yield path, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if key not in names:
                yield from leaves(key, path + KEY, names)
            yield from leaves(item, f"{path}.{key}", names)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from leaves(item, f"{path}[{i}]", names)
    else:
        yield path, str(value)


class DeclaredNames:
    """The property names a tool's JSON Schema declares, at any depth (its ``properties``,
    in its definitions and combinations too), asked with ``in``. The top level is looked up
    first; the whole schema is walked only for a name it does not hold, once."""

    __slots__ = ("_all", "_schema")

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self._schema = schema
        self._all: frozenset[str] | None = None

    def __contains__(self, name: object) -> bool:
        top = self._schema.get("properties")
        if isinstance(name, str) and isinstance(top, Mapping) and name in top:
            return True
        if self._all is None:
            self._all = _property_names(self._schema)
        return name in self._all


def declared_names(schema: Mapping[str, Any]) -> DeclaredNames:
    """The names ``schema`` declares for its properties (``DeclaredNames``)."""
    return DeclaredNames(schema)


def _property_names(schema: Mapping[str, Any]) -> frozenset[str]:
    out: set[str] = set()
    stack: list[Any] = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            properties = node.get("properties")
            if isinstance(properties, Mapping):
                out.update(k for k in properties if isinstance(k, str))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return frozenset(out)


NAME = "arguments" + KEY


def values(arguments: Mapping[str, Any], names: Container[Any]) -> Iterator[
        tuple[str, str, str | int | float]]:
    """Every value of a call: each argument's leaves (``leaves``), as ``(argument, path,
    value)``, and the name of each argument its tool's schema does not declare (a tool
    that takes any properties, as an MCP tool may, receives the names the model chose),
    under the path ``NAME``."""
    for name, value in arguments.items():
        if name not in names:
            yield name, NAME, name
        for path, leaf in leaves(value, name, names):
            yield name, path, leaf


def addresses(text: str) -> list[str]:
    """The places ``text`` points to: links, hosts, email addresses and IBANs, in every
    spelling a reader would follow, each as it resolves (``tether.addresses``)."""
    return places(text)


def trace_address(argument: str, place: str, sources: Sequence[Source]) -> Trace:
    """Where a place written in content could have come from: the sources that name the
    same place (``tether.addresses.named``: written in any spelling that resolves to it,
    or a link or address on the same host)."""
    trusted: list[str] = []
    untrusted: list[str] = []
    for source in sources:
        if place in named(source.text):
            (trusted if source.trusted else untrusted).append(source.name)
    return Trace(argument, "control", place, tuple(dict.fromkeys(trusted)),
                 tuple(dict.fromkeys(untrusted)))


def trace_call(arguments: Mapping[str, Any], roles: Mapping[str, Role], *, sends: bool,
               sources: Sequence[Source], names: Container[Any] | None = None) -> list[Trace]:
    """A trace for every value of a call the gate must trust: each string and number of
    its control and destination arguments, keys included, and (for a send) each place
    written in its content arguments, keys included. ``roles`` names each declared
    parameter's role; an undeclared one is control. ``names`` are the property names the
    tool's schema declares (``declared_names``): any other argument name or key is traced
    as a value; without ``names``, the call's own argument names count as declared."""
    declared: Container[Any] = frozenset(arguments) if names is None else names
    out: list[Trace] = []
    for name, path, leaf in values(arguments, declared):
        role = roles.get(name, "control") if path != NAME else "control"
        if role != "content":
            out.append(trace(path, role, leaf, sources))
        elif sends and isinstance(leaf, str):
            out.extend(trace_address(f"{path} (an address in it)", place, sources)
                       for place in addresses(leaf))
    return out
