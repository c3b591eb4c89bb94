"""Building the runtime a configuration describes: providers, MCP servers, an Agent."""

from __future__ import annotations

import importlib.util
import inspect
import ipaddress
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tether.a2a.remote import A2AAgent
from tether.agent import Agent
from tether.builtins import select_builtins
from tether.config.layers import _workspace_path, load_config
from tether.config.mcp_json import expand
from tether.config.schema import (
    Config,
    McpSection,
    ProviderConfig,
    ProviderKind,
    SandboxSection,
    SecuritySection,
)
from tether.config.tool_files import load_hook, load_tool_references, python_files
from tether.errors import ConfigError
from tether.mcp.oauth import OAuth
from tether.mcp.server import McpServer
from tether.paths import unique
from tether.providers.anthropic import Anthropic
from tether.providers.base import Provider
from tether.providers.fallback import Fallback
from tether.providers.gemini import Gemini
from tether.providers.http.retry import RetryPolicy
from tether.providers.http.transport import Timeouts
from tether.providers.ollama import Ollama
from tether.providers.openai_chat import OpenAIChat
from tether.providers.openai_responses import OpenAIResponses
from tether.providers.shell import HTTPModel
from tether.sandbox import Sandbox
from tether.settings import ContextConfig, Prices
from tether.skills import SkillFolder
from tether.subagents import SubagentProfile
from tether.telemetry import Instrumentation
from tether.tools.tool import Tool
from tether.trust import Capabilities, SecurityConfig

# The adapter of each provider kind (``[providers.NAME] kind``): one table, one row a kind.
ADAPTERS: dict[ProviderKind, type[HTTPModel[Any]]] = {
    "openai-chat": OpenAIChat,
    "openai-responses": OpenAIResponses,
    "anthropic": Anthropic,
    "gemini": Gemini,
    "ollama": Ollama,
}


def build_provider(name: str, cfg: ProviderConfig) -> Provider:
    """The adapter for one ``[providers.NAME]`` entry. A key variable that is not set is a
    ConfigError naming the provider, the variable and the setting that names it."""
    variable = key_variable(cfg)
    if variable and variable not in os.environ:
        raise ConfigError(missing_key_message(name, cfg))

    retry = RetryPolicy(max_retries=cfg.max_retries, retry_after_cap=cfg.retry_after_cap_secs)
    timeouts = Timeouts(read=cfg.stream_idle_timeout_secs, total=cfg.timeout_secs)
    common: dict[str, Any] = {"model": cfg.model, "retry": retry, "timeouts": timeouts,
                              "headers": cfg.headers or None}
    # Unset keys keep each adapter's own defaults (its vendor's URL and key variable).
    if cfg.base_url:
        common["base_url"] = cfg.base_url
    if cfg.api_key_env:
        common["api_key_env"] = cfg.api_key_env
    if cfg.profile:
        if cfg.kind != "openai-chat":
            raise ConfigError(f"providers.{name}.profile applies to kind = \"openai-chat\" "
                              f"only")
        common["profile"] = cfg.profile
    ollama = {"keep_alive": cfg.keep_alive, "think": cfg.think}
    for key, value in ollama.items():
        if value is not None and cfg.kind != "ollama":
            raise ConfigError(f"providers.{name}.{key} applies to kind = \"ollama\" only")
    if cfg.kind == "ollama":
        # The window the fitter fits to is the one every request asks the server for.
        common.update(ollama, num_ctx=cfg.context_window)
    return ADAPTERS[cfg.kind](**common)


