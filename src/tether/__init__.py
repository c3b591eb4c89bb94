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

from tether.version import __version__ as __version__

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
    "A2AAgent": "tether.a2a.remote",
    "McpServer": "tether.mcp.server",
    "Message": "tether.messages",
    "Usage": "tether.messages",
    "TetherError": "tether.errors",
    "ConfigError": "tether.errors",
    "ToolError": "tether.errors",
    "A2AError": "tether.errors",
    "A2ALimitError": "tether.errors",
    "ProviderError": "tether.errors",
    "OutputFailure": "tether.errors",
    "HookError": "tether.errors",
    "GuardrailTripped": "tether.errors",
    "ModelRetry": "tether.errors",
    "SandboxUnavailable": "tether.errors",
    "Sandbox": "tether.sandbox",
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
    # Each name re-exported explicitly (`X as X`), so a type checker in strict mode
    # reads `from tether import Agent` as the public name it is.
    from tether.agent import Agent as Agent
    from tether.approval import AllowAll as AllowAll
    from tether.approval import ApprovalRequest as ApprovalRequest
    from tether.approval import Approver as Approver
    from tether.approval import Decision as Decision
    from tether.approval import DenyAll as DenyAll
    from tether.approval import ElicitationAnswer as ElicitationAnswer
    from tether.approval import ElicitationRequest as ElicitationRequest
    from tether.approval import FormField as FormField
    from tether.approval import TurnApprovalRequest as TurnApprovalRequest
    from tether.approval import TurnApprover as TurnApprover
    from tether.batch import run_batch as run_batch
    from tether.config.build import agent_from_config as _agent_from_config

    from_config = _agent_from_config  # a renamed import is not an export to mypy; a name is
    from tether.a2a.remote import A2AAgent as A2AAgent
    from tether.conversation import Conversation as Conversation
    from tether.conversation import PendingCall as PendingCall
    from tether.conversation import SessionLike as SessionLike
    from tether.errors import A2AError as A2AError
    from tether.errors import A2ALimitError as A2ALimitError
    from tether.errors import ConfigError as ConfigError
    from tether.errors import GuardrailTripped as GuardrailTripped
    from tether.errors import HookError as HookError
    from tether.errors import ModelRetry as ModelRetry
    from tether.errors import OutputFailure as OutputFailure
    from tether.errors import ProviderError as ProviderError
    from tether.errors import SandboxUnavailable as SandboxUnavailable
    from tether.errors import TetherError as TetherError
    from tether.errors import ToolError as ToolError
    from tether.fields import Secret as Secret
    from tether.fields import WrittenBy as WrittenBy
    from tether.guardrails import InputGuardrail as InputGuardrail
    from tether.guardrails import OutputGuardrail as OutputGuardrail
    from tether.guardrails import secrets_in_answer as secrets_in_answer
    from tether.mcp.server import McpServer as McpServer
    from tether.messages import Message as Message
    from tether.messages import Text as Text
    from tether.messages import Usage as Usage
    from tether.messages import Writer as Writer
    from tether.outcome import StopCause as StopCause
    from tether.output import OutputReport as OutputReport
    from tether.output import OutputReservation as OutputReservation
    from tether.output import OutputSpec as OutputSpec
    from tether.output import PreparedRun as PreparedRun
    from tether.result import RunResult as RunResult
    from tether.result import ToolCallRecord as ToolCallRecord
    from tether.run.hooks import AmendRequest as AmendRequest
    from tether.run.hooks import AskApproval as AskApproval
    from tether.run.hooks import CallView as CallView
    from tether.run.hooks import Flag as Flag
    from tether.run.hooks import Hook as Hook
    from tether.run.hooks import RefuseCall as RefuseCall
    from tether.run.hooks import RequestView as RequestView
    from tether.run.hooks import ResultView as ResultView
    from tether.run.hooks import RewriteResult as RewriteResult
    from tether.run.hooks import RunEnd as RunEnd
    from tether.run.pending import DeferringApprover as DeferringApprover
    from tether.run.pending import PendingState as PendingState
    from tether.sandbox import Sandbox as Sandbox
    from tether.settings import AgentSettings as AgentSettings
    from tether.settings import ContextConfig as ContextConfig
    from tether.settings import Prices as Prices
    from tether.store.postgres import PostgresStore as PostgresStore
    from tether.store.session import Session as Session
    from tether.store.sqlite import SQLiteStore as SQLiteStore
    from tether.subagents import SubagentProfile as SubagentProfile
    from tether.telemetry import Instrumentation as Instrumentation
    from tether.tools.function import tool as tool
    from tether.tools.spec import ToolSpec as ToolSpec
    from tether.tools.spec import humanize_tool_name as humanize_tool_name
    from tether.tools.tool import Tool as Tool
    from tether.tools.tool import ToolContext as ToolContext
    from tether.tools.tool import ToolOutput as ToolOutput
    from tether.tools.toolsets import Toolset as Toolset
    from tether.trust import AnswerShape as AnswerShape
    from tether.trust import Capabilities as Capabilities
    from tether.trust import SecurityConfig as SecurityConfig
    from tether.trust import Taint as Taint
    from tether.trust import outside_text as outside_text
