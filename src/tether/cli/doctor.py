"""`tether doctor`: can each configured provider be reached, each MCP server started, the
session store opened?"""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import TYPE_CHECKING, Any

from tether.cli.common import EXIT_ERROR, EXIT_OK
from tether.errors import ConfigError

if TYPE_CHECKING:
    from tether.config import Config, ProviderConfig


def add_cli(sub: Any) -> None:
    doctor = sub.add_parser("doctor", help="check config, providers, MCP servers, the store")
    doctor.set_defaults(handler=cmd_doctor)


def cmd_doctor(args: argparse.Namespace) -> int:
    return asyncio.run(_doctor(args))


async def _doctor(args: argparse.Namespace) -> int:
    from rich.console import Console

    from tether.config import load_config

    console = Console(highlight=False)
    failures = 0

    def report(ok: bool, label: str, detail: str) -> None:
        from tether.display import shown

        nonlocal failures
        failures += not ok
        mark = ("✓", "green") if ok else ("✗", "red")
        # Details quote servers (an MCP server's stderr, an HTTP error): shown literally.
        console.print(shown(mark, f" {label}", *((" ", (detail, "dim")) if detail else ())))

    try:
        cfg = load_config(args.workspace)
    except ConfigError as e:
        report(False, "config", str(e))
        return EXIT_ERROR
    report(True, "config", ", ".join(cfg.sources))
    for ok, label, detail in await check_providers(cfg):
        report(ok, label, detail)
    from tether.cli.sessions import check_store

    checks: list[Any] = [check_store]
    if cfg.mcp:
        checks.append(check_mcp_servers)
    for check in checks:
        for ok, label, detail in await check(cfg):
            report(ok, label, detail)
    return EXIT_OK if not failures else EXIT_ERROR


# --- the checks -------------------------------------------------------------------------


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


async def check_mcp_servers(config: Config) -> list[tuple[bool, str, str]]:
    """``tether doctor``: start each configured server (side by side), list its tools, and
    close it again."""
    from tether.config import servers_from_config

    out: list[tuple[bool, str, str]] = [
        (True, f"mcp {s.name}", "disabled") for s in config.mcp if s.disabled]
    try:
        servers = servers_from_config(config.mcp)
    except ConfigError as e:
        return [*out, (False, "mcp", str(e))]
    try:
        await asyncio.gather(*(server.start() for server in servers))
        for server in servers:
            label = f"mcp {server.name} ({server.transport.describe()}, " \
                    f"{'trusted' if server.trusted else 'untrusted'})"
            if server.error is not None:
                out.append((False, label, f"did not start: {server.error}"))
                continue
            skipped = len(server.notices)
            trust = "" if server.trusted else (
                "; not trusted: a conversation offering its tools counts as untrusted from "
                "its first turn")
            out.append((True, label, f"started, {len(server.tools())} tools"
                                     + (f", {skipped} skipped (see `tether tools`)"
                                        if skipped else "") + trust))
    finally:
        await asyncio.gather(*(server.aclose() for server in servers))
    return out
