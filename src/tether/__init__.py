"""tether: an agent runtime for tool-using LLM applications that keeps every agent on a tether.

::

    from tether import Agent, tool
    from tether.providers import OpenAIChat

    @tool
    def add(a: int, b: int) -> int:
        \"\"\"Add two integers.\"\"\"
        return a + b

    agent = Agent(model=OpenAIChat(base_url="http://127.0.0.1:8080/v1", model="qwen"),
                  tools=[add])
    result = agent.run_sync("What is 2+3?")

Public names are imported lazily, so ``import tether`` stays cheap.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "Agent": "tether.agent",
    "Conversation": "tether.conversation",
    "ContextConfig": "tether.settings",
    "RunResult": "tether.result",
    "StopCause": "tether.outcome",
    "ToolCallRecord": "tether.result",
    "PendingCall": "tether.conversation",
    "SessionLike": "tether.conversation",
    "Prices": "tether.settings",
    "AgentSettings": "tether.settings",
    "tool": "tether.tools.function",
    "Tool": "tether.tools.tool",
    "ToolSpec": "tether.tools.spec",
    "ToolContext": "tether.tools.tool",
    "ToolOutput": "tether.tools.tool",
    "Toolset": "tether.tools.toolsets",
    "humanize_tool_name": "tether.tools.spec",
    "Capabilities": "tether.trust",
    "Taint": "tether.trust",
    "SecurityConfig": "tether.trust",
    "AnswerShape": "tether.trust",
    "outside_text": "tether.trust",
    "WrittenBy": "tether.fields",
    "Secret": "tether.fields",
    "Writer": "tether.messages",
    "Text": "tether.messages",
    "Approver": "tether.approval",
    "ApprovalRequest": "tether.approval",
    "TurnApprover": "tether.approval",
    "TurnApprovalRequest": "tether.approval",
    "Decision": "tether.approval",
    "AllowAll": "tether.approval",
    "DenyAll": "tether.approval",
    "ElicitationRequest": "tether.approval",
    "ElicitationAnswer": "tether.approval",
    "FormField": "tether.approval",
    "OutputSpec": "tether.output",
    "OutputReservation": "tether.output",
    "OutputReport": "tether.output",
    "PreparedRun": "tether.output",
    "SubagentProfile": "tether.subagents",
    "McpServer": "tether.mcp.server",
    "Message": "tether.messages",
    "Usage": "tether.messages",
    "TetherError": "tether.errors",
    "ConfigError": "tether.errors",
    "ToolError": "tether.errors",
    "ProviderError": "tether.errors",
    "OutputFailure": "tether.errors",
    "HookError": "tether.errors",
    "GuardrailTripped": "tether.errors",
    "ModelRetry": "tether.errors",
    "Hook": "tether.run.hooks",
    "RequestView": "tether.run.hooks",
    "CallView": "tether.run.hooks",
    "ResultView": "tether.run.hooks",
    "RunEnd": "tether.run.hooks",
    "Flag": "tether.run.hooks",
    "AmendRequest": "tether.run.hooks",
    "RefuseCall": "tether.run.hooks",
    "AskApproval": "tether.run.hooks",
    "RewriteResult": "tether.run.hooks",
    "InputGuardrail": "tether.guardrails",
    "OutputGuardrail": "tether.guardrails",
    "secrets_in_answer": "tether.guardrails",
    "Session": "tether.store.session",
    "SQLiteStore": "tether.store.sqlite",
    "PostgresStore": "tether.store.postgres",
    "PendingState": "tether.run.pending",
    "DeferringApprover": "tether.run.pending",
    "run_batch": "tether.batch",
    "Instrumentation": "tether.telemetry",
    # An agent as tether.toml describes it (the configuration's, above the core).
    "from_config": "tether.config.build:agent_from_config",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    home = _EXPORTS.get(name)
    if home is None:
        raise AttributeError(f"module 'tether' has no attribute {name!r}")
    module, _, attribute = home.partition(":")
    value = getattr(import_module(module), attribute or name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


if TYPE_CHECKING:
    from tether.agent import Agent
    from tether.approval import (
        AllowAll,
        ApprovalRequest,
        Approver,
        Decision,
        DenyAll,
        ElicitationAnswer,
        ElicitationRequest,
        FormField,
        TurnApprovalRequest,
        TurnApprover,
    )
    from tether.batch import run_batch
    from tether.config.build import agent_from_config as from_config
    from tether.conversation import Conversation, PendingCall, SessionLike
    from tether.errors import (
        ConfigError,
        GuardrailTripped,
        HookError,
        ModelRetry,
        OutputFailure,
        ProviderError,
        TetherError,
        ToolError,
    )
    from tether.fields import Secret, WrittenBy
    from tether.guardrails import InputGuardrail, OutputGuardrail, secrets_in_answer
    from tether.mcp.server import McpServer
    from tether.messages import Message, Text, Usage, Writer
    from tether.outcome import StopCause
    from tether.output import OutputReport, OutputReservation, OutputSpec, PreparedRun
    from tether.result import RunResult, ToolCallRecord
    from tether.run.hooks import (
        AmendRequest,
        AskApproval,
        CallView,
        Flag,
        Hook,
        RefuseCall,
        RequestView,
        ResultView,
        RewriteResult,
        RunEnd,
    )
    from tether.run.pending import DeferringApprover, PendingState
    from tether.settings import AgentSettings, ContextConfig, Prices
    from tether.store.postgres import PostgresStore
    from tether.store.session import Session
    from tether.store.sqlite import SQLiteStore
    from tether.subagents import SubagentProfile
    from tether.telemetry import Instrumentation
    from tether.tools.function import tool
    from tether.tools.spec import ToolSpec, humanize_tool_name
    from tether.tools.tool import Tool, ToolContext, ToolOutput
    from tether.tools.toolsets import Toolset
    from tether.trust import AnswerShape, Capabilities, SecurityConfig, Taint, outside_text
