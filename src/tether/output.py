"""Structured output: the model answers by calling a generated, per-call-unique tool.

::

    spec = OutputSpec("report", "The answer: the city and its temperature.", Weather)
    report = await agent.prepare("Weather in Paris?", output=spec).output()
    report.value  # a Weather instance

A shaping turn (the default) offers only the answering tool and asks the provider to call
it. ``spec.with_tools()`` keeps the agent's tools beside it: the model works, then answers.

``spec.with_validator(fn)`` adds a host's check of the answer: ``fn`` gets the validated
value (the model's instance, or the dict) and raises ``ModelRetry("why")`` to send the model
back with that message, up to the agent's ``output_retries``; a text answer is checked the
same way by ``Agent.run(..., output_validators=[fn])`` (``CheckedText``). A validator that
fails otherwise ends the run (``OutputFailure("rejected")``): it fails closed.
"""

from __future__ import annotations

import inspect
import re
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from tether.conversation import Conversation
from tether.display import inline
from tether.errors import ConfigError, HookError, ModelRetry, OutputFailure, TetherError
from tether.events import Event
from tether.messages import Part, ToolCall
from tether.outcome import Final, RunAgain, StopCause, Stopped, TurnOutcome
from tether.providers.base import NamedToolChoice, ToolChoice
from tether.result import RunResult, run_finished
from tether.run.host import RunHost
from tether.run.loop import run_events
from tether.tools.spec import ToolSpec
from tether.tools.tool import ArgumentError, Tool, ToolContext, ToolOutput, json_schema_validator

# A host's check of an answer: raises ModelRetry to send the model back; sync or async.
OutputValidator = Callable[[Any], Awaitable[Any] | Any]

_UNSAFE = re.compile(r"[^A-Za-z0-9_]")
TOOL_NAME = re.compile(r"^[A-Za-z0-9_]{1,64}$")


@dataclass(frozen=True)
class OutputSpec:
    """The shape a run must answer in (seed 004).

    - ``name``: what the answering tool is called as the model sees it (``report``); the real
      name is derived from it and made unique per run.
    - ``description``: what the answer is, in the imperative; with ``with_tools()``, also
      when to stop working and answer.
    - ``schema``: a JSON Schema dict, or a pydantic model class (its schema is used and the
      answer is parsed into it).
    """

    name: str
    description: str
    schema: dict[str, Any] | type[Any]
    keeps_tools: bool = field(default=False, kw_only=True)
    validators: tuple[OutputValidator, ...] = field(default=(), kw_only=True)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ConfigError("OutputSpec.name must be a non-empty string")
        if not isinstance(self.description, str):
            raise ConfigError("OutputSpec.description must be a string")
        if not isinstance(self.schema, dict) and not _is_model_class(self.schema):
            raise ConfigError("OutputSpec.schema must be a JSON Schema dict or a pydantic "
                              "model class")

    def with_tools(self) -> OutputSpec:
        """A copy whose run keeps the agent's tools and works before it answers."""
        return replace(self, keeps_tools=True)

    def with_validator(self, validator: OutputValidator) -> OutputSpec:
        """A copy whose answers ``validator`` checks too (after the schema, in the order
        added): it gets the validated value and raises ``ModelRetry`` to refuse it."""
        if not callable(validator):
            raise ConfigError("OutputSpec.with_validator takes a function of the answer")
        return replace(self, validators=(*self.validators, validator))

    def reserve(self) -> OutputReservation:
        """The exact generated answering tool name for one future run; no side effect."""
        return OutputReservation(self, _unique_name(self.name))

    def json_schema(self) -> dict[str, Any]:
        if isinstance(self.schema, dict):
            return self.schema
        generated: dict[str, Any] = self.schema.model_json_schema()
        return generated

    def __hash__(self) -> int:
        return hash((self.name, self.description, self.keeps_tools, self.validators,
                     self.schema if not isinstance(self.schema, dict) else repr(self.schema)))


@dataclass(frozen=True, slots=True)
class OutputReservation:
    """An ``OutputSpec`` with its answering tool's name fixed, so a host can recognise the
    run's events before it starts. Use it for one run."""

    spec: OutputSpec
    tool_name: str


@dataclass(frozen=True, slots=True)
class OutputReport:
    value: Any
    result: RunResult


def _unique_name(name: str) -> str:
    base = _UNSAFE.sub("_", name)[:32] or "answer"
    return f"{base}_{secrets.token_hex(6)}"


def _is_model_class(value: Any) -> bool:
    return isinstance(value, type) and hasattr(value, "model_validate") \
        and hasattr(value, "model_json_schema")


NUDGE = ("You answered in text, but this task must be answered by calling the {tool} tool. "
         "Call {tool} now with your answer.")


