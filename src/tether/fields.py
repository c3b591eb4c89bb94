"""Who writes each field of a tool's result, and which fields are secret: the markers a tool
puts on its return type, and the labelled values of one result.

A tool declares, on the fields of the pydantic models or dataclasses it returns, who writes
each (``tether.messages.Writer``) and which must never leave::

    class File(BaseModel):
        id: Annotated[str, WrittenBy.service]        # the service mints it
        owner: Annotated[str, WrittenBy.user]        # the user's own records
        shared_with: Annotated[list[str], WrittenBy.user]
        content: str                                 # undeclared: written by others

    class Card(BaseModel):
        number: Annotated[str, WrittenBy.user, Secret]

A marker on a field covers the strings and numbers under it (a list's items, a mapping's
keys and values), but not the fields of a model or dataclass nested in it: those say their
own, and an undeclared field is written by others, always. ``fields_of(value)`` reads a
returned value by these markers; the gate then traces a value in a user- or service-written
field even when the result as a whole is untrusted (``tether.provenance``).
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, TypeAlias

from tether import refs
from tether.messages import MAX_FIELD_CHARS, MAX_FIELD_LABELS, FieldLabel, Writer

# How deep a returned value is read for labels; deeper values are of the untrusted rest.
MAX_DEPTH = 32


class WrittenBy:
    """A marker for ``Annotated[...]``: who writes the field (``WrittenBy.user``,
    ``WrittenBy.service``, ``WrittenBy.others``)."""

    __slots__ = ("writer",)

    user: ClassVar[WrittenBy]
    service: ClassVar[WrittenBy]
    others: ClassVar[WrittenBy]

    def __init__(self, writer: Writer) -> None:
        self.writer: Writer = writer

    def __repr__(self) -> str:
        return f"WrittenBy.{self.writer}"


WrittenBy.user = WrittenBy("user")
WrittenBy.service = WrittenBy("service")
WrittenBy.others = WrittenBy("others")


class _Secret:
    """A marker for ``Annotated[...]``: the field's values must not leave (``Secret``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "Secret"


Secret = _Secret()
"""A field whose values must never be sent to anyone but the user: a send that holds one
verbatim is refused or asked about (``security.trifecta``)."""

