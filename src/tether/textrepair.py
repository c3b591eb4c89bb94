"""Text from outside made safe to encode: surrogate pairs joined, lone surrogates replaced.

JSON may spell a character outside the Basic Multilingual Plane as two ``\\uXXXX`` escapes
(a surrogate pair), and a server that cuts text by UTF-16 code units (a JavaScript proxy)
can send the two halves in two stream events, or one half alone. Python keeps a lone
surrogate in a ``str`` until something encodes it as UTF-8: the next request's body, the
session store, a terminal. So text is repaired where it enters: a pair split across two
deltas is joined (``SurrogateJoiner``), and any surrogate left alone becomes U+FFFD, the
replacement character (``repair``).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

REPLACEMENT = "\ufffd"


def repair(text: str) -> str:
    """``text`` with adjacent surrogate halves joined into their character and every lone
    surrogate replaced by U+FFFD. Text without surrogates comes back as it is (the same
    object)."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # UTF-16 joins a high and a low half into one character; what is left alone
        # cannot decode and becomes U+FFFD.
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def repair_json(value: Any) -> Any:
    """A decoded JSON value with ``repair`` applied to every string in it (keys too).
    Returns ``value`` itself when nothing needed repair."""
    if isinstance(value, str):
        return repair(value)
    changed = False
    if isinstance(value, dict):
        fixed: dict[Any, Any] = {}
        for key, item in value.items():
            new_key = repair(key) if isinstance(key, str) else key
            new_item = repair_json(item)
            changed = changed or new_key is not key or new_item is not item
            fixed[new_key] = new_item
        return fixed if changed else value
    if isinstance(value, list):
        items = []
        for item in value:
            new_item = repair_json(item)
            changed = changed or new_item is not item
            items.append(new_item)
        return items if changed else value
    return value


def _is_high(char: str) -> bool:
    return "\ud800" <= char <= "\udbff"


class SurrogateJoiner:
    """The deltas of streamed texts, each repaired, with a surrogate pair split across two
    deltas of one text joined.

    A delta ending in a high surrogate keeps it back until the next delta of the same text
    (``key``): if that starts with the low half, the two make one character. ``flush``
    gives what is still held, as U+FFFD, when the stream ends.
    """

    __slots__ = ("held",)

    def __init__(self) -> None:
        self.held: dict[Hashable, str] = {}

    def feed(self, key: Hashable, delta: str) -> str:
        """The part of ``delta`` that can go out now, repaired."""
        if self.held:
            delta = self.held.pop(key, "") + delta
        if delta.isascii():
            return delta
        if _is_high(delta[-1]):
            self.held[key] = delta[-1]
            delta = delta[:-1]
        return repair(delta)

    def flush(self) -> list[tuple[Hashable, str]]:
        """Each text still holding a lone high surrogate, with the U+FFFD it ends in."""
        held, self.held = self.held, {}
        return [(key, REPLACEMENT) for key in held]
