"""Server profiles of the OpenAI-compatible family: by name, or detected from the URL."""

from __future__ import annotations

import dataclasses

import pytest

from tether.errors import ConfigError
from tether.providers.profiles import GENERIC, PROFILES, OpenAICompatProfile, profile_for


@pytest.mark.parametrize(("base_url", "expected"), [
    ("https://api.openai.com/v1", "openai"),
    ("https://openrouter.ai/api/v1", "openrouter"),
    ("http://127.0.0.1:11434/v1", "ollama"),
    ("http://localhost:1234/v1", "lmstudio"),
    ("http://gpu-box:8000/v1", "vllm"),
    ("http://127.0.0.1:8080/v1", "llama-server"),
    ("http://10.0.0.5:9999/v1", "generic"),
    ("https://llm.example.com/v1", "generic"),
    ("not a url", "generic"),
])
def test_the_profile_is_detected_from_the_base_url(base_url: str, expected: str):
    assert profile_for(None, base_url).name == expected


def test_a_lookalike_host_is_not_mistaken_for_openai():
    assert profile_for(None, "https://api.openai.com.evil.test/v1").name == "generic"
    assert profile_for(None, "https://eu.openrouter.ai/api/v1").name == "openrouter"


def test_an_explicit_name_wins_over_detection():
    assert profile_for("vllm", "http://127.0.0.1:8080/v1").name == "vllm"
    assert profile_for(" Ollama ", "http://x/v1").name == "ollama"


def test_an_unknown_profile_name_is_a_config_error_listing_the_known_ones():
    with pytest.raises(ConfigError) as caught:
        profile_for("llamacpp", "http://127.0.0.1:8080/v1")
    message = str(caught.value)
    assert "'llamacpp'" in message
    for name in ("generic", "llama-server", "lmstudio", "ollama", "openai", "openrouter",
                 "vllm"):
        assert name in message


def test_every_server_of_the_family_has_a_profile_with_quirks():
    assert set(PROFILES) == {"llama-server", "ollama", "vllm", "lmstudio", "openrouter",
                             "openai", "generic"}
    assert all(p.quirks for p in PROFILES.values())


def test_the_generic_default_sends_nothing_an_unknown_server_might_reject():
    assert GENERIC.supports_named_tool_choice is False
    assert GENERIC.supports_stream_usage is False
    assert GENERIC.max_tokens_field == "max_tokens"


def test_only_openai_uses_max_completion_tokens():
    assert {p.name for p in PROFILES.values()
            if p.max_tokens_field == "max_completion_tokens"} == {"openai"}


def test_profiles_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        PROFILES["openai"].name = "x"  # type: ignore[misc]
    custom = OpenAICompatProfile("mine", supports_named_tool_choice=True)
    assert custom.supports_tool_choice_required is True