Marker: TypeAlias = WrittenBy | _Secret
Declared: TypeAlias = Mapping[type, Mapping[str, Sequence[Marker]]]
"""Markers given beside a type rather than on it (a type one cannot annotate: another
library's model): for each class, each field's markers."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Label:
    writer: Writer | None  # None: not declared
    secret: bool = False


_NONE = _Label(None)
_CLASS_LABELS: dict[type, dict[str, _Label]] = {}


def _label(markers: Sequence[Any]) -> _Label:
    writer: Writer | None = None
    secret = False
    for marker in markers:
        if isinstance(marker, WrittenBy):
            writer = marker.writer
        elif marker is Secret:
            secret = True
    return _Label(writer, secret) if writer is not None or secret else _NONE


def _class_labels(cls: type) -> dict[str, _Label] | None:
    """The labels a pydantic model's or a dataclass's fields declare, or None when ``cls``
    is neither (cached per class)."""
    known = _CLASS_LABELS.get(cls)
    if known is not None:
        return known
    model_fields = getattr(cls, "model_fields", None)
    if isinstance(model_fields, Mapping):  # a pydantic model: Annotated extras in metadata
        labels = {name: _label(getattr(info, "metadata", ()) or ())
                  for name, info in model_fields.items()}
    elif dataclasses.is_dataclass(cls):
        try:
            hints = typing.get_type_hints(cls, include_extras=True)
        except Exception:  # an annotation that does not resolve declares nothing
            hints = {}
        labels = {f.name: _label(getattr(hints.get(f.name), "__metadata__", ()))
                  for f in dataclasses.fields(cls)}
    else:
        return None
    _CLASS_LABELS[cls] = labels
    return labels


def fields_of(value: Any, declared: Declared | None = None) -> tuple[FieldLabel, ...]:
    """The labelled values of a tool's returned ``value``: every string and number in a
    field declared written by the user or the service, and every one in a secret field,
    each with its path. ``declared`` adds markers for classes one cannot annotate. Values
    deeper than ``MAX_DEPTH`` levels, longer than ``MAX_FIELD_CHARS`` or past the
    ``MAX_FIELD_LABELS``-th are left out (they are of the untrusted rest)."""
    if isinstance(value, str | int | float | bool) or value is None:
        return ()  # a plain value declares nothing
    out: list[FieldLabel] = []
    stack: list[tuple[Any, str, _Label, int]] = [(value, "", _NONE, 0)]
    while stack and len(out) < MAX_FIELD_LABELS:
        node, path, label, depth = stack.pop()
        if isinstance(node, enum.Enum):
            node = node.value
        if isinstance(node, bool) or node is None:
            continue
        if isinstance(node, str | int | float):
            text = str(node)
            if text and len(text) <= MAX_FIELD_CHARS and (
                    label.secret or label.writer in ("user", "service")):
                assert label.writer is not None or label.secret
                out.append(FieldLabel(path, text, label.writer or "others", label.secret))
            continue
        if depth >= MAX_DEPTH:
            continue
        children: list[tuple[Any, str, _Label, int]] = []
        own = _class_labels(type(node))
        if own is not None:
            extra = (declared or {}).get(type(node), {})
            for name, field_label in own.items():
                if name in extra:
                    field_label = _label(extra[name])
                children.append((getattr(node, name, None), f"{path}.{name}", field_label,
                                 depth + 1))
        elif isinstance(node, Mapping):
            for key, item in node.items():
                children.append((key, f"{path} (a key)", label, depth + 1))
                children.append((item, f"{path}.{key}", label, depth + 1))
        elif isinstance(node, list | tuple | set | frozenset):
            children.extend((item, f"{path}[{i}]", label, depth + 1)
                            for i, item in enumerate(node))
        stack.extend(reversed(children))
    return tuple(out)


def declares_secrets(annotation: Any) -> bool:
    """Whether a return type declares a ``Secret`` field anywhere in it (its models' and
    dataclasses' fields, the items of its lists and mappings, its unions), so a result may
    hold secrets (``Tool.returns_secrets``)."""
    seen: set[int] = set()
    stack: list[Any] = [annotation]
    while stack and len(seen) < 1000:
        node = stack.pop()
        if id(node) in seen or node is None:
            continue
        seen.add(id(node))
        if any(m is Secret for m in getattr(node, "__metadata__", ())):
            return True
        stack.extend(typing.get_args(node))
        origin = typing.get_origin(node)
        if origin is not None:
            stack.append(origin)
        if not isinstance(node, type):
            continue
        model_fields = getattr(node, "model_fields", None)
        if isinstance(model_fields, Mapping):
            for info in model_fields.values():
                if any(m is Secret for m in getattr(info, "metadata", ()) or ()):
                    return True
                stack.append(getattr(info, "annotation", None))
        elif dataclasses.is_dataclass(node):
            try:
                stack.extend(typing.get_type_hints(node, include_extras=True).values())
            except Exception:  # an annotation that does not resolve declares nothing
                continue
    return False


def schema_declares_secrets(schema: Any) -> bool:
    """Whether a JSON Schema declares a secret property anywhere (``SECRET_KEY``)."""
    stack: list[Any] = [schema]
    count = 0
    while stack and count < 10_000:
        node = stack.pop()
        count += 1
        if isinstance(node, Mapping):
            if node.get(SECRET_KEY) is True:
                return True
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


# --- declared in a JSON Schema (an MCP tool's outputSchema) ----------------------------------

WRITTEN_BY_KEY = "x-tether-written-by"
"""The key a JSON Schema property declares its writer with (``"user"``, ``"service"`` or
``"others"``): an MCP tool's ``outputSchema`` labels its ``structuredContent`` so."""
SECRET_KEY = "x-tether-secret"
"""The key a JSON Schema property declares itself secret with (``true``)."""


_NARROW: dict[str, int] = {"others": 0, "user": 1, "service": 2}


def _schema_label(nodes: Sequence[Mapping[str, Any]]) -> _Label:
    """The label a node declares: over its ``$ref`` chain (``tether.refs.chain``), the
    narrowest writer any of them names (others, then user, then service: a label beside a
    ``$ref`` can narrow its target's, never widen it), secret if any says so."""
    writer: Writer | None = None
    secret = False
    for node in nodes:
        by = node.get(WRITTEN_BY_KEY)
        if by in ("user", "service", "others") and (
                writer is None or _NARROW[by] < _NARROW[writer]):
            writer = by
        secret = secret or node.get(SECRET_KEY) is True
    return _Label(writer, secret) if writer is not None or secret else _NONE


def _inherited(own: _Label, around: _Label) -> _Label:
    """What a map's value or an array's item is labelled: its own declaration over the
    container's (narrowing only, as beside a ``$ref``), secret if either is."""
    if around is _NONE:
        return own
    if own is _NONE:
        return around
    writer = own.writer if own.writer is not None else around.writer
    if own.writer is not None and around.writer is not None \
            and _NARROW[around.writer] < _NARROW[own.writer]:
        writer = around.writer
    return _Label(writer, own.secret or around.secret)


def _child(raw: Any, root: Mapping[str, Any], around: _Label) -> tuple[Any, _Label]:
    """The schema of a map's values or an array's items and its label (``around``, the
    container's, narrowed by its own); a schema that does not resolve declares nothing."""
    nodes = refs.chain(raw, root)
    if nodes is None:
        return None, _NONE
    return raw, _inherited(_schema_label(nodes), around)


def _is_array(shape: Mapping[str, Any]) -> bool:
    declared = shape.get("type")
    return "items" in shape or declared == "array" or (
        isinstance(declared, list) and "array" in declared)


def fields_from_schema(value: Any, schema: Any) -> tuple[FieldLabel, ...]:
    """The labelled values of a structured result (an MCP tool's ``structuredContent``) by
    what its JSON Schema declares (``WRITTEN_BY_KEY``, ``SECRET_KEY`` on properties, beside
    a ``$ref`` too). A declaration covers an array's items and a map's keys and values (a
    schema's ``additionalProperties``), but not the properties of an object nested in it,
    which say their own; a property the schema does not declare (no ``properties`` entry,
    no ``additionalProperties`` schema), at any depth, is written by others, whatever the
    object or list around it says. The schema and the value are read as hostile input:
    wrong types declare nothing, references resolve locally or not at all, and depth and
    count are bounded."""
    if not isinstance(schema, Mapping):
        return ()
    out: list[FieldLabel] = []
    stack: list[tuple[Any, Any, str, _Label, int]] = [(value, schema, "", _NONE, 0)]
    while stack and len(out) < MAX_FIELD_LABELS:
        node, raw, path, label, depth = stack.pop()
        if isinstance(node, bool) or node is None:
            continue
        if isinstance(node, str | int | float):
            text = str(node)
            if text and len(text) <= MAX_FIELD_CHARS and (
                    label.secret or label.writer in ("user", "service")):
                out.append(FieldLabel(path, text, label.writer or "others", label.secret))
            continue
        if depth >= MAX_DEPTH:
            continue
        shape = refs.resolved(raw, schema)
        if shape is None:
            label, shape = _NONE, {}  # nothing declared: what is under it is others'
        if isinstance(node, Mapping):
            properties = shape.get("properties")
            extra = shape.get("additionalProperties")
            for key, item in node.items():
                if isinstance(properties, Mapping) and key in properties:
                    nodes = refs.chain(properties[key], schema)
                    own = _schema_label(nodes) if nodes is not None else _NONE
                    stack.append((item, properties[key], f"{path}.{key}", own, depth + 1))
                    continue
                # A key no property declares is a map's only if the schema says what the
                # map holds; otherwise anyone may have added it.
                sub, child = _child(extra, schema, label) if isinstance(extra, Mapping) \
                    else (None, _NONE)
                stack.append((key, None, f"{path} (a key)", child, depth + 1))
                stack.append((item, sub, f"{path}.{key}", child, depth + 1))
        elif isinstance(node, list):
            items = shape.get("items")
            if isinstance(items, Mapping):
                sub, child = _child(items, schema, label)
            else:  # an array of anything, labelled as a whole, or not declared an array
                sub, child = None, label if _is_array(shape) and items is None else _NONE
            stack.extend((item, sub, f"{path}[{i}]", child, depth + 1)
                         for i, item in enumerate(node))
    return tuple(out)