class OutputPlan:
    """A structured-output run's ``Ending``: its answering tool, and when the run is done.

    The answering tool is an ordinary ``Tool`` and passes the gate like any other: its
    validator checks the answer against the schema, its ``on_invalid`` words the correction
    (and counts the retries), its handler records the valid answer. The loop asks the plan
    what every ending is asked (the tools a request offers, what a text answer and a turn
    of calls mean) and never which tool was called.
    """

    def __init__(self, reservation: OutputReservation, retries: int) -> None:
        spec = reservation.spec
        self.spec = spec
        self.tool_name = reservation.tool_name
        schema = spec.json_schema()
        self._validate_schema = json_schema_validator(schema) if isinstance(spec.schema, dict) \
            else None
        self.tool = Tool(ToolSpec(self.tool_name, spec.description, schema, title=spec.name),
                         self._record, validator=self._validate, origin="output",
                         on_invalid=self._correction)
        self.max_retries = self.retries_left = retries
        self.nudged = False
        self.value: Any = None
        self.succeeded = False
        self.failure: Literal["mismatch", "prose", "rejected"] | None = None
        self.last_error: str | None = None

    @property
    def done(self) -> bool:
        return self.succeeded or self.failure is not None

    def owns(self, name: str) -> bool:
        return name == self.tool_name

    # --- the answering tool ----------------------------------------------------------------

    def _parsed(self, arguments: Any) -> Any:
        """The answer as its schema shapes it (a pydantic model's instance), or
        ``ArgumentError`` with the mismatch in words."""
        if not isinstance(arguments, dict):
            raise ArgumentError("arguments must be a JSON object")
        try:
            if self._validate_schema is not None:
                return self._validate_schema(arguments)
            return self.spec.schema.model_validate(arguments)  # type: ignore[union-attr]
        except (ArgumentError, ValueError) as e:
            raise ArgumentError(_validation_message(e)) from None

    def _validate(self, arguments: Any) -> dict[str, Any]:
        self._parsed(arguments)
        validated: dict[str, Any] = arguments
        return validated

    async def _record(self, arguments: dict[str, Any], ctx: ToolContext) -> str | ToolOutput:
        value = self._parsed(arguments)
        refused = await validated(self.spec.validators, value)
        if refused is not None:
            return self._refused(*refused)
        self.value = value
        self.succeeded = True
        return "Answer recorded."

    def _refused(self, why: str, retry: bool) -> ToolOutput:
        """A validator refused the answer: the model is sent back with its message until
        the retries run out (or at once, when the validator itself failed)."""
        self.last_error = why
        if not retry or self.retries_left <= 0:
            self.failure = "rejected"
            return ToolOutput(f"Error: the answer was not accepted: {why}.", is_error=True)
        self.retries_left -= 1
        return ToolOutput(f"Error: the answer was not accepted: {why}. Call {self.tool_name} "
                          f"again with a corrected answer.", is_error=True)

    def _correction(self, error: str) -> str:
        """An invalid answer: a correctable error for the model, until retries run out."""
        self.last_error = error
        if self.retries_left <= 0:
            self.failure = "mismatch"
            return f"Error: the answer does not match the schema: {error}."
        self.retries_left -= 1
        return (f"Error: the answer does not match the schema: {error}. "
                f"Call {self.tool_name} again with a corrected answer.")

    # --- the ending --------------------------------------------------------------------------

    def tools(self, agent_tools: Mapping[str, Tool]) -> dict[str, Tool]:
        if not self.spec.keeps_tools:
            return {self.tool_name: self.tool}
        return {**agent_tools, self.tool_name: self.tool}

    def tool_choice(self) -> ToolChoice:
        return "auto" if self.spec.keeps_tools else NamedToolChoice(self.tool_name)

    async def after_text(self, text: str) -> TurnOutcome:
        """The model answered in text: one nudge, then the run ends with ``prose``."""
        if self.nudged:
            self.failure = "prose"
            return Stopped(StopCause.NO_OUTPUT)
        self.nudged = True
        return RunAgain(say=NUDGE.format(tool=self.tool_name))

    def after_calls(self) -> TurnOutcome:
        if self.succeeded:
            return Final("")
        if self.failure is not None:
            return Stopped(StopCause.NO_OUTPUT, text="")
        return RunAgain()

    def ends_with(self, calls: Sequence[ToolCall]) -> bool:
        return any(c.name == self.tool_name for c in calls)


async def validated(validators: Sequence[OutputValidator], value: Any
                    ) -> tuple[str, bool] | None:
    """None when every validator accepts ``value``; else why not and whether the model may
    try again (``ModelRetry``: yes; a validator that failed otherwise: no)."""
    for validator in validators:
        try:
            checked = validator(value)
            if inspect.isawaitable(checked):
                await checked
        except ModelRetry as retry:
            return inline(retry.message), True
        except Exception as e:  # the host's check is broken: no answer is accepted
            return f"the output validator failed ({type(e).__name__}: {inline(e)})", False
    return None


