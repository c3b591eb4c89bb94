"""Tools: their declaration (``ToolSpec``), what they can do, and ``@tool``.

A ``Tool`` is a spec, the capabilities it declares, an argument validator and an async
handler. Every tool, whatever its source (a Python function, an MCP server, a built-in, a
sub-agent), has this one shape, so the agent loop passes all of them through one gate.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import (
    TYPE_CHECKING,
    Any,
    Literal,
    Protocol,
    TypeAlias,
    overload,
    runtime_checkable,
)

from tether.errors import ToolError
from tether.provenance import Source
from tether.tools.threads import start_in_daemon_thread
from tether.trust import NO_CAPABILITIES, Capabilities, SecurityConfig, Taint

if TYPE_CHECKING:
    from tether.agent import Agent
    from tether.bounds import Spend
    from tether.events import Event
    from tether.messages import Usage

__all__ = [
    "ArgumentError",
    "Capabilities",
    "ManagedToolset",
    "RunScope",
    "Tool",
    "ToolContext",
    "ToolOutput",
    "ToolSpec",
    "Toolset",
    "UnknownArguments",
    "humanize_tool_name",
    "tool",
    "unknown_arguments",
]

_SEPARATORS = re.compile(r"[_\-\s]+")


@functools.lru_cache(maxsize=1024)  # asked for each call's events; names repeat
def humanize_tool_name(name: str) -> str:
    """``read_file`` -> ``Read file``: split on ``_``, ``-`` and whitespace, lowercase, then
    capitalise the first letter of the first word. No camelCase split; ``.`` and ``/`` are
    kept as they are."""
    words = [w.lower() for w in _SEPARATORS.split(name) if w]
    if not words:
        return ""
    words[0] = words[0][:1].upper() + words[0][1:]
    return " ".join(words)


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """Declaration of a tool the model may invoke (seed 001).

    - ``name``: unique; the model references it when it emits a call.
    - ``description``: what the tool does, for the model.
    - ``schema_json``: JSON Schema object of the arguments.
    - ``title``: a human display label (MCP's ``title``); ``None`` derives one from ``name``.
    - ``needs_approval``: the call goes through the approval gate before it runs, always.
    """

    name: str
    description: str
    schema_json: dict[str, Any]
    title: str | None = None
    needs_approval: bool = False

    @property
    def display_name(self) -> str:
        return self.title if self.title is not None else humanize_tool_name(self.name)

    def to_dict(self) -> dict[str, Any]:
        """Serialize; the safe defaults (``needs_approval=False``, ``title=None``) are omitted."""
        d: dict[str, Any] = {
            "name": self.name, "description": self.description, "schema_json": self.schema_json,
        }
        if self.title is not None:
            d["title"] = self.title
        if self.needs_approval:
            d["needs_approval"] = True
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ToolSpec:
        """Read a serialized spec; a payload without ``needs_approval`` is ungated (False)."""
        return cls(
            name=d["name"],
            description=d.get("description", ""),
            schema_json=dict(d["schema_json"]) if d.get("schema_json") is not None
            else {"type": "object", "properties": {}},
            title=d.get("title"),
            needs_approval=bool(d.get("needs_approval", False)),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> ToolSpec:
        return cls.from_dict(json.loads(text))


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
    """

    content: str
    is_error: bool = False
    structured: Any = None
    from_outside: bool | None = None
    usage: Usage | None = None
    taint: Taint | None = None


@dataclass(frozen=True, slots=True)
class RunScope:
    """The run a tool call belongs to: what a tool that runs an agent of its own (a
    delegation) needs to run it inside this one.

    ``agent`` is the agent running the call (its settings, approver, model and providers);
    ``path`` names the delegating calls down to this one, outermost first, this call's id
    last; ``interrupt`` stops this run (and should stop what the tool runs); ``spend`` is
    what this run has spent, chained to the runs above it: a child's ``Spend`` is made
    under it, so the budgets of every run above cover the child's usage as it happens.
    """

    agent: Agent
    path: tuple[str, ...]
    interrupt: asyncio.Event | None
    spend: Spend


@dataclass(slots=True)
class ToolContext:
    """What a running tool may know about its call. Declare a parameter of this type in a
    ``@tool`` function to receive it; it is not part of the model-visible schema.

    ``workspace`` and ``security`` are the running agent's; ``emit`` hands an event to the
    run's listener (a sub-agent's events travel this way); ``run`` is the run the call
    belongs to, everything delegation needs (``None`` when a host calls a handler itself);
    ``sources`` are, for a delegation, the texts the model had seen when the call ran, with
    their labels (it hands the trusted ones to its child); other tools get none. Every field
    is typed: there is no bag of untyped extras to fish things out of."""

    call_id: str
    tool_name: str
    taint: Taint
    workspace: Path
    security: SecurityConfig
    emit: Callable[[Event], Awaitable[None]] | None = None
    run: RunScope | None = None
    sources: tuple[Source, ...] = ()


Handler = Callable[[dict[str, Any], ToolContext], Awaitable[Any]]
Validator = Callable[[Any], dict[str, Any]]
Correction = Callable[[str], str]


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

    ``source`` and ``source_name`` are the old names of ``origin`` and ``server``: still
    accepted as keyword arguments, and readable.
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
        source: ToolOrigin | None = None,
        source_name: str | None = None,
    ) -> None:
        # Frozen: set once, here. The old keyword names win when given (dataclasses.replace
        # passes the new ones too).
        put = object.__setattr__
        put(self, "spec", spec)
        put(self, "handler", handler)
        put(self, "capabilities", capabilities)
        put(self, "validator", validator)
        put(self, "cache_approval", cache_approval)
        put(self, "origin", source if source is not None else origin)
        put(self, "read_only_hint", read_only_hint)
        put(self, "server", source_name if source_name is not None else server)
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

    @property
    def delegates(self) -> bool:
        """Whether calling the tool hands a task to a sub-agent, which acts only through
        its own calls (each passing its own gate)."""
        return self.origin == "subagent"

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def source(self) -> ToolOrigin:
        """The old name of ``origin``."""
        return self.origin

    @property
    def source_name(self) -> str | None:
        """The old name of ``server``."""
        return self.server

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


