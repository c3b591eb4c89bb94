"""One MCP server's session: start (connect, negotiate the protocol revision, list every
page of its tools, resources and prompts), its tools and resources as tether Tools, calls
with their progress, reads, prompts, list-change refreshes, and a clean close."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import re
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any, TextIO

from tether.display import inline
from tether.errors import ConfigError, ToolError
from tether.events import Notice
from tether.fields import fields_from_schema, schema_declares_secrets
from tether.mcp.elicitation import Elicitations
from tether.mcp.environment import child_environment
from tether.mcp.freshness import Freshness
from tether.mcp.http import HttpTransport as _Http
from tether.mcp.mapping import Hints, believed, map_hints, output_from_result, schema_problem
from tether.mcp.oauth import OAuth, oauth_client
from tether.mcp.prompts import Prompt, PromptArgument, PromptText, check_arguments, prompt_text
from tether.mcp.protocol import (
    GivenUp,
    Throttled,
    answered,
    every_page,
    modern,
    negotiate,
    progress_to,
    said,
    start_failure,
)
from tether.mcp.protocol import StartFailure as _StartFailure
from tether.mcp.resources import Resource, ResourceTemplate, output_from_read, resource_tools
from tether.mcp.stdio import StdioTransport as _Stdio
from tether.mcp.stdio import stdio_server_streams
from tether.sandbox import Sandbox
from tether.tools.tool import Tool, ToolContext, ToolOutput
from tether.tools.toolsets import PrefixedToolset, marked
from tether.trust import NO_CAPABILITIES, Capabilities
from tether.version import __version__

if TYPE_CHECKING:
    import anyio
    from mcp.client.session import ClientSession, IncomingMessage
    from mcp_types import Tool as McpTool

_SERVER_NAME = re.compile(r"[A-Za-z0-9_-]+")
_NOT_NAME_CHAR = re.compile(r"[^A-Za-z0-9_-]")
_MAX_TOOL_NAME = 64  # the tightest provider limit (OpenAI function names)
_STDERR_TAIL = 600  # characters of a failed server's stderr quoted in its notice
DEFAULT_SANDBOX = Sandbox(network=True, read_all=False)  # most need the network, not your files


class McpServer:
    """One MCP server's tools, bridged into tether. Build with ``McpServer.stdio(...)`` or
    ``McpServer.http(...)`` (or ``tether.config.servers_from_config``) and pass it in
    ``Agent(tools=[...])``.

    - ``name`` prefixes the tool names (``<name>__<tool>``) unless ``prefix_tools=False``:
      the server's tools are offered through a ``PrefixedToolset``.
    - ``timeout_secs`` bounds each call: one that runs out gets an error result, and the
      server is asked to cancel it. ``start_timeout_secs`` (default: ``timeout_secs``)
      bounds each request of the start (initialize, each page of the tool list), for
      servers that are slow to come up (``npx`` fetching a package).
    - ``capabilities`` widen what every tool of the server declares (never narrow).
    - ``trusted``: whether the server's own text (tool names, titles, descriptions,
      schemas) is trusted. Default: a stdio server (code you installed, run on your machine)
      is; a remote one (``http``) is not. A conversation that offers an untrusted server's
      tools counts as having seen untrusted text from its first turn, and the server's
      results count as untrusted input.
    - ``defer``: ``Tool.defer`` of every tool (``True``: found by ``search_tools`` first).
    - ``error``: why the server is not running (failed start, crash), else ``None``.
    - ``notices``: what the user should know (start failure, tools that were skipped).

    Approval is never cached for the session (``cache_approval=False``): the server can
    redefine a tool under the same name at any time (``tools/list_changed``), so "allow for
    this session" would cover a tool nobody has seen.
    """

    def __init__(
        self,
        name: str,
        transport: _Stdio | _Http,
        *,
        prefix_tools: bool = True,
        timeout_secs: float = 60.0,
        start_timeout_secs: float | None = None,
        capabilities: Capabilities = NO_CAPABILITIES,
        errlog: TextIO | None = None,
        trusted: bool | None = None,
        defer: bool | None = None,
    ) -> None:
        if not _SERVER_NAME.fullmatch(name):
            raise ConfigError(f"mcp server name {name!r}: use letters, digits, _ and - only "
                              f"(it prefixes the tool names the model sees)")
        if timeout_secs <= 0 or (start_timeout_secs is not None and start_timeout_secs <= 0):
            raise ConfigError(f"mcp server {name!r}: timeouts must be positive")
        self._prefixed: PrefixedToolset | None = None
        self.name = name
        self.transport = transport
        self.prefix_tools = prefix_tools
        self.timeout_secs = timeout_secs
        self.start_timeout_secs = start_timeout_secs or timeout_secs
        self.capabilities = capabilities
        self.trusted = isinstance(transport, _Stdio) if trusted is None else bool(trusted)
        self.defer = defer
        self.error: str | None = None
        self.notices: list[Notice] = []
        self._errlog = errlog
        self._started = False
        self._down: str | None = None
        self._stderr: TextIO | None = None
        self._tools: tuple[Tool, ...] = ()  # named as the server names them
        self._own_tools: tuple[Tool, ...] = ()  # the server's tools, without its resources
        self.protocol_version: str | None = None
        self.resources: tuple[Resource, ...] = ()
        self.resource_templates: tuple[ResourceTemplate, ...] = ()
        self.prompts: tuple[Prompt, ...] = ()
        if prefix_tools:
            self._prefixed = PrefixedToolset(_Listing(self), name)
        self._session: ClientSession | None = None
        self._handshake: anyio.CancelScope | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._refresh_lock = asyncio.Lock()
        self._refreshing = 0
        self._refreshed = asyncio.Event()
        self._elicitations = Elicitations(self)
        self.relisted = asyncio.Event()  # set each time the lists were read again
        self._freshness = Freshness()  # how long its tools list holds (its ttlMs)

    @classmethod
    def stdio(
        cls,
        name: str,
        command: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        *,
        env_passthrough: Sequence[str] = (),
        cwd: str | None = None,
        prefix_tools: bool = True,
        timeout_secs: float = 60.0,
        start_timeout_secs: float | None = None,
        capabilities: Capabilities = NO_CAPABILITIES,
        errlog: TextIO | None = None,
        trusted: bool = True,
        sandbox: Sandbox | None = DEFAULT_SANDBOX,
        defer: bool | None = None,
    ) -> McpServer:
        """A server run as a child process, speaking over its stdin/stdout.

        The child gets only ``ALLOWED_ENV`` from tether's environment, plus the names in
        ``env_passthrough``, plus ``env``. Its stderr goes to ``errlog`` if given, else to a
        temporary file whose end is quoted when the server fails. It runs inside ``sandbox``
        (default: the network on; it writes its working folder, reads the system, its own
        program and its folders; ``None``: with all of your rights); with the network off,
        its tools lose ``external_send``.
        """
        transport = _Stdio(command, tuple(args), dict(env or {}), tuple(env_passthrough), cwd,
                           None if os.name != "posix" else sandbox)
        return cls(name, transport, prefix_tools=prefix_tools, timeout_secs=timeout_secs,
                   start_timeout_secs=start_timeout_secs, capabilities=capabilities,
                   errlog=errlog, trusted=trusted, defer=defer)

    @classmethod
    def http(
        cls,
        name: str,
        url: str,
        headers: Mapping[str, str] | None = None,
        *,
        headers_env: Mapping[str, str] | None = None,
        prefix_tools: bool = True,
        timeout_secs: float = 60.0,
        start_timeout_secs: float | None = None,
        capabilities: Capabilities = NO_CAPABILITIES,
        trusted: bool = False,
        oauth: OAuth | None = None,
        defer: bool | None = None,
    ) -> McpServer:
        """A server reached over streamable HTTP. ``headers_env`` maps a header to the
        environment variable holding its value (read when the server starts). Not trusted
        unless ``trusted=True``: whoever runs it wrote its tools' descriptions. ``oauth``
        signs in with OAuth 2.1 (``tether.mcp.oauth``)."""
        transport = _Http(url, dict(headers or {}), dict(headers_env or {}), oauth)
        return cls(name, transport, prefix_tools=prefix_tools, timeout_secs=timeout_secs,
                   start_timeout_secs=start_timeout_secs, capabilities=capabilities,
                   trusted=trusted, defer=defer)

    def __repr__(self) -> str:
        return f"McpServer({self.name!r}, {self.transport.describe()!r})"

    @property
    def name(self) -> str:
        """The server's name: in its notices, and the prefix of its tools' names."""
        return self._name

    @name.setter
    def name(self, name: str) -> None:
        self._name = name
        if self._prefixed is not None:
            self._prefixed.prefix = name

    # --- Toolset ------------------------------------------------------------------------------

    def tools(self) -> Sequence[Tool]:
        """The tools as the server last listed them (none before ``start()`` or after a
        failed start), named as the model sees them."""
        return self._tools if self._prefixed is None else self._prefixed.tools()

    @property
    def started(self) -> bool:
        """Whether ``start()`` was called (a failed start counts) and ``aclose()`` was not
        called since."""
        return self._started

    # --- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> list[Notice]:
        """Connect, initialize and list the tools (every page).

        Returns the notices of this start: a start failure (then ``error`` is set and the
        server offers no tools) or tools that were skipped. A running server is left as it
        is.
        """
        if self._task is not None:
            return []
        self._started = True
        self.error = self._down = None
        self.notices = []
        self.protocol_version = None
        self.resources, self.resource_templates, self.prompts = (), (), ()
        self._freshness = Freshness()
        # Fresh primitives per start: a server object may be started again under another
        # event loop (asyncio.run per CLI command).
        self._stop, self._refreshed, self._refresh_lock, self.relisted = \
            asyncio.Event(), asyncio.Event(), asyncio.Lock(), asyncio.Event()
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # Mark its failure as seen even if start() itself was cancelled meanwhile.
        ready.add_done_callback(lambda f: f.cancelled() or f.exception())
        # The connection lives in a task of its own: the SDK's transports are anyio task
        # groups that must be entered and left by one task, while start() and aclose() may
        # be called from different ones (the agent starts servers side by side). An anyio
        # scope (not task.cancel()) bounds the handshake, so that closing while a server
        # starts stops it at once and still lets the transport stop the child.
        import anyio

        self._handshake = anyio.CancelScope()
        self._task = asyncio.create_task(self._serve(ready, self._handshake),
                                         name=f"mcp server {self.name}")
        self._task.add_done_callback(
            lambda _: _fail(ready, _StartFailure("the connection task ended")))
        try:
            # shield: a cancelled start() must not cancel `ready` under the task's feet.
            await asyncio.shield(ready)
        except _StartFailure as failure:
            await self._close()
            self.error, self._down = str(failure), "it did not start"
            notice = Notice("error", f"MCP server {self.name!r} ({self.transport.describe()}) "
                                     f"did not start: {self.error}. Its tools are not "
                                     f"available; the run goes on without them.",
                            source=f"mcp:{self.name}")
            self.notices.append(notice)
            return [notice]
        except asyncio.CancelledError:
            await self.aclose()
            raise
        return list(self.notices)

    async def aclose(self) -> None:
        """End the session; a stdio server's process (and its children) is stopped: stdin
        closed, then SIGTERM, then SIGKILL, each after a short grace period."""
        self._started = False
        await self._close()

    async def _close(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            self._stop.set()
            if self._handshake is not None:
                self._handshake.cancel()
            # shield: the cleanup (the child's shutdown) finishes even if aclose is cancelled.
            await asyncio.shield(task)
        self._tools = ()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    async def _serve(self, ready: asyncio.Future[None], handshake: anyio.CancelScope) -> None:
        import anyio
        from mcp.client.session import ClientSession
        from mcp_types import Implementation

        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._connect())
                session = ClientSession(
                    read, write, read_timeout_seconds=self.start_timeout_secs,
                    message_handler=self._on_message,
                    elicitation_callback=self._elicitations.callback,
                    client_info=Implementation(name="tether", version=__version__))
                await stack.enter_async_context(session)
                self._session = session
                async with anyio.create_task_group() as listening:
                    with handshake:
                        self.protocol_version = await negotiate(session)
                        await self._list_everything(session)
                        if modern(self.protocol_version):
                            # Started once the server acknowledged it: no change is missed.
                            await listening.start(self._listen, session)
                    if handshake.cancel_called:
                        raise _StartFailure("closed while starting")
                    if not ready.done():
                        ready.set_result(None)
                    await self._stop.wait()
                    listening.cancel_scope.cancel()
        except Exception as e:  # a third-party server can fail in any way: report it, go on
            failure = e if isinstance(e, _StartFailure) else \
                _StartFailure(start_failure(e, self.start_timeout_secs))
            if ready.done():
                self.error = f"the connection failed: {failure}"
            else:
                failure.args = (f"{failure}{self._stderr_tail()}",)
                ready.set_exception(failure)
        finally:
            self._session = None

    async def _listen(self, session: ClientSession, *,
                      task_status: anyio.abc.TaskStatus[None]) -> None:
        """The current revision's list changes: a ``subscriptions/listen`` stream (the
        handshake era's notifications arrive through ``_on_message`` instead)."""
        from mcp.client.subscriptions import listen

        caps = session.server_capabilities
        tools = bool(caps and caps.tools and caps.tools.list_changed)
        resources = bool(caps and caps.resources and caps.resources.list_changed)
        prompts = bool(caps and caps.prompts and caps.prompts.list_changed)
        if not (tools or resources or prompts):
            task_status.started()
            return
        started = False
        try:
            async with listen(session, tools_list_changed=tools, prompts_list_changed=prompts,
                              resources_list_changed=resources) as subscription:
                task_status.started()
                started = True
                async for _ in subscription:
                    pass  # the session hands each event to _on_message as a notification
            self._freshness.stream_ended()
        except Exception as e:  # the server's stream failed: lists stay as they are
            if not started:
                task_status.started()
            self._freshness.stream_ended()
            self.notices.append(Notice(
                "warning", f"MCP server {self.name!r}: listening for changes to its lists "
                           f"failed ({inline(said(e))}); the lists stay as they were.",
                source=f"mcp:{self.name}"))

    @contextlib.asynccontextmanager
    async def _connect(self) -> AsyncIterator[Any]:
        transport = self.transport
        if isinstance(transport, _Stdio):
            env = child_environment(transport.env, transport.env_passthrough)
            if transport.cwd is None and \
                    shutil.which(transport.command, path=env.get("PATH")) is None:
                raise _StartFailure(f"the command {transport.command!r} was not found "
                                    f"(on the PATH the server gets)")
            errlog = self._errlog
            if errlog is None:
                if self._stderr is None:
                    self._stderr = tempfile.TemporaryFile(  # noqa: SIM115 (closed in aclose)
                        "w+", encoding="utf-8", errors="replace")
                errlog = self._stderr
            if sys.platform == "win32":  # no process groups: the SDK's Job Object instead
                from mcp.client.stdio import StdioServerParameters, stdio_client

                params = StdioServerParameters(command=transport.command,
                                               args=list(transport.args), env=env,
                                               cwd=transport.cwd)
                async with stdio_client(params, errlog=errlog) as streams:
                    yield streams
            else:
                async with stdio_server_streams(
                        transport.command, transport.args, env=env, cwd=transport.cwd,
                        errlog=errlog, on_gone=self._on_gone,
                        sandbox=transport.sandbox) as streams:
                    yield streams
        else:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            headers = transport.resolved_headers()
            longest = max(self.timeout_secs, self.start_timeout_secs)
            timeout = httpx2.Timeout(longest, read=max(300.0, longest))
            client = httpx2.AsyncClient(headers=headers, timeout=timeout) \
                if transport.oauth is None else \
                oauth_client(self.name, transport.url, transport.oauth, headers, timeout)
            async with client as http, \
                    streamable_http_client(transport.url, http_client=http) as streams:
                yield streams

    # --- tools --------------------------------------------------------------------------------

    async def _list_everything(self, session: ClientSession) -> None:
        """The server's tools, and its resources, resource templates and prompts when it
        says it has them. Only the tools can fail a start: a server whose other lists fail
        offers its tools, with a notice."""
        await self._list_tools(session)
        caps = session.server_capabilities
        if caps is not None and caps.resources is not None:
            try:
                listed = await every_page(session.list_resources, "resources",
                                           "resources/list")
                templates = await every_page(session.list_resource_templates,
                                              "resource_templates", "resources/templates/list")
            except Exception as e:
                self._list_failed("resources", e)
            else:
                self.resources = tuple(
                    Resource(str(r.uri), r.name, r.title, r.description, r.mime_type)
                    for r in listed)
                self.resource_templates = tuple(
                    ResourceTemplate(str(t.uri_template), t.name, t.title, t.description,
                                     t.mime_type) for t in templates)
        if caps is not None and caps.prompts is not None:
            try:
                prompts = await every_page(session.list_prompts, "prompts", "prompts/list")
            except Exception as e:
                self._list_failed("prompts", e)
            else:
                self.prompts = tuple(
                    Prompt(p.name, p.title, p.description,
                           tuple(PromptArgument(a.name, a.description, bool(a.required))
                                 for a in p.arguments or ()))
                    for p in prompts)
        self._tools = self._with_resources()

    async def _list_tools(self, session: ClientSession) -> None:
        """The server's own tools, every page, and how long the list holds."""
        ttls: list[int] = []
        self._own_tools = self._build_tools(
            await every_page(session.list_tools, "tools", "tools/list", ttls))
        caps = session.server_capabilities
        self._freshness.listed(ttls, bool(caps and caps.tools and caps.tools.list_changed))

    async def freshen(self, names: AbstractSet[str]) -> bool:
        """Before calls of ``names`` are judged (``tether.tools.toolsets.freshen``): when
        the tools list is past its time to live (``tether.mcp.freshness``) and one of them
        is this server's tool, the list is read again, so a tool redefined under the same
        name is judged by what it says now. True when it was (or, failing, the server's
        tools were withdrawn: a stale annotation is never judged by)."""
        session = self._session
        if not self._freshness.stale or session is None \
                or not any(t.name in names for t in self.tools()):
            return False
        async with self._refresh_lock:
            if not self._freshness.stale:
                return True  # read again meanwhile, for another call
            try:
                await self._list_tools(session)
            except Exception as e:  # the server's answer, whatever it is
                self._own_tools = ()
                self._freshness.withdrawn()
                self.notices.append(Notice(
                    "warning", f"MCP server {self.name!r}: its tool list was past its time "
                               f"to live and reading it again failed ({inline(said(e))}); "
                               f"its tools are withdrawn.", source=f"mcp:{self.name}"))
            self._tools = self._with_resources()
        return True

    def _list_failed(self, what: str, error: Exception) -> None:
        self.notices.append(Notice(
            "warning", f"MCP server {self.name!r}: listing its {what} failed "
                       f"({inline(said(error))}); they are not available.",
            source=f"mcp:{self.name}"))

    def _with_resources(self) -> tuple[Tool, ...]:
        """The server's tools, then the tools that read its resources (a name a server's
        own tool holds stays the server's)."""
        tools, problems = resource_tools(
            self.resources, self.resource_templates, self.read_resource, server=self.name,
            trusted=self.trusted, widen=self.capabilities)
        taken = {t.name for t in self._own_tools}
        for tool in tools:
            if tool.name in taken:
                problems.append(f"the tool {tool.name!r} that reads its resources is not "
                                f"offered: the server has a tool of that name")
        for problem in problems:
            self.notices.append(Notice("warning", f"MCP server {self.name!r}: {problem}.",
                                       source=f"mcp:{self.name}"))
        return marked(self._own_tools + tuple(t for t in tools if t.name not in taken),
                      self.defer)

    def _build_tools(self, listed: Sequence[McpTool]) -> tuple[Tool, ...]:
        tools: dict[str, Tool] = {}
        for mcp_tool in listed:
            name = _safe_name(mcp_tool.name)
            shown = self._shown_name(name)
            problem = schema_problem(mcp_tool.input_schema)
            if problem is None and len(shown) > _MAX_TOOL_NAME:
                problem = f"its name {shown!r} is longer than {_MAX_TOOL_NAME} characters"
            if problem is None and name in tools:
                problem = f"its name {shown!r} is taken by another tool of this server"
            if problem is not None:
                # An invalid schema sent to a provider can fail every request of the run,
                # so the tool is left out, and the user is told.
                self.notices.append(Notice(
                    "warning", f"MCP server {self.name!r}: tool {inline(repr(mcp_tool.name))} "
                               f"is not available: {inline(problem)}.",
                    source=f"mcp:{self.name}"))
                continue
            tools[name] = self._tool(name, mcp_tool)
        return tuple(tools.values())

    def _shown_name(self, name: str) -> str:
        """A tool's name as the model knows it (prefixed, unless the server is not)."""
        return name if self._prefixed is None else self._prefixed.named(name)

    def _tool(self, name: str, mcp_tool: McpTool) -> Tool:
        annotations = mcp_tool.annotations
        hints = Hints() if annotations is None else Hints(
            annotations.read_only_hint, annotations.destructive_hint, annotations.open_world_hint)
        # An untrusted server is not believed about itself: its hints can only add caution.
        offline = isinstance(self.transport, _Stdio) and self.transport.offline
        flags = map_hints(believed(hints, trusted=self.trusted), self.capabilities,
                          offline=offline)
        title = (annotations.title if annotations is not None else None) or mcp_tool.title
        original = mcp_tool.name
        # Who writes each field of its structuredContent (WRITTEN_BY_KEY, SECRET_KEY in its
        # outputSchema): read for every server, believed for a trusted one only (the gate
        # keeps an untrusted server's secrets and drops the trust it claims).
        output_schema = getattr(mcp_tool, "output_schema", None)

        async def handler(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
            output = await self.call(original, arguments, context=ctx)
            if output_schema is None or output.structured is None or output.is_error:
                return output
            return dataclasses.replace(
                output, fields=fields_from_schema(output.structured, output_schema))

        return Tool.from_schema(
            name, mcp_tool.description or "", dict(mcp_tool.input_schema), handler,
            title=title, needs_approval=flags.needs_approval, capabilities=flags.capabilities,
            origin="mcp", cache_approval=False, read_only_hint=flags.read_only,
            server=self.name, spec_from_outside=not self.trusted,
            returns_secrets=schema_declares_secrets(output_schema))

    # --- calls and notifications ------------------------------------------------------------

    async def call(self, tool_name: str, arguments: dict[str, Any], *,
                   context: ToolContext | None = None) -> ToolOutput:
        """Call ``tool_name`` (the server's own name, unprefixed). Never raises for the
        server's failures: a crash, a timeout or a refusal is an error result. ``context``
        is the call's, in a run: a request for input the server makes meanwhile goes to
        that run's approver (without one it is declined), and the call's progress
        notifications become ``ToolProgress`` events of that run (throttled:
        ``protocol.PROGRESS_EVERY_SECS``), their message as the server wrote it."""
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        # Named as the model knows it (prefixed, only [A-Za-z0-9_-]), never by the server's
        # own spelling: these texts are tether's, and may be trusted sources.
        name = self._shown_name(_safe_name(tool_name))
        session = self._session
        if session is None:
            why = self._down or "it is not started"
            return ToolOutput(f"Error: the MCP server {self.name!r} is not running ({why}); "
                              f"{name} was not run.", is_error=True, from_outside=False)
        try:
            progress = None if context is None else progress_to(context)
            progress_callback = None if progress is None else Throttled(progress)

            async def send(responses: Any, state: str | None) -> Any:
                return await session.call_tool(
                    tool_name, arguments, read_timeout_seconds=self.timeout_secs,
                    progress_callback=progress_callback, input_responses=responses,
                    request_state=state, allow_input_required=True)

            with self._elicitations.during(context):
                result = await answered(session, send, self.timeout_secs)
        except GivenUp as e:
            return ToolOutput(f"Error: the call to {name} (MCP server {self.name!r}) was "
                              f"given up: {e}. What the server did in the rounds before "
                              f"may have taken effect.", is_error=True, from_outside=False)
        except MCPError as e:
            if e.code == CONNECTION_CLOSED:
                if self._down is None:  # else its exit, seen first, already says how
                    self.error = f"the server stopped during a call to {name}" \
                                 f"{self._stderr_tail()}"
                    self._down = "it stopped during an earlier call"
                self._session = None
                return ToolOutput(f"Error: the MCP server {self.name!r} stopped during the "
                                  f"call (it crashed or exited); {name} may or may not "
                                  f"have done its work. The server's tools are unavailable "
                                  f"for the rest of this session.",
                                  is_error=True, from_outside=False)
            if e.code == REQUEST_TIMEOUT:
                return ToolOutput(f"Error: {name} (MCP server {self.name!r}) did not "
                                  f"answer within {self.timeout_secs:g}s. The server was "
                                  f"asked to cancel the call, but it may still finish, and "
                                  f"what it does may still take effect.",
                                  is_error=True, from_outside=False)
            return ToolOutput(f"Error: the MCP server {self.name!r} refused the call to "
                              f"{name}: {inline(e.error.message)}", is_error=True,
                              from_outside=True)
        except Exception as e:
            # The SDK's word on what the server sent (structured content that does not
            # match the tool's output schema, a result that is not one) quotes the server's
            # values: outside text, as the server's own results are.
            return ToolOutput(f"Error: the call to {name} (MCP server {self.name!r}) "
                              f"failed: {inline(said(e))}", is_error=True, from_outside=True)
        # A call that changed the tool list (the server said so before it answered) returns
        # once the new list is in, so the next turn offers the new tools.
        await self._refresh_settled()
        return output_from_result(result, server_trusted=self.trusted)

    async def read_resource(self, uri: str, context: ToolContext | None = None) -> ToolOutput:
        """Read one resource (what the resource tools run). Never raises for the server's
        failures: they are error results. What it returns is the server's text: untrusted
        unless the server is trusted. ``context`` is the call's: a request for input the
        server makes during the read goes to that run's approver, as during a tool call."""
        from mcp.shared.exceptions import MCPError

        session = self._session
        if session is None:
            why = self._down or "it is not started"
            return ToolOutput(f"Error: the MCP server {self.name!r} is not running ({why}); "
                              f"the resource was not read.", is_error=True, from_outside=False)
        try:
            async def send(responses: Any, state: str | None) -> Any:
                return await session.read_resource(uri, input_responses=responses,
                                                   request_state=state,
                                                   allow_input_required=True)

            with self._elicitations.during(context):
                result = await answered(session, send, self.timeout_secs)
        except MCPError as e:
            return ToolOutput(f"Error: the MCP server {self.name!r} refused to read the "
                              f"resource: {inline(e.error.message)}", is_error=True,
                              from_outside=not self.trusted)
        except Exception as e:  # what the server sent was not a result
            return ToolOutput(f"Error: reading the resource of the MCP server {self.name!r} "
                              f"failed: {inline(said(e))}", is_error=True,
                              from_outside=not self.trusted)
        return output_from_read(result, trusted=self.trusted)

    async def get_prompt(self, name: str, arguments: dict[str, str],
                         context: ToolContext | None = None) -> PromptText:
        """The server's prompt ``name`` filled with ``arguments``, as the parts of a user's
        turn (``tether.mcp.prompts``). For a person to invoke; no tool offers it. Raises
        ``ToolError`` with the reason when the server is not running, the prompt is not
        listed, or the server refuses. With ``context`` (``prompt_context``), a request for
        input the server makes while it fills the prompt goes to that agent's approver,
        as during a tool call; without one it is declined."""
        from mcp.shared.exceptions import MCPError

        session = self._session
        if session is None:
            raise ToolError(f"the MCP server {self.name!r} is not running "
                            f"({self._down or self.error or 'it is not started'})")
        listed = next((p for p in self.prompts if p.name == name), None)
        if listed is None:
            known = ", ".join(inline(p.name) for p in self.prompts) or "none"
            raise ToolError(f"the MCP server {self.name!r} has no prompt {inline(name)!r} "
                            f"(its prompts: {known})")
        problem = check_arguments(listed, arguments)
        if problem is not None:
            raise ToolError(f"{self.name}:{inline(name)}: {inline(problem)}")
        try:
            async def send(responses: Any, state: str | None) -> Any:
                return await session.get_prompt(name, arguments, input_responses=responses,
                                                 request_state=state,
                                                 allow_input_required=True)

            with self._elicitations.during(context):
                result = await answered(session, send, self.timeout_secs)
        except MCPError as e:
            raise ToolError(f"the MCP server {self.name!r} refused the prompt "
                            f"{inline(name)!r}: {inline(e.error.message)}") from None
        except Exception as e:
            raise ToolError(f"getting the prompt {inline(name)!r} of the MCP server "
                            f"{self.name!r} failed: {inline(said(e))}") from None
        return prompt_text(result, server=self.name, name=name, trusted=self.trusted)

    def _on_gone(self, how: str) -> None:
        """The stdio server is lost (its process exited, or its output closed). Unless we
        closed it: calls from now on fail at once (the ones in flight fail as the
        connection closes)."""
        if self._stop.is_set():
            return
        self._session = None
        self._down = how
        self.error = f"the server stopped: {how}{self._stderr_tail()}"

    async def _on_message(self, message: IncomingMessage) -> None:
        from mcp_types import (
            PromptListChangedNotification,
            ResourceListChangedNotification,
            ToolListChangedNotification,
        )

        # Both revisions' changes arrive here: the handshake era's notifications, and the
        # events of the current revision's subscription stream (``_listen``), which the
        # session passes on as the same notifications.
        if isinstance(message, ToolListChangedNotification | ResourceListChangedNotification
                      | PromptListChangedNotification):
            await self._changed()

    async def _changed(self) -> None:
        self._refreshing += 1
        self._refreshed.clear()
        try:
            await self._refresh()
        finally:
            self._refreshing -= 1
            if not self._refreshing:
                self._refreshed.set()
            self.relisted.set()

    async def _refresh(self) -> None:
        session = self._session
        if session is None:
            return
        async with self._refresh_lock:
            try:
                await self._list_everything(session)
            except Exception as e:  # the server's answer, whatever it is
                # The old list stays; a call to a tool that is gone gets the server's refusal.
                self.notices.append(Notice(
                    "warning", f"MCP server {self.name!r} changed its lists but listing them "
                               f"again failed: {inline(said(e))}", source=f"mcp:{self.name}"))

    async def _refresh_settled(self) -> None:
        if not self._refreshing:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.timeout_secs):
                await self._refreshed.wait()

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.flush()
        self._stderr.seek(0, os.SEEK_END)
        size = self._stderr.tell()
        self._stderr.seek(max(0, size - _STDERR_TAIL))
        tail = self._stderr.read().strip()
        self._stderr.seek(0, os.SEEK_END)
        # The server wrote it: on one line, so no line of it poses as tether's.
        return f" (its stderr ends with: {inline(tail)})" if tail else ""


def _fail(ready: asyncio.Future[None], failure: _StartFailure) -> None:
    if not ready.done():
        ready.set_exception(failure)


def _safe_name(tool_name: str) -> str:
    # Providers accept [A-Za-z0-9_-] only; MCP also allows "." (and servers send more).
    return _NOT_NAME_CHAR.sub("_", tool_name)


class _Listing:
    """A server's tools as it lists them, unprefixed: what its ``PrefixedToolset`` wraps."""

    def __init__(self, server: McpServer) -> None:
        self.server = server

    def tools(self) -> Sequence[Tool]:
        return self.server._tools
