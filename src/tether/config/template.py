"""The commented tether.toml `tether config init` writes."""

INIT_TEMPLATE = '''\
# tether.toml: configuration for the tether agent runtime.
# Layers, later wins: ~/.config/tether/config.toml -> ./tether.toml -> TETHER_* env -> flags.
# Unknown keys are rejected.

# Which [providers.NAME] entry `tether run` uses (override: --provider, TETHER_PROVIDER).
default_provider = "local"

# A local llama-server (`tether local serve` starts one on this port).
[providers.local]
kind = "openai-chat"            # openai-chat | openai-responses | anthropic | gemini | ollama
base_url = "http://127.0.0.1:8080/v1"
model = "qwen"
profile = "llama-server"        # llama-server | ollama | vllm | lmstudio | openrouter | openai
# api_key_env = "OPENAI_API_KEY" # the environment variable holding the key, if one is needed
# context_window = 4096         # tokens; unset: asked of the server (docs/context.md)
# max_retries = 2               # 429/503/529 and connection errors are retried with backoff
# retry_after_cap_secs = 60     # a longer Retry-After fails at once, naming the wait

# [providers.claude]
# kind = "anthropic"
# model = "claude-sonnet-4-5"
# api_key_env = "ANTHROPIC_API_KEY"

[agent]
# system_prompt = "Be brief."
max_turns = 20                  # model turns per run (the README says why 20)
max_repeated_failures = 3       # a call failing this often: told, then the run ends; 0: off
# max_output_tokens = 4000      # the run's output token budget
context = "trim"                # trim | summarize | off: a conversation longer than the window

[tools]
# enabled = ["calculator", "read_file", "list_dir", "grep", "write_file", "edit_file", "fetch_url"]
# python = ["my_tools.py"]       # your own @tool functions (a file, or module:name)
# disabled = ["fetch_url"]
permission_mode = "ask"         # ask | allow | read-only

[security]
rule = "provenance"             # provenance | interlock: how a send or destructive call is judged
trifecta = "block"              # block | ask | allow: a call the rule distrusts
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
# Or every server of a Claude Desktop style file ({"mcpServers": {...}}), untrusted unless
# trusted = true (docs/mcp.md):
# [[mcp]]
# file = "~/.config/Claude/claude_desktop_config.json"

# OpenTelemetry spans and metrics of every run (pip install 'tether[otel]'); `tether run`,
# `chat` and `batch` export them over OTLP as OTEL_EXPORTER_OTLP_* say (docs/telemetry.md).
# [telemetry]
# enabled = true
# include_content = false       # prompts, answers, tool arguments and results on the spans
'''
