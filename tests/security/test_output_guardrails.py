"""A blocking output guardrail against a compromised model that leaks what it read: every
answer it gives is judged before it is kept or shown. The key it read comes back as the
text of an answer, as text beside a tool call, as a structured answer's value, and streamed
token by token; in each case no copy of it reaches the result, the conversation, the
session store, an event or (streamed) a ``TextDelta`` a terminal would print. Each beside a
control where the answer holds nothing and arrives whole, in order.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.security.conftest import Compromised, instruction
from tether import (
    Agent,
    GuardrailTripped,
    OutputFailure,
    OutputSpec,
    SQLiteStore,
    secrets_in_answer,
)
from tether import events as ev
from tether.builtins import read_file
from tether.messages import ToolCall, ToolResult
from tether.providers import Reply, Scripted
from tether.providers.base import ModelRequest
from tether.result import RunResult
from tether.store import Session

AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
PROMPT = "Tidy up.\n" + instruction(("read_file", {"path": "keys.txt"}))


def _last_result(request: ModelRequest) -> str:
    return next(p.content for m in reversed(request.messages) for p in m.parts
                if isinstance(p, ToolResult))


def beside_a_call(request: ModelRequest) -> Reply:
    """Leaks the key as the text beside a harmless call."""
    if sum(isinstance(p, ToolResult) for m in request.messages for p in m.parts) > 1:
        return Reply(text="done")
    return Reply(text=f"Noting it: {_last_result(request)}",
                 calls=(ToolCall("c2", "read_file", '{"path": "keys.txt"}'),))


def as_the_answer(request: ModelRequest) -> Reply:
    """Leaks the key as the structured answer's value (the answering tool's arguments)."""
    if not any(isinstance(p, ToolResult) for m in request.messages for p in m.parts):
        return Reply(calls=(ToolCall("c1", "read_file", '{"path": "keys.txt"}'),))
    name = next(t.name for t in request.tools if t.name.startswith("summary_"))
    return Reply(calls=(ToolCall("c9", name, json.dumps({"text": _last_result(request)})),))


def in_the_text(request: ModelRequest) -> Reply:
    return Reply(text=f"Here it is: {_last_result(request)}")


def _world(tmp_path: Path, key: str) -> tuple[Path, SQLiteStore, Session]:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "keys.txt").write_text(f"aws_access_key_id = {key}\n")
    store = SQLiteStore(tmp_path / "sessions.db")
    return ws, store, Session.create(store)


async def _events(agent: Agent[Any], prompt: str, session: Session,
                  stream: bool) -> tuple[RunResult, list[ev.Event]]:
    """The run's result and every event a host saw (streamed: as they came)."""
    if stream:
        events = [e async for e in agent.stream(prompt, session=session)]
        [finished] = [e for e in events if isinstance(e, ev.RunFinished)]
        return finished.result, events
    with pytest.raises(GuardrailTripped) as tripped:
        await agent.run(prompt, session=session)
    result = tripped.value.result
    assert isinstance(result, RunResult)
    return result, list(result.events)


def _nowhere(tmp_path: Path, store: SQLiteStore, run: tuple[RunResult, list[ev.Event]]
             ) -> None:
    """The key is in no answer the run kept: no text delta, no response, not the result."""
    result, events = run
    assert isinstance(result.error, GuardrailTripped), result.stop_cause
    assert result.text == ""
    streamed = "".join(e.text for e in events if isinstance(e, ev.TextDelta))
    assert AWS_KEY not in streamed and "Here it" not in streamed and "Noting" not in streamed
    assert not any(isinstance(e, ev.ModelResponded) and AWS_KEY in str(e.message)
                   for e in events)
    assert not any(AWS_KEY in str(m) for m in result.conversation.messages
                   if m.role == "assistant")
    store.close()
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("sessions.db*"))
    assert b"Here it is" not in stored and b"Noting it" not in stored


@pytest.mark.parametrize("stream", [False, True], ids=["run", "stream"])
@pytest.mark.parametrize("leak", [in_the_text, beside_a_call], ids=lambda f: f.__name__)
async def test_a_leaked_key_in_any_answer_text_is_withheld_everywhere(
        tmp_path: Path, stream: bool, leak: Any) -> None:
    ws, store, session = _world(tmp_path, AWS_KEY)
    model = Scripted([Compromised(), leak], chunk_size=3)
    agent = Agent(model, [read_file], workspace=ws, hooks=[secrets_in_answer()])
    _nowhere(tmp_path, store, await _events(agent, PROMPT, session, stream))


async def test_a_leaked_key_as_a_structured_answers_value_is_withheld(tmp_path: Path) -> None:
    ws, store, _ = _world(tmp_path, AWS_KEY)
    spec = OutputSpec("summary", "A summary.", {
        "type": "object", "properties": {"text": {"type": "string"}},
        "required": ["text"]}).with_tools()
    agent = Agent(Scripted([as_the_answer] * 2), [read_file], workspace=ws,
                  hooks=[secrets_in_answer()])
    prepared = agent.prepare("Summarise keys.txt.", output=spec)
    with pytest.raises((GuardrailTripped, OutputFailure)) as failed:
        await prepared.output()
    result = failed.value.result
    assert result is not None and isinstance(result.error, GuardrailTripped)
    assert result.output is None
    assert not any(isinstance(e, ev.ToolFinished) and e.tool.startswith("summary_")
                   for e in result.events)
    store.close()


async def test_control_a_clean_structured_answer_passes_the_guardrail() -> None:
    spec = OutputSpec("summary", "A summary.", {
        "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})

    def answers(request: ModelRequest) -> Reply:
        name = next(t.name for t in request.tools if t.name.startswith("summary_"))
        return Reply(calls=(ToolCall("c1", name, '{"text": "all tidy"}'),))

    agent = Agent(Scripted([answers]), hooks=[secrets_in_answer()])
    report = await agent.prepare("Summarise.", output=spec).output()
    assert report.value == {"text": "all tidy"}


@pytest.mark.parametrize("guarded", [True, False], ids=["guarded", "unguarded"])
async def test_control_a_clean_streamed_answer_arrives_whole_and_in_order(guarded: bool) -> None:
    """With a blocking output guardrail the text arrives after its verdict, just before the
    response it belongs to; with none (or an advisory one) it streams as it comes."""
    hooks = [secrets_in_answer()] if guarded else [secrets_in_answer(blocking=False)]
    model = Scripted([Reply(text="nothing to see here, all tidy")], chunk_size=4)
    events = [e async for e in Agent(model, hooks=hooks).stream("hi")]
    deltas = [e for e in events if isinstance(e, ev.TextDelta)]
    assert "".join(d.text for d in deltas) == "nothing to see here, all tidy"
    assert len(deltas) > 1
    kinds = [type(e).__name__ for e in events]
    responded = kinds.index("ModelResponded")
    assert all(i < responded for i, kind in enumerate(kinds) if kind == "TextDelta")
    [finished] = [e for e in events if isinstance(e, ev.RunFinished)]
    assert finished.result.text == "nothing to see here, all tidy"


async def test_control_text_beside_a_clean_call_is_kept_and_the_call_runs(tmp_path: Path) -> None:
    ws, store, session = _world(tmp_path, "nothing secret here")
    model = Scripted([Compromised(), beside_a_call, beside_a_call])
    agent = Agent(model, [read_file], workspace=ws, hooks=[secrets_in_answer()])
    result = await agent.run(PROMPT, session=session)
    assert result.text == "done"
    assert [r.status for r in result.tool_calls] == ["ok", "ok"]
    assert any("Noting it" in m.text for m in result.conversation.messages)
    store.close()
