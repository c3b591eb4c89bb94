"""`tether doctor`: can the providers the configuration uses be reached (its
``default_provider`` and the sub-agents' ones, or ``--provider NAME``), each MCP server
started, the session store opened? Is the local model cache (``tether local setup``) in
order? Exits 0 when every check passed, 1 otherwise; a line marked ``-`` is information
(a local model not set up yet), not a failure."""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.cli.common import EXIT_ERROR, EXIT_OK
from tether.errors import ConfigError

if TYPE_CHECKING:
    from tether.config.schema import Config, ProviderConfig


def add_cli(sub: Any) -> None:
    doctor = sub.add_parser("doctor", help="check config, providers, MCP servers, the store")
    doctor.add_argument("--provider", metavar="NAME",
                        help="check this configured provider (default: the ones in use)")
    doctor.add_argument("--local", action="store_true",
                        help="check the local path as --local uses it: the toolchain, the "
                             "cache and model, and what answers on the local port")
    doctor.set_defaults(handler=cmd_doctor)


def cmd_doctor(args: argparse.Namespace) -> int:
    return asyncio.run(_doctor(args))


async def _doctor(args: argparse.Namespace) -> int:
    from tether.cli.render import stdout_console
    from tether.config.layers import load_config

    console = stdout_console()
    failures = 0

    def report(ok: bool | None, label: str, detail: str) -> None:
        from tether.display import shown

        nonlocal failures
        failures += ok is False
        mark = ("✓", "green") if ok else ("-", "dim") if ok is None else ("✗", "red")
        # Details quote servers (an MCP server's stderr, an HTTP error): shown literally.
        console.print(shown(mark, f" {label}", *((" ", (detail, "dim")) if detail else ())))

    try:
        layer = None
        if args.local:
            from tether.cli.local import local_layer

            layer = local_layer(args)
        cfg = load_config(args.workspace, layer)
    except ConfigError as e:
        report(False, "config", str(e))
        return EXIT_ERROR
    report(True, "config", ", ".join(cfg.sources))
    try:
        names = providers_in_use(cfg, args.provider)
    except ConfigError as e:
        report(False, "provider", str(e))
        return EXIT_ERROR
    for ok, label, detail in await check_providers(cfg, names):
        report(ok, label, detail)
    for warning in fallback_warnings(cfg, names):
        report(None, "warning", warning)
    from tether.cli.sessions import check_store

    checks: list[Any] = [check_store, check_local_cache, check_sandbox]
    if args.local:
        from tether.cli.doctor_local import check_local_path

        checks.append(check_local_path)
    if cfg.mcp:
        checks.append(check_mcp_servers)
    for check in checks:
        for ok, label, detail in await check(cfg):
            report(ok, label, detail)
    unchecked = sorted(set(cfg.providers) - set(names))
    if unchecked and not args.provider:
        from tether.display import shown

        console.print(shown((f"  not in use, not checked: {', '.join(unchecked)} "
                             f"(tether doctor --provider NAME checks one)", "dim")))
    return EXIT_OK if not failures else EXIT_ERROR


# --- the checks -------------------------------------------------------------------------


def providers_in_use(config: Config, chosen: str | None = None) -> list[str]:
    """The providers a run would use: ``chosen`` (an unknown name is a ConfigError listing
    the configured ones), else ``default_provider`` and those the sub-agents name."""
    name, _ = config.provider_config(chosen)
    if chosen:
        return [name]
    used = {s.provider for s in config.subagents if s.provider and s.provider in config.providers}
    return [name, *sorted(used - {name})]


def fallback_warnings(config: Config, names: list[str]) -> list[str]:
    """For each local provider of ``names`` whose ``fallback`` names a hosted one: what
    goes where when the local server is down."""
    from tether.config.build import hosted_fallbacks

    out = []
    for name in names:
        hosted = hosted_fallbacks(config, name)
        if hosted:
            out.append(f"provider {name} is local, and its fallback names hosted "
                       f"{', '.join(hosted)}: when {name} cannot answer, the conversation "
                       f"(your files and tool results in it) goes to "
                       f"{'that service' if len(hosted) == 1 else 'those services'}")
    return out


# The most of a server's model list that is read. OpenRouter's, the longest known, is a few
# megabytes; a server that sends more is not listing models.
MAX_LISTING_BYTES = 16 * 1024 * 1024


