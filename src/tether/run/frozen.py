"""Whether a hook changed, in place, a value it was shown and may not change.

A frozen dataclass stops ``value.field = x`` but not ``object.__setattr__(value, "field",
x)``: a hook could mark an injected result trusted in the conversation, clear the taint, or
take the send capability off a tool. Copying what a hook is shown costs a deep copy per
request (0.4 ms for three messages, and growing); instead ``Fingerprint`` records, before
the hook, every field value of the tree it is shown (the objects themselves, kept alive so
an identity cannot be reused) and, after it, walks the tree again: a field that now holds
another object, or a dict or list whose contents changed, is a change. Only when a hook is
attached at that point, and one walk over what it was shown.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

# Values that cannot change in place: their identity is the whole of them.
_ATOMS = (str, bytes, int, float, complex, bool, type(None))
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
    names = _FIELDS.get(kind)
    if names is None:
        names = tuple(f.name for f in dataclasses.fields(kind))
        _FIELDS[kind] = names
    return names


def _walk(value: Any, out: list[Any]) -> None:
    if isinstance(value, _ATOMS):
        return
    if isinstance(value, tuple | frozenset):
        for item in value:
            out.append(item)
            _walk(item, out)
    elif isinstance(value, dict | list | set):
        out.append(_Contents(value))
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for name in _fields(type(value)):
            item = getattr(value, name)
            out.append(item)
            _walk(item, out)
    # Anything else (a host's own output type, an error) is kept by identity only.


class Fingerprint:
    """What ``values`` hold, field by field, to tell later whether anything changed."""

    __slots__ = ("_seen", "_values")

    def __init__(self, values: tuple[Any, ...]) -> None:
        self._values = values
        self._seen: list[Any] = []
        for value in values:
            self._seen.append(value)
            _walk(value, self._seen)

    def changed(self) -> bool:
        """Whether any field of what was fingerprinted holds something else now."""
        now: list[Any] = []
        for value in self._values:
            now.append(value)
            _walk(value, now)
        if len(now) != len(self._seen):
            return True
        for was, is_now in zip(self._seen, now, strict=True):
            if was is is_now:
                continue
            if isinstance(was, _Contents) and was == is_now:
                continue
            return True
        return False


__all__ = ["Fingerprint"]
