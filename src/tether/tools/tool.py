"""A tool as the loop and the gate see it: one shape whatever its source.

A ``Tool`` is a spec (``tether.tools.spec``), the capabilities it declares, an argument
validator and an async handler. Every tool, whatever its source (a Python function, an MCP
server, a built-in, a sub-agent, the answering tool of structured output), has this one
shape, so the loop passes all of them through one gate. Here too: what a running tool
knows of its call (``ToolContext``, ``RunScope``), what a handler may return
(``ToolOutput``), and the one rule for argument keys a schema does not name.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeAlias

from tether.approval import Approver
from tether.bounds import Spend
from tether.errors import ToolError
from tether.events import Event
from tether.messages import FieldLabel, Image, Usage
from tether.provenance import Source
from tether.settings import AgentSettings
from tether.tools.spec import ToolSpec
from tether.tools.threads import start_in_daemon_thread
from tether.trust import NO_CAPABILITIES, Capabilities, SecurityConfig, Taint

if TYPE_CHECKING:
    from typing_extensions import TypeVar

    # A host's dependencies (``Agent[DepsT]``, ``ToolContext[DepsT]``); ``None`` when not
    # given, so a bare ``Agent`` or ``ToolContext`` is one without (PEP 696).
    DepsT = TypeVar("DepsT", default=None)
else:
    from typing import TypeVar

    DepsT = TypeVar("DepsT")  # the default is for type checkers (typing has it from 3.13)


class ArgumentError(ValueError):
    """Arguments that do not fit a tool's schema; the message is shown to the model."""


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """What a handler may return instead of a plain value, for full control of the result.

    ``from_outside`` says whether the content carries text from outside: the model is then
    shown it as untrusted data, provenance counts it as untrusted, and it taints the
    conversation, all three from this one answer (``tether.trust.received``), whatever the
    tool declares; ``None`` means "as the tool declares" (``untrusted_input``).
    ``usage`` is model usage spent inside the tool (a sub-agent), added to the run's.
    ``taint`` is exposure the call brought back beyond what the tool declares (a
    sub-agent's own taint); it joins the conversation's, which it can only grow.
    ``fields`` are the result's labelled values (``tether.fields.fields_of``: the ones its
    fields declare written by the user or the service, and the secret ones); a plain value
    a handler returns is read for them itself. ``written`` are values the call wrote beyond
    its arguments (a sub-agent's calls'): read back later, they are not trusted.
    ``images`` are images the result carries beside its text (an MCP tool's image
    content): they reach a model that accepts images, with the trust of the text.
    ``readers`` are who may read the result, as its source said (an MCP server's
    ``_meta.ifc`` readers list: ``tether.mcp.labels``); ``None``: no list. A send while the
    conversation holds it goes without asking only to a destination among them.
    """

    content: str
    is_error: bool = False
    structured: Any = None
    from_outside: bool | None = None
    usage: Usage | None = None
    taint: Taint | None = None
    fields: tuple[FieldLabel, ...] = ()
    written: tuple[str, ...] = ()
    images: tuple[Image, ...] = ()
    readers: tuple[str, ...] | None = None


class ToolHost(Protocol):
    """What a tool's call may read of the host running it (``RunScope.agent``). The engine's
    ``tether.run.host.RunHost`` is one, and says the rest (the model, the tools,
    ``spawn``...): it sits on a floor above the tools, which name it by this much."""

    @property
    def settings(self) -> AgentSettings:
        """What bounds and governs the runs."""
        ...

    @property
    def approver(self) -> Approver | None:
        """Who answers the gate's questions (None: nobody)."""
        ...


@dataclass(frozen=True, slots=True)
class RunScope:
    """The run a tool call belongs to: what a tool that runs an agent of its own (a
    delegation) needs to run it inside this one.

    ``agent`` is the host running the call (a ``ToolHost``: its settings and approver; the
    engine's is a ``RunHost``, an ``Agent`` is one);
    ``path`` names the delegating calls down to this one, outermost first, this call's id
    last; ``interrupt`` stops this run (and should stop what the tool runs); ``spend`` is
    what this run has spent, chained to the runs above it: a child's ``Spend`` is made
    under it, so the budgets of every run above cover the child's usage as it happens;
    ``deps`` are the host's dependencies given to the run (``agent.run(..., deps=...)``),
    which a delegated run is given too.
    """

    agent: ToolHost
    path: tuple[str, ...]
    interrupt: asyncio.Event | None
    spend: Spend
    deps: Any = None


