"""A run's ``seed`` (``AgentSettings.seed``; ``tether eval --seed``) on every wire, against a
real HTTP server on 127.0.0.1: sent where the server takes one (Chat Completions to
llama-server, Ollama, vLLM and OpenAI as ``seed``; Ollama's own API as ``options.seed``),
left out where it does not (an unknown server, Responses, Anthropic, Gemini), and the
provider's ``takes_seed`` saying which."""

from __future__ import annotations

from typing import Any

import pytest

from tests.providers.helpers import ask, collect
from tests.providers.wires import WIRES
from tests.servers.http import Canned, LoopbackServer
from tether import Agent
from tether.providers import OpenAIChat
from tether.settings import AgentSettings

# What each wire's request body carries the seed as (None: not at all).
SEEN = {"openai-chat": ("seed",), "ollama": ("options", "seed"), "openai-responses": None,
        "anthropic": None, "gemini": None}


def _sent(body: dict[str, Any], where: tuple[str, ...] | None) -> Any:
    if where is None:
        return body.get("seed"), body.get("options"), body.get("generationConfig", {})
    value: Any = body
    for key in where:
        value = value[key]
    return value


@pytest.mark.parametrize("wire", sorted(WIRES))
async def test_an_agents_seed_reaches_the_wires_that_take_one_and_only_them(
        server: LoopbackServer, wire: str) -> None:
    spec = WIRES[wire]
    server.queue(Canned.json(spec.body("fine")))
    model = spec.make(server.url + spec.prefix)
    result = await Agent.from_settings(model, AgentSettings(seed=1234)).run("Hi")
    await model.aclose()
    assert result.text == "fine"
    (request,) = server.requests
    where = SEEN[wire]
    if where is None:
        assert getattr(model, "takes_seed", False) is False
        assert "1234" not in str(request.body)
    else:
        assert model.takes_seed is True  # type: ignore[attr-defined]
        assert _sent(request.body, where) == 1234


@pytest.mark.parametrize(("profile", "sent"), [
    ("llama-server", True), ("ollama", True), ("vllm", True), ("openai", True),
    ("generic", False), ("lmstudio", False), ("openrouter", False)])
async def test_chat_completions_sends_the_seed_only_to_a_server_known_to_take_it(
        server: LoopbackServer, profile: str, sent: bool) -> None:
    server.queue(Canned.json(WIRES["openai-chat"].body("fine")))
    model = OpenAIChat(server.url + "/v1", "m", profile=profile)
    await collect(model, ask(seed=5))
    await model.aclose()
    (request,) = server.requests
    assert model.takes_seed is sent
    assert ("seed" in request.body) is sent and request.body.get("seed", 5) == 5


async def test_no_seed_sends_none(server: LoopbackServer) -> None:
    server.queue(Canned.json(WIRES["openai-chat"].body("fine")))
    model = OpenAIChat(server.url + "/v1", "m", profile="llama-server")
    await collect(model, ask())
    await model.aclose()
    assert "seed" not in server.requests[0].body
