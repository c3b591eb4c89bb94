"""The activities a worker runs: the only place a durable run does I/O.

- ``tether.describe``: the run plan, from the worker's configuration and the client's flag
  values: settings, the provider's wire, and the catalogue of tools (spec, capabilities,
  flags; never a handler).
- ``tether.model``: one model request against the provider the worker builds from
  ``[providers.NAME]``. Messages arrive inline or as blob names; the inline ones at least
  ``inline_limit`` bytes long (and the response, when it is) are stored and their names
  returned, so the workflow sends each large message through history once.
- ``tether.tool``: one tool call, with the worker's own tool of that name, its handler run
  as in process (the same timeout and failure messages); its result cut to the run's
  ``max_result_chars`` before it enters history.

Every activity heartbeats while it works, so a worker that dies is noticed within
``[temporal] heartbeat_timeout_secs``. A provider's failure is reported as data (non
retryable: the provider's own retry policy already ran inside the activity).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from temporalio import activity
from temporalio.exceptions import ApplicationError

from tether.bounds import Spend
from tether.errors import ConfigError, TetherError
from tether.messages import Message, message_from_dict
from tether.providers.base import complete
from tether.run.execution import call_handler  # the loop's own: same timeout, messages
from tether.tools.tool import RunScope, ToolContext, ToolOutput
from tether.trust import Taint, truncate

from . import DESCRIBE, MODEL, TOOL
from .blobs import BlobError
from .payloads import (
    canonical,
    error_to_dict,
    output_to_dict,
    request_from_dict,
    response_to_dict,
)

if TYPE_CHECKING:
    from tether.agent import Agent
    from tether.providers.base import Provider

    from .blobs import BlobStore


class WorkerRuntime(Protocol):
    """What the activities read of their worker: ``tether.temporal.worker.WorkerRuntime`` is
    the one (the worker starts them, so they name it by this)."""

    @property
    def agent(self) -> Agent[Any]: ...
    @property
    def blobs(self) -> BlobStore: ...
    def deps(self) -> Any: ...
    def plan(self, overrides: Mapping[str, Any]) -> dict[str, Any]: ...
    def provider(self, name: str, model: str) -> Provider: ...
    def store_if_large(self, message: Mapping[str, Any], limit: int) -> str | None: ...


class TetherActivities:
    """The activities of one worker, over its ``WorkerRuntime``."""

    def __init__(self, runtime: WorkerRuntime) -> None:
        self.runtime = runtime

    def all(self) -> list[Any]:
        return [self.describe, self.model, self.tool]

    @activity.defn(name=DESCRIBE)
    async def describe(self, overrides: dict[str, Any]) -> dict[str, Any]:
        try:
            return self.runtime.plan(overrides)
        except ConfigError as e:
            raise ApplicationError(str(e), type="ConfigError", non_retryable=True) from None

    @activity.defn(name=MODEL)
    async def model(self, call: dict[str, Any]) -> dict[str, Any]:
        runtime = self.runtime
        try:
            provider = runtime.provider(call["provider"], call["model"])
            messages = [_message(runtime, m) for m in call["messages"]]
        except (ConfigError, BlobError) as e:
            raise ApplicationError(str(e), error_to_dict(e), type=type(e).__name__,
                                   non_retryable=True) from None
        request = request_from_dict(call["request"], messages)
        try:
            async with _heartbeats():
                response = await complete(provider, request)
        except TetherError as e:  # ProviderError and its kinds: the run's error, as data
            raise ApplicationError(str(e), error_to_dict(e), type=type(e).__name__,
                                   non_retryable=True) from None
        out = response_to_dict(response)
        limit = int(call.get("inline_limit", 0))
        stored: dict[str, str] = {}
        try:
            for index, sent in enumerate(call["messages"]):
                if "inline" in sent:
                    name = runtime.store_if_large(sent["inline"], limit)
                    if name is not None:
                        stored[str(index)] = name
            name = runtime.store_if_large(out["message"], limit)
            if name is not None:
                stored[str(len(messages))] = name
        except BlobError as e:  # the response itself is fine: those travel inline again
            activity.logger.warning("tether: %s", e)
        return {"response": out, "stored": stored}

    @activity.defn(name=TOOL)
    async def tool(self, call: dict[str, Any]) -> dict[str, Any]:
        runtime = self.runtime
        agent = runtime.agent
        name = str(call["tool"])
        tool = agent.tools.get(name)
        if tool is None:
            return output_to_dict(ToolOutput(
                f"Error: {name} is not available on the worker that took the call (its "
                f"configuration has no such tool now). It was not run.", is_error=True,
                from_outside=False))
        try:
            # Validated in the workflow already; this reads its JSON form back to the values
            # the handler takes (a pydantic model, a date).
            arguments = tool.validate(call["arguments"])
        except ValueError as e:
            return output_to_dict(ToolOutput(f"Error: {name}: the arguments do not match "
                                             f"the tool's schema on this worker: {e}. It "
                                             f"was not run.", is_error=True,
                                             from_outside=False))
        # The call's run is the workflow's; here it is the worker's agent at the call's path,
        # with the dependencies this worker builds (a run's own never enter history).
        deps = runtime.deps()
        scope = RunScope(agent, tuple(call.get("path") or ()), None, Spend(agent.settings),
                         deps)
        ctx = ToolContext(str(call["call_id"]), name, Taint.from_dict(call["taint"]),
                          agent.workspace, agent.security, None, run=scope, deps=deps)
        async with _heartbeats():
            output = await call_handler(name, tool, arguments, ctx, call.get("timeout_secs"))
        limit = int(call["max_result_chars"])
        return output_to_dict(dataclasses.replace(output,
                                                  content=truncate(output.content, limit)))


def _message(runtime: WorkerRuntime, sent: Mapping[str, Any]) -> Message:
    if "ref" in sent:
        return message_from_dict(json.loads(runtime.blobs.get(str(sent["ref"]))))
    return message_from_dict(sent["inline"])


@contextlib.asynccontextmanager
async def _heartbeats() -> AsyncIterator[None]:
    """Heartbeat while the body runs: a silent worker is a lost one."""
    timeout = activity.info().heartbeat_timeout
    if timeout is None:
        yield
        return
    interval = max(timeout.total_seconds() / 3, 0.05)

    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(interval)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def message_blob(message: Mapping[str, Any]) -> bytes:
    """A message dict as the bytes its blob holds."""
    return canonical(message)