@dataclass(slots=True)
class ToolContext(Generic[DepsT]):
    """What a running tool may know about its call. Declare a parameter of this type in a
    ``@tool`` function to receive it; it is not part of the model-visible schema.

    ``workspace`` and ``security`` are the running agent's; ``emit`` hands an event to the
    run's listener (a sub-agent's events travel this way); ``run`` is the run the call
    belongs to, everything delegation needs (``None`` when a host calls a handler itself);
    ``sources`` are, for a delegation, the texts the model had seen when the call ran, with
    their labels (it hands the trusted ones to its child); other tools get none. ``deps``
    are the host's dependencies the run was given (``agent.run(prompt, deps=...)``), typed
    as the tool declares them: ``ctx: ToolContext[MyDeps]``. They reach the tool and
    nothing else (not the model, the session store, telemetry or a durable run's
    history). Every field is typed: there is no bag of untyped extras to fish things out
    of."""

    call_id: str
    tool_name: str
    taint: Taint
    workspace: Path
    security: SecurityConfig
    emit: Callable[[Event], Awaitable[None]] | None = None
    run: RunScope | None = None
    sources: tuple[Source, ...] = ()
    deps: DepsT = None  # type: ignore[assignment]  # None when the run was given none


Handler = Callable[[dict[str, Any], ToolContext], Awaitable[Any]]
Validator = Callable[[Any], dict[str, Any]]
Correction = Callable[[str], str]
# Why a call with these (validated) arguments needs no approval, or None (see Tool.unasked).
Waiver = Callable[[Mapping[str, Any]], str | None]


class ThreadedHandler:
    """The handler of a sync function's tool: ``fn`` runs in a daemon thread
    (``tether.tools.threads``). Called, it is a coroutine as any handler's; ``start`` gives the
    thread's future itself, which is what the loop waits on (no task around it)."""

    __slots__ = ("fn", "keywords")

    def __init__(self, fn: Callable[..., Any],
                 keywords: Callable[[dict[str, Any], ToolContext], dict[str, Any]]) -> None:
        self.fn = fn
        self.keywords = keywords  # the call's arguments as fn's keyword arguments

    async def __call__(self, arguments: dict[str, Any], ctx: ToolContext) -> Any:
        return await self.start(arguments, ctx)

    def start(self, arguments: dict[str, Any], ctx: ToolContext) -> asyncio.Future[Any]:
        """``fn`` started in a thread (in a copy of the current context), as its future."""
        return start_in_daemon_thread(self.fn, **self.keywords(arguments, ctx))

    def __repr__(self) -> str:
        return f"ThreadedHandler({getattr(self.fn, '__qualname__', self.fn)!r})"


# Where a tool comes from: "python", "builtin", "mcp", "subagent", "output" (the answering
# tool of structured output), or a host's own word.
ToolOrigin: TypeAlias = str


