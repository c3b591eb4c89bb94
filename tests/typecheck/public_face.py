"""Every name the lazy faces export (``tether``, ``tether.providers``) is one a type checker
in strict mode sees as exported, and is the very object of its home module (checked by
``mypy --strict src tests/typecheck`` in CI; tests/test_seams.py checks the runtime side)."""

from __future__ import annotations

from typing import assert_type

import tether
import tether.providers
from tether import Agent, from_config, tool
from tether.agent import Agent as AgentHome
from tether.errors import RunRecord, TetherError
from tether.providers import OpenAIChat, Scripted
from tether.providers.openai_chat import OpenAIChat as OpenAIChatHome
from tether.result import RunResult

agent: AgentHome[None] = Agent(Scripted(["hi"]))
assert_type(tether.Agent(Scripted(["hi"])), AgentHome[None])
chat: OpenAIChatHome = OpenAIChat("http://127.0.0.1:8080/v1", "m")
assert_type(tether.providers.Scripted, type[Scripted])
assert callable(from_config) and callable(tool)


def _a_result_is_what_an_error_names(result: RunResult, error: TetherError) -> RunRecord:
    # An error names the run it ended by a protocol on its own floor; a RunResult is one.
    assert_type(error.result, RunRecord | None)
    return result