def provider_from_config(name: str, cfg: Config) -> Provider:
    """Provider ``name`` of ``cfg``, and when its ``fallback`` names others, a ``Fallback``
    that hands a request to them in order when it cannot answer. Only the names on its own
    list are tried (never a fallback's fallbacks): each must be another configured provider."""
    _, pcfg = cfg.provider_config(name)
    primary = build_provider(name, pcfg)
    if not pcfg.fallback:
        return primary
    chain: list[tuple[str, Provider]] = [(name, primary)]
    for other in pcfg.fallback:
        if other == name or other in (n for n, _ in chain):
            raise ConfigError(f"providers.{name}.fallback names {other!r} twice or itself")
        if other not in cfg.providers:
            known = ", ".join(sorted(cfg.providers)) or "none"
            raise ConfigError(f"providers.{name}.fallback names {other!r}, which is not a "
                              f"configured provider (configured: {known})")
        chain.append((other, build_provider(other, cfg.providers[other])))
    return Fallback(chain)


def is_local_url(url: str) -> bool:
    """Whether ``url`` is on this machine or a private network (a server someone starts)."""
    try:
        host = (urlsplit(url).hostname or "").lower()
    except ValueError:
        return False
    if host == "localhost" or host.endswith((".localhost", ".local")):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_link_local


def hosted_fallbacks(cfg: Config, name: str) -> list[str]:
    """The hosted providers a local provider ``name`` falls back to (``tether doctor``
    warns: a conversation a local model held goes to a hosted service when it is down)."""
    pcfg = cfg.providers.get(name)
    if pcfg is None or not is_local_url(base_url(pcfg)):
        return []
    return [other for other in pcfg.fallback if other in cfg.providers
            and not is_local_url(base_url(cfg.providers[other]))]


def _adapter_default(kind: ProviderKind, parameter: str) -> Any:
    return inspect.signature(ADAPTERS[kind]).parameters[parameter].default


def key_variable(cfg: ProviderConfig) -> str | None:
    """The environment variable a provider's key is read from: ``api_key_env``, else its
    adapter's own default (``ANTHROPIC_API_KEY``...; none for ``openai-chat``)."""
    if cfg.api_key_env:
        return cfg.api_key_env
    default = _adapter_default(cfg.kind, "api_key_env")
    return default if isinstance(default, str) else None


def base_url(cfg: ProviderConfig) -> str:
    """Where a provider's requests go: ``base_url``, else its adapter's default."""
    if cfg.base_url:
        return cfg.base_url
    default = _adapter_default(cfg.kind, "base_url")
    return str(default)


def missing_key_message(name: str, cfg: ProviderConfig) -> str:
    variable = key_variable(cfg)
    setting = (f"providers.{name}.api_key_env names it" if cfg.api_key_env else
               f"the {cfg.kind} default; providers.{name}.api_key_env can name another")
    return (f"provider {name!r} ({cfg.kind}) needs an API key: the environment variable "
            f"{variable} is not set ({setting}). Export it: export {variable}=...")


def security_from(section: SecuritySection, protected: Sequence[str | Path] | None = None
                  ) -> SecurityConfig:
    """The ``SecurityConfig`` of a ``[security]`` section; ``protected`` (tether's own files)
    defaults to the places the environment and the defaults name."""
    extra: dict[str, Any] = {}
    if protected is not None:
        extra["protected_paths"] = unique(Path(p) for p in protected)
    return SecurityConfig(
        trifecta=section.trifecta,
        rule=section.rule,
        block_private_ips=section.block_private_ips,
        allowed_domains=tuple(section.allowed_domains),
        blocked_domains=tuple(section.blocked_domains),
        mark_untrusted_output=section.mark_untrusted_output,
        max_result_chars=section.max_result_chars,
        endorse_destructive=section.endorse_destructive,
        **extra,
    )


