"""Tool search: a large catalogue kept out of the request until the model asks for it.

A request that offers a hundred tools spends most of its prompt on their declarations and
swamps a small model's window. Past ``defer_after`` tools (or for tools marked
``Tool.defer``), a run offers the tools it always needs plus ``search_tools``: the model
asks it in words, it answers with the best matches' names and one-line descriptions
(ranked here with BM25 over names and descriptions: no model, no network), and what it
found joins the request's tools from the next turn on. A found tool is an ordinary tool:
the gate judges its calls as any other's.

What was found is read back from the conversation itself (each search's result holds the
names it revealed, ``REVEALED_KEY`` in its structured value), so a continued conversation
or a resumed session offers them again without a store of its own.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether import events as ev
from tether.messages import Message
from tether.tools.spec import ToolSpec
from tether.tools.tool import ArgumentError, Tool, ToolContext, ToolOutput

SEARCH_TOOL = "search_tools"
REVEALED_KEY = "revealed"
# Kinds of tool a run always offers when it defers by number: tether's own built-ins, a
# delegation and a structured answer's tool (the run cannot end without it).
ALWAYS_OFFERED = frozenset({"builtin", "subagent", "output"})
DEFAULT_MATCHES = 5
MAX_MATCHES = 20
_SUMMARY_CHARS = 160


# --- ranking ---------------------------------------------------------------------------------

_WORD = re.compile(r"[A-Za-z]+|\d+")
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")


def words(text: str) -> list[str]:
    """``text`` as lower-case words: ``getIssue__list-comments`` is get, issue, list,
    comments (snake, kebab and camel case split), with a plural's final s dropped."""
    out: list[str] = []
    for word in _WORD.findall(_CAMEL.sub(" ", text)):
        word = word.lower()
        if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        out.append(word)
    return out


def rank(query: str, tools: Iterable[Tool], limit: int = DEFAULT_MATCHES) -> list[Tool]:
    """The tools that best match ``query``, best first, at most ``limit``; only tools
    sharing a word with it. BM25 (k1 1.2, b 0.75) over each tool's name (counted twice:
    a name says what a tool does more surely than its prose) and description."""
    wanted = set(words(query))
    docs = [(tool, Counter(words(tool.name) * 2 + words(tool.spec.description)))
            for tool in tools]
    if not wanted or not docs:
        return []
    average = sum(sum(c.values()) for _, c in docs) / len(docs) or 1.0
    scored = []
    for order, (tool, counts) in enumerate(docs):
        length = sum(counts.values())
        score = sum(_idf(word, docs) * _tf(counts[word], length, average)
                    for word in wanted if counts[word])
        if score > 0:
            scored.append((-score, order, tool))
    scored.sort(key=lambda s: (s[0], s[1]))
    return [tool for _, _, tool in scored[:limit]]


def _idf(word: str, docs: Sequence[tuple[Tool, Counter[str]]]) -> float:
    having = sum(1 for _, counts in docs if counts[word])
    return math.log(1 + (len(docs) - having + 0.5) / (having + 0.5))


def _tf(count: int, length: int, average: float, k1: float = 1.2, b: float = 0.75) -> float:
    return count * (k1 + 1) / (count + k1 * (1 - b + b * length / average))


def summary(tool: Tool) -> str:
    """A tool's description on one line: its first line, shortened."""
    lines = tool.spec.description.strip().splitlines()
    first = " ".join(lines[0].split()) if lines else ""
    return first if len(first) <= _SUMMARY_CHARS else first[:_SUMMARY_CHARS - 1] + "…"


# --- which tools wait ------------------------------------------------------------------------


def deferred(tool: Tool, large: bool) -> bool:
    """Whether ``tool`` waits to be found: marked so, or in a catalogue past its threshold
    (``large``) and not of a kind always offered."""
    if tool.defer is not None:
        return tool.defer
    return large and tool.origin not in ALWAYS_OFFERED


def wants_shelf(tools: Mapping[str, Tool], defer_after: int | None) -> bool:
    """Whether a run with these tools defers any (once per run: a run that defers nothing
    pays nothing more per turn)."""
    if SEARCH_TOOL in tools:  # the host has a tool of that name: nothing is hidden behind it
        return False
    if defer_after is not None and len(tools) > defer_after:
        return True
    return any(t.defer for t in tools.values())