@runtime_checkable
class Toolset(Protocol):
    """A source of tools that may change over time (an MCP server, a filtered set)."""

    def tools(self) -> Sequence[Tool]: ...


@runtime_checkable
class ManagedToolset(Toolset, Protocol):
    """A toolset with a lifetime (an MCP server): ``async with agent`` starts it and
    closes it. ``start()`` may return ``Notice`` events (it did not start, a tool was left
    out); ``started`` says whether its tools are there; ``name`` names it in notices."""

    name: str

    @property
    def started(self) -> bool: ...

    async def start(self) -> Sequence[Event] | None: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Clash:
    """A tool left out because an earlier one has its name; ``toolset`` offered it."""

    name: str
    toolset: Toolset


def collect_tools(sources: Iterable[Tool | Toolset]) -> tuple[dict[str, Tool], list[Clash]]:
    """The tools of ``sources`` by name, as they are now: your own ``Tool``s first, then
    each toolset's in order; the first tool of a name keeps it. Also the clashes (a later
    tool of a taken name), which must never be silent: the caller reports them."""
    sources = list(sources)
    current: dict[str, Tool] = {}
    for source in sources:
        if isinstance(source, Tool):
            current.setdefault(source.name, source)
    clashes: list[Clash] = []
    for source in sources:
        if isinstance(source, Tool):
            continue
        for t in source.tools():
            if t.name not in current:
                current[t.name] = t
            elif current[t.name] is not t:
                clashes.append(Clash(t.name, source))
    return current, clashes


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
_SAYS_MORE = ("patternProperties", "allOf", "anyOf", "oneOf", "not", "$ref", "$dynamicRef",
              "if", "then", "else", "dependentSchemas", "dependencies", "propertyNames")


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
    if not isinstance(properties, Mapping) or any(w in schema for w in _SAYS_MORE):
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


