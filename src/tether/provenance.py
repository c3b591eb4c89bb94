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
import re
from collections.abc import Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from tether.addresses import fold, named, places
from tether.closed import KeyOf, Location
from tether.display import inline
from tether.messages import FieldLabel, Labels, Message, Text, ToolCall, ToolResult
from tether.tokens import Index as _Index
from tether.tokens import count as _count
from tether.tokens import occurs as _occurs
from tether.tokens import token_at as _token_at

Role: TypeAlias = Literal["content", "destination", "control"]


@dataclass(frozen=True, slots=True)
class Source:
    """One text the model has seen. ``trusted``: nothing untrusted could have chosen it
    (the user's words, the system prompt, the result of a call whose values all traced to
    trusted text); ``private``: it came from a tool that reads the user's data.

    A structured result that is untrusted as a whole may still hold trusted values: the
    ones in fields its tool declares written by the user or the service (``fields``, each
    with its path). The source is then those values, trusted, plus the untrusted rest: a
    value traces when it occurs, as a whole token, in one of them (never across two).
    ``tool`` names the tool whose result it is (the kind of record an id there is of).
    ``readers``: who may read it, as its source said (``None``: no list; see
    ``tether.run.checks.keep_readers``)."""

    name: str
    text: str
    trusted: bool
    private: bool = False
    fields: tuple[FieldLabel, ...] = ()
    tool: str = ""
    readers: tuple[str, ...] | None = None

    @property
    def secrets(self) -> tuple[str, ...]:
        return tuple(f.value for f in self.fields if f.secret)