def revealed_in(messages: Iterable[Message]) -> set[str]:
    """The names earlier searches of a conversation revealed (read from their results)."""
    found: set[str] = set()
    for message in messages:
        if message.role != "tool":
            continue
        for part in message.tool_results:
            value = part.structured
            if part.name == SEARCH_TOOL and not part.is_error and isinstance(value, dict):
                names = value.get(REVEALED_KEY)
                if isinstance(names, list):
                    found.update(n for n in names if isinstance(n, str))
    return found


@dataclass(slots=True)
class Shelf:
    """A run's deferred tools: the ones waiting now (``waiting``, set each turn from the
    tools as they are), the names found so far (``revealed``: by this run's searches and
    the conversation's earlier ones), and the ``search_tools`` tool that finds them."""

    defer_after: int | None
    revealed: set[str]
    waiting: dict[str, Tool] = field(default_factory=dict)
    tool: Tool = field(init=False)

    def __post_init__(self) -> None:
        self.tool = search_tool(self)

    def offer(self, tools: Mapping[str, Tool]) -> dict[str, Tool]:
        """The tools a request offers: every tool not waiting, the ones found, and
        ``search_tools`` while any waits."""
        large = self.defer_after is not None and len(tools) > self.defer_after
        offered: dict[str, Tool] = {}
        waiting: dict[str, Tool] = {}
        for name, tool in tools.items():
            if name in self.revealed or not deferred(tool, large):
                offered[name] = tool
            else:
                waiting[name] = tool
        self.waiting = waiting
        # Once a search found something it stays offered, even with nothing left to find:
        # a conversation that called it goes on seeing it (a small model shown its own
        # call to a tool no longer listed answers in words instead of calling what it found).
        if waiting or self.revealed:
            offered[SEARCH_TOOL] = self.tool
        return offered

    def find(self, query: str, limit: int) -> list[Tool]:
        """The waiting tools that match ``query``, now revealed."""
        found = rank(query, self.waiting.values(), limit)
        self.revealed.update(t.name for t in found)
        return found


def search_tool(shelf: Shelf) -> Tool:
    """``search_tools`` over ``shelf``: read-only, no approval (it shows names and
    descriptions; what it reveals is judged by the gate when called). Its result is
    outside text when it shows a tool an untrusted source described (an untrusted MCP
    server's), as offering that tool would be."""
    schema = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What the tool should do, in a few words."},
            # The default is declared: the validator fills it in, and provenance reads a
            # declared default as the tool's word, not the model's.
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_MATCHES,
                      "default": DEFAULT_MATCHES,
                      "description": f"How many tools at most (default {DEFAULT_MATCHES})."},
        },
        "required": ["query"],
    }
    spec = ToolSpec(SEARCH_TOOL, "Search the tools you have. Most of your tools are hidden "
                    "until found: when a task needs a tool you do not see (weather, email, "
                    "files, tickets...), call this first with a few words saying what the tool "
                    "does. The tools found can be called from your next step on.", schema)

    async def handler(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        found = shelf.find(arguments["query"], arguments.get("limit", DEFAULT_MATCHES))
        names = [t.name for t in found]
        if ctx.emit is not None and names:
            await ctx.emit(ev.ToolsRevealed(tuple(names), arguments["query"]))
        return ToolOutput(found_text(found), structured={REVEALED_KEY: names},
                          from_outside=any(t.spec_from_outside for t in found))

    return Tool(spec, handler, validator=_validated, origin="builtin", defer=False)


def found_text(found: Sequence[Tool]) -> str:
    """What a search answers the model."""
    if not found:
        return "No tool matches; try other words."
    return "Found (callable from your next step on):\n" + "\n".join(
        f"- {t.name}: {summary(t)}" for t in found)


def _validated(arguments: Any) -> dict[str, Any]:
    if not isinstance(arguments, dict):
        raise ArgumentError("arguments must be a JSON object")
    query, limit = arguments.get("query"), arguments.get("limit", DEFAULT_MATCHES)
    if not isinstance(query, str) or not query.strip():
        raise ArgumentError("query: say in a few words what the tool should do")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_MATCHES:
        raise ArgumentError(f"limit: a whole number from 1 to {MAX_MATCHES}")
    return {"query": query, "limit": limit}
