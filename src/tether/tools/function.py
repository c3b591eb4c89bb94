"""``@tool``: a ``Tool`` made from a Python function, its schema from the signature (via
pydantic, imported when the first function is made a tool) and its descriptions from the
docstring."""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable, Iterable
from typing import Any, overload

from tether.errors import ToolError
from tether.fields import declares_secrets
from tether.tools.spec import ToolSpec
from tether.tools.tool import ArgumentError, Handler, ThreadedHandler, Tool, ToolContext
from tether.tools.toolsets import Toolset
from tether.trust import NO_CAPABILITIES, Capabilities


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
    closed_destinations: bool = False,
    returns_secrets: bool | None = None,
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
    closed_destinations: bool = False,
    returns_secrets: bool | None = None,
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
    twice does no more than once (see ``Tool.idempotent``); ``closed_destinations=True``
    that its sends stay inside the user's own workspace (see ``Tool.closed_destinations``).

    Who writes each field of what it returns, and which are secret, is declared on the
    return type's fields (``tether.fields``: ``Annotated[str, WrittenBy.user]``,
    ``Annotated[str, Secret]``); a ``Literal[...]`` parameter is a closed vocabulary, not
    traced. ``returns_secrets`` (by default: whether the return type declares a
    ``Secret`` field) says a result may hold secrets (see ``Tool.returns_secrets``).
    """

    def build(f: Callable[..., Any]) -> Tool:
        return _tool_from_function(f, name=name, title=title, description=description,
                                   needs_approval=needs_approval, capabilities=capabilities,
                                   cache_approval=cache_approval, idempotent=idempotent,
                                   content_params=tuple(content_params),
                                   destination_params=tuple(destination_params),
                                   closed_destinations=closed_destinations,
                                   returns_secrets=returns_secrets)

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
    closed_destinations: bool = False,
    returns_secrets: bool | None = None,
) -> Tool:
    from pydantic import ConfigDict, Field, ValidationError, create_model

    if isinstance(fn, Tool):
        raise ToolError(f"{fn.name} is already a Tool")
    sig = inspect.signature(fn)
    summary, param_docs = _parse_docstring(inspect.getdoc(fn) or "")
    hints = _type_hints(fn)
    fields: dict[str, Any] = {}
    context_param: str | None = None
    deps_type: type | None = None  # what ``ctx: ToolContext[MyDeps]`` declares
    for pname, param in sig.parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolError(f"tool {fn.__name__}: *args/**kwargs parameters cannot be described "
                            "to a model; name each parameter")
        annotation = hints.get(pname, Any)
        if annotation is ToolContext or typing.get_origin(annotation) is ToolContext:
            context_param = pname
            declared = typing.get_args(annotation)
            if declared and isinstance(declared[0], type) and declared[0] is not type(None):
                deps_type = declared[0]
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
            if deps_type is not None and not isinstance(ctx.deps, deps_type):
                # The host's mistake, said in types only: the model never reads a dependency.
                raise ToolError(f"{tool_name} needs deps of type {deps_type.__name__} "
                                f"(ToolContext[{deps_type.__name__}]); the run was given "
                                f"{type(ctx.deps).__name__}")
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
                destination_params=destination_params,
                closed_destinations=closed_destinations,
                returns_secrets=declares_secrets(_return_type(fn)) if returns_secrets is None
                else returns_secrets)


def _return_type(fn: Callable[..., Any]) -> Any:
    """The return annotation with its ``Annotated`` markers (None if it does not resolve)."""
    try:
        return typing.get_type_hints(fn, include_extras=True).get("return")
    except (NameError, TypeError):
        return None


def _type_hints(fn: Callable[..., Any]) -> dict[str, Any]:
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
