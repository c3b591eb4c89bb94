"""What stands in a workflow for a worker's model and tools: the shapes the loop already
takes (a ``Provider``, ``Tool``s), whose work is an activity that a worker runs against the
provider and tools its own configuration names. Nothing is serialized but data.

- ``ActivityModel.stream`` runs one ``tether.model`` activity per request. Messages a
  worker stored by reference travel as their hash from then on (see ``activities.py``).
- ``activity_tool`` keeps a tool's spec, capabilities, parameter roles and validator (the
  gate runs in the workflow, on recorded data) and runs its handler as a ``tether.tool``
  activity. A call whose worker was lost is run again only when the tool is idempotent;
  otherwise its result tells the model it may or may not have run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.exceptions import TimeoutError as ActivityTimeout

from tether import errors
from tether.messages import Message, message_to_dict
from tether.providers.base import Completed, ModelRequest, StreamChunk
from tether.tools.spec import ToolSpec
from tether.tools.tool import Tool, ToolContext, ToolOutput, Validator, json_schema_validator
from tether.trust import truncate

from . import MODEL, TOOL
from .payloads import (
    capabilities_from_dict,
    error_from_dict,
    jsonable,
    output_from_dict,
    request_to_dict,
    response_from_dict,
)

# A model request is always safe to send again; the provider's own retry policy (backoff,
# Retry-After) runs inside each attempt, so these attempts only cover a lost worker.
MODEL_ATTEMPTS = 3
# An idempotent tool call is tried this many times when its workers are lost.
IDEMPOTENT_ATTEMPTS = 3
_NO_TIMEOUT = timedelta(days=7)  # "unbounded": the heartbeat is what notices a lost worker


@dataclass(frozen=True, slots=True)
class Timing:
    """How long activities may take and stay silent."""

    heartbeat_secs: float
    tool_timeout_secs: float | None
    max_result_chars: int
    inline_limit: int

    @property
    def heartbeat(self) -> timedelta:
        return timedelta(seconds=self.heartbeat_secs)

    def tool_deadline(self) -> timedelta:
        # The worker enforces the tool's own timeout; this only bounds the activity.
        if self.tool_timeout_secs is None:
            return _NO_TIMEOUT
        return timedelta(seconds=self.tool_timeout_secs + 60)


class ActivityModel:
    """A ``Provider`` in the workflow: each request is a ``tether.model`` activity.

    ``name`` is the worker's provider wire (``openai-chat``...), ``provider`` the
    ``[providers.NAME]`` the worker builds it from, ``model`` the model asked for.
    """

    def __init__(self, provider: str, wire: str, model: str, timeout_secs: float,
                 timing: Timing) -> None:
        self.provider = provider
        self.name = wire
        self.model = model
        self._timeout = timedelta(seconds=timeout_secs)
        self._timing = timing
        # Conversation index -> (the message, its blob name): sent by reference from now on.
        self._refs: dict[int, tuple[Message, str]] = {}

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        messages: list[dict[str, Any]] = []
        for index, message in enumerate(request.messages):
            ref = self._refs.get(index)
            if ref is not None and ref[0] is message:
                messages.append({"ref": ref[1]})
            else:
                messages.append({"inline": message_to_dict(message)})
        call = {"provider": self.provider, "model": self.model,
                "request": request_to_dict(request), "messages": messages,
                "inline_limit": self._timing.inline_limit}
        try:
            out = await workflow.execute_activity(
                MODEL, call, start_to_close_timeout=self._timeout,
                heartbeat_timeout=self._timing.heartbeat,
                retry_policy=RetryPolicy(maximum_attempts=MODEL_ATTEMPTS))
        except ActivityError as e:
            raise _model_error(e, self.name) from None
        response = response_from_dict(out["response"])
        for key, name in out.get("stored", {}).items():
            index = int(key)
            message = request.messages[index] if index < len(request.messages) \
                else response.message
            self._refs[index] = (message, name)
        chunk: StreamChunk = Completed(response)
        yield chunk

    async def aclose(self) -> None:
        return None


def _model_error(error: ActivityError, wire: str) -> errors.TetherError:
    cause = error.cause
    if isinstance(cause, ApplicationError) and cause.details \
            and isinstance(cause.details[0], dict):
        return error_from_dict(cause.details[0], wire)
    if isinstance(cause, ActivityTimeout):
        return errors.ProviderTimeout(
            f"{wire}: the model request did not finish on any worker ({cause}; tried "
            f"{MODEL_ATTEMPTS} times)", provider=wire)
    return errors.ProviderError(f"{wire}: the model request failed on the worker: "
                                f"{cause or error}", provider=wire)


def activity_tool(entry: dict[str, Any], validator: Validator | None, timing: Timing) -> Tool:
    """A worker's tool as the workflow holds it (``entry`` is ``payloads.tool_entry``)."""
    spec = ToolSpec.from_dict(entry["spec"])
    idempotent = bool(entry.get("idempotent"))
    attempts = IDEMPOTENT_ATTEMPTS if idempotent else 1

    async def handler(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        call = {"tool": spec.name, "call_id": ctx.call_id, "arguments": jsonable(arguments),
                "taint": ctx.taint.to_dict(), "max_result_chars": timing.max_result_chars,
                "timeout_secs": timing.tool_timeout_secs,
                "path": list(ctx.run.path if ctx.run is not None else ())}
        try:
            out = await workflow.execute_activity(
                TOOL, call, start_to_close_timeout=timing.tool_deadline(),
                heartbeat_timeout=timing.heartbeat,
                retry_policy=RetryPolicy(maximum_attempts=attempts))
        except ActivityError as e:
            return ToolOutput(_lost(spec.name, idempotent, e), is_error=True)
        return output_from_dict(out)

    return Tool(spec, handler, capabilities_from_dict(entry["capabilities"]), validator,
                bool(entry.get("cache_approval", True)), str(entry.get("source", "python")),
                entry.get("read_only_hint"), entry.get("source_name"),
                bool(entry.get("spec_from_outside")), idempotent=idempotent,
                # The roles the gate traces by: a plan recorded without them (an older
                # tether) has only control parameters, every value traced.
                content_params=[str(n) for n in entry.get("content_params") or ()],
                destination_params=[str(n) for n in entry.get("destination_params") or ()],
                closed_destinations=entry.get("closed_destinations") is True,
                returns_secrets=entry.get("returns_secrets") is True)


def _lost(name: str, idempotent: bool, error: ActivityError) -> str:
    why = error.cause or error
    if idempotent:
        return (f"Error: {name} did not finish: it was run {IDEMPOTENT_ATTEMPTS} times and "
                f"each time the worker running it was lost or failed ({why}).")
    return (f"Error: {name} may or may not have run: the worker running it was lost or "
            f"failed ({why}), and {name} is not safe to run twice, so it was not run again. "
            f"Nothing it did was undone: check whether it took effect before you call it "
            f"again.")


def tool_result_limit(content: str, limit: int) -> str:
    """A result as the loop would have cut it (the workflow's own agent never cuts)."""
    return truncate(content, limit)


# The worker's own tools, by name, as they are now: the workflow validates a call's
# arguments with the validator of the worker's tool of that name (pydantic for ``@tool``
# functions, the server's schema for MCP tools), exactly as a run in process would. Set
# by the worker (``tether.temporal.worker``) before it serves; a process that has none
# (a replayer) validates against the recorded schema.
_local_tools: list[Callable[[], Mapping[str, Tool]]] = []


def use_local_tools(tools: Callable[[], Mapping[str, Tool]] | None) -> None:
    """Name where this process's tools are (None: nowhere)."""
    _local_tools[:] = [tools] if tools is not None else []


def local_validator(entry: Mapping[str, Any]) -> Validator | None:
    """The validator of this worker's tool that ``entry`` records, if the worker has one
    with the very same spec; else one for the recorded JSON Schema."""
    spec = entry["spec"]
    local = _local_tools[0]().get(spec["name"]) if _local_tools else None
    if local is not None and local.spec.to_dict() == spec:
        return local.validator
    return json_schema_validator(ToolSpec.from_dict(spec).schema_json)
