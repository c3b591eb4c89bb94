"""What tether asks of an MCP client session, whatever the server: the protocol revision
agreed (the current revision's discovery, else the handshake), every page of a list, and
a call's progress passed on to the run as events, throttled."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from tether.display import inline
from tether.events import ToolProgress
from tether.tools.tool import ToolContext

if TYPE_CHECKING:
    from mcp.client.session import ClientSession

MAX_PAGES = 100  # a server whose cursors never end cannot hang the start
PROGRESS_EVERY_SECS = 0.25  # a call's progress events, at most this often (the last: always)
MAX_MESSAGE = 500  # characters of a progress message kept


Retry = Callable[[Any, "str | None"], Awaitable[Any]]
MAX_ROUNDS = 10  # rounds of one request the server may answer with a need for input


class GivenUp(Exception):
    """A request of several rounds that tether gave up: too many rounds, or past its time
    (the words say which)."""


async def answered(session: ClientSession, send: Retry, timeout: float) -> Any:
    """A request of the current revision's multi round-trip kind (``tools/call``,
    ``resources/read``, ``prompts/get``) sent (``send(None, None)``) and driven to its
    result: while the server answers that it needs input (``InputRequiredResult``), each
    request for input goes to the session's callbacks (the handshake era's
    server-to-client requests go to the same ones: an elicitation to the person, when the
    session has a way to ask; anything else declined, which ends the request as the
    server's refusal), and the request is sent again with the answers.

    The server's request state is its own opaque data, passed back byte for byte and
    never read, shown or kept. At most ``MAX_ROUNDS`` rounds, and all of them within
    ``timeout`` seconds of the first send, the person's answers included (as the one
    request of the handshake era is bounded, with the person's answers in it): past
    either, ``GivenUp``. The first send is bounded by its own read timeout; a request the
    handshake era answers is returned as it came."""
    from mcp.client._input_required import (  # the SDK's own driver
        InputRequiredRoundsExceededError,
        run_input_required_driver,
    )
    from mcp.client.session import ClientRequestContext
    from mcp_types import ErrorData, InputRequest, InputRequiredResult, InputResponse

    deadline = asyncio.get_running_loop().time() + timeout
    first = await send(None, None)
    if not isinstance(first, InputRequiredResult):
        return first

    async def dispatch(key: str, request: InputRequest) -> InputResponse | ErrorData:
        context = ClientRequestContext(
            session=session, request_id=key,
            meta=request.params.meta if request.params is not None else None)
        return await session.dispatch_input_request(context, request)

    try:
        async with asyncio.timeout_at(deadline):
            return await run_input_required_driver(first, dispatch=dispatch, retry=send,
                                                   max_rounds=MAX_ROUNDS)
    except TimeoutError:
        raise GivenUp(f"it did not finish within {timeout:g}s, the rounds in which it asked "
                      f"for input included") from None
    except InputRequiredRoundsExceededError:
        raise GivenUp(f"the server still asked for input after {MAX_ROUNDS} rounds") from None


class StartFailure(Exception):
    """Why a server could not start, in words for the user."""


def said(error: Exception) -> str:
    """An error a server's call ended in, on one line (its type and its message)."""
    try:
        return f"{type(error).__name__}: {inline(error)}"
    except Exception:  # an exception whose own message fails
        return type(error).__name__


def start_failure(error: BaseException, timeout: float) -> str:
    """A start failure in words: MCP errors by their meaning, task groups by their leaves."""
    from mcp.shared.exceptions import MCPError
    from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

    if isinstance(error, BaseExceptionGroup):
        return "; ".join(start_failure(e, timeout) for e in error.exceptions)
    if isinstance(error, StartFailure):
        return str(error)
    if isinstance(error, MCPError):
        if error.code == CONNECTION_CLOSED:
            return "the server closed the connection before it was ready (did it exit?)"
        if error.code == REQUEST_TIMEOUT:
            return f"the server did not answer within {timeout:g}s"
        return f"the server answered with an error: {inline(error.error.message)}"
    if isinstance(error, FileNotFoundError):
        return f"cannot run the command: {error}"
    return f"{type(error).__name__}: {inline(error)}"


async def negotiate(session: ClientSession) -> str:
    """The protocol revision agreed with the server: the current revision's discovery
    (``server/discover``) first, the ``initialize`` handshake when the server does not
    answer it (a server of an earlier revision). A server that refuses both (it speaks
    only revisions this SDK does not) fails the start with its own error."""
    from mcp.shared.exceptions import MCPError
    from mcp_types import UNSUPPORTED_PROTOCOL_VERSION
    from pydantic import ValidationError

    try:
        await session.discover()
    except (MCPError, ValidationError, RuntimeError):
        # No answer the current revision can use (method not found, a refusal, a timeout,
        # a result that is not one): the handshake, as every earlier revision starts.
        try:
            await session.initialize()
        except MCPError as e:
            if e.code != UNSUPPORTED_PROTOCOL_VERSION:
                raise
            # A server slow to start answered the discovery after it timed out here, and
            # so speaks the current revision now: ask again (it answers at once).
            await session.discover()
    version = session.protocol_version
    if version is None:  # pragma: no cover - both paths set it or raise
        raise StartFailure("no protocol revision was agreed")
    return version


def modern(version: str | None) -> bool:
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    return version in MODERN_PROTOCOL_VERSIONS


async def every_page(list_page: Callable[..., Awaitable[Any]], field: str,
                      method: str, ttls: list[int] | None = None) -> list[Any]:
    """Every item of a paginated list (``nextCursor`` followed), at most ``MAX_PAGES``
    pages; a cursor seen twice ends it as a failure. ``ttls`` collects the time to live
    (``ttlMs``, the current revision's) of each page that gives one."""
    from mcp_types import PaginatedRequestParams

    listed: list[Any] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(MAX_PAGES):
        params = PaginatedRequestParams(cursor=cursor) if cursor is not None else None
        page = await list_page(params=params)
        listed.extend(getattr(page, field))
        if ttls is not None and "ttl_ms" in getattr(page, "model_fields_set", ()):
            ttls.append(page.ttl_ms)
        cursor = page.next_cursor
        if cursor is None:
            return listed
        if cursor in seen:
            raise StartFailure(f"{method} repeated the cursor {cursor!r}")
        seen.add(cursor)
    raise StartFailure(f"{method} did not end within {MAX_PAGES} pages")


ProgressSink = Callable[[float, "float | None", "str | None"], Awaitable[None]]


def progress_to(ctx: ToolContext) -> ProgressSink | None:
    """Where a call's progress goes: a ``ToolProgress`` event of the run."""
    emit = ctx.emit
    if emit is None:
        return None

    async def sink(progress: float, total: float | None, message: str | None) -> None:
        await emit(ToolProgress(ctx.call_id, ctx.tool_name, progress, total, message))

    return sink


class Throttled:
    """A call's progress passed on at most once each ``PROGRESS_EVERY_SECS`` (a server
    can send thousands), the first and the one that says it is done always. Numbers that
    are not finite are dropped, and a message is cut to a line's worth."""

    def __init__(self, sink: ProgressSink) -> None:
        self.sink = sink
        self.last: float | None = None

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        if not math.isfinite(progress) or (total is not None and not math.isfinite(total)):
            return
        now = time.monotonic()
        done = total is not None and progress >= total
        if not done and self.last is not None and now - self.last < PROGRESS_EVERY_SECS:
            return
        self.last = now
        await self.sink(progress, total, None if message is None else message[:MAX_MESSAGE])

