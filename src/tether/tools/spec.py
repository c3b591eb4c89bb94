"""A tool's declaration, as the model sees it (seed 001): ``ToolSpec`` and the display name
derived from a tool's name (``humanize_tool_name``)."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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
