"""Tool arguments nested too deep: a correctable error for the model, like any malformed
call, on every path that reads what the model wrote (the gate, records, the session store,
events, the terminal, and the next request to each provider)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from tests.conftest import statuses
from tests.servers.http import Canned, LoopbackServer
from tests.test_anthropic import message_json
from tests.test_cli import completion
from tests.test_gemini import answer as gemini_answer
from tests.test_openai_responses import message_item, response
from tether import Agent, Conversation, Tool, tool
from tether import events as ev
from tether.cli.render import EventRenderer
from tether.messages import MAX_ARGUMENT_DEPTH, Message, ToolCall, ToolResult
from tether.output import OutputSpec
from tether.providers import Reply, Scripted, call
from tether.providers.base import ModelRequest
from tether.store import Session, SQLiteStore


@tool
def take(value: Any = None) -> str:
    """Takes any JSON value."""
    return "taken"


def arrays(depth: int) -> str:
    return "[" * depth + "]" * depth


def objects(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


def inside_an_object(depth: int) -> str:
    return '{"value": ' + arrays(depth - 1) + "}"


DEEP = {
    "arrays just past the limit": arrays(MAX_ARGUMENT_DEPTH + 1),
    "objects past the limit": objects(MAX_ARGUMENT_DEPTH + 10),
    "a field nested under Python's recursion limit": inside_an_object(900),
    "arrays far past the recursion limit": arrays(100_000),
    "objects far past the recursion limit": objects(50_000),
    "unclosed": "[" * 200_000,
    "mixed": '{"a": [{"b": [' * 3_000,
}


@pytest.mark.parametrize("raw", DEEP.values(), ids=DEEP.keys())
async def test_arguments_nested_too_deep_are_a_correctable_error(raw: str) -> None:
    model = Scripted([call("take", raw), call("take", {"value": [[1]]}), "done"])
    result = await Agent(model, tools=[take]).run("go")
    assert result.stop_cause == "completed" and result.text == "done"
    assert statuses(result) == ["invalid_args", "ok"]
    assert result.malformed_tool_args == 1
    told = model.requests[1].messages[-1].parts[0]
    assert isinstance(told, ToolResult) and told.is_error
    assert told.content.startswith("Error: the arguments are not valid JSON")
    assert "Call take again with corrected arguments" in told.content
    json.dumps(result.to_dict())
    for event in result.events:
        json.dumps(ev.event_to_dict(event))


def test_arguments_at_the_depth_limit_still_run() -> None:
    model = Scripted([call("take", inside_an_object(MAX_ARGUMENT_DEPTH)), "done"])
    result = Agent(model, tools=[take]).run_sync("go")
    assert statuses(result) == ["ok"]


async def test_too_deep_arguments_for_a_json_schema_tool_are_a_correctable_error() -> None:
    async def handler(arguments: dict[str, Any], ctx: Any) -> str:
        return "ran"

    node = {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}}
    schema = {"type": "object", "properties": {"root": {"$ref": "#/$defs/node"}},
              "$defs": {"node": node}}
    tree = Tool.from_schema("tree", "Takes a tree.", schema, handler)
    model = Scripted([call("tree", '{"root": ' + objects(5_000) + "}"), "done"])
    result = await Agent(model, tools=[tree]).run("go")
    assert statuses(result) == ["invalid_args"] and result.text == "done"


async def test_a_too_deep_structured_answer_is_asked_for_again() -> None:
    spec = OutputSpec("verdict", "The verdict.", {"type": "object",
                                                  "properties": {"ok": {"type": "boolean"}},
                                                  "required": ["ok"]})

    def answer(arguments: dict[str, Any] | str) -> Any:
        def reply(request: ModelRequest) -> Reply:  # the answering tool's name is generated
            return call(next(t.name for t in request.tools), arguments)
        return reply

    model = Scripted([answer(objects(10_000)), answer({"ok": True})])
    report = await Agent(model).prepare("judge", output=spec).output()
    assert report.value == {"ok": True}
    assert report.result.malformed_tool_args == 1


async def test_a_too_deep_call_is_stored_with_its_session_and_shown_in_the_terminal(
        tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "sessions.db")
    session = Session.create(store)
    err = io.StringIO()
    renderer = EventRenderer(out=io.StringIO(),
                             err=Console(file=err, force_terminal=False, width=200))
    model = Scripted([call("take", arrays(20_000)), "done"])
    async for event in Agent(model, tools=[take]).stream("go", session=session):
        renderer(event)
    reloaded = Session.load(session.id, store)
    assert [m.role for m in reloaded.messages] == ["user", "assistant", "tool", "assistant"]
    assert reloaded.messages[1].tool_calls[0].arguments == arrays(20_000)  # kept as written
    assert any(e["kind"] == "tool_finished" for e in store.events(session.id))
    assert "take" in err.getvalue()
    store.close()


def _history() -> Conversation:
    raw = arrays(30_000)
    return Conversation([
        Message.user("go"),
        Message("assistant", (ToolCall("c1", "take", raw),)),
        Message("tool", (ToolResult("c1", "take", "Error: the arguments are not valid JSON",
                                    True),)),
    ])


def _wire(kind: str, srv: LoopbackServer) -> tuple[Any, Canned]:
    from tether.providers.anthropic import Anthropic
    from tether.providers.gemini import Gemini
    from tether.providers.openai_chat import OpenAIChat
    from tether.providers.openai_responses import OpenAIResponses

    if kind == "openai-chat":
        return (OpenAIChat(base_url=f"{srv.url}/v1", model="m"),
                completion({"content": "ok"}, "stop"))
    if kind == "openai-responses":
        return (OpenAIResponses(f"{srv.url}/v1", model="m", api_key="k"),
                Canned.json(response(message_item("ok"))))
    if kind == "anthropic":
        return (Anthropic(srv.url, "m", api_key="k"),
                Canned.json(message_json([{"type": "text", "text": "ok"}])))
    return Gemini(srv.url, "m", api_key="k"), Canned.json(gemini_answer([{"text": "ok"}]))


@pytest.mark.parametrize("kind", ["openai-chat", "openai-responses", "anthropic", "gemini"])
async def test_a_conversation_holding_a_too_deep_call_continues_on_every_wire(
        kind: str, server: LoopbackServer) -> None:
    model, canned = _wire(kind, server)
    server.queue(canned)
    try:
        result = await Agent(model, tools=[take]).run("go on", conversation=_history())
    finally:
        await model.aclose()
    assert result.text == "ok" and result.stop_cause == "completed"
    assert len(server.requests) == 1
