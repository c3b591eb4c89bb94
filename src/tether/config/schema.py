"""The shape of tether.toml: one strict pydantic model per section.

Unknown keys are rejected with their path, so a typo never silently does nothing.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tether.errors import ConfigError

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
    rule: Literal["provenance", "interlock"] = "provenance"
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
    # Where each layer came from, for `tether config show`.
    sources: list[str] = Field(default_factory=list, exclude=True)
    # tether's own files as every layer names them (config files, stores, caches, tool
    # files): the file tools may not change them. See tether.paths.
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