def agent_from_config(
    workspace: str | Path = ".",
    *,
    config: Config | None = None,
    provider: str | None = None,
    tools: list[Any] | None = None,
    tool_files: Sequence[str] = (),
    **overrides: Any,
) -> Agent:
    """An Agent as tether.toml describes it. ``overrides`` are Agent keyword arguments
    (``approver=...``, ``max_turns=...``, ``model=`` a Provider instead of the configured
    one) that win over the file. ``tool_files`` are the references ``tools`` were loaded
    from (``--tools``): protected like ``[tools] python``."""
    cfg = config or load_config(workspace)
    name, pcfg = cfg.provider_config(provider)
    given = overrides.pop("model", None)
    model = given if given is not None else provider_from_config(name, cfg)
    # Only the providers this agent uses are built: a key missing for one it never asks is
    # not its problem. Sub-agents name theirs; so does the context summarizer.
    used = {s.provider for s in cfg.subagents if s.provider and s.provider != name}
    if cfg.agent.context_summarizer not in (None, name):
        used.add(cfg.agent.context_summarizer)
    others = {n: provider_from_config(n, cfg) for n in sorted(used) if n in cfg.providers}
    others[name] = model
    ws = Path(cfg.tools.workspace or workspace)
    own: list[str | Path] = [*cfg.own_files, *python_files(tool_files)]
    if cfg.tools.python:
        own.extend(python_files(_workspace_path(ws, r) for r in cfg.tools.python))
    hook_files = [_workspace_path(ws, h.python) for h in cfg.hooks]
    own.extend(python_files(hook_files))
    security = security_from(cfg.security, own)
    selected: list[Any] = list(select_builtins(cfg.tools.enabled, cfg.tools.disabled,
                                               sandbox=sandbox_from(cfg.sandbox),
                                               shell_allow=cfg.tools.shell.allow))
    explicit = list(tools or [])
    if cfg.tools.python:
        # Tools passed in (`--tools`) win over configured ones of the same name.
        taken = {t.name for t in explicit if isinstance(t, Tool)}
        references = [_workspace_path(ws, r) for r in cfg.tools.python]
        selected.extend(t for t in load_tool_references(references)
                        if not (isinstance(t, Tool) and t.name in taken))
    selected.extend(explicit)
    if cfg.mcp:
        selected.extend(servers_from_config(cfg.mcp, cfg.sandbox, own))
    subagents: list[SubagentProfile | A2AAgent] = [
        SubagentProfile(**s.model_dump()) for s in cfg.subagents]
    subagents.extend(A2AAgent(**s.model_dump()) for s in cfg.a2a)
    prices = None
    if pcfg.prices is not None:
        prices = Prices(pcfg.prices.input_per_mtok, pcfg.prices.output_per_mtok)
    kwargs: dict[str, Any] = {
        "context": context_from(cfg, name, others),
        "max_cost_usd": cfg.agent.max_cost_usd,
        "prices": prices,
        "system_prompt": cfg.agent.system_prompt,
        "max_turns": cfg.agent.max_turns,
        "max_repeated_failures": cfg.agent.max_repeated_failures or None,
        "max_output_tokens": cfg.agent.max_output_tokens,
        "security": security,
        "permission_mode": cfg.tools.permission_mode,
        "workspace": ws,
        "subagents": subagents,
        "providers": others,
        "approval_timeout_secs": cfg.agent.approval_timeout_secs,
        "tool_timeout_secs": cfg.agent.tool_timeout_secs,
        "temperature": cfg.agent.temperature,
        "output_retries": cfg.agent.output_retries,
        "hooks": [load_hook(reference) for reference in hook_files],
        "hook_timeout_secs": cfg.agent.hook_timeout_secs,
        "defer_after": cfg.tools.defer_after,
        "skills": [SkillFolder(Path(path), trusted) for path, trusted in cfg.skill_folders],
    }
    if cfg.telemetry.enabled:
        kwargs["instrument"] = Instrumentation(include_content=cfg.telemetry.include_content,
                                               agent_name=cfg.telemetry.agent_name)
    kwargs.update(overrides)
    return Agent(model, selected, **kwargs)


def context_from(cfg: Config, name: str, providers: dict[str, Provider]) -> ContextConfig:
    """The ``ContextConfig`` of ``[agent] context`` for provider ``name``: its
    ``context_window``, the other providers' windows (for sub-agents), the summarizer."""
    summarizer = None
    wanted = cfg.agent.context_summarizer
    if wanted is not None:
        if wanted not in providers:
            known = ", ".join(sorted(providers)) or "none"
            raise ConfigError(f"agent.context_summarizer = {wanted!r} names no configured "
                              f"provider (configured: {known})")
        summarizer = providers[wanted]
    windows = {n: p.context_window for n, p in cfg.providers.items()
               if p.context_window is not None}
    return ContextConfig(cfg.agent.context, window=cfg.providers[name].context_window,
                         summarizer=summarizer, windows=windows)


