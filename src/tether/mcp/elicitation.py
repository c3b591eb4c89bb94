"""A server's request for input from the person (MCP elicitation), through the host's
approver.

A server may ask, while one of its tools runs, for a form to be filled in or a URL to be
opened. tether never lets the model answer: the request goes to the approver of the run
whose call is in flight (``tether.approval.elicit``), typed (``ElicitationRequest``: the
server's name and trust, its message, the form's fields read from the schema it sent), and
whatever goes wrong is a decline. What the person types is data sent to that server, so
the gate's rule for sends applies to it (``send_rule``): an untrusted server asking while
the conversation holds private data is a send from an armed conversation (refused under
``trifecta = "block"``, asked with tether's warning otherwise). Each outcome is a
``Notice`` of the run (never the values typed).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from tether.approval import (
    FORMATS,
    INTERRUPTED,
    ElicitationAnswer,
    ElicitationRequest,
    FormField,
    elicit,
)
from tether.display import inline
from tether.events import Notice
from tether.tools.tool import ToolContext
from tether.trust import Taint

if TYPE_CHECKING:
    import mcp_types
    from mcp.client.session import ClientRequestContext

MAX_FIELDS = 40  # a form longer than this is not one a person fills in at a prompt
# Requests one call may put to the person; more are declined unasked: a server must not
# wear a person down into saying yes (prompt fatigue).
MAX_ASKS_PER_CALL = 3

# Words that name a credential: a form must not ask for one (the specification: "Servers
# MUST NOT use form mode elicitation to request sensitive information"), so a field that
# looks like one is flagged to the person. Matched on whole words of the field's name,
# title and description, case and separators ignored.
_SECRET_WORDS = re.compile(
    r"\b(pass ?word|passwd|pass ?phrase|pass ?code|pin|secret|token|api ?key|access ?key|"
    r"private ?key|otp|one ?time ?(?:code|password)|2fa|mfa|verification ?code|"
    r"credit ?card|card ?number|cvv|cvc|ssn|social ?security|seed ?phrase|recovery ?phrase|"
    r"credentials?)\b")


class FormError(ValueError):
    """A requested schema tether cannot show as a form; the request is declined."""


def form_fields(schema: Mapping[str, Any]) -> tuple[FormField, ...]:
    """The fields of a form from the schema a server sent: an object whose properties are
    flat strings, numbers, booleans, and enums (single or multiple). Raises ``FormError``
    for anything else (nesting, another type, a malformed bound), so nothing a person is
    asked is guessed."""
    if not isinstance(schema, Mapping) or schema.get("type", "object") != "object":
        raise FormError("the form is not an object")
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    if not isinstance(properties, Mapping) or not isinstance(required, list):
        raise FormError("the form's properties or required list are malformed")
    if len(properties) > MAX_FIELDS:
        raise FormError(f"the form has more than {MAX_FIELDS} fields")
    return tuple(_field(str(name), spec, name in required) for name, spec in properties.items())


def _field(name: str, spec: Any, required: bool) -> FormField:
    if not isinstance(spec, Mapping):
        raise FormError(f"field {name!r} is not a schema")
    kind = spec.get("type")
    common: dict[str, Any] = {"name": name, "required": required,
                              "title": _text(spec, "title"),
                              "description": _text(spec, "description")}
    if kind == "boolean":
        return _checked(FormField(kind="boolean", default=spec.get("default"), **common))
    if kind in ("integer", "number"):
        return _checked(FormField(kind=kind, default=spec.get("default"),
                                  minimum=_number(spec, "minimum"),
                                  maximum=_number(spec, "maximum"), **common))
    if kind == "array":
        items = spec.get("items")
        if not isinstance(items, Mapping):
            raise FormError(f"field {name!r}: a list without items")
        choices, titles = _choices(name, items)
        return _checked(FormField(kind="choices", choices=choices, choice_titles=titles,
                                  default=spec.get("default"),
                                  min_items=_count(spec, "minItems"),
                                  max_items=_count(spec, "maxItems"), **common))
    if kind != "string":
        raise FormError(f"field {name!r} has the type {kind!r}, which a form cannot ask for")
    if "enum" in spec or "oneOf" in spec:
        choices, titles = _choices(name, spec)
        return _checked(FormField(kind="choice", choices=choices, choice_titles=titles,
                                  default=spec.get("default"), **common))
    form = spec.get("format")
    if form is not None and form not in FORMATS:
        raise FormError(f"field {name!r} has the format {form!r}")
    return _checked(FormField(kind="string", default=spec.get("default"), format=form,
                              min_length=_count(spec, "minLength"),
                              max_length=_count(spec, "maxLength"), **common))


def _checked(f: FormField) -> FormField:
    if f.default is not None and f.problem(f.default) is not None:
        raise FormError(f"field {f.name!r}: its default does not fit it")
    return f


def _choices(name: str, spec: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A choice's values and their labels, from ``enum`` (with the legacy ``enumNames``),
    ``oneOf`` or ``anyOf`` of ``{const, title}``."""
    listed = spec.get("enum")
    if listed is not None:
        labels = spec.get("enumNames")
        if not isinstance(listed, list) or not listed or \
                not all(isinstance(v, str) for v in listed):
            raise FormError(f"field {name!r}: its choices are not a list of strings")
        if labels is not None and (not isinstance(labels, list) or len(labels) != len(listed)
                                   or not all(isinstance(v, str) for v in labels)):
            raise FormError(f"field {name!r}: its choices' names do not match them")
        return _distinct(name, tuple(listed)), tuple(labels or ())
    options = spec.get("oneOf", spec.get("anyOf"))
    if not isinstance(options, list) or not options:
        raise FormError(f"field {name!r}: no choices")
    values, titles = [], []
    for option in options:
        if not isinstance(option, Mapping) or not isinstance(option.get("const"), str):
            raise FormError(f"field {name!r}: a choice without a string value")
        values.append(option["const"])
        titles.append(str(option.get("title") or option["const"]))
    return _distinct(name, tuple(values)), tuple(titles)