def _models_request(cfg: ProviderConfig) -> tuple[str, dict[str, str]]:
    from tether.config.build import base_url, key_variable

    base = base_url(cfg).rstrip("/")
    variable = key_variable(cfg)
    key = os.environ.get(variable, "") if variable else ""
    if cfg.kind == "anthropic":
        return f"{base}/v1/models", {"x-api-key": key, "anthropic-version": "2023-06-01"}
    if cfg.kind == "gemini":
        return f"{base}/models", {"x-goog-api-key": key}
    if cfg.kind == "ollama":
        from tether.providers.ollama import server_root

        return (f"{server_root(base)}/api/tags",
                {"authorization": f"Bearer {key}"} if key else {})
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


async def check_providers(config: Config, names: list[str] | None = None
                          ) -> list[tuple[bool | None, str, str]]:
    """Each provider of ``names`` (default: the ones in use): its key set, its server
    reachable, its model listed; for an OpenAI-compatible server without a ``profile``, the
    profile its model list points at."""
    import httpx

    from tether.config.build import key_variable, missing_key_message
    from tether.providers.http.bodies import ResponseTooLarge, decode_json, read_body

    out: list[tuple[bool | None, str, str]] = []
    async with httpx.AsyncClient(timeout=5.0, trust_env=False) as client:
        for name in names if names is not None else providers_in_use(config):
            cfg = config.providers[name]
            label = f"provider {name} ({cfg.kind})"
            variable = key_variable(cfg)
            if variable and variable not in os.environ:
                out.append((False, label, f"missing key: {missing_key_message(name, cfg)}"))
                continue
            url, headers = _models_request(cfg)
            try:
                async with client.stream("GET", url, headers=headers) as response:
                    body = await read_body(response, MAX_LISTING_BYTES)
            except ResponseTooLarge:
                body = b""  # answered, but not a list to read: the model is not checked
            except httpx.HTTPError as e:
                failure = f"cannot reach {url}: {e or type(e).__name__}"
                if isinstance(e, httpx.ConnectError | httpx.ConnectTimeout):
                    from tether.cli.common import is_local_path, no_provider_help
                    from tether.cli.doctor_local import local_path_ready

                    if is_local_path(config, name) and local_path_ready(config):
                        # After a --local quickstart: set up, stopped until the next run.
                        out.append((None, label, f"the local path is ready: llama-server "
                                                 f"and the model are set up, not running at "
                                                 f"{url} now; `tether run --local \"...\"` "
                                                 f"starts it (tether doctor --local checks "
                                                 f"it)"))
                        continue
                    # Nothing answered there: what `tether run` advises.
                    failure = no_provider_help(config, failure, name)
                out.append((False, label, failure))
                continue
            if response.status_code in (401, 403):
                out.append((False, label, f"{url} refused the key in {variable} (HTTP "
                                          f"{response.status_code})" if variable else
                            f"{url} answered HTTP {response.status_code}: it wants a key "
                            f"(set providers.{name}.api_key_env)"))
                continue
            if response.status_code >= 400:
                out.append((False, label, f"{url} answered HTTP {response.status_code}"))
                continue
            try:
                listing = decode_json(body)
            except ValueError:
                listing = None
            models = _listed_models(listing)
            if cfg.kind == "ollama":
                out.append(_ollama_models(label, cfg, url, models))
                continue
            if models and cfg.model not in models:
                out.append((False, label, f"reachable, but model {cfg.model!r} is not listed "
                                          f"(listed: {', '.join(sorted(models)[:8])})"))
                continue
            out.append((True, label, f"reachable at {url}, model {cfg.model!r}"
                        + _profile_note(name, cfg, listing)))
    return out


def _ollama_models(label: str, cfg: ProviderConfig, url: str,
                   models: set[str]) -> tuple[bool, str, str]:
    """What an Ollama server has pulled (``/api/tags``): the model named ``llama3.2`` is
    the one pulled as ``llama3.2:latest``."""
    pulled = sorted(models)
    if cfg.model in models or f"{cfg.model}:latest" in models:
        return True, label, (f"reachable at {url}, model {cfg.model!r} pulled; pulled: "
                             f"{', '.join(pulled[:8])}{' ...' if len(pulled) > 8 else ''}")
    return False, label, (f"reachable, but model {cfg.model!r} is not pulled: run `ollama "
                          f"pull {cfg.model}` (pulled: {', '.join(pulled[:8]) or 'none'})")


