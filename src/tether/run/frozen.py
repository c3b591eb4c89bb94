"""Whether a hook changed, in place, a value it was shown and may not change.

A frozen dataclass stops ``value.field = x`` but not ``object.__setattr__(value, "field",
x)``: a hook could mark an injected result trusted in the conversation, clear the taint, or
take the send capability off a tool. Copying what a hook is shown costs a deep copy per
request (0.4 ms for three messages, and growing); instead ``Fingerprint`` records, before
the hook, every field value of the tree it is shown (the objects themselves, kept alive so
an identity cannot be reused) and, after it, walks the tree again: a field that now holds
another object, or a dict or list whose contents changed, is a change. Only when a hook is
attached at that point, and one walk over what it was shown.

A change found is also undone (``restore``): every field and every dict's or list's contents
set back to what they held before the hook. What a hook is shown is shared (the tool's own
capabilities, the conversation's taint, which may be a module-wide constant), so a tamper the
run stopped on must not outlive it: the next run of the agent, or any run in the process,
reads the values as they were.
"""

from __future__ import annotations

import copy
import dataclasses
from operator import is_
from typing import Any

# Values that cannot change in place: their identity is the whole of them. Matched by exact
# type (a set lookup is the cheapest test); a subclass (an enum of str) is kept by identity.
_ATOMS = frozenset({str, bytes, int, float, complex, bool, type(None)})
_CONTAINERS = frozenset({dict, list, set, bytearray})
# Each type's fields to walk into, found once: () for a type walked no further.
_FIELDS: dict[type, tuple[str, ...]] = {}


class _Contents:
    """A dict's, a list's or a set's contents as they were (compared by equality)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        try:
            self.value = copy.deepcopy(value)
        except Exception:  # a value that cannot be copied: compared by what it shows
            self.value = repr(value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Contents) and bool(self.value == other.value)

    __hash__ = None  # type: ignore[assignment]


def _fields(kind: type) -> tuple[str, ...]:
    if dataclasses.is_dataclass(kind):
        names = tuple(f.name for f in dataclasses.fields(kind))
    else:
        names = ()  # a host's own output type, an error: kept by identity only
    _FIELDS[kind] = names
    return names


def _walk(value: Any, out: list[Any], owners: list[tuple[Any, str]] | None = None) -> None:
    """Every field value under ``value`` into ``out``; with ``owners``, beside each one where
    it was held (the object and its field's name; a container's contents: the container
    and "")."""
    kind = type(value)
    if kind is tuple or kind is frozenset:
        for item in value:
            out.append(item)
            if owners is not None:
                owners.append((None, ""))  # a tuple's items cannot be set back: its owner is
            if type(item) not in _ATOMS:
                _walk(item, out, owners)
        return
    if kind in _CONTAINERS:
        out.append(_Contents(value))
        if owners is not None:
            owners.append((value, ""))
        return
    names = _FIELDS.get(kind)
    if names is None:
        names = _fields(kind)
    for name in names:
        item = getattr(value, name)
        out.append(item)
        if owners is not None:
            owners.append((value, name))
        if type(item) not in _ATOMS:
            _walk(item, out, owners)


def _put_back(owner: Any, name: str, was: Any) -> None:
    """Set one field, or one container's contents, back to what it held."""
    if name:
        object.__setattr__(owner, name, was)
        return
    if owner is None or not isinstance(was, _Contents) or isinstance(was.value, str):
        return  # a tuple's item (its owner is set back), or contents known only by repr
    contents = copy.deepcopy(was.value)
    if isinstance(owner, dict | set):
        owner.clear()
        owner.update(contents)
    else:  # a list or a bytearray
        owner[:] = contents


class Fingerprint:
    """What ``values`` hold, field by field, to tell later whether anything changed."""

    __slots__ = ("_owners", "_seen", "_values")

    def __init__(self, values: tuple[Any, ...]) -> None:
        self._values = values
        self._seen: list[Any] = []
        self._owners: list[tuple[Any, str]] = []
        for value in values:
            self._seen.append(value)
            self._owners.append((None, ""))
            if type(value) not in _ATOMS:
                _walk(value, self._seen, self._owners)

    def restore(self) -> None:
        """Set every field and container of what was fingerprinted back to what it held
        (what a hook changed in place is undone, wherever else the value is shared)."""
        for (owner, name), was in zip(self._owners, self._seen, strict=True):
            if owner is not None:
                _put_back(owner, name, was)

    def changed(self) -> bool:
        """Whether any field of what was fingerprinted holds something else now."""
        now: list[Any] = []
        for value in self._values:
            now.append(value)
            if type(value) not in _ATOMS:
                _walk(value, now)
        if len(now) != len(self._seen):
            return True
        if all(map(is_, self._seen, now)):
            return False
        # Only a dict's or a list's contents are compared by equality (a new copy each walk).
        return any(was is not is_now and not (type(was) is _Contents and was == is_now)
                   for was, is_now in zip(self._seen, now, strict=True))


__all__ = ["Fingerprint"]
