"""tether's data in the words of the OpenTelemetry GenAI semantic conventions: which
provider a wire is, where its server is, messages as the conventions' JSON.

Plain functions over tether's types; nothing here imports OpenTelemetry.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from tether.messages import Image, Message, Part, Reasoning, Text, ToolCall, ToolResult, Usage

# An OpenAI-compatible server's profile (providers/profiles.py) names who serves the model.
# The conventions' own values where they have one; the server's name where they do not.
# "generic" is a server tether could not place: it speaks OpenAI's API, so "openai".
OPENAI_COMPAT_PROVIDERS = {
    "openai": "openai",
    "openrouter": "openrouter",
    "ollama": "ollama",
    "vllm": "vllm",
    "lmstudio": "lmstudio",
    "llama-server": "llama.cpp",
    "generic": "openai",
}

# tether's stop reasons in the conventions' finish_reason words (output messages).
FINISH_REASONS = {
    "end_turn": "stop",
    "tool_calls": "tool_call",
    "max_tokens": "length",
    "content_filter": "content_filter",
}
# A run's stop causes in the same words (the run's output message); a cause with no such
# word (max_turns, repeated_failure...) is given as tether names it.
RUN_FINISH_REASONS = {
    "completed": "stop",
    "truncated": "length",
    "content_filter": "content_filter",
    "error": "error",
}

# Bucket boundaries the conventions give for the two client histograms.
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304,
                 16777216, 67108864)
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48,
                    40.96, 81.92)


def provider_name(model: Any) -> str:
    """``gen_ai.provider.name`` for a tether provider (its wire, and for Chat Completions
    its server's profile). A provider tether does not know is named as it names itself."""
    wire = str(getattr(model, "name", "") or "")
    if wire == "openai-chat":
        profile = getattr(getattr(model, "profile", None), "name", None)
        return OPENAI_COMPAT_PROVIDERS.get(str(profile), "openai")
    if wire == "openai-responses":
        return "openai"
    if wire == "anthropic":
        return "anthropic"
    if wire == "gemini":
        host = server_of(model).get("server.address", "")
        return "gcp.vertex_ai" if str(host).endswith("aiplatform.googleapis.com") else "gcp.gemini"
    return wire or "_OTHER"


def server_of(model: Any) -> dict[str, Any]:
    """``server.address`` and ``server.port`` of the provider's ``base_url``, if it has one."""
    base_url = getattr(model, "base_url", None)
    if not isinstance(base_url, str) or not base_url:
        return {}
    try:
        parts = urlsplit(base_url)
        port = parts.port
    except ValueError:  # a malformed URL names no server we could report
        return {}
    if not parts.hostname:
        return {}
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    return {"server.address": parts.hostname, "server.port": port}


def usage_attributes(usage: Usage) -> dict[str, int]:
    """A response's token counts as ``gen_ai.usage.*`` (cache and reasoning when reported;
    none for counts the server did not report, which are unknown, not 0)."""
    out: dict[str, int] = {}
    if usage.input_tokens is not None:
        out["gen_ai.usage.input_tokens"] = usage.input_tokens
    if usage.output_tokens is not None:
        out["gen_ai.usage.output_tokens"] = usage.output_tokens
    if usage.cache_read_tokens:
        out["gen_ai.usage.cache_read.input_tokens"] = usage.cache_read_tokens
    if usage.cache_write_tokens:
        out["gen_ai.usage.cache_creation.input_tokens"] = usage.cache_write_tokens
    reasoning = usage.details.get("reasoning_tokens")
    if reasoning:
        out["gen_ai.usage.reasoning.output_tokens"] = reasoning
    return out


def messages_json(messages: Iterable[Message], finish_reason: str | None = None) -> str:
    """Messages as the conventions' input/output messages JSON (``finish_reason`` on each,
    for output messages)."""
    out = []
    for message in messages:
        entry: dict[str, Any] = {"role": message.role,
                                 "parts": [_part(p) for p in message.parts]}
        if finish_reason is not None:
            entry["finish_reason"] = finish_reason
        out.append(entry)
    return _dumps(out)


def system_json(system: str) -> str:
    """A system prompt as ``gen_ai.system_instructions``."""
    return _dumps([{"type": "text", "content": system}])


def _part(part: Part) -> dict[str, Any]:
    if isinstance(part, Text):
        return {"type": "text", "content": part.text}
    if isinstance(part, ToolCall):
        try:
            arguments: Any = part.parsed_arguments()
        except ValueError:
            arguments = part.arguments
        return {"type": "tool_call", "id": part.id, "name": part.name, "arguments": arguments}
    if isinstance(part, ToolResult):
        return {"type": "tool_call_response", "id": part.call_id, "response": part.content}
    if isinstance(part, Reasoning):
        return {"type": "reasoning", "content": part.text}
    assert isinstance(part, Image)
    if part.url is not None:
        return {"type": "uri", "modality": "image", "mime_type": part.media_type,
                "uri": part.url}
    return {"type": "blob", "modality": "image", "mime_type": part.media_type,
            "content": part.base64()}


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)
