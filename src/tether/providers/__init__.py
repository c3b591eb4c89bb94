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
    "RetryPolicy": "tether.providers.http.retry",
    "Timeouts": "tether.providers.http.transport",
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
    # Each name re-exported explicitly (`X as X`), so a type checker in strict mode
    # reads `from tether import Agent` as the public name it is.
    from tether.providers.anthropic import Anthropic as Anthropic
    from tether.providers.base import ModelRequest as ModelRequest
    from tether.providers.base import ModelResponse as ModelResponse
    from tether.providers.base import NamedToolChoice as NamedToolChoice
    from tether.providers.base import Provider as Provider
    from tether.providers.gemini import Gemini as Gemini
    from tether.providers.http.retry import RetryPolicy as RetryPolicy
    from tether.providers.http.transport import Timeouts as Timeouts
    from tether.providers.ollama import Ollama as Ollama
    from tether.providers.openai_chat import OpenAIChat as OpenAIChat
    from tether.providers.openai_responses import OpenAIResponses as OpenAIResponses
    from tether.providers.profiles import OpenAICompatProfile as OpenAICompatProfile
    from tether.providers.profiles import profile_for as profile_for
    from tether.providers.scripted import Reply as Reply
    from tether.providers.scripted import Scripted as Scripted
    from tether.providers.scripted import call as call
    from tether.providers.scripted import calls as calls
