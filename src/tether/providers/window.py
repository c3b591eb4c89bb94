"""What an OpenAI-compatible server says about its context window, and its tokenizer.

Each local server tells its window its own way; a server that says nothing gets its
profile's default (``DEFAULT_WINDOWS``), and one without a default none (the agent then
learns the window from the server's overflow error, if one comes):

- llama-server: ``GET /props`` -> ``default_generation_settings.n_ctx`` (the ``-c`` it was
  started with, per slot); ``POST /tokenize`` counts tokens with the model's tokenizer.
- Ollama: ``GET /api/ps`` -> the loaded model's ``context_length``, else ``POST /api/show``
  -> the Modelfile's ``num_ctx``, else its default of 2,048. Ollama's OpenAI-compatible
  endpoint has no field for ``num_ctx`` (it ignores ``options``), so the window cannot be
  raised from here: set ``OLLAMA_CONTEXT_LENGTH`` or a Modelfile's ``PARAMETER num_ctx``,
  and ``context_window`` to the same value. Beyond its window Ollama silently cuts the
  prompt from the start; fitting to the window is what prevents that.
- vLLM: ``GET /v1/models`` -> the model's ``max_model_len``.
- LM Studio: ``GET /api/v0/models/{model}`` -> ``loaded_context_length``, else
  ``max_context_length``.

Discovery is best effort: a server that does not answer, or answers something else,
yields None, never an error.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

import httpx

from tether.providers.http.bodies import decode_json, read_body

# The window to assume when the server does not say: llama-server as `tether local`
# starts it (-c 4096), Ollama's own default, LM Studio's default load.
DEFAULT_WINDOWS: dict[str, int] = {"llama-server": 4096, "ollama": 2048, "lmstudio": 4096}

# How long a question about the window may take: it is asked once, before a request.
ASK_TIMEOUT_SECS = 10.0
# The most read of its answer (llama-server's /props, with its chat template, is some KB).
ASK_MAX_BYTES = 4 * 1024 * 1024

_NUM_CTX = re.compile(r"^\s*num_ctx\s+(\d+)\s*$", re.MULTILINE)


def server_root(base_url: str) -> str:
    """The server's own root: ``base_url`` without the OpenAI-compatible ``/v1``."""
    root = base_url.rstrip("/")
    return root[:-3] if root.endswith("/v1") else root


async def discover_window(client: httpx.AsyncClient, base_url: str, model: str,
                          profile: str) -> int | None:
    """The window the server at ``base_url`` reports for ``model``, else ``profile``'s
    default, else None."""
    root = server_root(base_url)
    window: int | None = None
    if profile == "llama-server":
        # A router (tether local serve --models-dir) answers for the model the query names;
        # a server of one model ignores the query.
        props = await _json(client, "GET", f"{root}/props?model={quote(model, safe='')}")
        settings = _get(props, "default_generation_settings")
        window = _positive(_get(settings, "n_ctx")) or _positive(_get(props, "n_ctx"))
    elif profile == "ollama":
        window = await _ollama_window(client, root, model)
    elif profile == "vllm":
        models = await _json(client, "GET", f"{base_url.rstrip('/')}/models")
        for entry in _list(_get(models, "data")):
            if _get(entry, "id") == model:
                window = _positive(_get(entry, "max_model_len"))
    elif profile == "lmstudio":
        info = await _json(client, "GET", f"{root}/api/v0/models/{model}")
        window = _positive(_get(info, "loaded_context_length")) \
            or _positive(_get(info, "max_context_length"))
    return window or DEFAULT_WINDOWS.get(profile)


async def _ollama_window(client: httpx.AsyncClient, root: str, model: str) -> int | None:
    running = await _json(client, "GET", f"{root}/api/ps")
    for entry in _list(_get(running, "models")):
        if model in (_get(entry, "name"), _get(entry, "model")):
            loaded = _positive(_get(entry, "context_length"))
            if loaded:
                return loaded
    shown = await _json(client, "POST", f"{root}/api/show", {"model": model})
    parameters = _get(shown, "parameters")
    if isinstance(parameters, str):
        match = _NUM_CTX.search(parameters)
        if match and len(match.group(1)) <= 9:
            return int(match.group(1))
    return None


async def count_tokens(client: httpx.AsyncClient, base_url: str, text: str) -> int | None:
    """How many tokens llama-server's tokenizer makes of ``text`` (``POST /tokenize``)."""
    data = await _json(client, "POST", f"{server_root(base_url)}/tokenize", {"content": text})
    tokens = _get(data, "tokens")
    return len(tokens) if isinstance(tokens, list) else None


async def _json(client: httpx.AsyncClient, method: str, url: str,
                body: Any = None) -> Any:
    """The JSON a server answered, or None for any failure (a question, not a request the
    run depends on)."""
    try:
        request = client.build_request(method, url, json=body, timeout=ASK_TIMEOUT_SECS)
        response = await client.send(request, stream=True)
        if response.status_code != 200:
            await response.aclose()
            return None
        raw = await read_body(response, ASK_MAX_BYTES)
        return decode_json(raw)
    except (httpx.HTTPError, httpx.InvalidURL, ValueError):  # ResponseTooLarge too
        return None


def _get(data: Any, key: str) -> Any:
    return data.get(key) if isinstance(data, dict) else None


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _positive(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 1 << 31:
        return value
    return None


__all__ = ["DEFAULT_WINDOWS", "count_tokens", "discover_window", "server_root"]
