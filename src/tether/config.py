"""tether.toml: providers, agent, tools, security, sub-agents, MCP servers.

Layers, later wins: built-in defaults -> the user file (~/.config/tether/config.toml) ->
./tether.toml in the workspace -> TETHER_* environment variables -> flags. Unknown keys are
rejected with their path, so a typo never silently does nothing.
"""

from __future__ import annotations

import copy
import os
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tether.errors import ConfigError

if TYPE_CHECKING:
    from tether.agent import Agent
    from tether.providers.base import Provider

ProviderKind = Literal["openai-chat", "openai-responses", "anthropic", "gemini"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Prices(_Strict):
    input_per_mtok: float = 0.0
    output_per_mtok: float = 0.0


class ProviderConfig(_Strict):
    kind: ProviderKind = "openai-chat"
    base_url: str | None = None
    model: str
    api_key_env: str | None = None
    profile: str | None = None
    context_window: int | None = None
    max_retries: int = Field(default=2, ge=0)
    retry_after_cap_secs: float = Field(default=60.0, ge=0)
    timeout_secs: float = Field(default=600.0, gt=0)
    stream_idle_timeout_secs: float = Field(default=120.0, gt=0)
    headers: dict[str, str] = Field(default_factory=dict)
    prices: Prices | None = None


class AgentConfig(_Strict):
    system_prompt: str | None = None
    max_turns: int = Field(default=40, ge=1)
    max_output_tokens: int | None = Field(default=None, ge=1)
    max_cost_usd: float | None = Field(default=None, gt=0)
    temperature: float | None = None
    approval_timeout_secs: float | None = Field(default=300.0, gt=0)
    tool_timeout_secs: float | None = Field(default=600.0, gt=0)
    output_retries: int = Field(default=2, ge=0)


class ToolsConfig(_Strict):
    enabled: list[str] | None = None  # None: the default built-ins
    disabled: list[str] = Field(default_factory=list)
    workspace: str | None = None
    permission_mode: Literal["ask", "allow", "read-only"] = "ask"
    # Your own @tool functions: files (relative to the workspace) or modules, as for --tools.
    python: list[str] = Field(default_factory=list)


class SecuritySection(_Strict):
    trifecta: Literal["block", "ask", "allow"] = "block"
    block_private_ips: bool = True
    allowed_domains: list[str] = Field(default_factory=list)
    blocked_domains: list[str] = Field(default_factory=list)
    mark_untrusted_output: bool = True
    max_result_chars: int = Field(default=50_000, ge=100)


class SubagentSection(_Strict):
    name: str
    description: str
    tools: list[str] = Field(default_factory=list)
    system_prompt: str | None = None
    max_turns: int = 12
    model: str | None = None
    provider: str | None = None
    trusted_output: bool = False
    answer_shape: str | list[str] | None = None


class McpCapabilities(_Strict):
    private_data: bool = False
    untrusted_input: bool = False
    external_send: bool = False
    destructive: bool = False


class McpSection(_Strict):
    name: str
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    env_passthrough: list[str] = Field(default_factory=list)
    url: str | None = None
    headers_env: dict[str, str] = Field(default_factory=dict)
    prefix_tools: bool = True
    disabled: bool = False
    timeout_secs: float = Field(default=60.0, gt=0)
    capabilities: McpCapabilities = Field(default_factory=McpCapabilities)
    # Whether the server's own text (tool descriptions, titles, schemas) is trusted;
    # unset: a stdio server is, a remote (url) one is not.
    trusted: bool | None = None

    @model_validator(mode="after")
    def _one_transport(self) -> McpSection:
        if (self.command is None) == (self.url is None):
            raise ValueError(f"mcp server {self.name!r} needs either command (stdio) or url "
                             f"(streamable HTTP), not both or neither")
        return self


class StoreSection(_Strict):
    path: str | None = None


class LocalSection(_Strict):
    cache_dir: str | None = None
    model_path: str | None = None
    port: int = 8080


class TemporalSection(_Strict):
    """``[temporal]``: where durable runs go (``tether worker``, ``--engine temporal``); see
    docs/scale.md."""

    address: str = "127.0.0.1:7233"
    namespace: str = "default"
    task_queue: str = "tether"
    # How long a worker may go silent before its activity counts as lost (and its
    # idempotent tool calls and model requests move to another worker).
    heartbeat_timeout_secs: float = Field(default=30.0, gt=0)
    # How long a workflow cached on a worker that went away waits before another worker
    # takes it (Temporal's sticky schedule-to-start timeout).
    sticky_timeout_secs: float = Field(default=10.0, gt=0)
    # How long a call waits for its approval signal; unset: until it is decided.
    approval_timeout_secs: float | None = Field(default=None, gt=0)
    # The content-addressed folder for what is passed by reference (every worker must
    # reach the same folder); unset: $XDG_DATA_HOME/tether/temporal-blobs.
    blob_dir: str | None = None
    # Messages at least this large travel by reference, not inline in workflow history.
    inline_limit_bytes: int = Field(default=16 * 1024, ge=0)


class Config(_Strict):
    default_provider: str = "local"
    providers: dict[str, ProviderConfig] = Field(default_factory=dict)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    security: SecuritySection = Field(default_factory=SecuritySection)
    subagents: list[SubagentSection] = Field(default_factory=list)
    mcp: list[McpSection] = Field(default_factory=list)
    store: StoreSection = Field(default_factory=StoreSection)
    local: LocalSection = Field(default_factory=LocalSection)
    temporal: TemporalSection = Field(default_factory=TemporalSection)
    # Where each layer came from, for `tether config show`.
    sources: list[str] = Field(default_factory=list, exclude=True)
    # tether's own files as every layer names them (config files, stores, caches, tool
    # files): the file tools may not change them. See tether.own_files.
    own_files: list[str] = Field(default_factory=list, exclude=True)

    def provider_config(self, name: str | None = None) -> tuple[str, ProviderConfig]:
        name = name or self.default_provider
        if name not in self.providers:
            known = ", ".join(sorted(self.providers)) or "none"
            raise ConfigError(f"provider {name!r} is not configured (configured: {known}); add "
                              f"[providers.{name}] to tether.toml (see `tether config init`)")
        return name, self.providers[name]


# The built-in defaults: one local llama-server (see `tether local serve`).
DEFAULTS: dict[str, Any] = {
    "default_provider": "local",
    "providers": {
        "local": {"kind": "openai-chat", "base_url": "http://127.0.0.1:8080/v1",
                  "model": "qwen", "profile": "llama-server"},
    },
}


def user_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "tether" / "config.toml"


def load_config(
    workspace: str | Path = ".",
    overrides: Mapping[str, Any] | None = None,
    *,
    user_file: str | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Config:
    """The merged configuration. ``overrides`` are flag values as a nested dict."""
    from tether.own_files import default_locations

    env = os.environ if env is None else env
    merged: dict[str, Any] = copy.deepcopy(DEFAULTS)
    sources = ["defaults"]
    user = Path(env.get("TETHER_CONFIG") or user_file or user_config_path())
    project = Path(workspace) / "tether.toml"
    # Both files are tether's own even when absent: one written now is read next time.
    own: list[Any] = [*default_locations(env), user, project]
    layers: list[Mapping[str, Any]] = []
    for path in (user, project):
        if _is_file(path):
            layer = _read_toml(path)
            layers.append(layer)
            _merge(merged, layer)
            sources.append(str(path))
    env_layer = _env_layer(env, merged)
    if env_layer:
        _merge(merged, env_layer)
        sources.append("environment")
    if overrides:
        layers.append(overrides)
        _merge(merged, dict(overrides))
        sources.append("flags")
    for named in layers:
        own.extend(_named_files(named, workspace))
    config = _validate(merged, sources)
    return config.model_copy(update={"own_files": [str(p) for p in own]})


def _named_files(layer: Mapping[str, Any], workspace: str | Path) -> list[Path]:
    """The files of tether's that one configuration layer names: its store, its cache
    folder, its tool files. Read loosely: validation reports a malformed value."""
    from tether.own_files import python_files, store_files

    out: list[Path] = []
    store, local, tools = (layer.get(k) for k in ("store", "local", "tools"))
    if isinstance(store, Mapping) and isinstance(store.get("path"), str):
        out.extend(store_files(store["path"]))
    temporal = layer.get("temporal")
    if isinstance(temporal, Mapping) and isinstance(temporal.get("blob_dir"), str):
        out.append(Path(temporal["blob_dir"]).expanduser())
    if isinstance(local, Mapping) and isinstance(local.get("cache_dir"), str):
        out.append(Path(local["cache_dir"]).expanduser())
    if isinstance(tools, Mapping) and isinstance(tools.get("python"), list):
        given = tools.get("workspace")
        root = Path(given if isinstance(given, str) else workspace)
        references = [r for r in tools["python"] if isinstance(r, str)]
        out.extend(python_files(_workspace_path(root, r) for r in references))
    return out


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError) as e:  # a folder it may not enter, a NUL in the name
        raise ConfigError(f"{path}: cannot read: {e}") from None


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e}") from None
    try:
        document = tomllib.loads(_toml_text(path, data))
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid TOML: arrays or inline tables nest too deep")\
            from None
    _refuse_nul(path, document, ())
    return document


