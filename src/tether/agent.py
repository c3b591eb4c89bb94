"""The facade: ``Agent``, what people call.

An agent holds a model, its tools and toolsets, an approver and one frozen ``AgentSettings``
value; it starts and closes its toolsets (MCP servers), and runs, streams, resumes and
prepares runs. The runs themselves are the engine's (``tether.run.loop``), which drives the
agent through the ``RunHost`` protocol (``tether.run.host``) and never imports it. How
runs are observed is an object the agent is given (``instrument=``, an ``Instrument``:
``tether.telemetry.Instrumentation``), which it calls and never imports.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeAlias

from tether import events as ev
from tether.approval import Approver, PermissionMode
from tether.attachments import Attachment, attachment_parts
from tether.conversation import Conversation, SessionLike
from tether.errors import ConfigError
from tether.messages import Part, Text
from tether.output import (
    CheckedText,
    OutputReservation,
    OutputSpec,
    OutputValidator,
    PreparedRun,
)
from tether.providers.base import Provider
from tether.result import RunResult, final_result
from tether.run.context.fitter import ContextFitter
from tether.run.hooks import Hook, Hooks
from tether.run.host import Instrument, RunHost, RunObserver
from tether.run.loop import resume_events, run_events, run_result
from tether.run.pending import Decisions, PendingState, bind_decisions, paused_calls
from tether.settings import (
    DEFAULT_DEFER_AFTER,
    DEFAULT_MAX_REPEATED_FAILURES,
    DEFAULT_MAX_TURNS,
    AgentSettings,
    ContextConfig,
    ContextStrategy,
    Prices,
    Setting,
)
from tether.skills import Skill, SkillFolder, Skills
from tether.subagents import RemoteSubagent, SubagentProfile, delegation_tools
from tether.tools.function import ensure_tools
from tether.tools.tool import DepsT, Tool
from tether.tools.toolsets import ManagedToolset, Toolset, collect_tools
from tether.trust import SecurityConfig

# Files given with a prompt: paths (outside text) or ``Attachment``s (tether.attachments).
Attachments: TypeAlias = Sequence[Attachment | str | os.PathLike[str]]


class Agent(Generic[DepsT]):
    """An LLM on a tether: a model, tools, and the rules every tool call must pass.

    ::

        agent = Agent(model=OpenAIChat(base_url=..., model="qwen"), tools=[add])
        result = await agent.run("What is 2+3?")

    The keyword arguments that bound and govern its runs make one frozen ``AgentSettings``
    (``agent.settings``); ``agent.max_turns`` and the others read it (and assigning one
    makes a new settings value).

    ``Agent[DepsT]`` takes the host's dependencies of type ``DepsT`` with each run
    (``agent.run(prompt, deps=...)``; ``deps_type=`` names the type for type checkers
    and checks it at run time), handed to tools as ``ToolContext[DepsT].deps`` and to
    nothing else. ``hooks`` are the host's code at five points of each run, which can only
    narrow it (``tether.run.hooks``). ``defer_after``: past this many tools, a run offers
    ``search_tools`` instead of the large catalogue (``tether.tools.search``). ``skills``:
    folders of skills (``tether.skills``; a plain path is the user's, trusted; a
    ``SkillFolder(path, trusted=False)`` is outside text), loaded by ``load_skill``, their
    files readable by the file tools; ``agent.skills`` lists them.
    """

    skills: list[Skill]

    system_prompt = Setting[str | None]()
    max_turns = Setting[int]()
    max_repeated_failures = Setting[int | None]()
    max_output_tokens = Setting[int | None]()
    max_cost_usd = Setting[float | None]()
    prices = Setting[Prices | None]()
    permission_mode = Setting[PermissionMode]()
    security = Setting[SecurityConfig]()
    workspace = Setting[Path]()
    approval_timeout_secs = Setting[float | None]()
    tool_timeout_secs = Setting[float | None]()
    hook_timeout_secs = Setting[float | None]()
    temperature = Setting[float | None]()
    output_retries = Setting[int]()
    context = Setting[ContextConfig]()
    defer_after = Setting[int | None]()

    def __init__(
        self,
        model: Provider,
        tools: Iterable[Tool | Toolset | Callable[..., Any]] = (),
        system_prompt: str | None = None,
        max_turns: int = DEFAULT_MAX_TURNS,
        max_output_tokens: int | None = None,
        *,
        approver: Approver | None = None,
        security: SecurityConfig | None = None,
        permission_mode: PermissionMode = "ask",
        workspace: str | Path = ".",
        subagents: Iterable[SubagentProfile | RemoteSubagent] = (),
        providers: dict[str, Provider] | None = None,
        approval_timeout_secs: float | None = 300.0,
        tool_timeout_secs: float | None = 600.0,
        temperature: float | None = None,
        output_retries: int = 2,
        max_cost_usd: float | None = None,
        prices: Prices | None = None,
        instrument: Instrument | bool | None = None,
        context: ContextStrategy | ContextConfig = "trim",
        max_repeated_failures: int | None = DEFAULT_MAX_REPEATED_FAILURES,
        hooks: Iterable[Hook] = (),
        hook_timeout_secs: float | None = 30.0,
        deps_type: type[DepsT] | None = None,
        defer_after: int | None = DEFAULT_DEFER_AFTER,
        skills: Skills | Iterable[SkillFolder | str | os.PathLike[str]] = (),
    ) -> None:
        self.deps_type = deps_type
        catalogue = skills if isinstance(skills, Skills) else Skills(skills)
        if catalogue.skills:
            tools = [*tools, catalogue]
            security = dataclasses.replace(security or SecurityConfig(), readable_paths=(
                *(security.readable_paths if security else ()), *catalogue.readable()))
        settings = AgentSettings(
            system_prompt=system_prompt, max_turns=max_turns,
            max_repeated_failures=max_repeated_failures,
            max_output_tokens=max_output_tokens, max_cost_usd=max_cost_usd, prices=prices,
            permission_mode=permission_mode, security=security or SecurityConfig(),
            workspace=Path(workspace), approval_timeout_secs=approval_timeout_secs,
            tool_timeout_secs=tool_timeout_secs, temperature=temperature,
            output_retries=output_retries, context=ContextConfig.of(context),
            hook_timeout_secs=hook_timeout_secs, defer_after=defer_after)
        self._setup(model, settings, tools, approver, subagents, providers, instrument, hooks)
        self.skills = catalogue.skills
        self.start_notices.extend(ev.Notice("warning", w, source="skills")
                                  for w in catalogue.warnings)

    @classmethod
    def from_settings(
        cls,
        model: Provider,
        settings: AgentSettings,
        tools: Iterable[Tool | Toolset | Callable[..., Any]] = (),
        *,
        approver: Approver | None = None,
        subagents: Iterable[SubagentProfile | RemoteSubagent] = (),
        providers: dict[str, Provider] | None = None,
        instrument: Instrument | bool | None = None,
        hooks: Iterable[Hook] | Hooks = (),
    ) -> Agent[Any]:
        """An agent with these settings (a sub-agent's: its parent's, changed by a profile)."""
        agent = cls.__new__(cls)
        agent.deps_type = None
        agent.skills = []
        agent._setup(model, settings, tools, approver, subagents, providers, instrument, hooks)
        return agent

    def _setup(
        self, model: Provider, settings: AgentSettings,
        tools: Iterable[Tool | Toolset | Callable[..., Any]], approver: Approver | None,
        subagents: Iterable[SubagentProfile | RemoteSubagent],
        providers: dict[str, Provider] | None,
        instrument: Instrument | bool | None, hooks: Iterable[Hook] | Hooks = (),
    ) -> None:
        self.model = model
        self.settings = settings
        self.approver = approver
        # What the host's hooks implement, found once (tether.run.hooks): a run without
        # hooks pays one truth test per point.
        self.hooks = Hooks.of(hooks)
        self.providers = dict(providers or {})
        # How this agent's runs are observed (OpenTelemetry's spans and metrics:
        # tether.telemetry.Instrumentation), not how they are bounded, so not a setting.
        # None: off. The agent calls it; it never imports it.
        self.instrument: Instrument | None = _instrument(instrument)
        self._toolsets = ensure_tools(tools)
        self._fitter: ContextFitter | None = None
        # What starting the toolsets (MCP servers) had to say; the next run emits it.
        self.start_notices: list[ev.Notice] = []
        self._reported_clashes: set[str] = set()
        # Runs of an agent not entered with ``async with`` start the toolsets nobody started
        # and close them when the last of them ends (see ``toolsets_for_run``).
        self._entered = False
        self._run_users = 0
        self._starting: asyncio.Future[None] | None = None
        self._run_started: list[ManagedToolset] = []
        self.subagents = list(subagents)
        if self.subagents:
            # First among the toolsets: a delegation keeps its name before any server's.
            self._toolsets[0:0] = delegation_tools(self.subagents, self)
        self._check_tool_names()

    # --- public API -----------------------------------------------------------------------

    @property
    def toolsets(self) -> tuple[Tool | Toolset, ...]:
        """The tools and toolsets the agent was given, in order (delegations first): a
        ``Tool`` stands for itself, a ``Toolset`` offers whatever tools it has now."""
        return tuple(self._toolsets)

    @property
    def tools(self) -> dict[str, Tool]:
        """The tools as they are now (MCP servers may change theirs during a run): your own
        tools first, then each toolset's; the first tool of a name keeps it (see
        ``tool_clashes``). Asking changes nothing."""
        tools, _ = collect_tools(self._toolsets)
        return tools

    def tool_clashes(self) -> list[ev.Notice]:
        """A warning for each tool left out because an earlier tool has its name."""
        _, clashes = collect_tools(self._toolsets)
        return [ev.Notice("warning", f"two tools are named {c.name!r}; the one from "
                                     f"{getattr(c.toolset, 'name', c.toolset)!r} is not offered",
                          source="tools") for c in clashes]

    def take_notices(self) -> list[ev.Notice]:
        """What the next run should tell its listener, handed over once: the start notices,
        a warning for toolsets that were never started (their tools are missing: the agent
        was not entered with ``async with``), and tool name clashes not reported before."""
        notices, self.start_notices = self.start_notices, []
        unstarted = [t for t in self._managed() if not t.started]
        if unstarted:
            names = ", ".join(repr(t.name) for t in unstarted)
            notices.append(ev.Notice("warning", f"toolsets not started, their tools are "
                                                f"missing: {names}. Use `async with agent:` "
                                                f"(it starts and closes them)."))
        if all(isinstance(t, Tool) for t in self._toolsets):
            return notices  # names of your own tools are unique (checked when given)
        _, clashes = collect_tools(self._toolsets)
        for clash, notice in zip(clashes, self.tool_clashes(), strict=True):
            if clash.name not in self._reported_clashes:
                self._reported_clashes.add(clash.name)
                notices.append(notice)
        return notices

    def add_tools(self, *tools: Tool | Toolset | Callable[..., Any]) -> None:
        self._toolsets.extend(ensure_tools(tools))
        self._check_tool_names()

    async def run(
        self,
        prompt: str | Sequence[Part],
        *,
        conversation: Conversation | None = None,
        session: SessionLike | None = None,
        interrupt: asyncio.Event | None = None,
        attachments: Attachments = (),
        deps: DepsT = None,  # type: ignore[assignment]  # None: the run has none
        output_validators: Sequence[OutputValidator] = (),
    ) -> RunResult:
        """Run to an answer or a bound. A provider failure raises (with ``.result`` set).

        ``attachments`` are files given with the prompt, before it (paths, or
        ``Attachment``s): images, text files, PDFs' text; a path is outside text, untrusted,
        unless given as ``Attachment.from_path(path, trusted=True)`` (``tether.attachments``).

        Setting ``interrupt`` stops the run with ``stop_cause == "interrupted"``: an answer
        the model is still writing is abandoned (and not kept), calls not yet run are
        answered "not run", a tool already running finishes first. The conversation stays
        valid to continue. ``deps`` reach the run's tools (``ToolContext.deps``) and nothing
        else. ``output_validators`` check the text answer: one that raises ``ModelRetry``
        sends the model back with its message, up to ``output_retries`` times (then the run
        raises ``OutputFailure("rejected")``)."""
        return _raised(await run_result(
            self, with_attachments(prompt, attachments), conversation=conversation,
            session=session, interrupt=interrupt, stream_requests=False,
            deps=self._checked_deps(deps), ending=self._checked_text(output_validators)))

    def run_sync(self, prompt: str | Sequence[Part], **kwargs: Any) -> RunResult:
        """``run`` for scripts without an event loop of their own.

        The loop is the call's own: the providers' HTTP connections are closed before it
        ends (the next call, or another loop, opens new ones)."""
        return asyncio.run(self._run_then_release(prompt, **kwargs))

    async def _run_then_release(self, prompt: str | Sequence[Part], **kwargs: Any) -> RunResult:
        try:
            return await self.run(prompt, **kwargs)
        finally:
            await self._close_providers()

    async def stream(
        self,
        prompt: str | Sequence[Part],
        *,
        conversation: Conversation | None = None,
        session: SessionLike | None = None,
        interrupt: asyncio.Event | None = None,
        attachments: Attachments = (),
        deps: DepsT = None,  # type: ignore[assignment]
        output_validators: Sequence[OutputValidator] = (),
    ) -> AsyncIterator[ev.Event]:
        """Every event of a run, ending with ``RunFinished``. Provider failures end the run
        with ``stop_cause == "error"`` instead of raising. ``attachments`` as for ``run``."""
        parts = with_attachments(prompt, attachments)
        # Closed with this stream: a reader that stops early ends the run now (see run_events).
        async with contextlib.aclosing(run_events(
                self, parts, conversation=conversation, session=session,
                interrupt=interrupt, deps=self._checked_deps(deps),
                ending=self._checked_text(output_validators))) as events:
            async for event in events:
                yield event

    async def resume(
        self,
        conversation: Conversation | PendingState | SessionLike,
        decisions: Decisions,
        *,
        stream: bool = False,
        deps: DepsT = None,  # type: ignore[assignment]
    ) -> RunResult:
        """Continue a paused run (a ``Conversation``, a ``PendingState`` or a stored session).

        ``decisions`` answers pending calls, keyed by ``PendingCall`` (``result.pending[i]``)
        or by call id. Each decision is bound to the one call it answers (its position in
        the paused turn, its id, tool and exact arguments) and used up by that turn: nothing
        a later turn does inherits it. A key that answers no pending call raises
        ``PendingStateError`` naming the pending ones, as does an id two pending calls
        share. A pending call left without a decision goes to the approver again."""
        session: SessionLike | None = None
        if isinstance(conversation, PendingState):
            conversation = conversation.conversation
        elif not isinstance(conversation, Conversation):
            session, conversation = conversation, conversation.conversation()
        bound = bind_decisions(paused_calls(conversation), decisions)
        return _raised(await final_result(resume_events(
            self, conversation, bound, session=session, stream_requests=stream,
            deps=self._checked_deps(deps))))

    def prepare(
        self,
        prompt: str | Sequence[Part],
        *,
        output: OutputSpec | OutputReservation,
        conversation: Conversation | None = None,
        attachments: Attachments = (),
        deps: DepsT = None,  # type: ignore[assignment]
    ) -> PreparedRun:
        """A run that must answer in ``output``'s shape: ``await agent.prepare(...).output()``."""
        return PreparedRun(self, with_attachments(prompt, attachments), output, conversation,
                           deps=self._checked_deps(deps))

    async def aclose(self) -> None:
        await self._close_providers()
        # Side by side: each may wait out a child process's grace period.
        await asyncio.gather(*(t.aclose() for t in self._managed()))

    async def __aenter__(self) -> Agent[DepsT]:
        """Start every ``ManagedToolset`` (MCP servers), side by side, and keep them up
        across runs until the block ends. A toolset's ``start()`` may return ``Notice``
        events (a server that did not start): they are kept in ``start_notices`` and emitted
        by the next run. Without ``async with``, each run starts the toolsets nobody started
        and closes them when it ends."""
        try:
            await self._start_toolsets(self._managed())
        except BaseException:
            await self._close_providers()
            raise
        self._entered = True
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._entered = False
        await self.aclose()

    # --- what the loop reads (RunHost) ------------------------------------------------------

    def observer(self, conversation: Conversation, path: tuple[str, ...],
                 stream_requests: bool) -> RunObserver | None:
        """The observer of one run: the instrument's, when the agent has one."""
        instrument = self.instrument
        return None if instrument is None else instrument.observer(self, conversation, path,
                                                                   stream_requests)

    def spawn(self, model: Provider, settings: AgentSettings, tools: Iterable[Tool | Toolset],
              *, approver: Approver | None, name: str) -> Agent[Any]:
        """A sub-agent's agent: its model, settings, tools and approver, this agent's
        providers and hooks (a hook that refuses a call refuses it in a sub-agent too), and
        its instrument under the sub-agent's name."""
        instrument = None if self.instrument is None else self.instrument.for_agent(name)
        return Agent.from_settings(model, settings, tools, approver=approver,
                                   providers=self.providers, instrument=instrument,
                                   hooks=self.hooks)

    # --- internals --------------------------------------------------------------------------

    def _checked_text(self, validators: Sequence[OutputValidator]) -> CheckedText | None:
        """The ending of a run whose text answer ``validators`` check (None: none do)."""
        return CheckedText(validators, self.settings.output_retries) if validators else None

    def _checked_deps(self, deps: object) -> object:
        """``deps``, of the ``deps_type`` the agent was made with (when it was given one)."""
        wanted = self.deps_type
        if deps is not None and isinstance(wanted, type) and not isinstance(deps, wanted):
            raise ConfigError(f"deps must be a {wanted.__name__} (Agent(deps_type="
                              f"{wanted.__name__})), not a {type(deps).__name__}")
        return deps

    async def _start_toolsets(self, toolsets: Sequence[ManagedToolset]) -> None:
        outcomes = await asyncio.gather(*(t.start() for t in toolsets),
                                        return_exceptions=True)
        failed = [o for o in outcomes if isinstance(o, BaseException)]
        if failed:
            await asyncio.gather(*(t.aclose() for t in toolsets))
            raise failed[0]
        for outcome in outcomes:
            if not isinstance(outcome, BaseException) and outcome:
                self.start_notices.extend(e for e in outcome if isinstance(e, ev.Notice))

    @contextlib.asynccontextmanager
    async def toolsets_for_run(self) -> AsyncIterator[None]:
        """Around one run of an agent not entered with ``async with``: the toolsets nobody
        started (MCP servers) start before its first turn and close when it ends, or when
        the last of the runs sharing them ends."""
        if self._entered:
            yield
            return
        if self._run_users == 0:
            idle = [t for t in self._managed() if not t.started]
            self._run_started = idle
            self._starting = (asyncio.ensure_future(self._start_toolsets(idle)) if idle
                              else None)
        self._run_users += 1
        try:
            if self._starting is not None:
                await asyncio.shield(self._starting)  # concurrent runs share one start
            yield
        finally:
            self._run_users -= 1
            if self._run_users == 0:
                started, self._run_started, self._starting = self._run_started, [], None
                if started:  # (a gather of nothing still makes and settles a future)
                    await asyncio.gather(*(t.aclose() for t in started))

    def context_fitter(self) -> ContextFitter:
        """The fitter of this agent's model: what it has learned (the window, the token
        estimate, the last summary) carries over from one run to the next."""
        fitter, settings = self._fitter, self.settings
        if fitter is None or fitter.provider is not self.model \
                or fitter.config is not settings.context \
                or fitter.max_output_tokens != settings.max_output_tokens:
            fitter = self._fitter = ContextFitter(settings.context, self.model,
                                                  settings.max_output_tokens)
        return fitter

    def _managed(self) -> list[ManagedToolset]:
        # A Tool is no toolset: known first, as a Protocol's isinstance is slow.
        return [t for t in self._toolsets
                if not isinstance(t, Tool) and isinstance(t, ManagedToolset)]

    async def _close_providers(self) -> None:
        await self.model.aclose()
        for provider in self.providers.values():
            await provider.aclose()

    def _check_tool_names(self) -> None:
        seen: set[str] = set()
        for source in self._toolsets:
            if isinstance(source, Tool):
                if source.name in seen:
                    raise ConfigError(f"two tools are named {source.name!r}; names must be unique")
                seen.add(source.name)


