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
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tether import events as ev
from tether.conversation import Conversation
from tether.display import inline
from tether.errors import HookError
from tether.events import ToolStatus
from tether.fields import fields_of
from tether.messages import ToolCall, ToolResult
from tether.provenance import GATE_LABELS, distrusted, result_labels
from tether.result import ToolCallRecord
from tether.run.ending import Ending
from tether.run.hooks import NO_HOOKS, Hooks, ResultView, rewrite_result
from tether.run.repeats import Repeats
from tether.run.staged import Staged
from tether.settings import AgentSettings
from tether.tools.tool import RunScope, ThreadedHandler, Tool, ToolContext, ToolOutput
from tether.trust import Taint, received

# What the model reads of a finished call's result, given the call, its status and content.
Note = Callable[[ToolCall, ToolStatus, str], str]


@dataclass(frozen=True, slots=True)
class Allowed:
    """A call the gate allowed, at its position in the turn. ``arguments_traced``: no
    untrusted text can have chosen its values (``checks.arguments_traced``), so its result
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


@dataclass(frozen=True, slots=True)
class Noting:
    """The run's repeat rule, as what the model reads of a finished call's result: a note
    when the same call has failed (or returned the same result) ``max_repeated_failures``
    times in this run. A call that can give a structured run its answer is left to its own
    retries."""

    repeats: Repeats
    ending: Ending

    def __call__(self, call: ToolCall, status: ToolStatus, content: str) -> str:
        if self.ending.ends_with((call,)):
            return content
        return self.repeats.finished(call, status, content)


@dataclass(frozen=True, slots=True)
class CallEnv:
    """What a run's calls run in, fixed for the run: the conversation (its taint grows by
    what each call read), the run's settings and ``scope`` (each call's is this one with
    its id on the path), ``context`` the context a call's handler runs in (a traced run's:
    the call's span current, so what the tool does, a sub-agent's whole run, is traced
    under it; None: a copy of this one), ``noted`` what the model reads of a result (the
    run's notes on repeated calls, outside any untrusted block), and ``hooks``, whose
    ``after_tool_result`` may rewrite what a call returned before it is wrapped (its trust
    stays the tool's: ``_finished``)."""

    conversation: Conversation
    settings: AgentSettings
    scope: RunScope
    context: Callable[[ToolCall], contextvars.Context | None] | None = None
    noted: Note | None = None
    hooks: Hooks = NO_HOOKS

    def scope_of(self, call: ToolCall) -> RunScope:
        """The run a call belongs to, as its tool sees it (``ToolContext.run``)."""
        scope = self.scope  # (made directly: dataclasses.replace costs a call's worth)
        return RunScope(scope.agent, (*scope.path, call.id), scope.interrupt, scope.spend,
                        scope.deps)


@dataclass(frozen=True, slots=True)
class Ran:
    """What became of the calls that ran, each by its position; ``error`` the hook that
    failed while they ran (the rest were cancelled: they have no outcome here)."""

    done: Mapping[int, Done]
    error: HookError | None = None


async def run_calls(staged: Staged[Ran], allowed: Sequence[Allowed], env: CallEnv,
                    ) -> AsyncGenerator[ev.Event, None]:
    """Run ``allowed`` side by side, yielding their events as they happen (a sub-agent's
    stream through), and giving, last, what became of each (``Ran``: a stage,
    ``tether.run.staged.Staged``).

    Only the handlers run apart (a task each, or a sync tool's thread): what comes before
    and after them is done here, in the run's own task, and this generator waits on one
    queue for what they emit and for their ends. A call that outlives its timeout is
    abandoned; when the run is cancelled (or this stage is closed: its reader left), every
    handler still running is cancelled, and waited for (it may clean up)."""
    done: dict[int, Done] = {}
    error: HookError | None = None
    notes: asyncio.Queue[ev.Event | _Ended] = asyncio.Queue()
    running: dict[int, _Running] = {}
    try:
        _start_all(allowed, env, notes, running)
        for item in allowed:
            yield ev.ToolStarted(item.call.id, item.call.name, item.tool.spec.display_name,
                                 item.arguments)
        while running:
            note = await notes.get()
            if not isinstance(note, _Ended):
                yield note
                continue
            entry = running.pop(note.position, None)
            if entry is None:  # answered already: its timeout and its end both came
                continue
            for event in await _concluded(entry, note, env, done):
                yield event
    except HookError as failed:  # the rest are cancelled: they have no outcome here
        error = failed
    finally:
        await _cancelled(running.values())
    staged.give(Ran(done, error))


def _start_all(allowed: Sequence[Allowed], env: CallEnv,
               notes: asyncio.Queue[ev.Event | _Ended], running: dict[int, _Running]) -> None:
    """Start every allowed call's handler, each kept in ``running`` by its position."""
    if not allowed:
        return
    loop = asyncio.get_running_loop()

    async def emit(event: ev.Event) -> None:
        notes.put_nowait(event)

    for item in allowed:
        running[item.position] = _start(item, env, emit, notes, loop)


async def _concluded(entry: _Running, note: _Ended, env: CallEnv,
                     done: dict[int, Done]) -> list[ev.Event]:
    """A call that ended (or timed out): its output, as an ``after_tool_result`` hook may
    rewrite it, wrapped as the model's result (in ``done``); the events that say so."""
    output = _ended(entry, note, env.settings)
    said: list[ev.Event] = []
    if env.hooks.after_tool_result:
        output, said = await _rewritten(env.hooks, entry.item, output, env.settings)
    return [*said, *_finished(entry, output, env, done)]


def _ended(entry: _Running, note: _Ended, settings: AgentSettings) -> ToolOutput:
    """A call's output as its end (or its timeout) left it; its timer stopped."""
    if entry.timer is not None:
        entry.timer.cancel()
    if note.timed_out and not entry.handler.done():
        _abandon(entry.handler)
        return _timed_out(entry.item.call.name, settings.tool_timeout_secs)
    return _output(entry.item.call.name, entry.handler)


async def _cancelled(left: Iterable[_Running]) -> None:
    """The handlers still running when the run is cancelled (or its reader stopped), each
    cancelled and waited for: its tools clean up first."""
    cleaning = []
    for entry in left:
        if entry.timer is not None:
            entry.timer.cancel()
        entry.handler.cancel()
        entry.handler.add_done_callback(_forget)
        if not entry.handler.done():
            cleaning.append(entry.handler)
    if cleaning:
        await asyncio.wait(cleaning)


@dataclass(frozen=True, slots=True)
class _Ended:
    """A note that a call's handler ended, or that its time is up."""

    position: int
    timed_out: bool = False


@dataclass(slots=True)
class _Running:
    item: Allowed
    scope: RunScope
    handler: asyncio.Future[Any]
    started: float
    timer: asyncio.TimerHandle | None


def _start(
    item: Allowed, env: CallEnv, emit: Callable[[ev.Event], Awaitable[None]],
    notes: asyncio.Queue[ev.Event | _Ended], loop: asyncio.AbstractEventLoop,
) -> _Running:
    """Start one allowed call's handler; its end (and its timeout) arrive in ``notes``."""
    call, tool = item.call, item.tool
    conversation, settings, context = env.conversation, env.settings, env.context
    scope = env.scope_of(call)
    ctx = ToolContext(call.id, call.name, conversation.taint, settings.workspace,
                      settings.security, emit, run=scope, deps=scope.deps,
                      # Only a delegation hands them on (to its child); collecting them
                      # walks the whole conversation.
                      sources=conversation.sources(settings.system_prompt)
                      if tool.delegates else ())
    within = None if context is None else context(call)
    started = time.perf_counter()
    handler = start_handler(call.name, tool, item.arguments, ctx, within)
    ended = _Ended(item.position)
    handler.add_done_callback(lambda _: notes.put_nowait(ended))
    timeout = settings.tool_timeout_secs
    timer = None if timeout is None or handler.done() else loop.call_later(
        timeout, notes.put_nowait, _Ended(item.position, timed_out=True))
    return _Running(item, scope, handler, started, timer)


async def _rewritten(hooks: Hooks, item: Allowed, output: ToolOutput,
                     settings: AgentSettings) -> tuple[ToolOutput, list[ev.Event]]:
    """The output as the hooks rewrote it: its content only. Whether it is outside text is
    still the tool's answer (``from_outside``, else its capabilities), so no rewrite makes
    outside text trusted; a structured value goes with a rewritten content (it would carry
    what the rewrite took out)."""
    outside = output.from_outside if output.from_outside is not None \
        else item.tool.capabilities.untrusted_input
    view = ResultView(item.call.id, item.call.name, output.content, output.is_error, outside)
    content, said = await rewrite_result(hooks, view, settings.hook_timeout_secs)
    if content is None:
        return output, said
    return replace(output, content=content, structured=None, from_outside=outside), said


def _finished(entry: _Running, output: ToolOutput, env: CallEnv,
              done: dict[int, Done]) -> list[ev.Event]:
    """One call's output wrapped as the model's result (in ``done``), the taint it brought,
    the usage it spent (counted in its scope's spend): the events that say so."""
    item, call, tool = entry.item, entry.item.call, entry.item.tool
    conversation, settings, noted = env.conversation, env.settings, env.noted
    events: list[ev.Event] = []
    if output.usage is not None:
        entry.scope.spend.add(output.usage)
    # One decision: what the model is shown as untrusted data is what taints (and what
    # provenance counts as untrusted), never one without the other.
    seen = received(output.content, claimed=output.from_outside, caps=tool.capabilities,
                    source=tool.spec.display_name, security=settings.security)
    before = conversation.taint
    conversation.grow_taint(before.after_call(tool.capabilities,
                                              content_from_outside=seen.outside))
    if output.taint is not None:  # a sub-agent's own exposure
        conversation.grow_taint(output.taint)
    if output.images:
        # An image is outside content whoever returned it (a screenshot's words can ask
        # for a send) and no value in it traces: the conversation is untrusted, and
        # private, as for a picture the user gives.
        conversation.grow_taint(Taint(private=True, untrusted=True))
    if conversation.taint != before:
        events.append(ev.TaintChanged(before, conversation.taint, call.name))
    labels = result_labels(private=tool.capabilities.private_data, from_outside=seen.outside,
                           arguments_traced=item.arguments_traced,
                           delegated=tool.origin == "subagent",
                           fields=output.fields if tool.believed else distrusted(output.fields),
                           written=output.written, readers=output.readers)
    status: ToolStatus = "error" if output.is_error else "ok"
    content = seen.content
    if noted is not None:
        content = noted(call, status, content)
    result = ToolResult(call.id, call.name, content, output.is_error, seen.trust,
                        output.structured, labels=labels, images=output.images)
    done[item.position] = Done(result, ToolCallRecord(call.id, call.name, item.arguments,
                                                      status, result.content))
    events.append(ev.ToolFinished(call.id, call.name, status, result,
                                  time.perf_counter() - entry.started))
    return events


def start_handler(name: str, tool: Tool, arguments: dict[str, Any], ctx: ToolContext,
                  context: contextvars.Context | None = None) -> asyncio.Future[Any]:
    """The tool's handler, started: in a task of its own (in ``context``; None: a copy of
    this one), or the future it returned itself (a sync tool's thread). A handler that
    fails before its first await gives a future holding the error output.

    Apart from the awaiting task, so a timeout stops the wait at once: a handler that
    ignores its cancellation (or a sync tool's thread, which cannot be stopped) is
    abandoned, not waited for."""
    handler = tool.handler
    start = handler.start if isinstance(handler, ThreadedHandler) else handler
    try:
        awaitable = start(arguments, ctx) if context is None \
            else context.run(start, arguments, ctx)
        if asyncio.isfuture(awaitable):
            return awaitable
        if asyncio.iscoroutine(awaitable):
            return asyncio.get_running_loop().create_task(awaitable, context=context)
        return asyncio.ensure_future(awaitable)
    except Exception as e:  # a handler that is not async, or fails before its first await
        failed: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        failed.set_result(ToolOutput(f"Error: {name} failed: {_described(e)}", is_error=True))
        return failed


async def call_handler(name: str, tool: Tool, arguments: dict[str, Any], ctx: ToolContext,
                       timeout: float | None) -> ToolOutput:
    """What the tool's handler returned, or an error output the model can act on: a
    failure, a timeout, a cancellation the run did not ask for. Only the run's own
    cancellation propagates (see ``start_handler``)."""
    handler = start_handler(name, tool, arguments, ctx)
    try:
        finished, _ = await asyncio.wait({handler}, timeout=timeout)
    except asyncio.CancelledError:  # the run is cancelled: so is the tool, which may clean up
        handler.cancel()
        handler.add_done_callback(_forget)
        await asyncio.wait({handler})
        raise
    if not finished:
        _abandon(handler)
        return _timed_out(name, timeout)
    return _output(name, handler)


def _output(name: str, handler: asyncio.Future[Any]) -> ToolOutput:
    """What a finished handler's future holds, as the model reads it."""
    if handler.cancelled():  # the handler raised CancelledError itself: the run goes on
        return ToolOutput(f"Error: {name} failed: it was cancelled (CancelledError) while "
                          f"the run was not; it may not have finished its work.",
                          is_error=True)
    try:
        value = handler.result()
        return value if isinstance(value, ToolOutput) else ToolOutput(render(value),
                                                                       fields=fields_of(value))
    except Exception as e:  # a tool's failure is the model's information, not a crash
        return ToolOutput(f"Error: {name} failed: {_described(e)}", is_error=True)


def _timed_out(name: str, timeout: float | None) -> ToolOutput:
    assert timeout is not None
    return ToolOutput(
        f"Error: {name} did not finish within {timeout:g}s. The run stopped waiting for "
        f"it, but nothing it did was undone: it may still be running, and what it does "
        f"may still take effect. Check before you call it again.", is_error=True)


def _abandon(handler: asyncio.Future[Any]) -> None:
    handler.cancel()
    handler.add_done_callback(_forget)


def _described(error: Exception) -> str:
    # A tool's exception can quote anything (a server's answer, a page): on one line.
    try:
        return f"{type(error).__name__}: {inline(error)}"
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