@dataclass(frozen=True, slots=True, init=False)
class Tool:
    """A callable tool: spec + capabilities + validator + async handler.

    ``cache_approval`` says whether an approver may allow it for the whole session.
    ``read_only`` overrides the derived rule (not destructive and no approval needed);
    MCP tools set it from ``readOnlyHint`` only. ``spec_from_outside`` says the spec (name,
    title, description, schema) was written by someone not trusted (an untrusted MCP
    server): offering the tool shows the model untrusted text. ``origin`` is the kind of
    place it comes from, ``server`` the MCP server that offers it. ``on_invalid``, when
    set, words what the model is told when a call's arguments are invalid (given the
    error); otherwise the gate's standard correction is. ``idempotent`` says running the call
    twice does no more than running it once: a durable engine (``tether.temporal``) may then
    run it again when the worker running it died; otherwise such a call comes back to the
    model as "may or may not have run". Off by default.

    ``content_params`` name the parameters that only carry content (a body, a subject, a
    file's text); ``destination_params`` the ones that say where a send goes (a recipient,
    a URL, an account). Every other parameter is control (what is acted on, how): the
    provenance gate traces destinations and control values, and the addresses written in
    a send's content. A tool that declares neither (an MCP tool) has only control
    parameters: safe by default.

    ``closed_destinations`` says where its sends go is a closed directory inside the user's
    own workspace (a channel or a direct message in the user's chat, never an email
    address, a URL or an account): a destination chosen from untrusted lists may stand when
    the whole content is the user's own words (see docs/security.md).
    ``returns_secrets`` says its results may hold values declared secret
    (``tether.fields.Secret``): a send in the same turn is judged as if it held them (it
    could, written by a model that knew them in advance).
    ``unasked``, given a call's validated arguments, names why that call needs no person's
    approval (None: it asks as the tool does): the tool's own vetted rule, such as a
    confined shell's read-only command line (``tether.builtins.shell_policy``). It waives
    only the tool's own need for approval, and only for a call every check before has let
    run: provenance, the trifecta and the permission mode still judge it.

    ``defer`` says when the tool is kept out of a request until the model finds it with
    ``search_tools`` (``tether.tools.search``): ``True`` always, ``False`` never, ``None``
    (the default) when the run offers more tools than ``defer_after``, unless it is a
    built-in, a delegation or a structured answer's tool.
    """

    spec: ToolSpec
    handler: Handler
    capabilities: Capabilities
    validator: Validator | None
    cache_approval: bool
    origin: ToolOrigin
    read_only_hint: bool | None
    server: str | None
    spec_from_outside: bool
    on_invalid: Correction | None
    idempotent: bool
    content_params: tuple[str, ...]
    destination_params: tuple[str, ...]
    closed_destinations: bool
    returns_secrets: bool
    unasked: Waiver | None
    defer: bool | None

    def __init__(
        self,
        spec: ToolSpec,
        handler: Handler,
        capabilities: Capabilities = NO_CAPABILITIES,
        validator: Validator | None = None,
        cache_approval: bool = True,
        origin: ToolOrigin = "python",
        read_only_hint: bool | None = None,
        server: str | None = None,
        spec_from_outside: bool = False,
        on_invalid: Correction | None = None,
        idempotent: bool = False,
        *,
        content_params: Iterable[str] = (),
        destination_params: Iterable[str] = (),
        closed_destinations: bool = False,
        returns_secrets: bool = False,
        unasked: Waiver | None = None,
        defer: bool | None = None,
    ) -> None:
        # Frozen: set once, here (dataclasses.replace passes every field by its name).
        put = object.__setattr__
        put(self, "spec", spec)
        put(self, "handler", handler)
        put(self, "capabilities", capabilities)
        put(self, "validator", validator)
        put(self, "cache_approval", cache_approval)
        put(self, "origin", origin)
        put(self, "read_only_hint", read_only_hint)
        put(self, "server", server)
        put(self, "spec_from_outside", spec_from_outside)
        put(self, "on_invalid", on_invalid)
        put(self, "idempotent", idempotent)
        content, destinations = tuple(content_params), tuple(destination_params)
        if isinstance(content_params, str) or isinstance(destination_params, str):
            raise ToolError(f"tool {spec.name}: content_params and destination_params are "
                            f"lists of parameter names")
        both = set(content) & set(destinations)
        if both:
            raise ToolError(f"tool {spec.name}: {', '.join(sorted(both))} cannot be both "
                            f"content and a destination")
        put(self, "content_params", content)
        put(self, "destination_params", destinations)
        put(self, "closed_destinations", closed_destinations)
        put(self, "returns_secrets", returns_secrets)
        put(self, "unasked", unasked)
        put(self, "defer", defer)

    @property
    def delegates(self) -> bool:
        """Whether calling the tool hands a task to a sub-agent, which acts only through
        its own calls (each passing its own gate)."""
        return self.origin == "subagent"

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def believed(self) -> bool:
        """Whether what the tool declares of itself (its schema's closed vocabularies, its
        results' field labels) is believed: not an untrusted MCP server's."""
        return not self.spec_from_outside

    def parameter_role(self, name: str) -> Literal["content", "destination", "control"]:
        """What parameter ``name`` does: carries ``content``, says where a send goes
        (``destination``), or anything else (``control``, also for undeclared ones)."""
        if name in self.content_params:
            return "content"
        if name in self.destination_params:
            return "destination"
        return "control"

    @property
    def needs_approval(self) -> bool:
        # destructive implies approval: a tool cannot declare itself out of the gate.
        return self.spec.needs_approval or self.capabilities.destructive

    @property
    def read_only(self) -> bool:
        if self.capabilities.destructive or self.needs_approval:
            return False
        return self.read_only_hint if self.read_only_hint is not None else True

    def validate(self, arguments: Any) -> dict[str, Any]:
        """Validated arguments, or ``ArgumentError`` with a message for the model.

        Keys the schema does not name are dropped first, unless it says what becomes of
        them (``unknown_arguments``): ``additionalProperties: false`` makes them an error
        the model can correct. What this returns is all that is traced, approved and run."""
        if not isinstance(arguments, dict):
            raise ArgumentError("arguments must be a JSON object")
        unknown = unknown_arguments(self.spec.schema_json, arguments)
        if unknown.forbidden:
            raise ArgumentError(f"{_listed('unknown argument', unknown.keys)}: "
                                f"{self.name} {_takes(self.spec.schema_json)}")
        if unknown.keys:
            arguments = {k: v for k, v in arguments.items() if k not in unknown.keys}
        try:
            return self.validator(arguments) if self.validator is not None else arguments
        except ArgumentError as e:
            if not unknown.keys:
                raise
            # A misspelt parameter is the likeliest reason a call lacks one: say so.
            raise ArgumentError(f"{e}; {_listed('ignored argument', unknown.keys)}: "
                                f"{self.name} {_takes(self.spec.schema_json)}") from None

    @classmethod
    def from_schema(
        cls,
        name: str,
        description: str,
        schema: dict[str, Any],
        handler: Handler,
        *,
        title: str | None = None,
        needs_approval: bool = False,
        capabilities: Capabilities = NO_CAPABILITIES,
        origin: ToolOrigin = "python",
        **kw: Any,
    ) -> Tool:
        """A tool declared by a raw JSON Schema, validated with ``jsonschema``."""
        spec = ToolSpec(name, description, schema, title, needs_approval)
        return cls(spec, handler, capabilities, json_schema_validator(schema), origin=origin,
                   **kw)


