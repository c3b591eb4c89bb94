"""Who a run asks: the person at the page that watches it, and nobody else.

One agent serves every session, but a question belongs to one run. An approval needs no
routing (the approver defers: the run pauses, and its own stream ends with the calls). An
MCP server's request for input (elicitation) does: it waits while the server's call is in
flight, and must reach the person who watches that run, not whoever else has the page open
(another session's tab would see, and could answer, a form meant for someone else).

So each run is driven through a ``RunAs`` host: the agent as that run sees it, its approver
a ``WebApprover`` of the run's own ``Watcher`` (its stream). tether's MCP client hands a
request to the approver of the run whose call is in flight (``ToolContext.run.agent``),
whichever task the request arrives on (the SDK's own receive loop, in the handshake era),
so the request reaches this run's stream and no other; with calls of two runs in flight on
one server it declines, since it cannot tell whose person is meant. A request is answered
at ``POST /api/elicitations/{id}``: its id is random, and only the run's stream names it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from tether import events as ev
from tether.agent import Agent
from tether.approval import Approver, ElicitationAnswer, ElicitationRequest
from tether.conversation import Conversation
from tether.providers.base import Provider
from tether.run.context.fitter import ContextFitter
from tether.run.hooks import Hooks
from tether.run.host import RunHost, RunObserver
from tether.run.pending import DeferringApprover
from tether.serve import agui
from tether.settings import AgentSettings
from tether.tools.tool import Tool
from tether.tools.toolsets import Toolset


@dataclass(eq=False)
class Watcher:
    """One run's stream of AG-UI frames, and whether a page still reads it."""

    frames: asyncio.Queue[str | None]
    watched: bool = True

    def send(self, event: Any) -> None:
        self.frames.put_nowait(agui.encoded(event))


@dataclass(frozen=True)
class _Waiting:
    request: ElicitationRequest
    answer: asyncio.Future[ElicitationAnswer]
    watcher: Watcher


class Elicitations:
    """Requests for input from MCP servers, each waiting for the person at the page that
    watches the run it belongs to."""

    def __init__(self) -> None:
        self.waiting: dict[str, _Waiting] = {}

    async def ask(self, request: ElicitationRequest, watcher: Watcher) -> ElicitationAnswer:
        """Show ``request`` on the run's stream (and only there); the person's answer."""
        if not watcher.watched:
            return ElicitationAnswer.decline("no page watches this run to ask a person")
        key = uuid.uuid4().hex
        answer: asyncio.Future[ElicitationAnswer] = asyncio.get_running_loop().create_future()
        self.waiting[key] = _Waiting(request, answer, watcher)
        watcher.send(agui.custom("tether.elicitation", elicitation_view(key, request)))
        try:
            return await answer
        finally:
            self.waiting.pop(key, None)
            watcher.send(agui.custom("tether.elicitation_closed", {"id": key}))

    def answer(self, key: str, body: Any) -> None:
        """The person's answer to request ``key``: ``{"action": "accept" | "decline" |
        "cancel", "values": {...}}`` (the gate checks the values against the form)."""
        waiting = self.waiting.get(key)
        if waiting is None or waiting.answer.done():
            raise agui.InputError("no request for input waits with that id")
        waiting.answer.set_result(_answer_of(body))

    def abandon(self, watcher: Watcher) -> None:
        """The page watching ``watcher``'s run went away: its requests are cancelled (nobody
        else may answer them)."""
        watcher.watched = False
        for waiting in list(self.waiting.values()):
            if waiting.watcher is watcher and not waiting.answer.done():
                waiting.answer.set_result(ElicitationAnswer.cancel(
                    "the page watching the run was closed"))


def _answer_of(body: Any) -> ElicitationAnswer:
    if not isinstance(body, Mapping) or body.get("action") not in \
            ("accept", "decline", "cancel"):
        raise agui.InputError("an answer is {\"action\": \"accept\" | \"decline\" | "
                              "\"cancel\", \"values\": {...}}")
    values = body.get("values") or {}
    if not isinstance(values, Mapping):
        raise agui.InputError("values is an object of the form's fields")
    action = body["action"]
    if action == "accept":
        return ElicitationAnswer.accept(values)
    return ElicitationAnswer.decline() if action == "decline" else ElicitationAnswer.cancel()


def elicitation_view(key: str, request: ElicitationRequest) -> dict[str, Any]:
    """What the page's form shows: who asks (the server, trusted or not), its message,
    the fields, or the URL whole with its host (shown, never opened)."""
    view: dict[str, Any] = {
        "id": key, "server": request.server, "trusted": request.trusted,
        "message": request.message, "mode": request.mode, "warning": request.warning,
        "taint": {"private": request.taint.private, "untrusted": request.taint.untrusted},
        "fields": [{"name": f.name, "kind": f.kind, "title": f.title,
                    "description": f.description, "required": f.required,
                    "default": f.default, "choices": list(f.choices),
                    "choice_titles": list(f.choice_titles)} for f in request.fields],
    }
    if request.url is not None:
        view["url"] = request.url
        view["host"] = urlsplit(request.url).hostname or ""
    return view


class WebApprover(DeferringApprover):
    """One run's approver: defers every approval (the run pauses; the page decides) and
    asks the person at the page watching this run for an MCP server's input."""

    def __init__(self, elicitations: Elicitations, watcher: Watcher) -> None:
        super().__init__()
        self.elicitations = elicitations
        self.watcher = watcher

    async def elicit(self, request: ElicitationRequest) -> ElicitationAnswer:
        return await self.elicitations.ask(request, self.watcher)


class RunAs:
    """The agent as one run sees it: everything the agent's, but the approver the run's own
    (``RunHost``). The toolsets, the context fitter and the hooks stay the agent's: runs
    share them as they share the agent."""

    def __init__(self, agent: Agent, approver: Approver) -> None:
        self._agent = agent
        self._approver = approver

    @property
    def approver(self) -> Approver:
        return self._approver

    @property
    def settings(self) -> AgentSettings:
        return self._agent.settings

    @property
    def model(self) -> Provider:
        return self._agent.model

    @property
    def providers(self) -> Mapping[str, Provider]:
        return self._agent.providers

    @property
    def hooks(self) -> Hooks:
        return self._agent.hooks

    @property
    def tools(self) -> dict[str, Tool]:
        return self._agent.tools

    @property
    def toolsets(self) -> Sequence[Tool | Toolset]:
        return self._agent.toolsets

    def toolsets_for_run(self) -> AbstractAsyncContextManager[None]:
        return self._agent.toolsets_for_run()

    def context_fitter(self) -> ContextFitter:
        return self._agent.context_fitter()

    def observer(self, conversation: Conversation, path: tuple[str, ...],
                 stream_requests: bool) -> RunObserver | None:
        return self._agent.observer(conversation, path, stream_requests)

    def take_notices(self) -> list[ev.Notice]:
        return self._agent.take_notices()

    def spawn(self, model: Provider, settings: AgentSettings, tools: Iterable[Tool | Toolset],
              *, approver: Approver | None, name: str) -> RunHost:
        return self._agent.spawn(model, settings, tools, approver=approver, name=name)
