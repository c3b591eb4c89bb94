"""A stored session as the page shows it: the sessions of the workspace, and one session's
messages (AG-UI message models) with the calls it waits on."""

from __future__ import annotations

import hashlib
from typing import Any

from ag_ui.core import (
    AssistantMessage,
    FunctionCall,
    ToolCall,
    ToolMessage,
    UserMessage,
)

from tether.messages import Message, Text, ToolResult
from tether.messages import ToolCall as TetherCall
from tether.store.base import SessionInfo


def session_summary(info: SessionInfo, busy: bool) -> dict[str, Any]:
    return {"id": info.id, "title": info.title, "updated": info.updated,
            "created": info.created, "paused": info.paused, "busy": busy,
            "messages": info.message_count, "last_stop": info.last_stop,
            "taint": {"private": info.taint.private, "untrusted": info.taint.untrusted}}


def messages_view(messages: list[Message]) -> list[dict[str, Any]]:
    """Each stored message as an AG-UI message (JSON, camelCase): the user's (outside text
    given with it marked as such), the assistant's (text and calls), each tool result.
    A tool result carries its status word and trust under ``tether``."""
    out: list[dict[str, Any]] = []
    for seq, message in enumerate(messages):
        for index, item in enumerate(_converted(message, seq)):
            data = item.model_dump(mode="json", by_alias=True)
            if isinstance(item, ToolMessage):
                result = [p for p in message.parts if isinstance(p, ToolResult)][index]
                data["tether"] = {"trust": result.trust, "tool": result.name,
                                  "error": result.is_error}
            out.append(data)
    return out


def _id(seq: int, index: int = 0) -> str:
    return hashlib.sha256(f"{seq}.{index}".encode()).hexdigest()[:16]


def _converted(message: Message, seq: int) -> list[Any]:
    if message.role == "user":
        texts = []
        for part in message.parts:
            if isinstance(part, Text):
                texts.append(part.text if part.origin is None else
                             f"[outside text, {part.origin}]\n{part.text}")
        return [UserMessage(id=_id(seq), content="\n\n".join(texts))]
    if message.role == "assistant":
        text = "".join(p.text for p in message.parts if isinstance(p, Text))
        calls = [ToolCall(id=p.id, function=FunctionCall(name=p.name, arguments=p.arguments))
                 for p in message.parts if isinstance(p, TetherCall)]
        return [AssistantMessage(id=_id(seq), content=text or None, tool_calls=calls or None)]
    if message.role == "tool":
        return [ToolMessage(id=_id(seq, i), content=p.content, tool_call_id=p.call_id,
                            error=p.content if p.is_error else None)
                for i, p in enumerate(q for q in message.parts if isinstance(q, ToolResult))]
    return []