def _raised(result: RunResult) -> RunResult:
    """The result, or its provider failure raised with the result attached."""
    if result.error is not None:
        result.error.result = result
        raise result.error
    return result


def _instrument(value: object) -> Instrument | None:
    """``Agent(instrument=...)``: an ``Instrument``; True for the host's global OpenTelemetry
    providers (pydantic-ai's convention: ``Instrumentation()``); None (or False) for none."""
    if value is None or value is False:
        return None
    if value is True:
        # Imported here, so that an agent without telemetry never loads it.
        from tether.telemetry import Instrumentation

        made: Instrument = Instrumentation()
        return made
    if not isinstance(value, Instrument):
        raise ConfigError(f"instrument must be True (the global OpenTelemetry providers) or "
                          f"an instrument such as tether.telemetry.Instrumentation(), not "
                          f"{type(value).__name__}")
    return value


if TYPE_CHECKING:

    def _a_run_host(agent: Agent) -> RunHost:
        return agent  # mypy holds the Agent to the protocol the engine drives


def with_attachments(prompt: str | Sequence[Part],
                     attachments: Attachments) -> str | Sequence[Part]:
    """``prompt`` after the parts of ``attachments`` (``prompt`` itself when none)."""
    if not attachments:
        return prompt
    parts = attachment_parts(attachments)
    return (*parts, *((Text(prompt),) if isinstance(prompt, str) else prompt))
