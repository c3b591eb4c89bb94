"""Whole tokens: when a value occurs in a text as itself, not as a piece of something
longer, and an index that finds the texts holding one without reading the others.

The rule the gate traces values by (``tether.provenance``): what stands right before and
after a value must end a token. ``Index`` lists each text under its words, so a value is
checked only in the texts listed under its first word; it finds exactly the texts
``occurs`` says hold it (tests/test_provenance_incremental.py tries every piece of random
texts made of the characters the rule turns on).
"""

from __future__ import annotations

import re
import threading
from bisect import bisect_left
from collections.abc import Iterable

# A value counts only as a whole token: what stands right before and after it must end a
# token (a space, a quote, a bracket, a comma...), so a value is never a piece of a longer
# word, number, address or link ("evil.example" does not trace to "evil.example.org",
# "https://x.example/leak?d=" does not trace to "https://x.example/leak?d={data}").
_BEFORE = frozenset(" \t\n\r\"'`([{<,;:=|*$#")
_AFTER = frozenset(" \t\n\r\"'`)]}>,;|*")
_ENDS_SENTENCE = frozenset(".,:;!?")

# A word: what lies between two characters a token may follow (``_BEFORE``). A whole-token
# occurrence starts a word, so it is found under its first word; a value that is one word
# may end inside a longer one, before a character that may close a token or a sentence
# (``_CUT``: "example.com" in "example.com."), so a word is also listed cut before each.
_BREAKS = re.escape("".join(sorted(_BEFORE)))
_BETWEEN_BREAKS = re.compile(f"[^{_BREAKS}]+")
_FIRST_BREAK = re.compile(f"[{_BREAKS}]")
_CUT = re.compile("[" + re.escape("".join(sorted((_AFTER | _ENDS_SENTENCE) - _BEFORE))) + "]")


def occurs(needle: str, text: str, start: int | None = None) -> bool:
    """``needle`` occurs in ``text`` as a whole token (see ``_BEFORE`` and ``_AFTER``;
    sentence punctuation after it counts as an end when a token end or the text's end
    follows). ``start``: where to look first (an occurrence already found)."""
    if not needle:
        return False
    start = text.find(needle) if start is None else start
    while start != -1:
        if token_at(needle, text, start):
            return True
        start = text.find(needle, start + 1)
    return False



def count(needle: str, text: str) -> int:
    """How often ``needle`` occurs in ``text`` as a whole token (``occurs``)."""
    found = 0
    start = text.find(needle) if needle else -1
    while start != -1:
        found += token_at(needle, text, start)
        start = text.find(needle, start + 1)
    return found


def token_at(needle: str, text: str, start: int) -> bool:
    """Whether the ``needle`` found at ``start`` of ``text`` is a whole token there."""
    end = start + len(needle)
    before_ok = start == 0 or text[start - 1] in _BEFORE
    after = text[end] if end < len(text) else ""
    return before_ok and (not after or after in _AFTER or (
        after in _ENDS_SENTENCE and (end + 1 == len(text) or text[end + 1] in _AFTER)))


def _keys(text: str) -> set[str]:
    """The keys ``text`` is listed under: its words, and each word cut before a ``_CUT``."""
    keys = set(_BETWEEN_BREAKS.findall(text))
    for word in [w for w in keys if not w.isalnum()]:
        keys.update(word[:m.start()] for m in _CUT.finditer(word) if m.start())
    return keys


def _key(needle: str) -> str | None:
    """The key a whole-token occurrence of ``needle`` is listed under: its first word when
    more follows it (the text's word there is exactly that), else the needle itself (a
    word, or a word's cut). None when it begins with a break (every text is looked in)."""
    if not needle or needle[0] in _BEFORE:
        return None
    found = _FIRST_BREAK.search(needle)
    return needle if found is None else needle[:found.start()]


class Index:
    """Texts and, per key (``_keys``), the positions of the texts listed under it, in order.

    The lists are shared by the indexes extended one from another, and only ever grow:
    an index reads the first ``count`` texts, so one made earlier never sees what a later
    one added. Only the longest (the one whose count is the lists' length) grows them in
    place; extending another (a conversation that went another way) copies its part."""

    __slots__ = ("count", "keys", "texts")

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.keys: dict[str, list[int]] = {}
        self.count = 0

    def extended(self, more: list[str]) -> Index:
        if not more:
            return self
        out = Index.__new__(Index)
        with _GROWING:
            if self.count == len(self.texts):
                out.texts, out.keys = self.texts, self.keys
            else:
                out.texts = self.texts[:self.count]
                out.keys = {}
                _list(out.keys, out.texts, 0)
            first = len(out.texts)
            out.texts.extend(more)
            _list(out.keys, more, first)
            out.count = len(out.texts)
        return out

    def holders(self, needle: str) -> list[int]:
        """The positions of the texts that hold ``needle`` as a whole token."""
        key = _key(needle)
        if key is None:
            candidates: Iterable[int] = range(self.count)
        else:
            found = self.keys.get(key)
            if not found:
                return []
            candidates = found[:bisect_left(found, self.count)]
        texts = self.texts
        return [i for i in candidates if occurs(needle, texts[i])]


def _list(keys: dict[str, list[int]], texts: list[str], first: int) -> None:
    for i, text in enumerate(texts, first):
        for key in _keys(text):
            at = keys.get(key)
            if at is None:
                keys[key] = [i]
            else:
                at.append(i)


# Growing an index's shared lists, and deciding whether it may, is one step.
_GROWING = threading.Lock()
