"""Typed dependencies: ``agent.run(prompt, deps=...)`` hands the host's objects to its tools
(``ToolContext[MyDeps].deps``) and to nothing else: not the model, the session store,
telemetry or the result; mypy holds their types."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tether import Agent, ConfigError, OutputSpec, SubagentProfile, ToolContext, tool
from tether import events as ev
from tether.providers import Scripted, call
from tether.store import Session, SQLiteStore

ROOT = Path(__file__).parents[1]
TOKEN = "db-password-0f3c9a"


@dataclass
class Db:
    """A host's object the model must never see (its repr holds a secret)."""

    token: str
    rows: dict[str, str]


class Other:
    pass


@tool
def lookup(ctx: ToolContext[Db], key: str) -> str:
    """Look a key up in the database."""
    return ctx.deps.rows.get(key, "missing")


@tool
async def count(ctx: ToolContext[Db]) -> int:
    """Count the rows."""
    return len(ctx.deps.rows)


def db() -> Db:
    return Db(TOKEN, {"a": "apple"})


async def test_a_run_hands_its_deps_to_sync_and_async_tools() -> None:
    model = Scripted([call("lookup", key="a"), call("count"), "done"])
    agent = Agent(model, [lookup, count], deps_type=Db)
    result = await agent.run("look", deps=db())
    assert [(r.name, r.output) for r in result.tool_calls] == [("lookup", "apple"),
                                                               ("count", "1")]


async def test_deps_never_reach_the_model_the_store_the_events_or_telemetry(
        tmp_path: Path) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from tether import Instrumentation

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    model = Scripted([call("count"), "done"])
    store = SQLiteStore(tmp_path / "s.db")
    agent: Agent[Db] = Agent(model, [count], instrument=Instrumentation(tracer_provider=provider,
                                                            include_content=True))
    result = await agent.run("count", deps=db(), session=Session.create(store))
    assert result.tool_calls[0].output == "1"
    assert TOKEN not in repr(model.requests)
    assert TOKEN not in repr(result) and TOKEN not in repr(result.events)
    assert all(TOKEN not in json.dumps(ev.event_to_dict(e), default=str)
               for e in result.events)
    store.close()
    assert TOKEN.encode() not in b"".join(p.read_bytes() for p in tmp_path.glob("s.db*"))
    recorded = repr([(s.attributes, [e.attributes for e in s.events])
                     for s in spans.get_finished_spans()])
    assert "count" in recorded and TOKEN not in recorded
    provider.shutdown()


async def test_a_structured_run_a_stream_and_a_resume_hand_on_their_deps() -> None:
    from tether import Decision, DeferringApprover

    spec = OutputSpec("answer", "The fruit.", {"type": "object", "properties": {
        "fruit": {"type": "string"}}, "required": ["fruit"]}).with_tools()
    agent: Agent[Db] = Agent(Scripted([call("lookup", key="a"), lambda r: _answer(r)]),
                             [lookup])
    report = await agent.prepare("which fruit?", output=spec, deps=db()).output()
    assert report.value == {"fruit": "apple"}

    streamed: Agent[Db] = Agent(Scripted([call("lookup", key="a"), "done"]), [lookup])
    events = [e async for e in streamed.stream("look", deps=db())]
    assert [e.result.content for e in events if isinstance(e, ev.ToolFinished)] == ["apple"]

    gated = tool(needs_approval=True, name="gated_lookup")(_gated_lookup)
    paused_agent: Agent[Db] = Agent(Scripted([call("gated_lookup", key="a"), "done"]), [gated],
                                    approver=DeferringApprover())
    paused = await paused_agent.run("look", deps=db())
    resumed = await paused_agent.resume(paused.conversation,
                                        {paused.pending[0]: Decision.allow()}, deps=db())
    assert resumed.tool_calls[-1].output == "apple"


def _gated_lookup(ctx: ToolContext[Db], key: str) -> str:
    """Look a key up, with approval."""
    return ctx.deps.rows[key]


def _answer(request: Any) -> Any:
    from tether.messages import ToolCall
    from tether.providers import Reply

    [name] = [t.name for t in request.tools if t.name.startswith("answer")]
    return Reply(calls=(ToolCall("o1", name, json.dumps({"fruit": "apple"})),))


async def test_a_sub_agent_runs_with_its_parents_deps() -> None:
    child = Scripted([call("lookup", key="a"), "the child found apple"])
    profile = SubagentProfile("finder", "Finds keys.", tools=["lookup"], provider="kid")
    parent: Agent[Db] = Agent(Scripted([call("finder", task="find a"), "done"]), [lookup],
                              subagents=[profile], providers={"kid": child})
    result = await parent.run("delegate", deps=db())
    inner = [e for e in result.events if isinstance(e, ev.ToolFinished) and e.path]
    assert [e.result.content for e in inner] == ["apple"]


async def test_deps_of_another_type_are_refused_before_a_run_and_by_the_tool() -> None:
    agent = Agent(Scripted(["x"]), [lookup], deps_type=Db)
    with pytest.raises(ConfigError, match="deps must be a Db"):
        await agent.run("look", deps=Other())  # type: ignore[arg-type]
    untyped = Agent(Scripted([call("lookup", key="a"), "done"]), [lookup])
    result = await untyped.run("look", deps=Other())  # type: ignore[arg-type]
    [record] = result.tool_calls
    assert record.status == "error"
    assert "needs deps of type Db (ToolContext[Db]); the run was given Other" in record.output


NEGATIVE = '''
from tether.agent import Agent
from tether.providers.scripted import Scripted
from tether.tools.tool import ToolContext
from tests.typecheck.deps_types import Db

class Other:
    pass

async def wrong() -> None:
    agent = Agent(Scripted(["x"]), deps_type=Db)
    await agent.run("x", deps=Other())
    annotated: Agent[Db] = Agent(Scripted(["x"]))
    await annotated.run("x", deps="a string")
    await agent.stream("x", deps=1).__anext__()

def tool_body(ctx: ToolContext[Db]) -> None:
    ctx.deps.missing
'''


def test_mypy_holds_the_types_of_deps(tmp_path: Path) -> None:
    """mypy passes tests/typecheck/deps_types.py (its ``assert_type`` checks) and finds each
    wrong use of deps in a snippet: deps of another type, and a field a type lacks."""
    negative = tmp_path / "wrong_deps.py"
    negative.write_text(NEGATIVE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
           "MYPYPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary",
         "--cache-dir", str(ROOT / ".mypy_cache"), "tests/typecheck/deps_types.py",
         str(negative)], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert not [line for line in lines if "deps_types.py" in line], done.stdout
    wrong = sorted((int(line.split(":")[1]), line.rsplit("[", 1)[-1].rstrip("]"))
                   for line in lines if "wrong_deps.py" in line)
    assert wrong == [(12, "arg-type"), (14, "arg-type"), (15, "arg-type"),
                     (18, "attr-defined")], done.stdout + done.stderr
