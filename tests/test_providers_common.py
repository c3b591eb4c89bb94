"""What every provider adapter promises alike."""

from __future__ import annotations

import pytest

from tether.providers import Anthropic, Gemini, OpenAIChat, OpenAIResponses
from tether.providers.base import Provider

ADAPTERS = {
    "openai-chat": lambda: OpenAIChat("http://127.0.0.1:1/v1", "a", api_key="k"),
    "openai-responses": lambda: OpenAIResponses("http://127.0.0.1:1/v1", "a", api_key="k"),
    "anthropic": lambda: Anthropic("http://127.0.0.1:1", "a", api_key="k"),
    "gemini": lambda: Gemini("http://127.0.0.1:1/v1beta", "a", api_key="k"),
}


@pytest.mark.parametrize("wire", sorted(ADAPTERS))
def test_with_model_is_a_copy_on_another_model_sharing_the_http_client(wire: str) -> None:
    # A sub-agent on another model calls with_model on every delegation: a copy with a
    # client of its own would leave one connection pool behind each time.
    provider = ADAPTERS[wire]()
    other = provider.with_model("b")  # type: ignore[attr-defined]
    assert isinstance(other, Provider) and other is not provider
    assert (provider.model, other.model) == ("a", "b")
    assert other.name == provider.name == wire
    assert other._transport is provider._transport  # type: ignore[attr-defined]
