"""Model providers: one adapter per wire protocol, all speaking ``Provider``.

Adapters are imported lazily (they pull in httpx).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    "Provider": "tether.providers.base",
    "ModelRequest": "tether.providers.base",
    "ModelResponse": "tether.providers.base",
    "NamedToolChoice": "tether.providers.base",
    "RetryPolicy": "tether.providers.http",
    "Timeouts": "tether.providers.http",
    "OpenAIChat": "tether.providers.openai_chat",
    "OpenAICompatProfile": "tether.providers.profiles",
    "profile_for": "tether.providers.profiles",
    "OpenAIResponses": "tether.providers.openai_responses",
    "Anthropic": "tether.providers.anthropic",
    "Gemini": "tether.providers.gemini",
    "Ollama": "tether.providers.ollama",
    "Scripted": "tether.providers.scripted",
    "Reply": "tether.providers.scripted",
    "call": "tether.providers.scripted",
    "calls": "tether.providers.scripted",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tether.providers' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from tether.providers.anthropic import Anthropic
    from tether.providers.base import ModelRequest, ModelResponse, NamedToolChoice, Provider
    from tether.providers.gemini import Gemini
    from tether.providers.http import RetryPolicy, Timeouts
    from tether.providers.ollama import Ollama
    from tether.providers.openai_chat import OpenAIChat
    from tether.providers.openai_responses import OpenAIResponses
    from tether.providers.profiles import OpenAICompatProfile, profile_for
    from tether.providers.scripted import Reply, Scripted, call, calls
