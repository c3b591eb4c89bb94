"""Pinning a test MCP server to one era of the protocol, as a server of that era would be:
``handshake`` answers only the ``initialize`` handshake (a ``server/discover`` probe, or
any request in the current revision's envelope, gets "method not found", as from a server
written before that revision); ``modern`` answers only the current revision's stateless
requests (``initialize`` gets -32022, unsupported protocol version, naming the revisions
it serves); ``both`` is the SDK's own server, which serves either.

The SDK's server decides the era from the client's first request; this puts a sieve in
front of it that refuses the other era's requests, over stdio (``serve_stdio_in``) and over
streamable HTTP (``pinned``, around the SDK's app).
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp_types as types
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types.version import MODERN_PROTOCOL_VERSIONS


def refusal(message: dict[str, Any], era: str) -> dict[str, Any] | None:
    """The error a server of ``era`` answers ``message`` with, or None to serve it."""
    method, params = message.get("method"), message.get("params") or {}
    meta = params.get("_meta") if isinstance(params, dict) else None
    modern = isinstance(meta, dict) and types.PROTOCOL_VERSION_META_KEY in meta
    if era == "handshake" and (modern or method == "server/discover"):
        return {"code": types.METHOD_NOT_FOUND, "message": "Method not found"}
    if era == "modern" and method == "initialize":
        return {"code": types.UNSUPPORTED_PROTOCOL_VERSION,
                "message": "Unsupported protocol version",
                "data": {"supported": list(MODERN_PROTOCOL_VERSIONS),
                         "requested": params.get("protocolVersion")}}
    return None


async def serve_stdio_in(server: Any, era: str, init_options: Any) -> None:
    """``server`` over stdio, answering only ``era``'s requests."""
    async with stdio_server() as (read, write):
        if era == "both":
            await server.run(read, write, init_options)
            return
        inner_send, inner_read = anyio.create_memory_object_stream[SessionMessage | Exception](16)

        async def sieve() -> None:
            async with inner_send:
                async for item in read:
                    if isinstance(item, SessionMessage) and \
                            isinstance(item.message, types.JSONRPCRequest):
                        raw = item.message.model_dump(by_alias=True, exclude_none=True)
                        error = refusal(raw, era)
                        if error is not None:
                            await write.send(SessionMessage(types.JSONRPCError(
                                jsonrpc="2.0", id=item.message.id,
                                error=types.ErrorData(**error))))
                            continue
                    await inner_send.send(item)

        async with anyio.create_task_group() as tg:
            tg.start_soon(sieve)
            await server.run(inner_read, write, init_options)
            tg.cancel_scope.cancel()


def pinned(app: Any, era: str) -> Any:
    """The SDK's HTTP ``app`` behind a sieve that refuses the other era's requests."""
    if era == "both":
        return app

    async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        chunks: list[bytes] = []
        more = True
        while more:
            event = await receive()
            chunks.append(event.get("body", b""))
            more = event.get("more_body", False)
        body = b"".join(chunks)
        try:
            message = json.loads(body)
        except ValueError:
            message = None
        error = refusal(message, era) if isinstance(message, dict) and "id" in message \
            else None
        if error is not None:
            payload = json.dumps({"jsonrpc": "2.0", "id": message["id"], "error": error})
            await send({"type": "http.response.start", "status": 400,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": payload.encode()})
            return
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if sent:
                return await receive()  # type: ignore[no-any-return]
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await app(scope, replay, send)

    return asgi