@dataclass(frozen=True, slots=True)
class Trace:
    """Where one value of a call could have come from.

    ``argument`` names it (``recipients[0]``, ``body (a link in it)``), ``at`` locates it
    (``Location``: the argument's name, then each key and index), ``role`` is its
    parameter's (a link inside content counts as ``control``), ``value`` is the value as
    traced (shortened in ``shown``), ``trusted_sources`` and ``untrusted_sources`` name the
    sources that hold it."""

    argument: str
    role: Role
    value: str
    trusted_sources: tuple[str, ...]
    untrusted_sources: tuple[str, ...]
    at: Location = ()

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
    texts). Read whole each time; a conversation keeps a ``SourceIndex`` instead."""
    return SourceIndex(prompts_trusted).sources(messages, system_prompt, tuple(inherited))


class SourceIndex:
    """The sources of a conversation's messages, read once each, as they are appended: a
    turn costs what its new messages cost, not the whole conversation again.

    It also keeps what a value read back must be checked against: the values the model
    wrote into calls that did not all trace (``written``: a record or a draft it made may
    come back in a later result, in a field its tool declares written by the user, and is
    not trusted for it), the secret values results declared (``secrets``), and the
    readers lists results carried (``readers``: each restricts where a send may go)."""

    __slots__ = (
        "_cache",
        "_calls",
        "_last",
        "_seen",
        "_sources",
        "prompts_trusted",
        "readers",
        "secrets",
        "written",
    )

    def __init__(self, prompts_trusted: bool = True) -> None:
        self.prompts_trusted = prompts_trusted
        self._reset()

    def _reset(self) -> None:
        self._sources: list[Source] = []
        self._cache: tuple[Source, ...] = ()
        self._seen = 0
        self._last: Message | None = None
        self._calls: list[ToolCall] = []
        self.written: list[str] = []
        self.secrets: list[str] = []
        self.readers: list[tuple[str, ...]] = []

    def sources(self, messages: Sequence[Message], system_prompt: str | None = None,
                inherited: tuple[Source, ...] = ()) -> tuple[Source, ...]:
        """The sources of ``messages`` after ``inherited`` and the system prompt, reading
        only the messages appended since the last call (all of them again when ``messages``
        is not the list read before, grown)."""
        seen = self._seen
        if seen > len(messages) or (seen and messages[seen - 1] is not self._last):
            self._reset()
        if self._seen < len(messages):
            self.extend(messages[self._seen:])
        head = (*inherited, Source(SYSTEM_PROMPT, system_prompt, True)) if system_prompt \
            else inherited
        return head + self._cache if head else self._cache

    def extend(self, messages: Iterable[Message]) -> None:
        for message in messages:
            self._read(message)
            self._seen += 1
            self._last = message
        self._cache = tuple(self._sources)

    def _read(self, message: Message) -> None:
        out = self._sources
        if message.role == "user":
            # Each text apart: two are never one token by being written side by side.
            own = "\n".join(p.text for p in message.parts
                             if isinstance(p, Text) and p.origin is None)
            if own:
                trusted = self.prompts_trusted
                out.append(Source(USER_PROMPT if trusted else
                                  "the task the delegating model wrote", own, trusted))
            # Outside text given with the prompt (piped to tether run) is not the user's.
            out.extend(Source(f"{OUTSIDE_TEXT} ({p.origin})", p.text, False)
                       for p in message.parts if isinstance(p, Text) and p.origin is not None)
        elif message.role == "assistant":
            self._calls = [p for p in message.parts if isinstance(p, ToolCall)]
        elif message.role == "tool":
            results = [p for p in message.parts if isinstance(p, ToolResult)]
            # The turn's calls run side by side: what any of them wrote may be in the
            # result of any other, so every echo of the turn counts before any result.
            for result in results:
                labels = result.labels
                if labels is None or labels.echoes:
                    for call in self._calls:
                        if call.id == result.call_id:
                            self.written.extend(_written(call))
                    if labels is not None:
                        self.written.extend(labels.written)
            for result in results:
                source = result_source(result, self.written)
                out.append(source)
                self.secrets.extend(source.secrets)
                if source.readers is not None:
                    self.readers.append(source.readers)


def _written(call: ToolCall) -> list[str]:
    try:
        arguments = call.parsed_arguments()
    except ValueError:
        return [call.arguments]  # what the model wrote, whole
    return [str(leaf) for _, leaf in leaves(arguments, "")]


def result_source(result: ToolResult, written: Sequence[str] = ()) -> Source:
    """A tool result as a source, with its labels. A trusted field whose value the model
    wrote into a call that did not all trace (``written``: a value in it, or it in a
    value) is not trusted: a record the model made is only as good as the call that made
    it."""
    labels = result.labels
    name = f"the result of {result.name} ({result.call_id})"
    if labels is None:
        return Source(f"{name}, {UNKNOWN_ORIGIN}", result.content, False, tool=result.name)
    fields = labels.fields
    if fields and written:
        folded = [w for w in map(fold, written) if w]
        fields = tuple(f if not f.trusted or not _echoed(f.value, folded)
                       else FieldLabel(f.path, f.value, "others", f.secret) for f in fields)
    return Source(name, result.content, not labels.untrusted, labels.private, fields,
                  result.name, labels.readers)


def distrusted(fields: Iterable[FieldLabel]) -> tuple[FieldLabel, ...]:
    """The labels a tool that is not believed about itself declared: its secrets alone (a
    secret only adds caution), written by others."""
    return tuple(FieldLabel(f.path, f.value, "others", True) for f in fields if f.secret)


def _echoed(value: str, folded: Sequence[str]) -> bool:
    """Whether a field's ``value`` is, or holds, or is held by, a value the model wrote
    (``folded``), compared folded (``tether.addresses.fold``: case, Unicode forms, white
    space), so a service that canonicalised what it stored does not hand it back as
    another's."""
    value = fold(value)
    return any(_occurs(value, f) or _occurs(f, value) for f in folded)


def result_labels(*, private: bool, from_outside: bool, arguments_traced: bool,
                  delegated: bool = False, fields: Sequence[FieldLabel] = (),
                  written: Sequence[str] = (),
                  readers: tuple[str, ...] | None = None) -> Labels:
    """The labels of a tool result: a trusted source unless it carries outside text, or
    the call's own values were not all traced to trusted text (a tool can echo what it was
    given: ``create_file`` returns its content). A delegation's answer carries the child's
    verdict alone (the child ran under its own gate).

    ``fields`` are the labelled values its tool declared (``tether.fields``): kept, except
    that a user-written field of a call whose values did not all trace may echo them, and
    is of the untrusted rest (a service-written one, an id the service minted, is kept: a
    handle the agent got back from a create call traces). ``written`` are values the call
    wrote beyond its arguments (a child agent's calls'). ``readers`` go with it whatever
    else it is (who may read it, as its source said)."""
    echoes = not arguments_traced
    if echoes:
        fields = [f for f in fields if f.by == "service" or f.secret]
        fields = [f if f.by == "service" else FieldLabel(f.path, f.value, "others", True)
                  for f in fields]
    kept = tuple(fields)
    if from_outside:
        return Labels(private=private, untrusted=True, why="outside text", fields=kept,
                      echoes=echoes, written=tuple(written), readers=readers)
    if echoes and not delegated:
        return Labels(private=private, untrusted=True,
                      why="the call's arguments were not all traced to trusted text",
                      fields=kept, echoes=True, written=tuple(written), readers=readers)
    return Labels(private=private, untrusted=False, fields=kept, echoes=echoes,
                  written=tuple(written), readers=readers)