# --- @tool ------------------------------------------------------------------------------


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    title: str | None = None,
    description: str | None = None,
    needs_approval: bool = False,
    capabilities: Capabilities = NO_CAPABILITIES,
    cache_approval: bool = True,
    idempotent: bool = False,
    content_params: Iterable[str] = (),
    destination_params: Iterable[str] = (),
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    title: str | None = None,
    description: str | None = None,
    needs_approval: bool = False,
    capabilities: Capabilities = NO_CAPABILITIES,
    cache_approval: bool = True,
    idempotent: bool = False,
    content_params: Iterable[str] = (),
    destination_params: Iterable[str] = (),
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a ``Tool`` from a sync or async function.

    The JSON Schema comes from the signature (via pydantic), the description from the
    docstring, parameter descriptions from its ``Args:`` section (or ``:param x:`` lines)::

        @tool
        def add(a: int, b: int) -> int:
            \"\"\"Add two integers.\"\"\"
            return a + b

        @tool(needs_approval=True, capabilities=Capabilities(destructive=True))
        def delete(path: str) -> str: ...

        @tool(capabilities=Capabilities(external_send=True),
              destination_params=["to"], content_params=["body"])
        def send_email(to: str, body: str) -> str: ...

    ``content_params`` and ``destination_params`` name parameters (see ``Tool``); a name
    the function does not have is an error. ``idempotent=True`` declares that running a call
    twice does no more than once (see ``Tool.idempotent``).
    """

    def build(f: Callable[..., Any]) -> Tool:
        return _tool_from_function(f, name=name, title=title, description=description,
                                   needs_approval=needs_approval, capabilities=capabilities,
                                   cache_approval=cache_approval, idempotent=idempotent,
                                   content_params=tuple(content_params),
                                   destination_params=tuple(destination_params))

    return build(fn) if fn is not None else build


def _tool_from_function(
    fn: Callable[..., Any],
    *,
    name: str | None,
    title: str | None,
    description: str | None,
    needs_approval: bool,
    capabilities: Capabilities,
    cache_approval: bool,
    idempotent: bool = False,
    content_params: tuple[str, ...] = (),
    destination_params: tuple[str, ...] = (),
) -> Tool:
    from pydantic import ConfigDict, Field, ValidationError, create_model

    if isinstance(fn, Tool):
        raise ToolError(f"{fn.name} is already a Tool")
    sig = inspect.signature(fn)
    summary, param_docs = _parse_docstring(inspect.getdoc(fn) or "")
    hints = _type_hints(fn)
    fields: dict[str, Any] = {}
    context_param: str | None = None
    for pname, param in sig.parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolError(f"tool {fn.__name__}: *args/**kwargs parameters cannot be described "
                            "to a model; name each parameter")
        annotation = hints.get(pname, Any)
        if annotation is ToolContext:
            context_param = pname
            continue
        default = ... if param.default is param.empty else param.default
        fields[pname] = (annotation, Field(default, description=param_docs.get(pname)))
    tool_name = name or fn.__name__
    # The schema does not forbid extra keys: Tool.validate drops the keys it does not name
    # before this model sees them (see unknown_arguments).
    model = create_model(
        f"{tool_name}_arguments", __config__=ConfigDict(extra="ignore"), **fields
    )
    schema = _clean_schema(model.model_json_schema())
    is_async = inspect.iscoroutinefunction(fn)
    names = list(fields)

    def validate(arguments: Any) -> dict[str, Any]:
        if not isinstance(arguments, dict):
            raise ArgumentError("arguments must be a JSON object")
        try:
            parsed = model.model_validate(arguments)
        except ValidationError as e:
            raise ArgumentError(_describe_validation_error(e)) from None
        return {n: getattr(parsed, n) for n in names}

    def keywords(arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        kwargs = dict(arguments)
        if context_param is not None:
            kwargs[context_param] = ctx
        return kwargs

    async def awaited(arguments: dict[str, Any], ctx: ToolContext) -> Any:
        return await fn(**keywords(arguments, ctx))

    # Sync tools run in a thread so a slow one cannot stall the event loop (and several
    # calls of one turn really run side by side).
    handler: Handler = awaited if is_async else ThreadedHandler(fn, keywords)

    unknown = [p for p in (*content_params, *destination_params) if p not in fields]
    if unknown:
        raise ToolError(f"tool {tool_name}: no parameter named {', '.join(map(repr, unknown))} "
                        f"(content_params and destination_params name parameters)")
    spec = ToolSpec(tool_name, description if description is not None else summary, schema,
                    title, needs_approval)
    return Tool(spec, handler, capabilities, validate, cache_approval, origin="python",
                idempotent=idempotent, content_params=content_params,
                destination_params=destination_params)


def _type_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    import typing

    try:
        return typing.get_type_hints(fn)
    except (NameError, TypeError) as e:
        raise ToolError(f"tool {getattr(fn, '__name__', fn)}: cannot resolve its type hints: {e}")\
            from None


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Drop pydantic's generated ``title`` keys: noise for the model, tokens on every turn."""
    def strip(node: Any, in_properties: bool = False) -> Any:
        if isinstance(node, dict):
            return {
                k: strip(v, k in ("properties", "$defs"))
                for k, v in node.items()
                if not (k == "title" and not in_properties and isinstance(v, str))
            }
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    cleaned: dict[str, Any] = strip(schema)
    cleaned.setdefault("properties", {})
    return cleaned


