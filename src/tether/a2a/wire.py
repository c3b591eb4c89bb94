"""One exchange with a remote A2A agent through the official SDK (``a2a-sdk``), bounded.

The card is read with a bounded GET and parsed by the SDK; the SDK's client then sends the
message and streams the task's events. Every byte comes through one HTTP transport that
counts them: past ``max_bytes`` (a huge body, a stream that never ends) the exchange is
cut, as it is past ``max_events`` events or ``timeout_secs`` from its start. A card whose
interfaces point at another origin than the configured URL is refused: the card is the
remote's text, and it may not send the task somewhere else.

Imported only when a remote agent is called: it loads the SDK (the ``a2a`` extra).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

import httpx

from tether.errors import A2AError, A2ALimitError, ConfigError

if TYPE_CHECKING:
    from a2a.types.a2a_pb2 import AgentCard, Part, StreamResponse

CARD_PATH = "/.well-known/agent-card.json"


class Endpoint(Protocol):
    """What an exchange needs of a remote agent (``tether.a2a.remote.A2AAgent`` is one)."""

    @property
    def url(self) -> str: ...
    @property
    def timeout_secs(self) -> float: ...
    @property
    def max_bytes(self) -> int: ...
    @property
    def max_events(self) -> int: ...

    def request_headers(self) -> dict[str, str]: ...


def require() -> None:
    """The SDK, or a ``ConfigError`` saying how to install it."""
    try:
        import a2a.client  # noqa: F401
    except ImportError:
        raise ConfigError("remote agents (A2A) need the a2a extra: pip install "
                          "'tether[a2a]'") from None


@dataclass
class Reply:
    """What a remote said, folded from its stream: the task's last ``state`` (``completed``,
    ``input-required``, ...; a direct message counts as ``completed``), the text of its
    last message, its artifacts' texts, and its ids."""

    state: str = "completed"
    text: str = ""
    artifacts: list[str] = field(default_factory=list)
    task_id: str = ""
    context_id: str = ""


class _Cut(Exception):
    """The remote sent more bytes than allowed (raised inside the transport)."""


class _Counted(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, meter: _Meter) -> None:
        self.inner, self.meter = inner, meter

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.inner:
            self.meter.used += len(chunk)
            if self.meter.used > self.meter.limit:
                raise _Cut
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class _Meter(httpx.AsyncBaseTransport):
    """An HTTP transport that counts every byte the remote sends, over the whole exchange."""

    def __init__(self, limit: int) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.limit, self.used = limit, 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(response.status_code, headers=response.headers,
                              stream=_Counted(response.stream, self),
                              extensions=response.extensions)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def exchange(agent: Endpoint, task: str, continue_task: str | None) -> Reply:
    """Send ``task`` (on the remote's task ``continue_task`` when given) and fold what
    comes back. Raises ``A2ALimitError`` past a bound, ``A2AError`` for the rest."""
    require()
    headers = agent.request_headers()
    meter = _Meter(agent.max_bytes)
    http = httpx.AsyncClient(transport=meter, headers=headers, follow_redirects=False,
                             timeout=httpx.Timeout(agent.timeout_secs))
    try:
        async with asyncio.timeout(agent.timeout_secs):
            return await _exchange(agent, http, task, continue_task)
    except TimeoutError:
        raise A2ALimitError(f"the remote agent did not finish within {agent.timeout_secs:g} "
                            f"s (timeout_secs)") from None
    except _Cut:
        raise A2ALimitError(f"the remote agent sent more than {agent.max_bytes} bytes "
                            f"(max_bytes); the exchange was cut") from None
    finally:
        await http.aclose()


async def _exchange(agent: Endpoint, http: httpx.AsyncClient, task: str,
                    continue_task: str | None) -> Reply:
    from a2a.client import A2AClientError, ClientConfig, ClientFactory
    from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest
    from a2a.utils.errors import A2AError as SdkError

    card = await fetch_card(http, agent.url)
    client = ClientFactory(ClientConfig(httpx_client=http, streaming=True)).create(card)
    message = Message(role=Role.ROLE_USER, message_id=uuid.uuid4().hex,
                      parts=[Part(text=task)])
    if continue_task:
        message.task_id = continue_task
    reply, events = Reply(), 0
    try:
        async for response in client.send_message(SendMessageRequest(message=message)):
            events += 1
            if events > agent.max_events:
                raise A2ALimitError(f"the remote agent sent more than {agent.max_events} "
                                    f"events (max_events); the exchange was cut")
            fold(reply, response)
    except (A2AClientError, SdkError) as e:
        raise A2AError(f"the remote agent's answer broke the protocol: {e}",
                       from_outside=True) from None
    except (ValueError, KeyError, TypeError) as e:  # what the SDK's parsers raise
        raise A2AError(f"the remote agent's answer did not parse: {e}",
                       from_outside=True) from None
    return reply


