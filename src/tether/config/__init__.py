"""tether.toml: providers, agent, tools, security, sub-agents, MCP servers, store, telemetry.

Layers, later wins: built-in defaults -> the user file (~/.config/tether/config.toml) ->
./tether.toml in the workspace -> TETHER_* environment variables -> flags. Unknown keys are
rejected with their path, so a typo never silently does nothing.

- ``schema``: the sections as strict pydantic models (``Config``);
- ``layers``: reading and merging the layers (``load_config``);
- ``build``: the runtime they describe (``agent_from_config``, ``build_provider``,
  ``servers_from_config``);
- ``tool_files``: ``[tools] python`` / ``--tools`` references;
- ``template``: what ``tether config init`` writes.
"""

from __future__ import annotations

from tether.config.build import (
    agent_from_config,
    build_provider,
    security_from,
    servers_from_config,
)
from tether.config.layers import load_config, user_config_path
from tether.config.schema import (
    DEFAULTS,
    AgentConfig,
    Config,
    LocalSection,
    McpCapabilities,
    McpSection,
    Prices,
    ProviderConfig,
    ProviderKind,
    SecuritySection,
    StoreSection,
    SubagentSection,
    TelemetrySection,
    TemporalSection,
    ToolsConfig,
)
from tether.config.template import INIT_TEMPLATE

__all__ = [
    "DEFAULTS",
    "INIT_TEMPLATE",
    "AgentConfig",
    "Config",
    "LocalSection",
    "McpCapabilities",
    "McpSection",
    "Prices",
    "ProviderConfig",
    "ProviderKind",
    "SecuritySection",
    "StoreSection",
    "SubagentSection",
    "TelemetrySection",
    "TemporalSection",
    "ToolsConfig",
    "agent_from_config",
    "build_provider",
    "load_config",
    "security_from",
    "servers_from_config",
    "user_config_path",
]