@dataclass(frozen=True, slots=True)
class UnknownArguments:
    """The top-level argument keys a tool's schema does not name (``keys``, in the order
    given), and whether the schema forbids them (``forbidden``) or leaves them to be
    dropped."""

    keys: tuple[str, ...] = ()
    forbidden: bool = False


NO_UNKNOWN_ARGUMENTS = UnknownArguments()

# Schema words that say more about an object's keys than its ``properties`` list: where one
# is used, which keys are known is the validator's to say, and nothing is dropped.
_SAYS_MORE = frozenset({"patternProperties", "allOf", "anyOf", "oneOf", "not", "$ref",
                        "$dynamicRef", "if", "then", "else", "dependentSchemas", "dependencies",
                        "propertyNames"})


def unknown_arguments(schema: Mapping[str, Any], arguments: Mapping[str, Any]
                      ) -> UnknownArguments:
    """The keys of ``arguments`` that ``schema`` does not name, by one rule for every tool.

    A schema that lists its ``properties`` names its parameters; a key it lists in neither
    ``properties`` nor ``required`` is unknown. Unknown keys are dropped (a small model adds
    stray keys, and a Python function cannot take them), unless the schema's author said
    what becomes of them: ``additionalProperties: false`` (or ``unevaluatedProperties:
    false``) forbids them, ``true`` or a schema accepts them. A schema that lists no
    ``properties``, or says more about its keys (``patternProperties``, ``allOf``, a
    ``$ref``...), names no unknown key here: its validator judges every key."""
    if not isinstance(schema, Mapping):
        return NO_UNKNOWN_ARGUMENTS
    properties = schema.get("properties")
    if not isinstance(properties, Mapping) or not _SAYS_MORE.isdisjoint(schema):
        return NO_UNKNOWN_ARGUMENTS
    required = schema.get("required")
    names = required if isinstance(required, list) else ()
    keys = tuple(k for k in arguments if k not in properties and k not in names)
    if not keys:
        return NO_UNKNOWN_ARGUMENTS
    extra = schema.get("additionalProperties", schema.get("unevaluatedProperties"))
    if extra is False:
        return UnknownArguments(keys, forbidden=True)
    if extra is not None:  # true, or a schema the extra keys must fit: the author's word
        return NO_UNKNOWN_ARGUMENTS
    return UnknownArguments(keys)


def _listed(what: str, keys: Sequence[str]) -> str:
    shown = ", ".join(repr(k) for k in keys[:10]) + (", ..." if len(keys) > 10 else "")
    return f"{what}{'s' if len(keys) > 1 else ''} {shown}"


def _takes(schema: Mapping[str, Any]) -> str:
    names = list(schema.get("properties") or ())
    if not names:
        return "takes no arguments"
    return f"takes {', '.join(names[:20])}{', ...' if len(names) > 20 else ''}"


def json_schema_validator(schema: dict[str, Any]) -> Validator:
    """A validator for a raw JSON Schema. ``jsonschema`` is imported on first use only."""
    compiled: list[Any] = []

    def validate(arguments: Any) -> dict[str, Any]:
        if not compiled:
            import jsonschema

            cls = jsonschema.validators.validator_for(
                schema, default=jsonschema.Draft202012Validator)
            try:
                cls.check_schema(schema)
            except jsonschema.SchemaError as e:
                raise ArgumentError(f"the tool's own schema is invalid: {e.message}") from None
            compiled.append(cls(schema))
        if not isinstance(arguments, dict):
            raise ArgumentError("arguments must be a JSON object")
        errors = sorted(compiled[0].iter_errors(arguments), key=lambda e: list(e.path))
        if errors:
            raise ArgumentError("; ".join(_describe_jsonschema_error(e) for e in errors[:5]))
        return arguments

    return validate


def _describe_jsonschema_error(error: Any) -> str:
    where = "/".join(str(p) for p in error.path)
    return f"{where}: {error.message}" if where else str(error.message)