def _distinct(name: str, values: tuple[str, ...]) -> tuple[str, ...]:
    if len(set(values)) != len(values):
        raise FormError(f"field {name!r}: a choice is listed twice")
    return values


def _text(spec: Mapping[str, Any], key: str) -> str | None:
    value = spec.get(key)
    return value if isinstance(value, str) else None


def _number(spec: Mapping[str, Any], key: str) -> float | None:
    value = spec.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FormError(f"{key} is not a number")
    return float(value)


def _count(spec: Mapping[str, Any], key: str) -> int | None:
    value = spec.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise FormError(f"{key} is not a count")
    return value


# Latin look-alikes from Cyrillic and Greek (fullwidth letters NFKC folds itself): a
# server must not dodge the warning by writing "Pаssword" with a Cyrillic a.
_CONFUSABLES = str.maketrans(
    "аАвВсСеЕһНніІјЈкКмМоОрРѕЅтТуУҮхХԁԛԝӏɑ"
    "αΑβΒεΕζΖηΗιΙκΚμΜνΝοΟρΡτΤυΥχΧ",
    "aABBcCeEhHHiIjJkKMMoOpPsSTTyYYxXdqwla"
    "aABBeEZZnHiIkKuMvNoOpPtTuYxX")


def _folded(text: str) -> str:
    """``text`` as the secret-word check reads it: compatibility forms folded (NFKC:
    fullwidth and styled letters), look-alike Cyrillic and Greek letters read as Latin,
    invisible characters (zero-width, soft hyphen, bidi controls) dropped."""
    text = unicodedata.normalize("NFKC", text).translate(_CONFUSABLES)
    if text.isascii():
        return text
    return "".join(c for c in text if unicodedata.category(c) != "Cf")


def looks_secret(f: FormField) -> bool:
    """Whether a field's name, title or description names a credential, however its
    letters are spelt (``_folded``)."""
    words = _folded(" ".join(filter(None, (f.name, f.title, f.description))))
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", words).lower()
    return _SECRET_WORDS.search(re.sub(r"[_\-.]+", " ", spaced)) is not None


SendVerdict = Literal["ask", "refuse"]


def send_rule(trusted: bool, taint: Taint, trifecta: str) -> tuple[SendVerdict, str | None]:
    """The gate's rule for what a person would send to a server in answer: whether the
    person may be asked, and tether's warning. A trusted server gets the answer as a
    trusted destination (no model chose the values: a person typed them). An untrusted
    server is an outside destination: while the conversation holds private data (it
    always holds the server's untrusted text), an answer is a send from an armed
    conversation, refused under ``trifecta = "block"`` and asked with a warning under
    ``"ask"`` and ``"allow"``."""
    if trusted or not taint.private:
        return "ask", None
    why = ("this conversation holds private data and untrusted text, and the answer goes to "
           "an untrusted server")
    if trifecta == "block":
        return "refuse", f"{why} (security.trifecta = \"block\")"
    return "ask", f"{why}: type nothing you would not post publicly"


@dataclass(slots=True)
class _InFlight:
    context: ToolContext
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    asked: int = 0  # requests of this call so far, in every round
    # One request of a call before the person at a time, in the order they came: the
    # current revision asks several at once (one round's requests are answered side by
    # side), and so may a server of the handshake era.
    turn: asyncio.Lock = field(default_factory=asyncio.Lock)


class _Asker(Protocol):
    """The server that asks, as its requests name it."""

    @property
    def name(self) -> str: ...

    @property
    def trusted(self) -> bool: ...


