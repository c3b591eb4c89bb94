"""One ``Agent``, many event loops: ``run_sync`` twice, ``asyncio.run`` twice, ``run_sync``
then ``asyncio.run`` with ``stream``, on every real adapter against a loopback server.

The HTTP client of an adapter is made on the loop of its first request; a later loop gets
a client of its own (the old one's connections died with their loop), and the copy
``with_model`` makes shares the switch.
"""

from __future__ import annotations

import asyncio
import gc
import json
import warnings

import pytest

from tests.faults.rawserver import RawServer, chunked, whole
from tests.providers.wires import WIRES, Wire
from tether.agent import Agent
from tether.events import RunFinished
from tether.outcome import StopCause
from tether.result import RunResult


def answer(srv: RawServer, wire: Wire, text: str, *, streamed: bool = False) -> None:
    if streamed:
        srv.queue(chunked(wire.sse([text]), content_type=wire.stream_type))
    else:
        srv.queue(whole(json.dumps(wire.body(text)).encode()))


async def streamed_run(agent: Agent, prompt: str) -> RunResult:
    last = None
    async for event in agent.stream(prompt):
        last = event
    assert isinstance(last, RunFinished)
    return last.result


@pytest.mark.parametrize("wire", sorted(WIRES))
def test_run_sync_twice_on_one_agent_answers_both_times(raw: RawServer, wire: str) -> None:
    agent = Agent(WIRES[wire].provider(raw.url))
    answer(raw, WIRES[wire], "one")
    answer(raw, WIRES[wire], "two")
    assert agent.run_sync("first").text == "one"
    assert agent.run_sync("second").text == "two"


@pytest.mark.parametrize("wire", sorted(WIRES))
def test_asyncio_run_twice_on_one_agent_answers_both_times(raw: RawServer, wire: str) -> None:
    agent = Agent(WIRES[wire].provider(raw.url))
    answer(raw, WIRES[wire], "one")
    answer(raw, WIRES[wire], "two")
    assert asyncio.run(agent.run("first")).text == "one"
    assert asyncio.run(agent.run("second")).text == "two"


@pytest.mark.parametrize("wire", sorted(WIRES))
def test_run_sync_then_a_stream_in_asyncio_run_answers_both(raw: RawServer, wire: str) -> None:
    agent = Agent(WIRES[wire].provider(raw.url))
    answer(raw, WIRES[wire], "one")
    answer(raw, WIRES[wire], "two", streamed=True)
    answer(raw, WIRES[wire], "three", streamed=True)
    assert agent.run_sync("first").text == "one"
    second = asyncio.run(streamed_run(agent, "second"))
    assert (second.stop_cause, second.text) == (StopCause.COMPLETED, "two")
    third = asyncio.run(streamed_run(agent, "third"))
    assert (third.stop_cause, third.text) == (StopCause.COMPLETED, "three")


@pytest.mark.parametrize("wire", sorted(WIRES))
def test_a_with_model_copy_follows_the_original_onto_a_new_loop(
        raw: RawServer, wire: str) -> None:
    provider = WIRES[wire].provider(raw.url)
    other = provider.with_model("m2")  # type: ignore[attr-defined]
    answer(raw, WIRES[wire], "one")
    answer(raw, WIRES[wire], "two")
    answer(raw, WIRES[wire], "three")
    assert Agent(provider).run_sync("first").text == "one"
    assert Agent(other).run_sync("second").text == "two"
    assert Agent(provider).run_sync("third").text == "three"
    assert other._transport is provider._transport  # type: ignore[attr-defined]


@pytest.mark.parametrize("wire", sorted(WIRES))
def test_closing_after_the_loop_of_the_last_request_ended_raises_nothing(
        raw: RawServer, wire: str) -> None:
    agent = Agent(WIRES[wire].provider(raw.url))
    answer(raw, WIRES[wire], "one")
    answer(raw, WIRES[wire], "two")
    assert agent.run_sync("first").text == "one"
    asyncio.run(agent.aclose())  # the client's loop is gone: nothing to await on it
    assert agent.run_sync("second").text == "two"  # closed, and opened again on demand
    asyncio.run(agent.aclose())


def unclosed_sockets(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "unclosed" in str(w.message)]


@pytest.mark.parametrize("wire", sorted(WIRES))
def test_run_sync_leaves_no_socket_open_behind_its_loop(raw: RawServer, wire: str) -> None:
    agent = Agent(WIRES[wire].provider(raw.url))
    answer(raw, WIRES[wire], "one")
    answer(raw, WIRES[wire], "two")
    gc.collect()  # what earlier tests left behind is not this test's
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        agent.run_sync("first")
        agent.run_sync("second")
        gc.collect()
    assert unclosed_sockets(caught) == []
