"""Server profiles of the OpenAI-compatible family: by name, or detected from the URL."""

from __future__ import annotations

import dataclasses

import pytest

from tether.errors import ConfigError
from tether.providers.profiles import GENERIC, PROFILES, OpenAICompatProfile, profile_for


@pytest.mark.parametrize(("base_url", "expected"), [
    ("https://api.openai.com/v1", "openai"),
    ("https://openrouter.ai/api/v1", "openrouter"),
    # A port proves nothing about the server behind it: never a guess from it.
    ("http://127.0.0.1:11434/v1", "generic"),
    ("http://localhost:1234/v1", "generic"),
    ("http://gpu-box:8000/v1", "generic"),
    ("http://127.0.0.1:8080/v1", "generic"),
    ("http://10.0.0.5:9999/v1", "generic"),
    ("https://llm.example.com/v1", "generic"),
    ("not a url", "generic"),
])
def test_the_profile_is_detected_from_a_hosted_services_host_never_from_a_port(
        base_url: str, expected: str):
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
    assert GENERIC.max_tokens_field == "max_tokens"
    # Usage in streams is asked for: a server that refuses the field is asked again
    # without it (tests/test_openai_chat.py).
    assert GENERIC.supports_stream_usage is True


def test_only_openai_uses_max_completion_tokens():
    assert {p.name for p in PROFILES.values()
            if p.max_tokens_field == "max_completion_tokens"} == {"openai"}


def test_profiles_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        PROFILES["openai"].name = "x"  # type: ignore[misc]
    custom = OpenAICompatProfile("mine", supports_named_tool_choice=True)
    assert custom.supports_tool_choice_required is True


def test_an_unnamed_server_is_assumed_generic_and_the_adapter_says_so():
    from tether.providers.openai_chat import OpenAIChat

    assumed = OpenAIChat("http://127.0.0.1:11434/v1", "m")
    assert assumed.profile.name == "generic" and assumed.profile_assumed
    named = OpenAIChat("http://127.0.0.1:11434/v1", "m", profile="ollama")
    assert named.profile.name == "ollama" and not named.profile_assumed
    hosted = OpenAIChat("https://api.openai.com/v1", "m")
    assert hosted.profile.name == "openai" and not hosted.profile_assumed


@pytest.mark.parametrize(("owner", "expected"), [
    ("llamacpp", "llama-server"), ("vllm", "vllm"), ("library", "ollama"),
    ("organization_owner", "lmstudio"), ("someone", None)])
def test_a_servers_model_list_names_its_profile(owner: str, expected: str | None):
    from tether.providers.profiles import profile_from_models

    listing = {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": owner}]}
    assert profile_from_models(listing) == expected
    assert profile_from_models({"data": "junk"}) is None and profile_from_models([]) is None
