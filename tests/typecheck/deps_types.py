"""What mypy sees of typed dependencies (checked by ``mypy --strict src tests/typecheck`` in
CI, and by tests/test_deps.py): ``Agent[DepsT]``, ``run(deps=...)``, ``ToolContext[DepsT]``.
Positive checks only (``assert_type``); the wrong types are tests/test_deps.py's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import assert_type

# From the public face, as users write it: tether/__init__.py re-exports lazily, and names
# each export `X as X` for type checkers (public_face.py checks every one of them).
from tether import Agent, ToolContext, tool
from tether.providers import Scripted


@dataclass
class Db:
    url: str

    def lookup(self, key: str) -> str:
        return f"{self.url}/{key}"


@tool
def find(ctx: ToolContext[Db], key: str) -> str:
    """Find a key."""
    assert_type(ctx.deps, Db)
    return ctx.deps.lookup(key)


@tool
def plain(ctx: ToolContext, text: str) -> str:
    """A tool that takes no dependencies."""
    assert_type(ctx.deps, None)
    return text


async def runs() -> None:
    agent = Agent(Scripted(["x"]), [find], deps_type=Db)
    assert_type(agent, Agent[Db])
    await agent.run("find it", deps=Db("sqlite://"))
    annotated: Agent[Db] = Agent(Scripted(["x"]), [find])
    await annotated.run("find it", deps=Db("sqlite://"))
    bare = Agent(Scripted(["x"]), [plain])
    assert_type(bare, Agent[None])
    await bare.run("hi")
