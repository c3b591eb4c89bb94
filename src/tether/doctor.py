"""`tether doctor`: can each configured provider be reached, and does it list its model?"""

from __future__ import annotations

import os
from typing import Any

from tether.config import Config, ProviderConfig

_DEFAULT_BASE = {
    "openai-chat": "https://api.openai.com/v1",
    "openai-responses": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
    "gemini": "https://generativelanguage.googleapis.com/v1beta",
}


def _models_request(cfg: ProviderConfig) -> tuple[str, dict[str, str]]:
    base = (cfg.base_url or _DEFAULT_BASE[cfg.kind]).rstrip("/")
    key = os.environ.get(cfg.api_key_env, "") if cfg.api_key_env else ""
    if cfg.kind == "anthropic":
        return f"{base}/v1/models", {"x-api-key": key, "anthropic-version": "2023-06-01"}
    if cfg.kind == "gemini":
        return f"{base}/models", {"x-goog-api-key": key}
    return f"{base}/models", ({"authorization": f"Bearer {key}"} if key else {})


def _listed_models(data: Any) -> set[str]:
    names: set[str] = set()
    if isinstance(data, dict):
        for key in ("data", "models"):
            for item in data.get(key) or []:
                if isinstance(item, dict):
                    for field in ("id", "name", "model"):
                        if isinstance(item.get(field), str):
                            names.add(item[field].removeprefix("models/"))
    return names


async def check_providers(config: Config) -> list[tuple[bool, str, str]]:
    import httpx

    out: list[tuple[bool, str, str]] = []
    async with httpx.AsyncClient(timeout=5.0, trust_env=False) as client:
        for name, cfg in config.providers.items():
            label = f"provider {name} ({cfg.kind})"
            if cfg.api_key_env and cfg.api_key_env not in os.environ:
                out.append((False, label, f"{cfg.api_key_env} is not set"))
                continue
            url, headers = _models_request(cfg)
            try:
                response = await client.get(url, headers=headers)
            except httpx.HTTPError as e:
                out.append((False, label, f"cannot reach {url}: {e or type(e).__name__}"))
                continue
            if response.status_code >= 400:
                out.append((False, label, f"{url} answered HTTP {response.status_code}"))
                continue
            try:
                models = _listed_models(response.json())
            except ValueError:
                models = set()
            if models and cfg.model not in models:
                out.append((False, label, f"reachable, but model {cfg.model!r} is not listed "
                                          f"(listed: {', '.join(sorted(models)[:8])})"))
            else:
                out.append((True, label, f"reachable at {url}, model {cfg.model!r}"))
    return out
