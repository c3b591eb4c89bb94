"""The bounds of a run, in one table, and what a run has spent.

Every bound (the interrupt, the output token budget, the cost budget, ``max_turns``) is a
row of ``BOUNDS``: how to tell it is reached, and the cause the run then stops with. The
loop checks the table before every model request and before every batch of tool calls; the
first row reached stops the run.

A run's ``Spend`` is its usage as it happens, its sub-agents' included: a child's ``Spend``
is chained to its parent's, every token it spends is counted up the chain at once, and the
child checks every budget on the chain. So a parent's ``max_output_tokens`` or
``max_cost_usd`` covers what its children spend, and stops a child the moment the family
has spent it, however deep the delegation and however many children run side by side.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from tether.messages import Usage
from tether.outcome import StopCause
from tether.settings import AgentSettings


class Spend:
    """What a run has spent so far (its sub-agents' and tools' included), chained to the
    ``Spend`` of the run that delegated to it (``above``)."""

    __slots__ = ("above", "cost_capped", "settings", "tokens_capped", "usage")

    def __init__(self, settings: AgentSettings, above: Spend | None = None) -> None:
        self.settings = settings
        self.above = above
        self.usage = Usage()
        # Whether any run on the chain has an output token (a cost) budget: most have none,
        # and the bounds are read before every request.
        self.tokens_capped: bool = settings.max_output_tokens is not None or (
            above is not None and above.tokens_capped)
        self.cost_capped: bool = settings.max_cost_usd is not None or (
            above is not None and above.cost_capped)

    def add(self, usage: Usage) -> None:
        """Count ``usage`` here and in every run above this one."""
        spend: Spend | None = self
        while spend is not None:
            spend.usage = spend.usage + usage
            spend = spend.above

    def chain(self) -> Iterator[Spend]:
        """This run's spend, then its parent's, up to the top-level run's."""
        spend: Spend | None = self
        while spend is not None:
            yield spend
            spend = spend.above

    def cost(self) -> float | None:
        """This run's cost at its prices, or None without prices."""
        prices = self.settings.prices
        return prices.cost(self.usage) if prices is not None else None

    def output_tokens_left(self) -> int | None:
        """The fewest output tokens any budget on the chain has left (None: no budget)."""
        if not self.tokens_capped:
            return None
        # Tokens a server did not report are unknown: the budget counts the known ones.
        left = [s.settings.max_output_tokens - (s.usage.output_tokens or 0)
                for s in self.chain() if s.settings.max_output_tokens is not None]
        return min(left) if left else None

    def tokens_spent(self) -> str | None:
        """Why no more output tokens may be spent, or None."""
        if not self.tokens_capped:
            return None
        for spend in self.chain():
            budget = spend.settings.max_output_tokens
            if budget is not None and (spend.usage.output_tokens or 0) >= budget:
                if spend is self:
                    return "the run's output token budget is spent"
                return (f"the delegating run's output token budget ({budget} tokens) is "
                        f"spent")
        return None

    def cost_spent(self) -> str | None:
        """Why no more money may be spent, or None."""
        if not self.cost_capped:
            return None
        for spend in self.chain():
            budget, cost = spend.settings.max_cost_usd, spend.cost()
            if budget is not None and cost is not None and cost >= budget:
                whose = "the run's" if spend is self else "the delegating run's"
                return f"{whose} cost budget (${budget:g}) is spent"
        return None


@dataclass(frozen=True, slots=True)
class Progress:
    """Where a run is, as the bounds see it."""

    turns: int
    max_turns: int
    interrupt: asyncio.Event | None
    spend: Spend


@dataclass(frozen=True, slots=True)
class Bound:
    """One bound: ``reached`` says why the run must stop (None while it may go on)."""

    name: str
    cause: StopCause
    reached: Callable[[Progress], str | None]


def _interrupted(p: Progress) -> str | None:
    return "the run was interrupted" if p.interrupt is not None and p.interrupt.is_set() \
        else None


def _turns_used(p: Progress) -> str | None:
    return f"the run reached max_turns ({p.max_turns})" if p.turns >= p.max_turns else None


# The order is the order of precedence: the first row reached names the stop.
BOUNDS: tuple[Bound, ...] = (
    Bound("interrupt", StopCause.INTERRUPTED, _interrupted),
    Bound("max_output_tokens", StopCause.OUTPUT_TOKEN_BUDGET, lambda p: p.spend.tokens_spent()),
    Bound("max_cost_usd", StopCause.COST_BUDGET, lambda p: p.spend.cost_spent()),
    Bound("max_turns", StopCause.MAX_TURNS, _turns_used),
)


@dataclass(frozen=True, slots=True)
class Reached:
    """A bound that stops the run, and why in words (for the calls it leaves unrun)."""

    bound: Bound
    why: str


def armed(interrupt: asyncio.Event | None, spend: Spend) -> tuple[Bound, ...]:
    """The rows of ``BOUNDS`` a run with ``interrupt`` and ``spend`` can reach, in order: a
    row with nothing to watch (no interrupt, no budget on the chain) is never reached, so
    it need not be read before every request."""
    watched = {"interrupt": interrupt is not None, "max_output_tokens": spend.tokens_capped,
               "max_cost_usd": spend.cost_capped}
    return tuple(bound for bound in BOUNDS if watched.get(bound.name, True))


def first_reached(progress: Progress, *, skip: frozenset[str] = frozenset(),
                  bounds: tuple[Bound, ...] = BOUNDS) -> Reached | None:
    """The first bound of ``bounds`` (``BOUNDS``, or the rows ``armed`` for a run) not
    named in ``skip`` that ``progress`` reached."""
    for bound in bounds:
        if bound.name in skip:
            continue
        why = bound.reached(progress)
        if why is not None:
            return Reached(bound, why)
    return None