GATE_LABELS = Labels(untrusted=True, why="written by the gate about a call it did not run")


# --- tracing -----------------------------------------------------------------------------


def trace_value(value: str | int | float, sources: Sequence[Source]) -> tuple[
        tuple[str, ...], tuple[str, ...]]:
    """The names of the trusted and the untrusted sources that hold ``value`` exactly (a
    trusted field of an untrusted source is named with its path), in the sources' order."""
    spellings = _spellings(value)
    if not spellings:
        return (), ()
    hay = _haystack(sources)
    in_text = {i for s in spellings for i in hay.holders(s)}
    in_field = {i: f for s in spellings for i, f in hay.field_holders(s)}
    trusted: list[str] = []
    untrusted: list[str] = []
    for i in sorted(in_text | in_field.keys()):
        source = sources[i]
        if source.trusted:
            if i in in_text:
                trusted.append(source.name)
        elif i in in_field:
            field = in_field[i]
            trusted.append(f"{source.name} at {field.path or '.'} (written by {field.by})")
        else:
            untrusted.append(source.name)
    return tuple(dict.fromkeys(trusted)), tuple(dict.fromkeys(untrusted))


class _Haystack:
    """Where a value is looked for: a turn's source texts, and the trusted fields of its
    untrusted sources, each under an index of the tokens they hold (``_Index``), so tracing
    a value visits only the texts that may hold it, whatever the conversation's length. A
    match is a whole token inside one text, never across two (the rule of ``_occurs``).

    It is never changed once made (another thread may be reading it): ``extended`` makes
    the haystack of more sources from it, reading only the new ones."""

    __slots__ = ("field_index", "fields", "index")

    def __init__(self, sources: Sequence[Source] = ()) -> None:
        self.index = _Index().extended([s.text for s in sources])
        self.fields = _trusted_fields(sources, 0)
        self.field_index = _Index().extended([f.value for _, f in self.fields])

    def extended(self, more: Sequence[Source]) -> _Haystack:
        """The haystack of this one's sources followed by ``more``: the same as one made of
        them all (``_Haystack(sources + more)``), at the cost of ``more`` alone."""
        if not more:
            return self
        hay = _Haystack.__new__(_Haystack)
        hay.index = self.index.extended([s.text for s in more])
        added = _trusted_fields(more, self.index.count)
        hay.fields = self.fields + added
        hay.field_index = self.field_index.extended([f.value for _, f in added])
        return hay

    def holders(self, needle: str) -> list[int]:
        """The positions of the sources whose text holds ``needle`` as a whole token."""
        return self.index.holders(needle)

    def field_holders(self, needle: str) -> list[tuple[int, FieldLabel]]:
        """The trusted fields that hold ``needle`` as a whole token, by their source."""
        return [self.fields[j] for j in self.field_index.holders(needle)]


def _trusted_fields(sources: Sequence[Source], first: int) -> list[tuple[int, FieldLabel]]:
    """The trusted fields of the untrusted ones of ``sources``, each with its source's
    position (``first`` is the position of ``sources[0]``)."""
    return [(first + i, f) for i, source in enumerate(sources) if source.fields
            and not source.trusted for f in source.fields if f.trusted]


# The haystacks of the last few turns' sources (runs side by side each have theirs), the
# latest first, as one tuple: rebound whole (one assignment), so runs in several threads
# never pair one turn's sources with another's haystack.
_KEPT = 4
_kept: tuple[tuple[tuple[Source, ...], _Haystack], ...] = ()


