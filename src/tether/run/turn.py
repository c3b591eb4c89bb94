"""What a turn's answer leads to (``triage``: a pure function), and the one value for a turn
that ends before its calls ran (``Unrun``).

The loop asks the model (``tether.run.loop``), then triages the answer it kept: the answer
was cut by a limit that is not the run's own, the provider filtered it, it has no calls
(its text is weighed by the run's ending), it is the last turn, or it repeats a call that
failed too often; else its calls are taken (judged, then paused on or run). Every early
ending is an ``Unrun``: the loop applies it in one place, so a new reason to stop is a new
``Unrun`` here, not a new branch in the loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tether import events as ev
from tether.bounds import Reached
from tether.errors import HookError
from tether.messages import ToolCall
from tether.outcome import StopCause, Stopped
from tether.providers.base import ModelResponse
from tether.run.execution import Done
from tether.run.hooks import failed


@dataclass(frozen=True, slots=True)
class Unrun:
    """A turn ended before its calls ran (all of them, or the rest): the run stops with
    ``stop``. Each call not run is answered "Not run: ``why``." so the conversation stays
    valid to continue; ``said`` is what the run says of it (a warning, a hook's failure).

    ``done``: None when none of the calls was judged (the unrun are answered in the
    conversation, with a notice); else the calls the gate settled or that ran before the
    turn ended, by position, and every other call is settled as denied (each is then in
    the run's records, as a judged turn's calls are)."""

    stop: Stopped
    calls: Sequence[ToolCall] = ()
    why: str = ""
    said: ev.Event | None = None
    done: Mapping[int, Done] | None = None


@dataclass(frozen=True, slots=True)
class Weigh:
    """An answer without calls: the run's ending weighs its text."""

    text: str


@dataclass(frozen=True, slots=True)
class Take:
    """An answer whose calls are taken: judged, then paused on or run."""

    calls: Sequence[ToolCall]


Triaged = Unrun | Stopped | Weigh | Take


def triage(response: ModelResponse, *, own_budget: bool, last_turn: Reached | None,
           repeated: tuple[ToolCall, int] | None) -> Triaged:
    """What the kept answer leads to. ``own_budget``: the run has an output token budget
    of its own (so a ``max_tokens`` stop may be its cut); ``last_turn``: the bound the run
    reaches once this turn's calls ran (the calls then run for nothing, unless one of them
    can give the run its answer); ``repeated``: a call of the answer that failed too often
    already, and how often."""
    calls = response.message.tool_calls
    raw = response.raw_stop_reason
    if response.stop_reason == "max_tokens" and not own_budget:
        return cut_short(calls, raw)
    if response.stop_reason == "content_filter":
        return filtered(calls, raw)
    if not calls:
        if response.stop_reason == "max_tokens":
            return Stopped(StopCause.OUTPUT_TOKEN_BUDGET)  # the run's budget cut the answer
        return Weigh(response.message.text)
    if last_turn is not None:
        return Unrun(Stopped(last_turn.bound.cause), calls, last_turn.why)
    if repeated is not None:
        return gave_up(calls, *repeated)
    return Take(calls)


def cut_short(calls: Sequence[ToolCall], raw: str | None) -> Unrun:
    """The answer was cut by an output token limit that is not the run's own budget (the
    provider's or the server's) before the model finished it: the run stops, its text is
    what was written. No call of the answer runs: the last one's arguments may be cut too,
    and cut arguments can still parse (half a file's content, the first words of a
    command), and the model meant more calls than it wrote."""
    said = f" (stop reason {raw[:40]!r})" if raw else ""
    return Unrun(
        Stopped(StopCause.TRUNCATED), calls,
        "the answer that made it was cut short by the output token limit",
        ev.Notice("warning", f"the model's answer was cut by its output token limit{said} "
                             f"before it was complete; ask for a shorter answer, or raise "
                             f"the limit (max_output_tokens, tether run --max-tokens)",
                  source="model"))


def filtered(calls: Sequence[ToolCall], raw: str | None) -> Unrun:
    """The provider filtered or refused the answer (its stop reason says so): the run stops
    and says why, never as a completed answer; its text is what was written, and no call
    in it runs (the provider stopped the model mid-answer)."""
    said = f" (stop reason {raw[:40]!r})" if raw else ""
    return Unrun(
        Stopped(StopCause.CONTENT_FILTER), calls,
        "the provider filtered the answer that made it",
        ev.Notice("warning", f"the provider filtered or refused the model's answer{said}; "
                             f"what it wrote is kept, and the run stops", source="model"))


def gave_up(calls: Sequence[ToolCall], repeated: ToolCall, times: int) -> Unrun:
    """The model made a call again that failed ``times`` times in this run, after its last
    result told it not to: the run ends, and nothing of this turn runs."""
    name = repeated.name if len(repeated.name) <= 64 else repeated.name[:64] + "..."
    return Unrun(
        Stopped(StopCause.REPEATED_FAILURE), calls,
        f"the run ended: the call to {name} was made again with the same arguments after "
        f"failing {times} times",
        ev.Notice("warning", f"the model made the same call ({name!r} with the same "
                             f"arguments) again after it failed {times} times "
                             f"(max_repeated_failures); the run stops", source="agent"))


def hook_failed(calls: Sequence[ToolCall], done: Mapping[int, Done],
                error: HookError) -> Unrun:
    """A hook failed while the turn's calls were judged or run: the run ends with its
    error. Every call still gets a result: its own if it has one (``done``), else "not
    run" (a call whose result a hook was rewriting is withheld: it failed closed)."""
    return Unrun(Stopped(StopCause.ERROR, error=error), calls,
                 f"the run stopped because a hook failed ({error.hook or 'a hook'})",
                 failed(error), done)