async def fetch_card(http: httpx.AsyncClient, url: str) -> AgentCard:
    """The agent card at ``url``, parsed by the SDK; only interfaces on the configured
    origin are kept (none left is an ``A2AError``)."""
    from a2a.client.card_resolver import parse_agent_card
    from google.protobuf.json_format import ParseError

    where = url.rstrip("/") + CARD_PATH
    try:
        response = await http.get(where)
        body = await response.aread()
    except httpx.HTTPError as e:
        raise A2AError(f"cannot read the agent card at {where}: {e}") from None
    if response.status_code != 200:
        raise A2AError(f"the agent card at {where} answered HTTP {response.status_code}")
    try:
        card = parse_agent_card(json.loads(body))
    except (ValueError, ParseError) as e:
        raise A2AError(f"the agent card at {where} does not parse: {e}",
                       from_outside=True) from None
    origin = _origin(url)
    kept = [i for i in card.supported_interfaces if _origin(i.url) == origin]
    if not kept:
        raise A2AError(f"the agent card at {where} offers no interface on {origin} (an agent "
                       f"card may not send the task to another host)")
    del card.supported_interfaces[:]
    card.supported_interfaces.extend(kept)
    return card


async def card_of(agent: Endpoint) -> dict[str, Any]:
    """The remote's agent card as JSON (for ``tether tools``), read within the agent's
    bounds; an ``A2AError`` when it cannot be read."""
    require()
    from google.protobuf.json_format import MessageToDict

    meter = _Meter(agent.max_bytes)
    async with httpx.AsyncClient(transport=meter, headers=agent.request_headers(),
                                 follow_redirects=False,
                                 timeout=httpx.Timeout(agent.timeout_secs)) as http:
        try:
            async with asyncio.timeout(agent.timeout_secs):
                card = await fetch_card(http, agent.url)
        except TimeoutError:
            raise A2ALimitError("the agent card did not come within timeout_secs") from None
        except _Cut:
            raise A2ALimitError("the agent card is larger than max_bytes") from None
    out: dict[str, Any] = MessageToDict(card)
    return out


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    try:
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        port = -1
    return parts.scheme, (parts.hostname or "").lower(), port


_STATES = {
    "TASK_STATE_SUBMITTED": "submitted", "TASK_STATE_WORKING": "working",
    "TASK_STATE_COMPLETED": "completed", "TASK_STATE_FAILED": "failed",
    "TASK_STATE_CANCELED": "canceled", "TASK_STATE_INPUT_REQUIRED": "input-required",
    "TASK_STATE_REJECTED": "rejected", "TASK_STATE_AUTH_REQUIRED": "auth-required",
}


def fold(reply: Reply, response: StreamResponse) -> None:
    """One streamed event into ``reply``: the task's state and ids, the last message's
    text, the artifacts' texts (a chunk that appends joins the one before)."""
    from a2a.types.a2a_pb2 import TaskState

    kind = response.WhichOneof("payload")
    if kind == "message":
        reply.text = parts_text(response.message.parts)
        reply.context_id = response.message.context_id or reply.context_id
        reply.state = "completed"
    elif kind == "task":
        t = response.task
        reply.task_id, reply.context_id = t.id, t.context_id
        reply.state = _STATES.get(TaskState.Name(t.status.state), "working")
        if t.status.HasField("message"):
            reply.text = parts_text(t.status.message.parts)
        reply.artifacts = [parts_text(a.parts) for a in t.artifacts]
    elif kind == "status_update":
        u = response.status_update
        reply.task_id = u.task_id or reply.task_id
        reply.state = _STATES.get(TaskState.Name(u.status.state), "working")
        if u.status.HasField("message"):
            reply.text = parts_text(u.status.message.parts)
    elif kind == "artifact_update":
        text = parts_text(response.artifact_update.artifact.parts)
        if response.artifact_update.append and reply.artifacts:
            reply.artifacts[-1] += text
        else:
            reply.artifacts.append(text)


def parts_text(parts: Any) -> str:
    """The text of a message's or an artifact's parts: text as it is, data as JSON, a URL
    as itself, raw bytes only named (never decoded into the conversation)."""
    out = []
    for part in parts:
        out.append(_part_text(part))
    return "\n".join(t for t in out if t)


def _part_text(part: Part) -> str:
    from google.protobuf.json_format import MessageToDict

    kind = part.WhichOneof("content")
    if kind == "text":
        return str(part.text)
    if kind == "data":
        return json.dumps(MessageToDict(part.data), ensure_ascii=False)
    if kind == "url":
        return str(part.url)
    if kind == "raw":
        return f"[a file{' ' + part.filename if part.filename else ''}, {len(part.raw)} bytes, " \
               f"not shown]"
    return ""
