"""The seam that says when a run has its answer: the ``Ending`` protocol, and the ordinary one.

What counts as the answer is an ``Ending``'s to say. An ordinary run ends when the model
answers in text (``TextEnding``); a structured-output run ends when its answering tool
records a valid answer (``tether.output.OutputPlan``). The loop asks its ending and never
looks at which one it has.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from tether.messages import ToolCall
from tether.outcome import Final, RunAgain, StopCause, Stopped, TurnOutcome
from tether.providers.base import ToolChoice
from tether.tools.tool import Tool


class Ending(Protocol):
    """When a run has its answer, and what it offers the model to give it."""

    @property
    def value(self) -> Any:
        """The answer's value (``RunResult.output``); None for a text answer."""

    def tools(self, agent_tools: Mapping[str, Tool]) -> dict[str, Tool]:
        """The tools a request offers, given the agent's."""

    def tool_choice(self) -> ToolChoice:
        """What a request asks of the model's tool use."""

    async def after_text(self, text: str) -> TurnOutcome:
        """The model answered in text, calling no tool (awaited: a host's validator of the
        answer may be async)."""

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

    async def after_text(self, text: str) -> TurnOutcome:
        return Final(text) if text.strip() else Stopped(StopCause.NO_OUTPUT)

    def after_calls(self) -> TurnOutcome:
        return RunAgain()

    def ends_with(self, calls: Sequence[ToolCall]) -> bool:
        return False


TEXT_ENDING = TextEnding()