def _toml_text(path: Path, data: bytes) -> str:
    """The file's text: TOML is UTF-8 (a UTF-8 byte order mark is skipped). Anything else
    is a ConfigError that names the encoding it looks like and the line."""
    import codecs

    if data.startswith((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):
        raise ConfigError(f"{path}: the file is UTF-32 (it starts with a UTF-32 byte order "
                          f"mark); TOML files must be UTF-8: save it as UTF-8")
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) or _looks_utf16(data):
        raise ConfigError(f"{path}: the file is UTF-16; TOML files must be UTF-8: save it "
                          f"as UTF-8")
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8):]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ConfigError(
            f"{path}: line {line} is not UTF-8 (byte 0x{data[e.start]:02x}); TOML files must "
            f"be UTF-8. Was it saved as Latin-1 or another legacy encoding? Save it as "
            f"UTF-8") from None


def _looks_utf16(data: bytes) -> bool:
    """UTF-16 without a byte order mark: ASCII text with a NUL beside every character."""
    if len(data) < 4 or len(data) % 2:
        return False
    half = len(data) // 2
    return data[0::2].count(0) > half // 2 or data[1::2].count(0) > half // 2


def _refuse_nul(path: Path, value: Any, where: tuple[str, ...]) -> None:
    """No string of the file holds a NUL: no path, command, name or header can."""
    def name(keys: tuple[str, ...]) -> str:
        return ".".join(keys) or "(top level)"

    if isinstance(value, str) and "\x00" in value:
        raise ConfigError(f"{path}: {name(where)} contains a NUL character (\\u0000), which "
                          f"no path, command, name or header can hold")
    if isinstance(value, dict):
        for key, item in value.items():
            if "\x00" in key:
                raise ConfigError(f"{path}: a key in {name(where)} contains a NUL character "
                                  f"(\\u0000): {key!r}")
            _refuse_nul(path, item, (*where, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _refuse_nul(path, item, (*where, str(index)))


def _env_layer(env: Mapping[str, str], merged: dict[str, Any]) -> dict[str, Any]:
    layer: dict[str, Any] = {}
    provider = env.get("TETHER_PROVIDER")
    if provider:
        layer["default_provider"] = provider
    name = provider or merged.get("default_provider", "local")
    for var, key in (("TETHER_MODEL", "model"), ("TETHER_BASE_URL", "base_url")):
        # A default_provider that is not a name is reported by the validation below.
        if env.get(var) and isinstance(name, str):
            layer.setdefault("providers", {}).setdefault(name, {})[key] = env[var]
    if env.get("TETHER_MAX_TURNS"):
        try:
            layer.setdefault("agent", {})["max_turns"] = int(env["TETHER_MAX_TURNS"])
        except ValueError:
            raise ConfigError(f"TETHER_MAX_TURNS must be a whole number, not "
                              f"{env['TETHER_MAX_TURNS']!r}") from None
    if env.get("TETHER_PERMISSION_MODE"):
        layer.setdefault("tools", {})["permission_mode"] = env["TETHER_PERMISSION_MODE"]
    return layer


def _merge(base: dict[str, Any], layer: Mapping[str, Any]) -> None:
    """Deep-merge tables; anything else (lists, arrays of tables, scalars) is replaced."""
    for key, value in layer.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)


def _validate(data: dict[str, Any], sources: list[str]) -> Config:
    try:
        return Config.model_validate({**data, "sources": sources})
    except ValidationError as e:
        problems = []
        for err in e.errors():
            where = ".".join(str(p) for p in err["loc"]) or "(top level)"
            if err["type"] == "extra_forbidden":
                problems.append(f"unknown key {where}")
            else:
                problems.append(f"{where}: {err['msg']}")
        raise ConfigError("invalid configuration (" + ", ".join(sources[1:] or ["defaults"])
                          + "): " + "; ".join(problems)) from None


# --- building the runtime from a config -------------------------------------------------------


def build_provider(name: str, cfg: ProviderConfig) -> Provider:
    """The adapter for one ``[providers.NAME]`` entry."""
    from tether.providers.http import RetryPolicy, Timeouts

    retry = RetryPolicy(max_retries=cfg.max_retries, retry_after_cap=cfg.retry_after_cap_secs)
    timeouts = Timeouts(read=cfg.stream_idle_timeout_secs, total=cfg.timeout_secs)
    common: dict[str, Any] = {"model": cfg.model, "retry": retry, "timeouts": timeouts,
                              "headers": cfg.headers or None}
    # Unset keys keep each adapter's own defaults (its vendor's URL and key variable).
    if cfg.base_url:
        common["base_url"] = cfg.base_url
    if cfg.api_key_env:
        common["api_key_env"] = cfg.api_key_env
    provider: Provider
    if cfg.kind == "openai-chat":
        from tether.providers.openai_chat import OpenAIChat

        provider = OpenAIChat(profile=cfg.profile, **common)
    elif cfg.kind == "openai-responses":
        from tether.providers.openai_responses import OpenAIResponses

        provider = OpenAIResponses(**common)
    elif cfg.kind == "anthropic":
        from tether.providers.anthropic import Anthropic

        provider = Anthropic(**common)
    else:
        from tether.providers.gemini import Gemini

        provider = Gemini(**common)
    if cfg.profile and cfg.kind != "openai-chat":
        raise ConfigError(f"providers.{name}.profile applies to kind = \"openai-chat\" only")
    return provider


def security_from(section: SecuritySection, protected: Sequence[str | Path] | None = None
                  ) -> Any:
    """The ``SecurityConfig`` of a ``[security]`` section; ``protected`` (tether's own files)
    defaults to the places the environment and the defaults name."""
    from tether.trust import SecurityConfig

    extra: dict[str, Any] = {}
    if protected is not None:
        from tether.own_files import unique

        extra["protected_paths"] = unique(Path(p) for p in protected)
    return SecurityConfig(
        trifecta=section.trifecta,
        block_private_ips=section.block_private_ips,
        allowed_domains=tuple(section.allowed_domains),
        blocked_domains=tuple(section.blocked_domains),
        mark_untrusted_output=section.mark_untrusted_output,
        max_result_chars=section.max_result_chars,
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
    (``approver=...``, ``max_turns=...``) that win over the file. ``tool_files`` are the
    references ``tools`` were loaded from (``--tools``): protected like ``[tools] python``."""
    from tether.agent import Agent
    from tether.builtins import select_builtins
    from tether.subagents import SubagentProfile
    from tether.tools import Tool

    cfg = config or load_config(workspace)
    name, pcfg = cfg.provider_config(provider)
    model = build_provider(name, pcfg)
    others = {n: build_provider(n, p) for n, p in cfg.providers.items() if n != name}
    others[name] = model
    ws = Path(cfg.tools.workspace or workspace)
    from tether.own_files import python_files

    own: list[str | Path] = [*cfg.own_files, *python_files(tool_files)]
    if cfg.tools.python:
        own.extend(python_files(_workspace_path(ws, r) for r in cfg.tools.python))
    security = security_from(cfg.security, own)
    selected: list[Any] = list(select_builtins(cfg.tools.enabled, cfg.tools.disabled))
    explicit = list(tools or [])
    if cfg.tools.python:
        from tether.tool_files import load_tool_references

        # Tools passed in (`--tools`) win over configured ones of the same name.
        taken = {t.name for t in explicit if isinstance(t, Tool)}
        references = [_workspace_path(ws, r) for r in cfg.tools.python]
        selected.extend(t for t in load_tool_references(references)
                        if not (isinstance(t, Tool) and t.name in taken))
    selected.extend(explicit)
    if cfg.mcp:
        from tether.mcp import servers_from_config

        selected.extend(servers_from_config(cfg.mcp))
    subagents = [SubagentProfile(**s.model_dump()) for s in cfg.subagents]
    prices = None
    if pcfg.prices is not None:
        from tether.result import Prices

        prices = Prices(pcfg.prices.input_per_mtok, pcfg.prices.output_per_mtok)
    kwargs: dict[str, Any] = {
        "max_cost_usd": cfg.agent.max_cost_usd,
        "prices": prices,
        "system_prompt": cfg.agent.system_prompt,
        "max_turns": cfg.agent.max_turns,
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
    }
    kwargs.update(overrides)
    return Agent(model, selected, **kwargs)


def _workspace_path(workspace: Path, reference: str) -> str:
    """A file reference made relative to the workspace; module references stay as they are."""
    target, sep, attr = reference.rpartition(":")
    if not sep or not attr.isidentifier():
        target, sep, attr = reference, "", ""
    if not (target.endswith(".py") or "/" in target):
        return reference
    path = Path(target)
    return f"{path if path.is_absolute() else workspace / path}{sep}{attr}"


INIT_TEMPLATE = '''\
# tether.toml: configuration for the tether agent runtime.
# Layers, later wins: ~/.config/tether/config.toml -> ./tether.toml -> TETHER_* env -> flags.
# Unknown keys are rejected.

# Which [providers.NAME] entry `tether run` uses (override: --provider, TETHER_PROVIDER).
default_provider = "local"

# A local llama-server (`tether local serve` starts one on this port).
[providers.local]
kind = "openai-chat"            # openai-chat | openai-responses | anthropic | gemini
base_url = "http://127.0.0.1:8080/v1"
model = "qwen"
profile = "llama-server"        # llama-server | ollama | vllm | lmstudio | openrouter | openai
# api_key_env = "OPENAI_API_KEY" # the environment variable holding the key, if one is needed
# max_retries = 2               # 429/503/529 and connection errors are retried with backoff
# retry_after_cap_secs = 60     # a longer Retry-After fails at once, naming the wait

# [providers.claude]
# kind = "anthropic"
# model = "claude-sonnet-4-5"
# api_key_env = "ANTHROPIC_API_KEY"

[agent]
# system_prompt = "Be brief."
max_turns = 40
# max_output_tokens = 4000      # the run's output token budget

[tools]
# enabled = ["calculator", "read_file", "list_dir", "grep", "write_file", "edit_file", "fetch_url"]
# python = ["my_tools.py"]       # your own @tool functions (a file, or module:name)
# disabled = ["fetch_url"]
permission_mode = "ask"         # ask | allow | read-only

[security]
trifecta = "block"              # block | ask | allow: a send after private + untrusted data
block_private_ips = true        # fetch_url refuses loopback/private/link-local addresses
# allowed_domains = ["example.com"]
# blocked_domains = []
mark_untrusted_output = true

# [[subagents]]
# name = "rate_page"
# description = "Read a web page and rate its quality. Use for any URL the user gives."
# tools = ["fetch_url"]
# trusted_output = true
# answer_shape = ["low", "medium", "high"]

# [[mcp]]
# name = "files"
# command = "python"
# args = ["-m", "my_mcp_server"]
'''
