"""Running the calls the gate allowed: side by side, each bounded by its timeout, each
result wrapped for the model, and the conversation's taint grown by what each call read.

A tool's failure (an exception, a timeout, a cancellation the run did not ask for) is its
result, an error the model can act on; only the run's own cancellation propagates.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tether import events as ev
from tether.conversation import Conversation
from tether.events import ToolStatus
from tether.messages import ToolCall, ToolResult, Trust
from tether.provenance import GATE_LABELS, result_labels
from tether.result import ToolCallRecord
from tether.settings import AgentSettings
from tether.tools import RunScope, Tool, ToolContext, ToolOutput
from tether.trust import truncate, untrusted_block


@dataclass(frozen=True, slots=True)
class Allowed:
    """A call the gate allowed, at its position in the turn. ``arguments_traced``: no
    untrusted text can have chosen its values (``gate.arguments_traced``), so its result
    may be a trusted source."""

    position: int
    call: ToolCall
    tool: Tool
    arguments: dict[str, Any]
    arguments_traced: bool = False


@dataclass(frozen=True, slots=True)
class Done:
    """What became of one call: the result the model reads and the record the run keeps."""

    result: ToolResult
    record: ToolCallRecord


def settled(call: ToolCall, status: ToolStatus, text: str) -> Done:
    """A call the gate answered itself (it did not run); the taint is unchanged."""
    try:
        arguments = call.parsed_arguments()
    except ValueError:
        arguments = call.arguments
    return Done(ToolResult(call.id, call.name, text, True, "trusted", labels=GATE_LABELS),
                ToolCallRecord(call.id, call.name, arguments, status, text))


async def run_calls(
    allowed: Sequence[Allowed], conversation: Conversation, settings: AgentSettings,
    scope: Callable[[ToolCall], RunScope], done: dict[int, Done],
    context: Callable[[ToolCall], contextvars.Context | None] | None = None,
) -> AsyncIterator[ev.Event]:
    """Run ``allowed`` side by side, yielding their events as they happen (a sub-agent's
    stream through). Each one's outcome lands in ``done`` at its position as it finishes.
    ``scope`` gives a call the run it belongs to; ``context``
    the context its task runs in (a traced run's: the call's span current, so what the
    tool does, a sub-agent's whole run, is traced under it; None: a copy of this one)."""
    if not allowed:
        return
    queue: asyncio.Queue[ev.Event | None] = asyncio.Queue()

    async def emit(event: ev.Event) -> None:
        queue.put_nowait(event)

    async def run_one(item: Allowed) -> None:
        try:
            outcome = await run_tool(item, conversation, settings, scope(item.call), emit)
            done[item.position] = outcome
        finally:
            queue.put_nowait(None)

    tasks = [asyncio.create_task(run_one(item),
                                 context=None if context is None else context(item.call))
             for item in allowed]
    try:
        remaining = len(tasks)
        while remaining:
            event = await queue.get()
            if event is None:
                remaining -= 1
            else:
                yield event
    finally:
        for task in tasks:
            task.cancel()
        if not all(task.done() for task in tasks):
            await asyncio.wait(tasks)  # a cancelled run: its tools clean up first
    for task in tasks:
        task.result()  # re-raise what the runtime itself got wrong; tools' errors are results


async def run_tool(
    item: Allowed, conversation: Conversation, settings: AgentSettings, scope: RunScope,
    emit: Callable[[ev.Event], Awaitable[None]],
) -> Done:
    """Run one allowed call: its events, its output wrapped as the model's result, the
    taint it brought, the usage it spent (counted in ``scope.spend``)."""
    call, tool, arguments = item.call, item.tool, item.arguments
    await emit(ev.ToolStarted(call.id, call.name, tool.spec.display_name, arguments))
    ctx = ToolContext(call.id, call.name, conversation.taint, settings.workspace,
                      settings.security, emit, run=scope,
                      # Only a delegation hands them on (to its child); collecting them
                      # walks the whole conversation.
                      sources=conversation.sources(settings.system_prompt)
                      if tool.delegates else ())
    started = time.perf_counter()
    output = await call_handler(call.name, tool, arguments, ctx, settings.tool_timeout_secs)
    if output.usage is not None:
        scope.spend.add(output.usage)
    from_outside = output.from_outside if output.from_outside is not None \
        else tool.capabilities.untrusted_input
    before = conversation.taint
    conversation.grow_taint(before.after_call(tool.capabilities,
                                              content_from_outside=from_outside))
    if output.taint is not None:  # a sub-agent's own exposure
        conversation.grow_taint(output.taint)
    if conversation.taint != before:
        await emit(ev.TaintChanged(before, conversation.taint, call.name))
    content = truncate(output.content, settings.security.max_result_chars)
    trust: Trust = "untrusted" if from_outside else "trusted"
    if trust == "untrusted" and settings.security.mark_untrusted_output:
        content = untrusted_block(tool.spec.display_name, content)
    labels = result_labels(private=tool.capabilities.private_data, from_outside=from_outside,
                           arguments_traced=item.arguments_traced,
                           delegated=tool.origin == "subagent")
    result = ToolResult(call.id, call.name, content, output.is_error, trust, output.structured,
                        labels=labels)
    status: ToolStatus = "error" if output.is_error else "ok"
    await emit(ev.ToolFinished(call.id, call.name, status, result,
                               time.perf_counter() - started))
    return Done(result, ToolCallRecord(call.id, call.name, arguments, status, result.content))


async def call_handler(name: str, tool: Tool, arguments: dict[str, Any], ctx: ToolContext,
                       timeout: float | None) -> ToolOutput:
    """What the tool's handler returned, or an error output the model can act on: a
    failure, a timeout, a cancellation the run did not ask for.

    The handler runs in a task of its own, so a timeout stops the wait at once: a handler
    that ignores its cancellation (or a sync tool's thread, which cannot be stopped) is
    abandoned, not waited for. Only the run's own cancellation propagates.
    """
    try:
        task = asyncio.ensure_future(tool.handler(arguments, ctx))
    except Exception as e:  # a handler that is not async, or fails before its first await
        return ToolOutput(f"Error: {name} failed: {_described(e)}", is_error=True)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except asyncio.CancelledError:  # the run is cancelled: so is the tool, which may clean up
        task.cancel()
        await asyncio.wait({task})
        raise
    if not done:
        task.cancel()
        task.add_done_callback(_forget)
        assert timeout is not None
        return ToolOutput(
            f"Error: {name} did not finish within {timeout:g}s. The run stopped waiting for "
            f"it, but nothing it did was undone: it may still be running, and what it does "
            f"may still take effect. Check before you call it again.", is_error=True)
    if task.cancelled():  # the handler raised CancelledError itself: the run goes on
        return ToolOutput(f"Error: {name} failed: it was cancelled (CancelledError) while "
                          f"the run was not; it may not have finished its work.",
                          is_error=True)
    try:
        value = task.result()
        return value if isinstance(value, ToolOutput) else ToolOutput(render(value))
    except Exception as e:  # a tool's failure is the model's information, not a crash
        return ToolOutput(f"Error: {name} failed: {_described(e)}", is_error=True)


def _described(error: Exception) -> str:
    try:
        return f"{type(error).__name__}: {error}"
    except Exception:  # an exception whose own message fails
        return f"{type(error).__name__} (its message could not be shown)"


def _forget(task: asyncio.Future[Any]) -> None:
    """An abandoned handler's outcome is nobody's: retrieve it so asyncio does not warn."""
    if not task.cancelled():
        task.exception()


def render(value: Any) -> str:
    """A handler's plain return value as the text the model reads."""
    if isinstance(value, str):
        return value
    if value is None:
        return "(no output)"
    dump = getattr(value, "model_dump_json", None)
    if dump is not None:
        return str(dump())
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)