def _haystack(sources: Sequence[Source]) -> _Haystack:
    """The haystack of ``sources``. A turn's sources (one tuple) are joined once; a later
    turn's, which begin with them (the conversation grew), extend their haystack with the
    new sources only. Sources that begin otherwise (the conversation was summarised,
    trimmed or replaced) are joined whole again."""
    global _kept
    if not isinstance(sources, tuple):
        return _Haystack(sources)
    kept = _kept
    for earlier, hay in kept:
        if earlier is sources:
            return hay
    base: tuple[tuple[Source, ...], _Haystack] | None = None
    for entry in kept:
        n = len(entry[0])
        # Equal sources (by value: the system prompt's is made anew each turn) make the same
        # haystack, so a prefix equal to an earlier turn's sources is read from it.
        if n <= len(sources) and sources[:n] == entry[0]:
            base = entry
            break
    hay = _Haystack(sources) if base is None else base[1].extended(sources[len(base[0]):])
    _kept = ((sources, hay), *(e for e in kept if e is not base))[:_KEPT]
    return hay


def trace_id(value: str | int | float, sources: Sequence[Source],
             kinds: Container[str] | None = None) -> tuple[str, ...]:
    """The sources that hold ``value`` as the whole value of a service-written field (an id
    the service minted for a record): how a bare id of an endorsed destructive call must
    trace (a prompt that says "June 13" does not name the file with id 13). With
    ``kinds`` (``kinds_of``: the records the call acts on), only a field of a record of one
    of those kinds counts: its path or its tool's name names one (a file's id, from
    ``list_files`` at ``[0].id``, is not an event's)."""
    spellings = set(_spellings(value))
    return tuple(dict.fromkeys(
        f"{source.name} at {f.path or '.'} (written by service)" for source in sources
        for f in source.fields if f.by == "service" and f.value in spellings and (
            kinds is None or any(k in kinds for k in kinds_of(source.tool, f.path)))))


# Words that name no kind of record: verbs, ids, and the small words between.
_NOT_KINDS = frozenset((
    "id", "ids", "get", "list", "search", "find", "read", "fetch", "show", "by", "the", "of",
    "to", "for", "from", "all", "with", "and", "or", "in", "on", "at", "a", "an", "my",
    "delete", "remove", "cancel", "drop", "erase", "destroy", "purge", "trash", "clear",
    "update", "set", "create", "new", "add", "append", "edit", "move", "rename", "reschedule",
    "share", "send", "post", "put", "patch", "replace", "write", "name", "number", "key",
    "value", "item", "record", "entry", "data", "info", "detail", "one", "single", "user", "day"))
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def kinds_of(*names: object) -> frozenset[str]:
    """The kinds of record ``names`` (a tool's name, a field's path, an argument's steps)
    speak of: their words, singular, lower case, less those that name no kind
    (``delete_file``, ``file_id`` and ``.files[2].id`` all say ``file``)."""
    out: set[str] = set()
    for name in names:
        if not isinstance(name, str):
            continue
        for word in _WORD.findall(name):
            word = _singular(word.lower())
            if word not in _NOT_KINDS and not word.isdigit():
                out.add(word)
    return frozenset(out)


def in_others_text(value: str | int | float, sources: Sequence[Source],
                   words: Container[str] = frozenset()) -> tuple[str, ...]:
    """The sources whose untrusted text names ``value`` as an id: as a whole token with a
    word of ``words`` (the call's kinds and verbs, ``ids_words``) or ``#`` beside it on its
    line ("the file with ID 13", ``"file_id": "13"``, "delete 13"; "June 13" is prose).
    In an untrusted result, the occurrences beyond its trusted fields count (one that names
    it more often than its trusted fields hold it). An id others named may be the
    attacker's choice, even when a service minted it."""
    out: list[str] = []
    for source in sources:
        if source.trusted or not source.text:
            continue
        for spelling in _spellings(value):
            named = _named(spelling, source.text, words)
            if named and named > sum(_count(spelling, f.value) for f in source.fields
                                     if f.trusted):
                out.append(source.name)
                break
    return tuple(out)


def ids_words(*names: object) -> frozenset[str]:
    """The words that, beside a number, name it as the id of a record of a call's tool
    and arguments (``names``): their kinds, the tool's verbs, and ``id`` itself."""
    own = {w.lower() for n in names if isinstance(n, str) for w in _WORD.findall(n)}
    return kinds_of(*names) | own | {"id", "ids", "identifier", "number", "no", "num"}


