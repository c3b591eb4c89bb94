"""A process that runs an agent on a stored session, for tests/test_store_conformance.py.

``python tests/store_child.py SCENARIO STORE [ARGS...]``; STORE is a SQLite file or a
PostgreSQL URL. It prints progress lines the test waits on (flushed at once), and some
scenarios block for ever so the test can kill them.

- ``kill-during-tools STORE``: one turn calls ``read_secret`` (private) and ``slow_fetch``
  (untrusted, never finishes); prints ``tool-finished read_secret`` while ``slow_fetch``
  still runs.
- ``kill-during-model STORE``: ``read_secret`` runs, then the model streams part of an
  answer and stalls; prints ``model-streaming``.
- ``pause STORE``: a gated ``delete_note`` is deferred; the process exits after the pause.
- ``writer STORE NAME RUNS``: waits for ``go`` on stdin, then runs RUNS short runs, each on
  a new session, printing ``done NAME`` at the end.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator

from tether import Agent, Capabilities, tool
from tether.events import TextDelta, ToolFinished
from tether.providers.base import ModelRequest, StreamChunk, TextChunk
from tether.providers.scripted import Scripted, call, calls
from tether.run.pending import DeferringApprover
from tether.store import Session, SessionStore, SQLiteStore
from tether.store.postgres import PostgresStore, is_postgres_url


def say(line: str) -> None:
    print(line, flush=True)


@tool(capabilities=Capabilities(private_data=True))
def read_secret() -> str:
    """Read the user's secret note."""
    return "the vault code is 0417"


# Not a sender: beside read_secret in one turn a sender would be armed and refused by the
# trifecta check instead of running (and blocking) as this scenario needs.
@tool(capabilities=Capabilities(untrusted_input=True))
async def slow_fetch(url: str) -> str:
    """Fetch a page (never finishes here)."""
    await asyncio.Event().wait()
    return "unreachable"


@tool(needs_approval=True, capabilities=Capabilities(destructive=True))
def delete_note(name: str) -> str:
    """Delete a note."""
    return f"deleted {name}"


class StallingModel:
    """Plays ``first`` scripted turns, then streams a partial answer and stalls for ever."""

    name = "scripted"
    model = "stalling"

    def __init__(self, first: Scripted) -> None:
        self.first = first
        self.turn = 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        self.turn += 1
        if self.first.remaining:
            async for chunk in self.first.stream(request):
                yield chunk
            return
        yield TextChunk("The vault code is")
        await asyncio.Event().wait()  # stalls until the process is killed

    async def aclose(self) -> None:
        return None


async def kill_during_tools(store: SessionStore) -> None:
    session = Session.create(store, provider="scripted", model="scripted", title="tools")
    say(f"session {session.id}")
    model = Scripted([calls(("read_secret", {}, "c1"), ("slow_fetch", {"url": "http://x"}, "c2"))])
    agent = Agent(model, tools=[read_secret, slow_fetch])
    async for event in agent.stream("Read my secret and fetch the page", session=session):
        if isinstance(event, ToolFinished):
            say(f"tool-finished {event.tool}")


async def kill_during_model(store: SessionStore) -> None:
    session = Session.create(store, provider="scripted", model="scripted", title="model")
    say(f"session {session.id}")
    agent = Agent(StallingModel(Scripted([call("read_secret", id="c1")])), tools=[read_secret])
    async for event in agent.stream("What is my vault code?", session=session):
        if isinstance(event, TextDelta):
            say("model-streaming")


async def pause(store: SessionStore) -> None:
    session = Session.create(store, provider="scripted", model="scripted", title="pause")
    say(f"session {session.id}")
    model = Scripted([call("read_secret", id="c1"), call("delete_note", name="old", id="c2")])
    agent = Agent(model, tools=[read_secret, delete_note], approver=DeferringApprover())
    result = await agent.run("Read the secret, then delete the old note", session=session)
    say(f"stopped {result.stop_cause} {','.join(p.call_id for p in result.pending)}")


async def writer(store: SessionStore, name: str, runs: int) -> None:
    say(f"ready {name}")
    assert sys.stdin.readline().strip() == "go"
    for n in range(runs):
        session = Session.create(store, provider="scripted", model="scripted",
                                 title=f"{name} {n}")
        model = Scripted([call("read_secret"), f"{name} answer {n}"])
        await Agent(model, tools=[read_secret]).run(f"{name} prompt {n}", session=session)
    say(f"done {name}")


def main() -> None:
    scenario, target, *rest = sys.argv[1:]
    store: SessionStore = PostgresStore(target) if is_postgres_url(target) \
        else SQLiteStore(target)
    try:
        if scenario == "kill-during-tools":
            asyncio.run(kill_during_tools(store))
        elif scenario == "kill-during-model":
            asyncio.run(kill_during_model(store))
        elif scenario == "pause":
            asyncio.run(pause(store))
        elif scenario == "writer":
            asyncio.run(writer(store, rest[0], int(rest[1])))
        else:
            raise SystemExit(f"unknown scenario {scenario}")
    finally:
        store.close()


if __name__ == "__main__":
    main()
