"""A JSON Schema node with its local ``$ref`` followed, the keywords beside each ``$ref``
kept: the one walker the gate reads schemas with (a tool's closed vocabularies in
``tether.provenance``, a server's field labels in ``tether.fields``).

JSON Schema 2020-12 applies the keywords beside a ``$ref`` as well as its target's, so a
node is read as its whole chain, ``{"$ref": "#/$defs/Id", "x-tether-written-by": "others"}``
as the sibling and ``Id`` both. Only local references (``#/...``) are followed, at most
``MAX_HOPS`` of them; one that leads elsewhere, nowhere, or round in a circle resolves to
nothing (the caller reads the node as declaring nothing: fail closed).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MAX_HOPS = 16


def chain(node: Any, root: Any) -> tuple[Mapping[str, Any], ...] | None:
    """``node`` and each node its ``$ref`` leads to, in order (the outermost first), or
    None when ``node`` is not an object or a reference does not resolve locally."""
    out: list[Mapping[str, Any]] = []
    for _ in range(MAX_HOPS + 1):
        if not isinstance(node, Mapping):
            return None
        out.append(node)
        ref = node.get("$ref")
        if ref is None:
            return tuple(out)
        if not isinstance(ref, str) or not ref.startswith("#"):
            return None
        node = pointer(root, ref[1:])
    return None


def pointer(root: Any, path: str) -> Any:
    """What the JSON Pointer ``path`` (``/$defs/Id``, ``""`` for the root) names in
    ``root``, or None."""
    if not path:
        return root
    if not path.startswith("/"):
        return None
    target: Any = root
    for raw in path[1:].split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(target, Mapping):
            target = target.get(part)
        elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
            target = target[int(part)]
        else:
            return None
    return target


def resolved(node: Any, root: Any) -> Mapping[str, Any] | None:
    """``node``'s keywords and its targets', a keyword beside a ``$ref`` over the target's
    (``$ref`` itself left out), or None (see ``chain``)."""
    nodes = chain(node, root)
    if nodes is None:
        return None
    if len(nodes) == 1:
        return nodes[0]
    merged: dict[str, Any] = {}
    for each in reversed(nodes):
        merged.update(each)
    merged.pop("$ref", None)
    return merged
