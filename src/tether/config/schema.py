"""The shape of tether.toml: one strict pydantic model per section.

Unknown keys are rejected with their path, so a typo never silently does nothing.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_serializer,
    model_validator,
)

from tether.display import mask_url
from tether.errors import ConfigError
from tether.settings import DEFAULT_DEFER_AFTER, DEFAULT_MAX_REPEATED_FAILURES, DEFAULT_MAX_TURNS

ProviderKind = Literal["openai-chat", "openai-responses", "anthropic", "gemini", "ollama"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _names_a_place(value: str) -> str:
    # "" would be the current folder to pathlib, or the default to a caller that reads it
    # with ``or``: either way not what was written, so it is refused, naming the key.
    if not value.strip():
        raise ValueError("an empty path names no file or folder; leave the key out for the "
                         "default")
    return value


# A file or folder named in the configuration (or a module, for [tools] python).
PathText = Annotated[str, AfterValidator(_names_a_place)]


class Prices(_Strict):
    input_per_mtok: float = 0.0
    output_per_mtok: float = 0.0


class ProviderConfig(_Strict):
    kind: ProviderKind = "openai-chat"
    base_url: str | None = None
    model: str
    api_key_env: str | None = None
    profile: str | None = None
    # The model's context window in tokens; unset: asked of the server, else the server
    # profile's default (see docs/context.md).
    context_window: int | None = Field(default=None, ge=256)
    max_retries: int = Field(default=2, ge=0)
    retry_after_cap_secs: float = Field(default=60.0, ge=0)
    timeout_secs: float = Field(default=600.0, gt=0)
    stream_idle_timeout_secs: float = Field(default=120.0, gt=0)
    headers: dict[str, str] = Field(default_factory=dict)
    prices: Prices | None = None
    # kind = "ollama" only: how long the server keeps the model loaded ("5m", "1h", -1),
    # and a thinking model's thinking on or off (or "low" / "medium" / "high").
    keep_alive: str | int | None = None
    think: bool | Literal["low", "medium", "high"] | None = None
    # The providers that answer, in order, when this one cannot (a connection error, an
    # overload, a server error, after its own retries); see docs/providers.md.
    fallback: list[str] = Field(default_factory=list)


class AgentConfig(_Strict):
    system_prompt: str | None = None
    max_turns: int = Field(default=DEFAULT_MAX_TURNS, ge=1)
    # How often one call (same tool, same arguments) may fail in a run before making it
    # again ends the run (tether.repeats); 0: never noticed.
    max_repeated_failures: int = Field(default=DEFAULT_MAX_REPEATED_FAILURES, ge=0)
    max_output_tokens: int | None = Field(default=None, ge=1)
    max_cost_usd: float | None = Field(default=None, gt=0)
    temperature: float | None = None
    approval_timeout_secs: float | None = Field(default=300.0, gt=0)
    tool_timeout_secs: float | None = Field(default=600.0, gt=0)
    output_retries: int = Field(default=2, ge=0)
    # How long one answer of a hook is waited for ([[hooks]]); past it the run ends.
    hook_timeout_secs: float | None = Field(default=30.0, gt=0)
    # How a conversation longer than the model's window is sent (docs/context.md), and
    # which [providers.NAME] writes summaries for "summarize" (unset: the agent's model).
    context: Literal["trim", "summarize", "off"] = "trim"
    context_summarizer: str | None = None


class ShellSection(_Strict):
    """``[tools.shell]``: command names the confined shell runs without a prompt, beside
    its read-only list (``tether.builtins.shell_policy``), when the whole line is simple."""

    allow: list[Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.+-]+$")]] = Field(
        default_factory=list)


class ToolsConfig(_Strict):
    enabled: list[str] | None = None  # None: the default built-ins
    disabled: list[str] = Field(default_factory=list)
    workspace: PathText | None = None
    permission_mode: Literal["ask", "allow", "read-only"] = "ask"
    # Your own @tool functions: files (relative to the workspace) or modules, as for --tools.
    python: list[PathText] = Field(default_factory=list)
    shell: ShellSection = Field(default_factory=ShellSection)
    # Past this many tools, a run offers search_tools instead of the large catalogue
    # (docs/extend.md, "Tool search"); [[mcp]] defer = true defers a server whatever the count.
    defer_after: int = Field(default=DEFAULT_DEFER_AFTER, ge=0)


class SkillsSection(_Strict):
    """``[skills]``: folders of skills (docs/extend.md, "Skills"). Named in your own config
    file (or by a flag) they hold your words; named by a project's tether.toml, outside
    text. ``untrusted``: folders whose skills are outside text wherever they are named (a
    download). ``~/.config/tether/skills`` is read too, as yours."""

    paths: list[PathText] = Field(default_factory=list)
    untrusted: list[PathText] = Field(default_factory=list)


class SecuritySection(_Strict):
    rule: Literal["provenance", "interlock"] = "provenance"
    trifecta: Literal["block", "ask", "allow"] = "block"
    block_private_ips: bool = True
    allowed_domains: list[str] = Field(default_factory=list)
    blocked_domains: list[str] = Field(default_factory=list)
    mark_untrusted_output: bool = True
    max_result_chars: int = Field(default=50_000, ge=100)
    endorse_destructive: bool = False


class SandboxSection(_Strict):
    """``[sandbox]``: how the ``shell`` built-in is confined (docs/security.md, "Sandbox")."""

    mode: Literal["auto", "bwrap", "landlock", "none"] = "auto"
    network: bool = False
    read: list[PathText] = Field(default_factory=list)  # more paths it may read
    write: list[PathText] = Field(default_factory=list)  # more paths it may write
    env: list[str] = Field(default_factory=list)  # more environment variables it gets


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
    read_only: bool = False


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
    # Literal header values (a secret is better in headers_env, or as ${VAR} with
    # expand_env); `tether config show` prints them as ***.
    headers: dict[str, str] = Field(default_factory=dict)
    # ${VAR} and ${VAR:-default} in command, args, env, url and headers are read from the
    # environment when the server is built (servers imported from a JSON file).
    expand_env: bool = False
    # The JSON file the server was imported from ([[mcp]] file = ...), for messages.
    source_file: str | None = None
    prefix_tools: bool = True
    disabled: bool = False
    timeout_secs: float = Field(default=60.0, gt=0)
    capabilities: McpCapabilities = Field(default_factory=McpCapabilities)
    # Whether the server's own text (tool descriptions, titles, schemas) is trusted;
    # unset: a stdio server is, a remote (url) one is not.
    trusted: bool | None = None
    # true: its tools wait until the model finds them with search_tools; false: always
    # offered; unset: as [tools] defer_after decides.
    defer: bool | None = None
    # "oauth": sign in with OAuth 2.1 (discovery, PKCE, a loopback redirect); `scope` is
    # what is asked for (default: what the server's metadata says).
    auth: Literal["oauth"] | None = None
    scope: str | None = None
    # A stdio server runs confined ([sandbox] mode picks how): it writes its working folder
    # and `write`, reads all but the secrets, and reaches the network unless network = false.
    sandbox: bool = True
    network: bool = True
    read: list[PathText] = Field(default_factory=list)
    write: list[PathText] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_transport(self) -> McpSection:
        if (self.command is None) == (self.url is None):
            raise ValueError(f"mcp server {self.name!r} needs either command (stdio) or url "
                             f"(streamable HTTP), not both or neither")
        if self.headers and self.url is None:
            raise ValueError(f"mcp server {self.name!r}: headers are for a url server")
        if (self.auth is not None or self.scope is not None) and self.url is None:
            raise ValueError(f"mcp server {self.name!r}: auth and scope are for a url server")
        if self.scope is not None and self.auth is None:
            raise ValueError(f"mcp server {self.name!r}: scope needs auth = \"oauth\"")
        return self

    @field_serializer("headers", when_used="json")
    def _masked_headers(self, headers: dict[str, str]) -> dict[str, str]:
        # `tether config show` prints the JSON form: a header is often a key. A ${VAR}
        # reference is shown, it holds no secret.
        return {k: v if v.startswith("${") and v.endswith("}") else "***"
                for k, v in headers.items()}


class A2ASection(_Strict):
    """A remote agent (Agent2Agent protocol) the model can delegate to: ``[[a2a]]``."""

    name: str
    url: str
    description: str = ""
    answer_shape: str | list[str] | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    headers_env: dict[str, str] = Field(default_factory=dict)
    token_env: str | None = None
    timeout_secs: float = Field(default=120.0, gt=0)
    max_bytes: int = Field(default=2_000_000, gt=0)
    max_events: int = Field(default=1_000, gt=0)

    @field_serializer("headers", when_used="json")
    def _masked_headers(self, headers: dict[str, str]) -> dict[str, str]:
        return dict.fromkeys(headers, "***")


class A2AServerSection(_Strict):
    """tether's own A2A endpoint (``tether.a2a_server``): what its card says, which
    callers' messages are the user's words, how long a task waits for the owner."""

    name: str = "tether"
    description: str = "A tether agent."
    # Environment variables each holding a bearer token whose caller is trusted: that
    # caller's message is the user's words. Any other caller's message is outside text.
    trusted_tokens_env: list[str] = Field(default_factory=list)
    # How long a task waiting for the owner's approval holds its stream open; after that it
    # stays input-required, and a message to it looks again.
    owner_wait_secs: float = Field(default=3600.0, gt=0)


class StoreSection(_Strict):
    """Where sessions live: a SQLite file (``path``, the default) or a PostgreSQL database
    that many processes and machines share (``url = "postgresql://user@host:5432/db"``)."""

    path: PathText | None = None
    url: str | None = Field(default=None, repr=False)  # it may hold a password

    @model_validator(mode="after")
    def _one_store(self) -> StoreSection:
        if self.path is not None and self.url is not None:
            raise ValueError("set path (a SQLite file) or url (a PostgreSQL database), not both")
        if self.url is not None and not self.url.lower().startswith(("postgresql://",
                                                                     "postgres://")):
            # The value is not repeated: it may hold a password.
            raise ValueError("url must be a PostgreSQL URL: postgresql://user@host:5432/db")
        return self

    @field_serializer("url", when_used="json")
    def _masked(self, url: str | None) -> str | None:
        # `tether config show` prints the JSON form: never a password.
        return None if url is None else mask_url(url)


class LocalSection(_Strict):
    cache_dir: PathText | None = None
    model_path: PathText | None = None
    port: int = 8080


class TelemetrySection(_Strict):
    """OpenTelemetry spans and metrics of every run (docs/telemetry.md)."""

    enabled: bool = False
    # Prompts, answers, tool arguments and results on the spans: off, they may be private.
    include_content: bool = False
    agent_name: str = Field(default="tether", min_length=1)


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
    blob_dir: PathText | None = None
    # Messages at least this large travel by reference, not inline in workflow history.
    inline_limit_bytes: int = Field(default=16 * 1024, ge=0)


class HookSection(_Strict):
    # A hook (docs/extend.md): a Python callable named as [tools] python names tools, a file
    # (relative to the workspace) or a module, with the name after a colon: "hooks.py:audit",
    # "tether.guardrails:secrets_in_answer". A class or function is called with no
    # arguments to make the hook. Loading it runs the file: it is tether's own, as a tool
    # file is (the file tools may not change it).
    python: PathText


class Config(_Strict):
    default_provider: str = "local"
    providers: dict[str, ProviderConfig] = Field(default_factory=dict)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    security: SecuritySection = Field(default_factory=SecuritySection)
    sandbox: SandboxSection = Field(default_factory=SandboxSection)
    subagents: list[SubagentSection] = Field(default_factory=list)
    mcp: list[McpSection] = Field(default_factory=list)
    a2a: list[A2ASection] = Field(default_factory=list)
    a2a_server: A2AServerSection = Field(default_factory=A2AServerSection)
    hooks: list[HookSection] = Field(default_factory=list)
    skills: SkillsSection = Field(default_factory=SkillsSection)
    store: StoreSection = Field(default_factory=StoreSection)
    local: LocalSection = Field(default_factory=LocalSection)
    telemetry: TelemetrySection = Field(default_factory=TelemetrySection)
    temporal: TemporalSection = Field(default_factory=TemporalSection)
    # Where each layer came from, for `tether config show`.
    sources: list[str] = Field(default_factory=list, exclude=True)
    # tether's own files as every layer names them (config files, stores, caches, tool
    # files): the file tools may not change them. See tether.paths.
    own_files: list[str] = Field(default_factory=list, exclude=True)
    # The folders of skills every layer names, each with whether it is the user's (trusted):
    # the user's file, flags and ~/.config/tether/skills are; the project's file is not.
    skill_folders: list[tuple[str, bool]] = Field(default_factory=list, exclude=True)

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