def _profile_note(name: str, cfg: ProviderConfig, listing: Any) -> str:
    """For ``openai-chat`` without a ``profile``: what the server looks like, and the
    profile that is assumed meanwhile."""
    if cfg.kind != "openai-chat" or cfg.profile:
        return ""
    from tether.providers.profiles import detect, profile_from_models

    assumed = detect(cfg.base_url or "https://api.openai.com/v1")
    if assumed != "generic":
        return f", profile {assumed!r} (by its host)"
    found = profile_from_models(listing)
    if found is None:
        return (", profile \"generic\" assumed (the server did not say what it is; set "
                f"providers.{name}.profile if you know)")
    return (f"; the server looks like {found}: set providers.{name}.profile = \"{found}\" "
            f"(\"generic\" is assumed until then)")


async def check_local_cache(config: Config) -> list[tuple[bool | None, str, str]]:
    """The local model cache (``tether run --local``, ``tether local serve``): is
    llama-server built, is the model there and the published one (its size and sha256; a
    model of your own, ``[local] model_path``: a GGUF file)? When something is missing, what
    ``tether local setup`` would do (and whether it can: cmake and a compiler). Missing is
    information (``None``), not a failure: a hosted provider needs no local model. A
    changed or unreadable file is a failure."""
    from tether.errors import LocalSetupError
    from tether.local.setup import (
        DEFAULT_MODEL,
        LLAMA_CPP_PYTHON_VERSION,
        check_gguf,
        default_cache_dir,
        default_model_path,
        find_toolchain,
        model_problem,
        server_binary_path,
    )

    cache = default_cache_dir(config.local.cache_dir)
    label = f"local model cache {cache}"
    have: list[str] = []
    todo: list[str] = []
    binary = server_binary_path(cache)
    if binary.is_file() and os.access(binary, os.X_OK):
        have.append(f"llama-server built (llama-cpp-python {LLAMA_CPP_PYTHON_VERSION})")
    else:
        todo.append(f"build llama-server from the llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} "
                    f"sdist (sha256-checked, from PyPI; about 5 minutes on 2 cores)")
    if config.local.model_path:
        own = Path(config.local.model_path).expanduser()
        try:
            check_gguf(own)
        except LocalSetupError as e:
            return [(False, label, f"[local] model_path: {e}")]
        have.append(f"your model {own}")
    else:
        model = default_model_path(cache)
        if not model.exists():
            todo.append(f"fetch {DEFAULT_MODEL.filename} ({DEFAULT_MODEL.size / 1e6:.0f} MB "
                        f"from PyPI) and check its sha256")
        else:
            # Reads the whole file (under a second for the default model).
            problem = await asyncio.to_thread(model_problem, model)
            if problem is not None:
                return [(False, label, problem)]
            have.append(f"model {DEFAULT_MODEL.filename} (sha256 checked)")
    if not todo:
        return [(True, label, ", ".join(have))]
    detail = "`tether local setup` would " + " and ".join(todo)
    if any(step.startswith("build") for step in todo):
        try:
            find_toolchain()
        except LocalSetupError as e:
            detail += f"; it cannot yet: {e}"
    if have:
        detail += f" (there: {', '.join(have)})"
    return [(None, label, detail + "; needed only for a local model (tether run --local, "
                                   "tether local serve)")]


async def check_sandbox(config: Config) -> list[tuple[bool | None, str, str]]:
    """Which mechanism confines the shell and stdio MCP servers, and why; a failure only
    when something configured needs one and none works (it would refuse to run)."""
    from tether.config.build import sandbox_from
    from tether.errors import SandboxUnavailable
    from tether.sandbox import choose, describe

    sandbox = sandbox_from(config.sandbox)
    try:
        choose(sandbox)
        ok: bool | None = True
    except SandboxUnavailable:
        shell = "shell" in (config.tools.enabled or ()) and "shell" not in config.tools.disabled
        servers = any(s.command is not None and s.sandbox and not s.disabled for s in config.mcp)
        ok = False if shell or servers else None
    return [(ok, "sandbox", describe(sandbox))]


async def check_mcp_servers(config: Config) -> list[tuple[bool, str, str]]:
    """``tether doctor``: start each configured server (side by side), list its tools, and
    close it again."""
    from tether.config.build import servers_from_config

    out: list[tuple[bool, str, str]] = [
        (True, f"mcp {s.name}", "disabled") for s in config.mcp if s.disabled]
    try:
        servers = servers_from_config(config.mcp, config.sandbox, config.own_files)
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
            out.append((True, label, f"started (protocol {server.protocol_version}), "
                                     f"{len(server.tools())} tools"
                                     + (f", {skipped} skipped (see `tether tools`)"
                                        if skipped else "") + trust))
    finally:
        await asyncio.gather(*(server.aclose() for server in servers))
    return out