def sandbox_from(section: SandboxSection) -> Sandbox:
    """The ``Sandbox`` of a ``[sandbox]`` table: the shell's."""
    return Sandbox(mode=section.mode, network=section.network, read=tuple(section.read),
                   write=tuple(section.write), env=tuple(section.env))


def server_sandbox(section: McpSection, sandbox: SandboxSection,
                   protected: Sequence[str | Path] = ()) -> Sandbox | None:
    """The ``Sandbox`` a stdio ``[[mcp]]`` server runs in: ``[sandbox]``'s mode, the
    server's own network, read and write (it reads the system, its program and its
    folders, not the rest of the user's files), ``protected`` hidden (tether's own files: a
    server that rewrote the configuration would run unconfined next time). None:
    ``sandbox = false``, or mode "none"."""
    if not section.sandbox or sandbox.mode == "none":
        return None
    return Sandbox(mode=sandbox.mode, network=section.network, read=tuple(section.read),
                   write=tuple(section.write), hide=tuple(protected), read_all=False)


def servers_from_config(sections: Sequence[McpSection],
                        sandbox: SandboxSection | None = None,
                        protected: Sequence[str | Path] = ()) -> list[McpServer]:
    """One ``McpServer`` per enabled ``[[mcp]]`` entry of tether.toml; stdio ones inside the
    sandbox ``[sandbox]`` (its mode) and their own settings describe, ``protected`` (the
    configuration's own files) hidden from them."""
    sandbox = sandbox or SandboxSection()
    _require_sdk()
    servers: list[McpServer] = []
    for s in sections:
        if s.disabled:
            continue
        widen = Capabilities(**s.capabilities.model_dump())
        common: dict[str, Any] = {"prefix_tools": s.prefix_tools, "timeout_secs": s.timeout_secs,
                                  "capabilities": widen, "defer": s.defer}
        if s.trusted is not None:
            common["trusted"] = s.trusted
        s = _expanded(s) if s.expand_env else s
        if s.command is not None:
            servers.append(McpServer.stdio(s.name, s.command, s.args, s.env,
                                           env_passthrough=s.env_passthrough,
                                           sandbox=server_sandbox(s, sandbox, protected),
                                           **common))
        else:
            assert s.url is not None  # McpSection allows exactly one transport
            oauth = OAuth(scope=s.scope) if s.auth == "oauth" else None
            servers.append(McpServer.http(s.name, s.url, s.headers, headers_env=s.headers_env,
                                          oauth=oauth, **common))
    names = [server.name for server in servers]
    if len(set(names)) != len(names):
        raise ConfigError(f"two [[mcp]] servers share a name: {', '.join(names)}")
    return servers


def _expanded(s: McpSection) -> McpSection:
    """``s`` with ``${VAR}`` and ``${VAR:-default}`` read from the environment in its
    command, args, env, url and headers; an unset variable is a ConfigError naming where."""
    whose = f"mcp server {s.name}" + (f" (from {s.source_file})" if s.source_file else "")

    def text(value: str, field: str) -> str:
        return expand(value, f"{whose}: {field}")

    return s.model_copy(update={
        "command": text(s.command, "command") if s.command is not None else None,
        "args": [text(a, f"args[{i}]") for i, a in enumerate(s.args)],
        "env": {k: text(v, f"env.{k}") for k, v in s.env.items()},
        "url": text(s.url, "url") if s.url is not None else None,
        "headers": {k: text(v, f"headers.{k}") for k, v in s.headers.items()},
    })


def _require_sdk() -> None:
    if importlib.util.find_spec("mcp") is None:
        raise ConfigError("[[mcp]] servers need the official MCP SDK: "
                          "pip install 'tether[mcp]'")