class CheckedText:
    """An ordinary run whose text answer the host's validators check
    (``Agent.run(..., output_validators=[...])``): a ``ModelRetry`` sends the model back
    with its message, up to ``retries`` times; then, or when a validator fails otherwise,
    the run ends with ``OutputFailure("rejected")`` and no answer."""

    value: Any = None

    def __init__(self, validators: Sequence[OutputValidator], retries: int) -> None:
        self.validators = tuple(validators)
        self.retries_left = retries

    def tools(self, agent_tools: Mapping[str, Tool]) -> dict[str, Tool]:
        return dict(agent_tools)

    def tool_choice(self) -> ToolChoice:
        return "auto"

    async def after_text(self, text: str) -> TurnOutcome:
        if not text.strip():
            return Stopped(StopCause.NO_OUTPUT)
        refused = await validated(self.validators, text)
        if refused is None:
            return Final(text)
        why, retry = refused
        if retry and self.retries_left > 0:
            self.retries_left -= 1
            return RunAgain(say=f"Your answer was not accepted: {why}. Answer again.")
        return Stopped(StopCause.NO_OUTPUT, text="", error=OutputFailure(
            "rejected", f"the answer was not accepted: {why}", validation_error=why))

    def after_calls(self) -> TurnOutcome:
        return RunAgain()

    def ends_with(self, calls: Sequence[ToolCall]) -> bool:
        return False


def _validation_message(error: Exception) -> str:
    errors = getattr(error, "errors", None)
    if callable(errors):
        items = errors()
        return "; ".join(
            (".".join(str(x) for x in i["loc"]) + ": " if i["loc"] else "") + str(i["msg"])
            for i in items[:5])
    return str(error)


class PreparedRun:
    """A run that must answer in a declared shape. ``await run.output()`` runs it (once)
    and returns an ``OutputReport`` or raises ``OutputFailure``; ``run.stream()`` yields the
    same events as any run, the answer appearing as the answering tool's call."""

    def __init__(
        self,
        agent: RunHost,
        prompt: str | Sequence[Part],
        output: OutputSpec | OutputReservation,
        conversation: Conversation | None,
        *,
        deps: Any = None,
    ) -> None:
        self.agent = agent
        self.deps = deps
        self.prompt = prompt
        self.reservation = output if isinstance(output, OutputReservation) else output.reserve()
        self.conversation = conversation
        self._plan: OutputPlan | None = None
        self._result: RunResult | None = None

    @property
    def tool_name(self) -> str:
        return self.reservation.tool_name

    async def stream(self) -> AsyncIterator[Event]:
        if self._plan is not None:
            raise TetherError("a PreparedRun runs once; prepare another for a new run")
        self._plan = OutputPlan(self.reservation, self.agent.settings.output_retries)
        if self._empty_prompt():
            return
        async for event in run_events(self.agent, self.prompt, conversation=self.conversation,
                                      ending=self._plan, deps=self.deps):
            self._result = run_finished(event) or self._result
            yield event

    async def output(self) -> OutputReport:
        if self._plan is None:
            async for _ in self.stream():
                pass
        if self._empty_prompt():
            raise OutputFailure("empty_prompt", "the prompt is empty: there is nothing to "
                                "answer")
        plan, result = self._plan, self._result
        assert plan is not None and result is not None
        if isinstance(result.error, HookError):
            # A hook or a guardrail ended the run (after the answer, too: on_run_end): it
            # fails closed, as Agent.run's does, and its answer is not handed on.
            result.error.result = result
            raise result.error
        if plan.succeeded:
            return OutputReport(plan.value, result)
        raise _failure(plan, result, self.agent.settings.max_turns)

    def _empty_prompt(self) -> bool:
        return isinstance(self.prompt, str) and not self.prompt.strip()


def _failure(plan: OutputPlan, result: RunResult, max_turns: int) -> OutputFailure:
    if result.stop_cause is StopCause.ERROR:
        error = result.error
        return OutputFailure("provider", f"the provider failed: {error}", result=result,
                             error=error)
    if result.stop_cause is StopCause.CONTENT_FILTER:
        return OutputFailure("filtered", "the provider filtered or refused the model's "
                             "answer (its stop reason says so)", result=result,
                             validation_error=plan.last_error)
    if result.stop_cause is StopCause.TRUNCATED:
        return OutputFailure("truncated", "the model's answer was cut by its output token "
                             "limit before it was complete (a cut answer is never recorded)",
                             result=result, validation_error=plan.last_error)
    if plan.failure == "mismatch":
        return OutputFailure(
            "mismatch",
            f"the model's answer did not match the schema after {plan.max_retries} "
            f"correction(s): {plan.last_error}",
            result=result, validation_error=plan.last_error)
    if plan.failure == "rejected":
        return OutputFailure("rejected", f"the answer was not accepted: {plan.last_error}",
                             result=result, validation_error=plan.last_error)
    if plan.failure == "prose":
        return OutputFailure("prose", "the model answered in text instead of calling "
                             f"{plan.tool_name}, even after a reminder", result=result,
                             validation_error=plan.last_error)
    bound = str(result.stop_cause)
    detail = f"max_turns, {max_turns} turns" if bound == "max_turns" else bound
    return OutputFailure("bound", f"the run stopped at a bound ({detail}) before answering",
                         result=result, bound=bound, validation_error=plan.last_error)
