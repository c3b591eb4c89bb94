"""Every name the lazy faces export (``tether``, ``tether.providers``) is one a type checker
in strict mode sees as exported, and is the very object of its home module (checked by
``mypy --strict src tests/typecheck`` in CI; tests/test_seams.py checks the runtime side)."""

from __future__ import annotations

from typing import assert_type

import tether
import tether.providers
from tether import Agent, from_config, tool
from tether.agent import Agent as AgentHome
from tether.providers import OpenAIChat, Scripted
from tether.providers.openai_chat import OpenAIChat as OpenAIChatHome

agent: AgentHome[None] = Agent(Scripted(["hi"]))
assert_type(tether.Agent(Scripted(["hi"])), AgentHome[None])
chat: OpenAIChatHome = OpenAIChat("http://127.0.0.1:8080/v1", "m")
assert_type(tether.providers.Scripted, type[Scripted])
assert callable(from_config) and callable(tool)
