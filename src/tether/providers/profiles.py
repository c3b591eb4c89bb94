"""What each OpenAI-compatible server supports, so one Chat Completions adapter can serve all.

The wire is the same; the servers differ in what they honour. A profile states it, and the
adapter shapes its requests to fit: a server that cannot force a tool call gets the nearest
request it can serve instead of a 400 or a silently ignored field.

Chosen by name (``profile = "llama-server"`` in tether.toml) or, for the hosted services
(api.openai.com, openrouter.ai), from the base URL's host. A port says nothing about the
server behind it, so it is never used to guess: an unnamed server gets ``generic``,
conservative choices that any Chat Completions server accepts, and the adapter says so
(``OpenAIChat.profile_assumed``; ``tether doctor`` probes the server and names its profile).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from tether.errors import ConfigError


@dataclass(frozen=True, slots=True)
class OpenAICompatProfile:
    """The capabilities and quirks of one OpenAI-compatible server.

    - ``supports_tool_choice_required``: ``tool_choice: "required"`` forces a call. When
      False the adapter sends ``"auto"`` (the loop's nudges cover a model that answers in
      prose).
    - ``supports_named_tool_choice``: ``tool_choice: {"type": "function", ...}`` forces that
      tool. When False the adapter offers only that tool, with ``"required"`` where supported.
    - ``supports_parallel_calls``: the server can return several tool calls in one turn.
    - ``supports_stream_usage``: ask for usage at the end of a stream with
      ``stream_options: {"include_usage": true}`` (every profile does, ``generic`` too: a
      server that refuses the field is asked again without it, and then never sent it).
      When False it is not sent, and a stream may end without usage (unknown, not 0).
    - ``supports_json_schema_output``: ``response_format: {"type": "json_schema"}`` works.
    - ``continues_assistant_text``: a conversation that ends with an assistant message is
      continued from its text rather than answered anew (llama-server's default; its
      ``--no-prefill-assistant`` turns it off). tether uses it to finish an answer the
      server broke off after text went out (a model-output parse error in a stream).
    - ``accepts_images``: the server's models read images (``image_url`` parts): True,
      False, or None when it depends on the model loaded (unknown). An image a person
      attaches is sent unless it is False (then the request is refused before it is sent:
      a text-only server, llama-server without a projector); the images a tool result
      carries are sent only when it is True, and otherwise left out with a note saying so
      (an image a tool returned must not make a text-only server fail the run).
    - ``max_tokens_field``: the request field for the output token limit.
    - ``supports_seed``: the body's ``seed`` seeds the server's sampling (sent only then).
    - ``quirks``: what a user debugging this server should know.
    """

    name: str
    supports_tool_choice_required: bool = True
    supports_named_tool_choice: bool = False
    supports_parallel_calls: bool = True
    supports_stream_usage: bool = False
    supports_json_schema_output: bool = False
    continues_assistant_text: bool = False
    accepts_images: bool | None = None
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    supports_seed: bool = False
    quirks: tuple[str, ...] = ()


GENERIC = OpenAICompatProfile(
    name="generic",
    supports_stream_usage=True,
    quirks=("Unknown server: a named tool_choice is not sent; stream_options asks for usage "
            "in streams (left out from then on if the server refuses it), and a server "
            "that still reports none has unknown usage.",),
)

PROFILES: dict[str, OpenAICompatProfile] = {
    p.name: p
    for p in (
        OpenAICompatProfile(
            name="llama-server",
            supports_seed=True,
            supports_tool_choice_required=True,
            supports_named_tool_choice=False,
            supports_parallel_calls=True,
            supports_stream_usage=True,
            supports_json_schema_output=True,
            continues_assistant_text=True,
            # Images need a multimodal projector (--mmproj), which `tether local serve`
            # does not start with; a server started with one: profile = "generic".
            accepts_images=False,
            quirks=(
                "Images need a multimodal projector (--mmproj); tether's own local server "
                "has none, so an image is refused before the request (a server you started "
                "with --mmproj: profile = \"generic\", or kind = \"ollama\" with a vision "
                "model).",
                "Tool calling needs --jinja and a chat template with tool support; without it "
                "the server ignores `tools` silently.",
                "`content: \"\"` beside tool calls; call ids are random strings.",
                "A model output that is neither plain text nor a call of an offered tool comes "
                "back as HTTP 500 (\"does not match the expected ... format\"), or as an "
                "error event after the text before it streamed out; tether asks once more "
                "without the tools (going on from the text shown, in a stream).",
                "A named tool_choice is ignored: tether offers only that tool, with "
                "tool_choice \"required\".",
                "Reasoning models stream `reasoning_content`.",
            ),
        ),
        OpenAICompatProfile(
            name="ollama",
            supports_seed=True,
            supports_tool_choice_required=False,
            supports_named_tool_choice=False,
            supports_parallel_calls=True,
            supports_stream_usage=True,
            supports_json_schema_output=True,
            quirks=(
                "tool_choice is ignored: tether sends \"auto\", and offers only the named tool "
                "when one is asked for.",
                "finish_reason may be \"stop\" when the model called tools (tether goes by "
                "the calls).",
                "Tool calls arrive whole in one chunk; ids look like call_xxxxxxxx.",
                "Base URL is http://HOST:11434/v1 (the /v1 prefix is the OpenAI-compatible API).",
            ),
        ),
        OpenAICompatProfile(
            name="vllm",
            supports_seed=True,
            supports_tool_choice_required=True,
            supports_named_tool_choice=True,
            supports_parallel_calls=True,
            supports_stream_usage=True,
            supports_json_schema_output=True,
            quirks=(
                "tool_choice \"auto\" needs the server started with --enable-auto-tool-choice "
                "and a --tool-call-parser for the model family.",
                "Reasoning models (--reasoning-parser) send `reasoning_content`.",
            ),
        ),
        OpenAICompatProfile(
            name="lmstudio",
            supports_tool_choice_required=True,
            supports_named_tool_choice=False,
            supports_parallel_calls=True,
            supports_stream_usage=True,
            supports_json_schema_output=True,
            quirks=(
                "Models without native tool support get LM Studio's default tool prompt; "
                "quality varies.",
                "Base URL is http://HOST:1234/v1.",
            ),
        ),
        OpenAICompatProfile(
            name="openrouter",
            supports_tool_choice_required=True,
            supports_named_tool_choice=True,
            supports_parallel_calls=True,
            supports_stream_usage=True,
            supports_json_schema_output=True,
            accepts_images=True,
            quirks=(
                "What is honoured depends on the routed model and upstream provider.",
                "Upstream failures can arrive as HTTP 200 with an `error` body, or as an "
                "`error` event mid-stream; tether maps both to its errors.",
                "Streams carry `: OPENROUTER PROCESSING` comment lines (ignored).",
                "Reasoning arrives as `reasoning`.",
            ),
        ),
        OpenAICompatProfile(
            name="openai",
            supports_seed=True,
            supports_tool_choice_required=True,
            supports_named_tool_choice=True,
            supports_parallel_calls=True,
            supports_stream_usage=True,
            supports_json_schema_output=True,
            accepts_images=True,
            max_tokens_field="max_completion_tokens",
            quirks=(
                "Reasoning models (o-series, gpt-5) reject `max_tokens` and non-default "
                "temperature; tether sends max_completion_tokens.",
            ),
        ),
        GENERIC,
    )
}

# The hosted services, by host suffix. Ports are not used: any server may listen on 8080.
_HOSTS = (("api.openai.com", "openai"), ("openrouter.ai", "openrouter"))


def profile_for(name: str | None, base_url: str) -> OpenAICompatProfile:
    """The profile named ``name``, or, without a name, the one ``base_url`` points at.

    ::

        profile_for(None, "https://api.openai.com/v1").name   # "openai"
        profile_for("vllm", "http://gpu-box:9000/v1").name    # "vllm"
        profile_for(None, "http://127.0.0.1:11434/v1").name   # "generic": a port proves nothing

    An unknown ``name`` is a ConfigError that lists the known profiles.
    """
    if name is not None:
        profile = PROFILES.get(name.strip().lower())
        if profile is None:
            raise ConfigError(
                f"unknown OpenAI-compatible profile {name!r}; known profiles: "
                f"{', '.join(sorted(PROFILES))}"
            )
        return profile
    return PROFILES[detect(base_url)]


def detect(base_url: str) -> str:
    """The profile of the hosted service ``base_url`` names (``generic`` for any other)."""
    try:
        host = (urlsplit(base_url).hostname or "").lower()
    except ValueError:  # a malformed URL: nothing to detect from
        return GENERIC.name
    for suffix, profile in _HOSTS:
        if host == suffix or host.endswith("." + suffix):
            return profile
    return GENERIC.name


# What a server's model list says in ``owned_by`` (``GET /v1/models``), for ``tether doctor``.
_OWNERS = {"llamacpp": "llama-server", "vllm": "vllm", "library": "ollama",
           "organization_owner": "lmstudio"}


def profile_from_models(listing: object) -> str | None:
    """The profile a server's ``/v1/models`` answer points at (``owned_by``), or None."""
    items = listing.get("data") if isinstance(listing, dict) else None
    owners = {item.get("owned_by") for item in items or () if isinstance(item, dict)}
    found = {_OWNERS[o] for o in owners if isinstance(o, str) and o in _OWNERS}
    return found.pop() if len(found) == 1 else None


__all__ = ["GENERIC", "PROFILES", "OpenAICompatProfile", "detect", "profile_for",
           "profile_from_models"]
