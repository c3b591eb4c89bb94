"""The labels an MCP server puts on a tool result, read so that they can only narrow.

Two spellings are read from a result's ``_meta``:

- ``ifc`` (GitHub's MCP server): ``{"integrity": "trusted" | "untrusted",
  "confidentiality": [reader, ...]}``, where the readers list is ``["public"]`` for data
  anyone may read; a bare string ``"public"`` or ``"private"`` is read as the same.
- the draft trust annotations (SEP-1913), at the top of ``_meta`` or under
  ``_meta.annotations``: ``sensitiveHint`` (``true`` or a level: ``"medium"`` and
  ``"high"`` count), ``privateHint`` and ``openWorldHint``.

What a label may do (``ServerLabel``): say the result is untrusted (any server), say it is
trusted (believed only from a server the user marked trusted, and never beside an
``openWorldHint`` or ``untrusted`` claim), say it is private, and name who may read it. A
label can never make a result less private nor a conversation less tainted: ``public``
only means "no readers list". Whatever the shape, nothing here raises: a value that is not
one of these spellings is read the cautious way (an integrity that is not ``trusted`` is
untrusted; a confidentiality that is neither a list nor a known word is private with no
reader), and what was odd is kept in ``ServerLabel.problems``.

Plain functions on plain values: no MCP SDK import here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# A readers list longer than this is cut (keeping fewer readers only narrows); a reader
# longer than this is dropped (it names nobody a destination could be).
MAX_READERS = 256
MAX_READER_CHARS = 320
PUBLIC = "public"
_LEVELS = {"medium": True, "high": True, "low": False, "none": False}


@dataclass(frozen=True, slots=True)
class ServerLabel:
    """What a server said of one result. ``trusted``/``untrusted``: its integrity claim
    (both false: none, or one not understood). ``private``: it says the data is private
    (a readers list that is not public, ``privateHint``, ``sensitiveHint``). ``readers``:
    who may read it (``None``: no list, anyone; ``()``: private to nobody the client can
    name). ``open_world``: ``openWorldHint: true`` on the result. ``problems``: what was
    malformed, in words."""

    trusted: bool = False
    untrusted: bool = False
    private: bool = False
    readers: tuple[str, ...] | None = None
    open_world: bool = False
    problems: tuple[str, ...] = ()

    @property
    def said_anything(self) -> bool:
        return self != NO_LABEL


NO_LABEL = ServerLabel()


def read_label(meta: Any) -> ServerLabel:
    """The label in a result's ``_meta`` (any value: a server may send anything)."""
    if not isinstance(meta, Mapping):
        return NO_LABEL if meta is None else ServerLabel(problems=("_meta is not an object",))
    problems: list[str] = []
    trusted = untrusted = private = open_world = False
    readers: tuple[str, ...] | None = None
    ifc = meta.get("ifc")
    if ifc is not None:
        if isinstance(ifc, Mapping):
            trusted, untrusted = _integrity(ifc.get("integrity"), problems)
            private, readers = _confidentiality(ifc.get("confidentiality"), problems)
        else:
            # Something was meant; what cannot be read is read the cautious way.
            problems.append("_meta.ifc is not an object")
            untrusted, private, readers = True, True, ()
    for hints in (meta, meta.get("annotations")):
        if not isinstance(hints, Mapping):
            continue
        private = _flag(hints.get("privateHint"), "privateHint", problems) or private
        private = _sensitive(hints.get("sensitiveHint"), problems) or private
        open_world = _flag(hints.get("openWorldHint"), "openWorldHint", problems) or open_world
    return ServerLabel(trusted and not untrusted, untrusted or open_world, private, readers,
                       open_world, tuple(problems))


def _integrity(value: Any, problems: list[str]) -> tuple[bool, bool]:
    if value is None:
        return False, False
    if value == "trusted":
        return True, False
    if value != "untrusted":
        problems.append("_meta.ifc.integrity is neither \"trusted\" nor \"untrusted\"")
    return False, True


def _confidentiality(value: Any, problems: list[str]) -> tuple[bool, tuple[str, ...] | None]:
    """(private, readers) of a confidentiality claim."""
    if value is None:
        return False, None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, Sequence) or isinstance(value, bytes | bytearray):
        problems.append("_meta.ifc.confidentiality is not a list of readers")
        return True, ()
    readers: list[str] = []
    for item in list(value[:MAX_READERS + 1]):
        if not isinstance(item, str) or not item.strip() or len(item) > MAX_READER_CHARS:
            problems.append("a reader in _meta.ifc.confidentiality is not a short string")
            continue
        readers.append(item.strip())
    if len(value) > MAX_READERS:
        problems.append(f"_meta.ifc.confidentiality names more than {MAX_READERS} readers")
        readers = readers[:MAX_READERS]
    if PUBLIC in readers:
        # GitHub's join: public data joined with anything is readable by anyone. Public
        # only means no list: it never makes the result less private than its tool is.
        return False, None
    named = tuple(dict.fromkeys(r for r in readers if r != "private"))
    return True, named


def _flag(value: Any, name: str, problems: list[str]) -> bool:
    if value is None or value is False:
        return False
    if value is not True:
        problems.append(f"{name} is not a boolean")
    return True  # anything but an explicit false adds caution


def _sensitive(value: Any, problems: list[str]) -> bool:
    if value is None or value is False:
        return False
    if value is True:
        return True
    if isinstance(value, str) and value.lower() in _LEVELS:
        return _LEVELS[value.lower()]
    problems.append("sensitiveHint is neither a boolean nor a level")
    return True


def result_trusted(label: ServerLabel, *, server_trusted: bool) -> bool:
    """Whether a result is a trusted source by its label: only a server the user marked
    trusted can say so, and not beside any claim that it is untrusted or open world."""
    return server_trusted and label.trusted and not label.untrusted and not label.open_world
