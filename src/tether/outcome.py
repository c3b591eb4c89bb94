"""How a turn ends: a small sum type, and the seam that says when a run has its answer.

Every turn of the loop ends in one ``TurnOutcome``: ``Final`` (the answer), ``RunAgain``
(ask the model once more, maybe telling it something first), ``Paused`` (calls wait for a
host's decisions) or ``Stopped`` (a bound, an error, no answer: the cause says which).

What counts as the answer is an ``Ending``'s to say. An ordinary run ends when the model
answers in text (``TextEnding``); a structured-output run ends when its answering tool
records a valid answer (``tether.output.OutputPlan``). The loop asks its ending and never
looks at which one it has.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

if TYPE_CHECKING:
    from tether.errors import TetherError
    from tether.messages import ToolCall
    from tether.providers.base import ToolChoice
    from tether.tools.tool import Tool


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


class Ending(Protocol):
    """When a run has its answer, and what it offers the model to give it."""

    @property
    def value(self) -> Any:
        """The answer's value (``RunResult.output``); None for a text answer."""

    def tools(self, agent_tools: Mapping[str, Tool]) -> dict[str, Tool]:
        """The tools a request offers, given the agent's."""

    def tool_choice(self) -> ToolChoice:
        """What a request asks of the model's tool use."""

    def after_text(self, text: str) -> TurnOutcome:
        """The model answered in text, calling no tool."""

    def after_calls(self) -> TurnOutcome:
        """Every call of a turn has its result."""

    def ends_with(self, calls: Sequence[ToolCall]) -> bool:
        """Whether one of ``calls`` can give the answer: such a turn's calls run even at
        the last turn, whose results no model would read otherwise."""


class TextEnding:
    """An ordinary run: the model's text answer ends it (an empty one is no answer)."""

    value: Any = None

    def tools(self, agent_tools: Mapping[str, Tool]) -> dict[str, Tool]:
        return dict(agent_tools)

    def tool_choice(self) -> ToolChoice:
        return "auto"

    def after_text(self, text: str) -> TurnOutcome:
        return Final(text) if text.strip() else Stopped(StopCause.NO_OUTPUT)

    def after_calls(self) -> TurnOutcome:
        return RunAgain()

    def ends_with(self, calls: Sequence[ToolCall]) -> bool:
        return False


TEXT_ENDING = TextEnding()
