"""Which messages a fitting leaves out and shortens: pure functions over the message list.

The conversation stays whole (a stored session keeps its full history); what is *sent* is
a view of it, made fresh before every request by the rules below: ``plan_fit`` says which
messages to leave out and shorten, ``build_view`` makes the view. Tokens are estimated
from characters (``Estimate``). The fitter that applies a plan to each request is
``tether.run.context.fitter``; summaries of what is left out are ``...summary``'s.

The rules, in order:

- The system prompt (sent apart from the messages) and the latest user message are kept.
- A tool call and its result are one block: the assistant message with its calls and the
  tool message that answers them (parallel calls included) are kept or left out together.
- The newest block is never left out: it holds the calls just answered, or a paused call
  and the results its resumed turn produced.
- When the view passes the budget (the window less a reserve for the answer), old large
  tool results are shortened first, each with a marker saying so; then whole blocks are
  left out, oldest first, down to a low-water mark well under the budget. Trimming in
  such large steps keeps the sent prefix the same for many turns, so a server's prompt
  cache keeps hitting.
- Fitting never reads or writes ``Conversation.taint``: leaving text out never makes the
  conversation cleaner. Untrusted text stays delimited when it is shortened, and a
  summary of untrusted text is itself untrusted and delimited
  (``trust.untrusted_block``): the summarizer read the text, so what it wrote is no more
  trustworthy than what it read.

The view is a function of the messages alone (the fitting is *replayed* over every
earlier request of the conversation), so a session continued in a new process is sent the
same prefix its last request was.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from itertools import chain

from tether.messages import Image, Message, Part, Reasoning, Text, ToolCall, ToolResult
from tether.providers.base import ModelRequest
from tether.tools.spec import ToolSpec

# A new estimate counts this many characters as one token until the model's own counts
# (or its tokenizer) say otherwise: low, so an unknown text is over- rather than under-
# counted (English runs near 4, JSON and code near 3).
DEFAULT_CHARS_PER_TOKEN = 3.0
# What a message costs beyond its text (the chat template's role markers), and an image.
MESSAGE_OVERHEAD_TOKENS = 4
IMAGE_TOKENS = 768
# Below this many characters in all, a request fits any window tether expects (2,048
# tokens and up): it is sent as it is, and nobody is asked for the window.
SMALL_REQUEST_CHARS = 2_000
# What the note standing for left-out messages costs (a summary adds its own length).
NOTE_TOKENS = 48

_UNTRUSTED_OPEN = "<untrusted-data"
_UNTRUSTED_CLOSE = "\n</untrusted-data>"


@dataclass(frozen=True, slots=True)
class Estimate:
    """Tokens from characters: ``chars / chars_per_token``, times ``scale`` (what the
    model's own counts showed the estimate to be off by)."""

    chars_per_token: float = DEFAULT_CHARS_PER_TOKEN
    scale: float = 1.0

    def tokens(self, chars: int, extra: int = 0) -> int:
        return math.ceil((chars / self.chars_per_token + extra) * self.scale)

    def message(self, message: Message) -> int:
        chars, images = message_size(message)
        return self.tokens(chars, MESSAGE_OVERHEAD_TOKENS + images * IMAGE_TOKENS)

    def fixed(self, request: ModelRequest) -> int:
        """The system prompt and the tool declarations (sent with every request)."""
        return self.tokens(fixed_chars(request), 2 * MESSAGE_OVERHEAD_TOKENS)

    def request(self, request: ModelRequest) -> int:
        return self.fixed(request) + sum(self.message(m) for m in request.messages)


def message_chars(message: Message) -> int:
    """The characters of a message as a wire carries them (images are counted apart)."""
    return message_size(message)[0]


def message_size(message: Message) -> tuple[int, int]:
    """A message's characters as a wire carries them, and its images (counted apart)."""
    total = images = 0
    for part in message.parts:
        if isinstance(part, Text):
            total += len(part.text)
        elif isinstance(part, ToolCall):
            total += len(part.name) + len(part.arguments) + 16
        elif isinstance(part, ToolResult):
            total += len(part.content) + 8
            images += len(part.images)
        elif isinstance(part, Reasoning):
            total += len(part.text) + len(part.signature or "") + len(part.redacted or "")
        elif isinstance(part, Image):
            images += 1
    return total, images


def fixed_chars(request: ModelRequest) -> int:
    return len(request.system or "") + sum(map(spec_chars, request.tools))


# A spec's count, by the spec's identity (the spec is kept, so its id is not reused): the
# same specs go with every request, and their schemas are not changed once declared.
_spec_chars: dict[int, tuple[ToolSpec, int]] = {}


def spec_chars(spec: ToolSpec) -> int:
    """The characters of a tool's declaration as a wire carries it."""
    known = _spec_chars.get(id(spec))
    if known is not None and known[0] is spec:
        return known[1]
    chars = len(spec.name) + len(spec.description) \
        + len(json.dumps(spec.schema_json, default=str)) + 24
    if len(_spec_chars) >= 4096:  # tools made anew all the time: start over
        _spec_chars.clear()
    _spec_chars[id(spec)] = (spec, chars)
    return chars


# --- the plan ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Budget:
    """The tokens a request's prompt may take (``window - reserve``) and the low-water
    mark a fitting trims down to."""

    window: int
    reserve: int
    low_water: float = 0.6

    @property
    def high(self) -> int:
        return max(1, self.window - self.reserve)

    @property
    def low(self) -> int:
        return max(1, int(self.high * self.low_water))


@dataclass(frozen=True, slots=True)
class Plan:
    """Which messages a fitting leaves out and which it shortens (indices into the
    conversation), and the estimated tokens before and after."""

    dropped: tuple[int, ...]
    shortened: tuple[int, ...]
    tokens_before: int
    tokens_after: int
    acted: bool  # the last request point moved the cut or shortened more

    @property
    def fitted(self) -> bool:
        return bool(self.dropped or self.shortened)


def blocks(messages: Sequence[Message]) -> list[tuple[int, int]]:
    """The units a fitting keeps or leaves out whole, as ``(start, end)`` index ranges: a
    tool message always belongs to the block before it (the assistant message whose calls
    it answers), so a call and its result are never separated."""
    out: list[tuple[int, int]] = []
    for i, message in enumerate(messages):
        if message.role == "tool" and out:
            start, _ = out[-1]
            out[-1] = (start, i + 1)
        else:
            out.append((i, i + 1))
    return out


def shorten_result(result: ToolResult, keep_chars: int) -> ToolResult:
    """``result`` with its content cut to about ``keep_chars`` characters and a marker
    saying how much was left out. A delimited untrusted block keeps its opening notice and
    its closing delimiter; the result's trust is unchanged."""
    content = result.content
    head_start = 0
    tail = ""
    if content.startswith(_UNTRUSTED_OPEN) and content.endswith(_UNTRUSTED_CLOSE):
        # The opening tag and the notice under it (two lines) stay, as does the close.
        first = content.find("\n")
        second = content.find("\n", first + 1) if first >= 0 else -1
        head_start = second + 1 if second >= 0 else 0
        tail = _UNTRUSTED_CLOSE
    body_end = len(content) - len(tail)
    keep_to = head_start + keep_chars
    if keep_to >= body_end:
        return result
    left_out = body_end - keep_to
    marker = (f"\n[... shortened by tether to fit the context window: {left_out} more "
              f"characters left out]")
    return dataclasses.replace(result, content=content[:keep_to] + marker + tail)


def shorten_message(message: Message, min_chars: int, keep_chars: int) -> Message | None:
    """``message`` with every tool result longer than ``min_chars`` shortened, or None
    when it has none."""
    changed = False
    parts: list[Part] = []
    for part in message.parts:
        if isinstance(part, ToolResult) and len(part.content) > min_chars:
            short = shorten_result(part, keep_chars)
            changed = changed or short is not part
            parts.append(short)
        else:
            parts.append(part)
    return Message(message.role, tuple(parts)) if changed else None


def shortening_limits(budget: Budget, estimate: Estimate) -> tuple[int, int]:
    """``(min_chars, keep_chars)``: a tool result longer than ``min_chars`` is large; a
    shortened one keeps ``keep_chars`` characters (an eighth and a sixteenth of the
    budget's tokens, in characters)."""
    per_token = estimate.chars_per_token / estimate.scale
    return (int(max(100, budget.high // 8) * per_token),
            int(max(50, budget.high // 16) * per_token))


def plan_fit(
    messages: Sequence[Message],
    budget: Budget,
    estimate: Estimate,
    fixed: int,
    *,
    pins: Collection[int] = (),
    note_tokens: int = NOTE_TOKENS,
) -> Plan:
    """Which messages to leave out and shorten so the view fits ``budget``.

    The fitting is replayed over every request the conversation has had (each assistant
    message answers one) and then the next: at each, a view over the budget first has its
    old large tool results shortened, then loses whole blocks, oldest first, down to the
    low-water mark. Kept and shortened only ever grow, so between two fittings the view is
    only appended to. ``fixed`` is what the system prompt and tools cost; ``pins`` are
    indices kept whatever happens (the run's own prompt), besides the latest user message
    and the newest block. (``Replay`` keeps this as a conversation grows.)
    """
    return Replay().plan(messages, budget, estimate, fixed, pins=pins, note_tokens=note_tokens)


@dataclass(slots=True)
class _Replayed:
    """Where the replay of a fitting stands after a request point."""

    shortened: set[int] = field(default_factory=set)
    cut: int = 0  # blocks before this one are left out, except the pinned ones
    held: set[int] = field(default_factory=set)  # pinned blocks before the cut: still sent
    total: int = 0
    noted: bool = False
    upto: int = 0
    acted: bool = False
    done: int = 0  # request points replayed

    def copy(self) -> _Replayed:
        return _Replayed(set(self.shortened), self.cut, set(self.held), self.total,
                         self.noted, self.upto, self.acted, self.done)


class Replay:
    """``plan_fit`` kept as a conversation grows, so a turn costs what its new messages
    cost, not the whole conversation again.

    Each message is counted once (its characters and images: ``chars``), and the fitting's
    state after each earlier request point (an assistant message) is kept: the next plan
    replays only the points after it. A point's state depends only on the messages before
    it, so it holds for every later request of the same conversation. Everything is read
    again when the messages are not the ones read before, grown (the same last message at
    the same place, as ``tether.provenance.SourceIndex`` checks: a conversation is only
    appended to), and the replay again when the budget, estimate, fixed cost, pins or note
    cost differ from the last plan's.
    """

    __slots__ = ("_block_of", "_blocks", "_chars", "_dropped", "_full", "_key", "_last",
                 "_last_user", "_points", "_short", "_state", "_sums", "_total_chars")

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._last: Message | None = None
        self._chars: list[tuple[int, int]] = []  # each message's (characters, images)
        self._sums: dict[Estimate, tuple[int, int]] = {}  # an estimate's (upto, tokens)
        self._total_chars = 0
        self._blocks: list[tuple[int, int]] = []
        self._block_of: list[int] = []  # the block each message belongs to
        self._last_user = [-1]  # _last_user[p]: the latest user message before p
        self._points: list[int] = []  # the assistant messages after the first
        self._restart()

    def _restart(self) -> None:
        """Forget the replay (not the counts): its key changed."""
        self._key: tuple[object, ...] | None = None
        self._full: list[int] = []
        self._short: dict[int, int] = {}  # a large tool result's cost once shortened
        self._state = _Replayed()
        # The last plan's left-out messages, by (cut end, held blocks): the cut moves only
        # now and then (down to the low-water mark), so most turns' plans share it.
        self._dropped: tuple[tuple[int, tuple[int, ...]], tuple[int, ...]] | None = None

    def read(self, messages: Sequence[Message]) -> None:
        """Count the messages appended since the last call (all of them when ``messages``
        is not the sequence read before, grown)."""
        seen = len(self._chars)
        if seen > len(messages) or (seen and messages[seen - 1] is not self._last):
            self._reset()
            seen = 0
        if seen == len(messages):
            return
        for i in range(seen, len(messages)):
            message = messages[i]
            chars, images = message_size(message)
            self._chars.append((chars, images))
            self._total_chars += chars
            if message.role == "tool" and self._blocks:
                self._blocks[-1] = (self._blocks[-1][0], i + 1)
            else:
                self._blocks.append((i, i + 1))
            self._block_of.append(len(self._blocks) - 1)
            self._last_user.append(i if message.role == "user" else self._last_user[i])
            if message.role == "assistant" and i > 0:
                self._points.append(i)
        self._last = messages[-1]

    def chars(self, messages: Sequence[Message]) -> int:
        """The characters of ``messages`` (``message_chars`` summed)."""
        self.read(messages)
        return self._total_chars

    def tokens(self, messages: Sequence[Message], estimate: Estimate) -> int:
        """``estimate.message`` summed over ``messages``."""
        self.read(messages)
        upto, total = self._sums.get(estimate, (0, 0))
        for chars, images in self._chars[upto:]:
            total += estimate.tokens(chars, MESSAGE_OVERHEAD_TOKENS + images * IMAGE_TOKENS)
        if len(self._sums) >= 8 and estimate not in self._sums:
            self._sums.clear()  # estimates that keep moving: keep the latest few
        self._sums[estimate] = (len(self._chars), total)
        return total

    def plan(self, messages: Sequence[Message], budget: Budget, estimate: Estimate,
             fixed: int, *, pins: Collection[int] = (),
             note_tokens: int = NOTE_TOKENS) -> Plan:
        """``plan_fit(messages, ...)``, replaying only the request points not replayed
        before."""
        self.read(messages)
        key = (budget, estimate, fixed, tuple(sorted(pins)), note_tokens)
        if key != self._key:
            self._restart()
            self._key = key
            self._state.total = fixed
        n = len(messages)
        full = self._full
        min_chars, keep_chars = shortening_limits(budget, estimate)
        for i in range(len(full), n):
            chars, images = self._chars[i]
            full.append(estimate.tokens(chars, MESSAGE_OVERHEAD_TOKENS + images * IMAGE_TOKENS))
            if messages[i].role == "tool":
                short = shorten_message(messages[i], min_chars, keep_chars)
                if short is not None:
                    self._short[i] = estimate.message(short)
        state = self._state
        points = self._points
        while state.done < len(points):
            self._point(state, points[state.done], pins, budget, note_tokens)
            state.done += 1
        last = state.copy()  # the next request's point: not kept (what follows may differ)
        self._point(last, n, pins, budget, note_tokens)
        units, cut = self._blocks, last.cut
        end = units[cut - 1][1] if cut else 0  # what the cut leaves out, but the held
        held = tuple(sorted(last.held))
        dropped = self._left_out(end, held)
        kept_short = tuple(sorted(i for i in last.shortened if i >= end or any(
            units[b][0] <= i < units[b][1] for b in held)))
        return Plan(dropped, kept_short, fixed + self.tokens(messages, estimate),
                    last.total, last.acted)

    def _left_out(self, end: int, held: tuple[int, ...]) -> tuple[int, ...]:
        """The messages before ``end`` but those of the ``held`` blocks (below the cut:
        their places are fixed), in order; the last plan's when the same."""
        key = (end, held)
        if self._dropped is not None and self._dropped[0] == key:
            return self._dropped[1]
        # Blocks never overlap: the runs between the held ones, in order.
        starts = [0, *(self._blocks[b][1] for b in held)]
        ends = [*(self._blocks[b][0] for b in held), end]
        dropped = tuple(chain.from_iterable(map(range, starts, ends)))
        self._dropped = (key, dropped)
        return dropped

    def _point(self, state: _Replayed, p: int, pins: Collection[int], budget: Budget,
               note_tokens: int) -> None:
        """Replay the fitting at request point ``p`` (the request sent with ``p`` messages)."""
        full, block_of, held = self._full, self._block_of, state.held
        for i in range(state.upto, p):
            state.total += full[i]
        state.upto = p
        pinned = {block_of[x] for x in pins if x < p}
        if self._last_user[p] >= 0:
            pinned.add(block_of[self._last_user[p]])
        for b in sorted(held - pinned):  # a pin moved on: its block below the cut goes
            held.discard(b)
            state.total -= self._block_cost(state, b)
            if not state.noted:
                state.total, state.noted = state.total + note_tokens, True
        state.acted = state.total > budget.high
        if state.acted:
            self._shed(state, p, pinned, budget, note_tokens)

    def _block_cost(self, state: _Replayed, b: int) -> int:
        """What block ``b`` costs as it stands (its shortened results at their short cost)."""
        full, short_cost, shortened = self._full, self._short, state.shortened
        return sum(short_cost[i] if i in shortened else full[i]
                   for i in range(*self._blocks[b]))

    def _shed(self, state: _Replayed, p: int, pinned: set[int], budget: Budget,
              note_tokens: int) -> None:
        """Bring request point ``p``, over the high-water mark, back under it: shorten the
        results that may be, then cut whole blocks (``pinned`` ones are held), then shorten
        the newest block too."""
        full, short_cost, units, block_of = self._full, self._short, self._blocks, \
            self._block_of
        shortened, held = state.shortened, state.held
        tail = block_of[p - 1] if p > 0 else 0
        for i in sorted(short_cost):
            if i < p and i not in shortened and block_of[i] != tail \
                    and (block_of[i] >= state.cut or block_of[i] in held):
                shortened.add(i)
                state.total -= full[i] - short_cost[i]
        # Shortening alone may be enough: only the view after the shortened result
        # changes, so a server's prompt cache still serves what comes before. Otherwise
        # whole blocks go, down to the low-water mark, so the next fitting is far off.
        if state.total > budget.high:
            while state.total > budget.low and state.cut < tail:
                b, state.cut = state.cut, state.cut + 1
                if b in pinned:
                    held.add(b)
                    continue
                state.total -= self._block_cost(state, b)
                shortened.difference_update(range(*units[b]))  # gone: no longer counted
                if not state.noted:
                    state.total, state.noted = state.total + note_tokens, True
        if state.total > budget.high:  # the newest block alone is too large: shorten it too
            for i in range(*units[tail]):
                if i in short_cost and i not in shortened:
                    shortened.add(i)
                    state.total -= full[i] - short_cost[i]

def build_view(
    messages: Sequence[Message], plan: Plan, budget: Budget, estimate: Estimate, note: str,
) -> tuple[Message, ...]:
    """The messages to send: ``plan`` applied, and ``note`` (saying what was left out)
    at the start, inside the first user message so roles still alternate."""
    min_chars, keep_chars = shortening_limits(budget, estimate)
    # Only the messages kept are visited: those the cut left out are a run from the start
    # (but for the pinned blocks kept below it).
    end = plan.dropped[-1] + 1 if plan.dropped else 0
    below = kept_below(plan.dropped)
    view = [messages[i] for i in below]
    view.extend(messages[end:])
    if plan.shortened:
        at = {i: k for k, i in enumerate(below)}
        for i in plan.shortened:
            k = at[i] if i < end else len(below) + i - end
            view[k] = shorten_message(view[k], min_chars, keep_chars) or view[k]
    if plan.dropped:
        if view and view[0].role == "user":
            view[0] = Message("user", (Text(note + "\n\n"), *view[0].parts))
        else:
            view.insert(0, Message.user(note))
    return tuple(view)


def kept_below(dropped: Sequence[int]) -> list[int]:
    """The indices below the last of ``dropped`` (ascending, none twice) that it leaves
    out, in order: found by halving where the count of missing indices grows, so they cost
    what the kept ones are (a few pinned blocks), not what the left-out ones are."""
    if not dropped:
        return []
    out = list(range(dropped[0]))
    spans = [(0, len(dropped) - 1)]
    while spans:
        lo, hi = spans.pop()
        if dropped[hi] - dropped[lo] == hi - lo:
            continue  # consecutive: nothing missing between them
        if hi - lo == 1:
            out.extend(range(dropped[lo] + 1, dropped[hi]))
            continue
        mid = (lo + hi) // 2
        spans += ((mid, hi), (lo, mid))  # the lower half next: found in order
    return out


def trim_note(count: int) -> str:
    return (f"[tether: {count} earlier message(s) of this conversation were left out to fit "
            f"the model's context window.]")
