"""A long tool-using session on a small real window (llama-server ``-c 2048``) keeps
answering: tether fits each request into the window the server reports (docs/context.md).

Measured on this model: after six turns the server holds 1,941 tokens of this session, so
without fitting the seventh turn passes the window (the server's "exceeds the available
context size") and so would every later one.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from tests.e2e.test_real_model import THREADS, _toolchain_or_skip
from tether import Agent, Conversation, tool
from tether import events as ev
from tether.local import SYSTEM_PROMPT, LocalServer
from tether.local.setup import default_cache_dir
from tether.providers.openai_chat import OpenAIChat

# On the real-model tests' worker (pytest-xdist --dist loadgroup), one server at a time.
pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module"),
              pytest.mark.xdist_group("real_model")]

WINDOW = 2048
# TETHER_E2E_CONTEXT_TURNS runs fewer, to try it out on a busy machine.
TURNS = int(os.environ.get("TETHER_E2E_CONTEXT_TURNS", "30"))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def small() -> AsyncIterator[LocalServer]:
    _toolchain_or_skip()
    async with LocalServer(port=0, cache_dir=default_cache_dir(), context=WINDOW,
                           threads=THREADS) as running:
        yield running


@tool
def read_record(n: int) -> str:
    """Read record number n from the archive.

    Args:
        n: The record's number.
    """
    # About 300 tokens: a few of these fill the window.
    return f"Record {n}: the code is K{n * 7}. " + "Archived notes follow. " * 50


async def test_a_thirty_turn_session_with_large_tool_results_keeps_answering(
        small: LocalServer) -> None:
    model = OpenAIChat(small.base_url, "qwen", profile="llama-server")
    conversation = Conversation()
    fitted: list[ev.ContextFitted] = []
    # max_output_tokens bounds each run's answer (a tiny model can ramble), and is the
    # reserve the fitting keeps free for it.
    async with Agent(model, [read_record], system_prompt=SYSTEM_PROMPT, max_turns=3,
                     max_output_tokens=64, temperature=0.0) as agent:
        for turn in range(TURNS):
            async for event in agent.stream(
                    f"What is the code of record {turn}? Use the read_record tool.",
                    conversation=conversation):
                if isinstance(event, ev.ContextFitted):
                    fitted.append(event)
                elif isinstance(event, ev.RunFinished):
                    result = event.result
            assert result.error is None, f"turn {turn}: {result.error}"
            assert result.stop_cause != "error", turn
    assert fitted and all(f.window == WINDOW for f in fitted)
    # The conversation is whole; only what was sent was fitted.
    assert sum(m.role == "user" for m in conversation.messages) == TURNS
    if TURNS == 30:
        assert max(f.tokens_before for f in fitted) > 2 * WINDOW
    assert all(f.tokens_after <= WINDOW for f in fitted)
    # The model kept using the tool to the end.
    assert result.tool_calls and result.tool_calls[0].name == "read_record"