class Elicitations:
    """One server's elicitation requests, answered for the runs whose calls are in flight.

    A request arrives while a call of the server runs (``during``, around each call); it
    goes to that run's approver, with the conversation's taint at the call. With calls of
    several runs in flight and different approvers, nobody can tell whose person is meant:
    the request is declined. A request with no call in flight (while starting, listing, or
    between calls) is declined too. A prompt ends when its call does (the call's own
    ``timeout_secs`` runs while the person answers) or when the run is interrupted."""

    def __init__(self, server: _Asker) -> None:
        self._server = server
        self._calls: list[_InFlight] = []

    @contextlib.contextmanager
    def during(self, context: ToolContext | None) -> Iterator[None]:
        if context is None:
            yield
            return
        entry = _InFlight(context)
        self._calls.append(entry)
        try:
            yield
        finally:
            entry.ended.set()
            self._calls.remove(entry)

    async def callback(
        self, context: ClientRequestContext, params: mcp_types.ElicitRequestParams,
    ) -> mcp_types.ElicitResult:
        """The SDK's elicitation callback: the answer as the protocol carries it."""
        import mcp_types

        try:
            answer = await self.answer(params)
        except Exception as e:  # whatever a hostile request breaks: a decline, never a crash
            answer = ElicitationAnswer.decline(f"{type(e).__name__}")
        if answer.action != "accept" or getattr(params, "mode", "form") == "url":
            return mcp_types.ElicitResult(action=answer.action)
        return mcp_types.ElicitResult(action="accept", content=dict(answer.values))

    async def answer(self, params: mcp_types.ElicitRequestParams) -> ElicitationAnswer:
        calls = list(self._calls)
        url: str | None = getattr(params, "url", None)
        what = "to open a URL" if url is not None else "for input"
        if not calls:
            return ElicitationAnswer.decline("no call of the server is running")
        approvers = {id(_approver(c.context)) for c in calls}
        if len(approvers) > 1:
            return await self._told(calls[-1].context, what, ElicitationAnswer.decline(
                "calls of several runs are in flight; whose person to ask is unknown"))
        entry = calls[-1]
        context = entry.context
        entry.asked += 1
        if entry.asked > MAX_ASKS_PER_CALL:
            declined = ElicitationAnswer.decline(
                f"not asked: the server asked more than {MAX_ASKS_PER_CALL} times during "
                f"one call")
            # Told once: a server that asks a thousand times cannot flood the run's events.
            if entry.asked > MAX_ASKS_PER_CALL + 1:
                return declined
            return await self._told(context, what, declined)
        taint = Taint()
        for c in calls:
            taint = taint | c.context.taint
        fields: tuple[FormField, ...] = ()
        warnings: list[str] = []
        if url is None:
            try:
                fields = form_fields(getattr(params, "requested_schema", {}))
            except FormError as e:
                return await self._told(context, what, ElicitationAnswer.decline(str(e)))
            # The server's names, quoted: they cannot continue tether's sentence.
            secret = [inline(repr(f.name)) for f in fields if looks_secret(f)]
            if secret:
                warnings.append(
                    f"the server asks for what looks like a secret ({', '.join(secret)}); "
                    f"MCP servers must not ask for one in a form: decline unless you are sure")
        trusted = self._server.trusted
        verdict, caution = send_rule(trusted, taint, context.security.trifecta)
        if verdict == "refuse":
            return await self._told(context, what, ElicitationAnswer.decline(
                f"not asked: {caution}"))
        if caution:
            warnings.append(caution)
        request = ElicitationRequest(
            server=self._server.name, trusted=trusted, message=str(params.message),
            fields=fields, url=url, warning="; ".join(warnings) or None, taint=taint)
        run = context.run
        timeout = run.agent.settings.approval_timeout_secs if run is not None else None
        # The prompt ends when the call ends or the run is interrupted, whichever is first.
        stop = asyncio.Event()
        watchers = [asyncio.ensure_future(e.wait()) for e in
                    (entry.ended, run.interrupt if run is not None else None) if e is not None]
        for watcher in watchers:
            watcher.add_done_callback(lambda _: stop.set())
        try:
            async with entry.turn:
                answer = await elicit(_approver(context), request, timeout, stop)
        finally:
            for watcher in watchers:
                watcher.cancel()
        if answer.reason == INTERRUPTED and entry.ended.is_set() and \
                not (run is not None and run.interrupt is not None and run.interrupt.is_set()):
            answer = ElicitationAnswer.cancel("the call ended before the person answered")
        return await self._told(context, what, answer)

    async def _told(self, context: ToolContext, what: str,
                    answer: ElicitationAnswer) -> ElicitationAnswer:
        """``answer``, with a notice of it for the run (what was sent, never the values)."""
        if context.emit is not None:
            if answer.action == "accept":
                sent = ", ".join(answer.values) or "consent"
                text = f"answered: sent {inline(sent)}"
            else:
                done = "declined" if answer.action == "decline" else "cancelled"
                text = done + (f": {inline(answer.reason)}" if answer.reason
                               else " by the person")
            await context.emit(Notice(
                "info" if answer.action == "accept" else "warning",
                f"MCP server {self._server.name!r} asked {what}; {text}.",
                source=f"mcp:{self._server.name}"))
        return answer


def _approver(context: ToolContext) -> object:
    """The approver of the run the call belongs to (None: a host called the tool itself,
    or a durable run's stand-in: nobody to ask)."""
    return context.run.agent.approver if context.run is not None else None
