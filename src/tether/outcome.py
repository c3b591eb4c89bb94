"""How a turn ends, and why a run ended: a small sum type and ``StopCause``.

Every turn of the loop ends in one ``TurnOutcome``: ``Final`` (the answer), ``RunAgain``
(ask the model once more, maybe telling it something first), ``Paused`` (calls wait for a
host's decisions) or ``Stopped`` (a bound, an error, no answer: the cause says which).
What counts as the answer is an ``Ending``'s to say (``tether.run.ending``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from tether.errors import TetherError


class StopCause(StrEnum):
    """Why a run ended. A ``StrEnum``: ``result.stop_cause == "completed"`` works."""

    COMPLETED = "completed"  # the model gave its answer
    MAX_TURNS = "max_turns"  # the turn bound was reached while the model still worked
    OUTPUT_TOKEN_BUDGET = "output_token_budget"  # max_output_tokens spent
    COST_BUDGET = "cost_budget"  # max_cost_usd spent (at the agent's prices)
    INTERRUPTED = "interrupted"  # the interrupt event was set (Ctrl-C in the CLI)
    NO_OUTPUT = "no_output"  # the model finished without an answer
    # The model's answer was cut by an output token limit (the provider's or the server's,
    # not the run's own max_output_tokens) before it was complete; calls in it never ran.
    TRUNCATED = "truncated"
    # The model made a call again (same tool, same arguments) that had failed
    # max_repeated_failures times in the run, after it was told not to.
    REPEATED_FAILURE = "repeated_failure"
    # The provider filtered or refused the model's answer (a safety filter, a refusal):
    # what it wrote is kept, calls in it never ran.
    CONTENT_FILTER = "content_filter"
    PAUSED = "paused"  # waiting for approval decisions (see Agent.resume)
    ERROR = "error"  # the provider failed; RunResult.error says how


@dataclass(frozen=True, slots=True)
class Final:
    """The run has its answer; ``text`` is the run's text."""

    text: str


@dataclass(frozen=True, slots=True)
class RunAgain:
    """Ask the model again; ``say`` (when set) joins the conversation first, as the user's."""

    say: str | None = None


@dataclass(frozen=True, slots=True)
class Paused:
    """Calls of this turn wait for a host's decisions (``Agent.resume``)."""


@dataclass(frozen=True, slots=True)
class Stopped:
    """The run stops with ``cause``. ``text`` is the run's text (None: the model's last
    text); ``error`` is what failed, for ``StopCause.ERROR``."""

    cause: StopCause
    text: str | None = None
    error: TetherError | None = None


TurnOutcome: TypeAlias = Final | RunAgain | Paused | Stopped