def _describe_validation_error(error: Any) -> str:
    parts = []
    for item in error.errors()[:5]:
        loc = ".".join(str(x) for x in item["loc"])
        parts.append(f"{loc}: {item['msg']}" if loc else str(item["msg"]))
    return "; ".join(parts)


_SECTION = re.compile(r"^[A-Z][A-Za-z ]*:$")
_ARGS_SECTIONS = {"Args:", "Arguments:", "Parameters:", "Params:"}
_GOOGLE_PARAM = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_PARAM = re.compile(r"^:param\s+(?:[\w\[\], ]+\s+)?(\w+):\s*(.*)$")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The description (text before any section) and per-parameter descriptions, from a
    Google-style ``Args:`` section or Sphinx ``:param x:`` lines."""
    summary: list[str] = []
    params: dict[str, str] = {}
    section: str | None = None  # None while in the summary, then "args", "sphinx" or "other"
    param_indent: int | None = None
    current: str | None = None
    for line in doc.splitlines():
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        sphinx = _SPHINX_PARAM.match(stripped)
        if sphinx:
            section, current = "sphinx", sphinx.group(1)
            params[current] = sphinx.group(2).strip()
            continue
        if indent == 0 and _SECTION.match(stripped):
            section = "args" if stripped in _ARGS_SECTIONS else "other"
            current, param_indent = None, None
            continue
        if section is None:
            summary.append(line)
            continue
        if not stripped or section == "other":
            continue
        google = _GOOGLE_PARAM.match(stripped) if section == "args" else None
        if google and (param_indent is None or indent <= param_indent):
            param_indent, current = indent, google.group(1).lstrip("*")
            params[current] = google.group(2).strip()
        elif current is not None and indent > 0:
            params[current] = f"{params[current]} {stripped}".strip()
    return "\n".join(summary).strip(), params


def ensure_tools(items: Iterable[Tool | Toolset | Callable[..., Any]]) -> list[Tool | Toolset]:
    """Accept plain functions where a Tool is expected (``tools=[add]``) by wrapping them."""
    out: list[Tool | Toolset] = []
    for item in items:
        if isinstance(item, Tool | Toolset):
            out.append(item)
        elif callable(item):
            out.append(tool(item))
        else:
            raise ToolError(f"not a tool: {item!r}")
    return out
