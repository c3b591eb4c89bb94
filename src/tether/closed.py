"""Where a value of a call is (``Location``), and which values a tool's own schema vouches
for: those it restricts to a closed vocabulary (``closed_locations``), which name nothing
outside the tool and are not traced (``tether.provenance``), and those equal to the default
it declares (``defaulted_locations``), which are the tool's word, not the model's. Schemas
are read with ``tether.refs``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from tether import refs


@dataclass(frozen=True, slots=True)
class KeyOf:
    """In a ``Location``: the key ``name`` itself (a value too), not what it holds."""

    name: object


Step: TypeAlias = "str | int | KeyOf"
Location: TypeAlias = tuple[Step, ...]
"""Where a value of a call is: the argument's name, then each key (an object's) and index
(a list's) down to it, and ``KeyOf`` for a key read as a value. Structured, so a key
literally named ``a.b`` is never ``a`` then ``b``, and two keys of one object are two
places (the printed paths of ``leaves`` say both alike)."""


def closed_paths(arguments: Mapping[str, Any], schema: Mapping[str, Any]) -> frozenset[str]:
    """``closed_locations`` as ``leaves`` prints them (for people and tests; the gate
    compares locations)."""
    return frozenset(_printed(at) for at in closed_locations(arguments, schema))


def _printed(at: Location) -> str:
    head, *rest = at
    return str(head) + "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in rest)


def closed_locations(arguments: Mapping[str, Any], schema: Mapping[str, Any]
                     ) -> frozenset[Location]:
    """Where the values of a call are that its tool's schema restricts to a closed
    vocabulary: an ``enum`` or a ``const`` (a ``Literal[...]`` in a ``@tool`` signature), at
    any depth: a property's, a list's items', a map's values' (``additionalProperties``:
    ``dict[str, Literal[...]]``), beside a ``$ref`` or behind one. Such a value names
    nothing outside the tool, like a boolean, and is not traced. Only the tool's own schema
    counts, and only a believed one (the caller asks this of a tool that is not an
    untrusted MCP server's). A key is never closed: it is a value the model chose."""
    return _where(arguments, schema, lambda value, node: isinstance(
        value, str | int | float) and not isinstance(value, bool) and _closed(node, value, schema))


def defaulted_locations(arguments: Mapping[str, Any], schema: Mapping[str, Any]
                        ) -> frozenset[Location]:
    """Where the values of a call are that equal the ``default`` its tool's schema declares
    for them (a ``@tool`` signature's default: ``limit: int = 2000``), at any depth: a
    property's, an object's within it, beside a ``$ref`` or behind one. Every value below
    such a place is the default's too (``within``). Equal means the same JSON value of the
    same type (``1`` is not ``1.0`` nor ``true``); anything else is not a default.

    Such a value is what the tool does when the model says nothing: a validator fills it
    in, and if the model wrote it, it chose nothing the tool's author had not. Only the
    tool's own schema counts, and only a believed one (the caller asks this of a tool that
    is not an untrusted MCP server's: its defaults are the server's word)."""
    return _where(arguments, schema,
                  lambda value, node: "default" in node and _same(value, node["default"]))


def _where(arguments: Mapping[str, Any], schema: Mapping[str, Any],
           holds: Callable[[Any, Mapping[str, Any]], bool]) -> frozenset[Location]:
    """The places of the call's values whose schema node (``$ref`` resolved) ``holds``
    for them, walking the arguments beside the schema: a property's, a list's items', a
    map's values'. Below a place that holds, nothing more is looked at."""
    out: set[Location] = set()
    stack: list[tuple[Any, Any, Location, int]] = [
        (value, _property(schema, name, schema), (name,), 0)
        for name, value in arguments.items()]
    while stack:
        value, node, at, depth = stack.pop()
        node = refs.resolved(node, schema)
        if node is None or depth > 64:
            continue
        if holds(value, node):
            out.add(at)
        elif isinstance(value, Mapping):
            stack.extend((item, _property(node, str(key), schema), (*at, str(key)), depth + 1)
                         for key, item in value.items())
        elif isinstance(value, list):
            items = _container(node, "items", schema)
            stack.extend((item, items, (*at, i), depth + 1) for i, item in enumerate(value))
    return frozenset(out)


def within(at: Location, places: frozenset[Location]) -> bool:
    """Whether ``at`` is one of ``places`` or below one (a key or item of its value)."""
    return any(at[:n] in places for n in range(1, len(at) + 1)) if places else False


def _same(value: Any, default: Any, depth: int = 0) -> bool:
    """Whether ``value`` is ``default`` as JSON: same type, same value, all the way down."""
    if depth > 64:
        return False
    if isinstance(value, Mapping):
        return isinstance(default, Mapping) and value.keys() == default.keys() and all(
            _same(value[k], default[k], depth + 1) for k in value)
    if isinstance(value, list | tuple):
        return isinstance(default, list | tuple) and len(value) == len(default) and all(
            _same(v, d, depth + 1) for v, d in zip(value, default, strict=True))
    return type(value) is type(default) and bool(value == default)


def _property(node: Any, name: str, root: Mapping[str, Any]) -> Any:
    """The schema of the property ``name`` of an object ``node`` describes: declared, or
    else its ``additionalProperties`` schema (a map's values)."""
    node = _container(node, "properties", root)
    properties = node.get("properties") if isinstance(node, Mapping) else None
    if isinstance(properties, Mapping) and name in properties:
        return properties[name]
    extra = node.get("additionalProperties") if isinstance(node, Mapping) else None
    return extra if isinstance(extra, Mapping) else None


def _container(node: Any, key: str, root: Mapping[str, Any]) -> Any:
    """For ``properties``, ``node`` itself (or the one branch of its ``anyOf``/``oneOf``
    that describes an object: an optional one); for ``items``, the schema of its items."""
    node = refs.resolved(node, root)
    if node is None:
        return None
    keys = ("properties", "additionalProperties") if key == "properties" else (key,)
    if not any(k in node for k in keys):
        branches = [b for b in (refs.resolved(b, root) for b in _branches(node))
                    if b is not None and any(k in b for k in keys)]
        if len(branches) != 1:
            return None
        node = branches[0]
    return node.get(key) if key == "items" else node


def _branches(node: Mapping[str, Any]) -> list[Any]:
    out: list[Any] = []
    for key in ("anyOf", "oneOf"):
        branches = node.get(key)
        if isinstance(branches, list):
            out.extend(branches)
    return out


def _closed(node: Mapping[str, Any], value: str | int | float, root: Mapping[str, Any],
            depth: int = 0) -> bool:
    """Whether every part of ``node`` that could accept ``value`` is a closed vocabulary
    holding it."""
    if "const" in node:
        return bool(node["const"] == value)
    enum = node.get("enum")
    if isinstance(enum, list):
        return value in enum
    branches = _branches(node)
    if not branches or depth > 16 or ("type" in node and _accepts(node, value)):
        return False
    for branch in branches:
        resolved = refs.resolved(branch, root)
        if resolved is None:
            return False
        if not _closed(resolved, value, root, depth + 1) and _accepts(resolved, value):
            return False
    return True


def _accepts(node: Mapping[str, Any], value: str | int | float) -> bool:
    """Whether ``node`` could take ``value`` by its type (no type, or another keyword: it
    could)."""
    declared = node.get("type")
    if declared is None:
        return True
    types = declared if isinstance(declared, list) else [declared]
    kinds = ("string",) if isinstance(value, str) else ("integer", "number")
    return any(t in types for t in kinds)