def _named(needle: str, text: str, words: Container[str]) -> int:
    """How often ``needle`` occurs in ``text`` as a whole token named as an id (see
    ``in_others_text``)."""
    count = 0
    start = text.find(needle) if needle else -1
    while start != -1:
        if _token_at(needle, text, start):
            line_start = max(text.rfind("\n", 0, start) + 1, start - 48)
            end = start + len(needle)
            line_end = text.find("\n", end)
            around = text[line_start:start] + " " + text[end:min(
                end + 24, len(text) if line_end == -1 else line_end)]
            said = {_singular(w.lower()) for w in _WORD.findall(around)}
            if "#" in text[max(line_start, start - 2):start] or any(w in words for w in said):
                count += 1
        start = text.find(needle, start + 1)
    return count


def _singular(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") \
        else word


def is_short(value: str | int | float) -> bool:
    """A value that must trace as a bare id (``trace_id``), never to prose: any number, and
    any string of digits (with the separators a number or a phone number is written with),
    however long: an id, an amount, a day of the month, a phone number in a prompt."""
    if isinstance(value, int | float):
        return True
    text = value.strip()
    return any(c.isdigit() for c in text) and all(
        c.isdigit() or c in ".,-+ ()" for c in text)


def holds_secret(text: str, secret: str) -> bool:
    """Whether ``text`` holds ``secret`` verbatim: anywhere in it (six characters or
    more), as a whole token (a shorter one, which would otherwise be found everywhere)."""
    return secret in text if len(secret) >= 6 else _occurs(secret, text)


def in_prompt(text: str, sources: Sequence[Source]) -> bool:
    """Whether ``text`` occurs whole, verbatim, in the user's own prompt (a trusted one)."""
    return any(s.trusted and s.name == USER_PROMPT and _occurs(text, s.text) for s in sources)


def trace(argument: str, role: Role, value: str | int | float,
          sources: Sequence[Source], at: Location = ()) -> Trace:
    trusted, untrusted = trace_value(value, sources)
    return Trace(argument, role, str(value), trusted, untrusted, at)


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


# --- a call's values -----------------------------------------------------------------------


KEY = " (a key)"


def leaves(value: Any, path: str, names: Container[Any] = frozenset()) -> Iterator[
        tuple[str, str | int | float]]:
    """The strings and numbers inside an argument, each with its path. An object's keys
    are values too (a model can put an address in a key as well as in a value), each with
    its object's path and ``(a key)``, unless ``names`` holds it: the names a tool's schema
    declares for its properties are the tool author's words, not values. Booleans and nulls
    are left out (a flag says yes or no; it names nothing), as are empty strings."""
    for _, where, leaf in located(value, path, (path,), names):
        yield where, leaf


def located(value: Any, path: str, at: Location, names: Container[Any] = frozenset()
            ) -> Iterator[tuple[Location, str, str | int | float]]:
    """``leaves``, each also with its ``Location`` (``at`` is the argument's own)."""
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, str):
        if value:
            yield at, path, value
    elif isinstance(value, int | float):
        yield at, path, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if key not in names:
                yield from located(key, path + KEY, (*at, KeyOf(key)), names)
            yield from located(item, f"{path}.{key}", (*at, str(key)), names)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from located(item, f"{path}[{i}]", (*at, i), names)
    else:
        yield at, path, str(value)


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
    for name, _, path, leaf in located_values(arguments, names):
        yield name, path, leaf


def located_values(arguments: Mapping[str, Any], names: Container[Any]) -> Iterator[
        tuple[str, Location, str, str | int | float]]:
    """``values``, each also with its ``Location`` (an undeclared argument name's is
    ``(KeyOf(name),)``)."""
    for name, value in arguments.items():
        if name not in names:
            yield name, (KeyOf(name),), NAME, name
        yield from ((name, *rest) for rest in located(value, name, (name,), names))


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
    for name, at, path, leaf in located_values(arguments, declared):
        role = roles.get(name, "control") if path != NAME else "control"
        if role != "content":
            out.append(trace(path, role, leaf, sources, at))
        elif sends and isinstance(leaf, str):
            out.extend(trace_address(f"{path} (an address in it)", place, sources)
                       for place in addresses(leaf))
    return out
