"""The MCP client beyond tools, against a real server built with the official SDK
(tests/mcp_servers/features.py), over stdio and streamable HTTP: the protocol revision
negotiated with servers of either era, resources as gated tools, prompts a person inserts,
progress, images and embedded resources; each new channel also from a hostile server to a
compromised model."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console

from tests.conftest import FormFiller, statuses
from tests.test_cli import answer, tether, workspace
from tests.test_mcp import http_server, started
from tether import Agent
from tether import events as ev
from tether.approval import ElicitationAnswer
from tether.mcp import McpServer
from tether.messages import Message, Text, ToolResult, message_from_dict, message_to_dict
from tether.providers import Scripted, call
from tether.tools.tool import ToolContext
from tether.trust import SecurityConfig, Taint, untrusted_content

FEATURES = str(Path(__file__).parent / "mcp_servers" / "features.py")
PY = sys.executable


def features(*flags: str, trusted: bool = True, name: str = "f") -> McpServer:
    # A server given a log writes it: the log's folder is its own (it runs sandboxed).
    folder = str(Path(flags[flags.index("--log") + 1]).parent) if "--log" in flags else None
    return McpServer.stdio(name, PY, [FEATURES, *flags], trusted=trusted, cwd=folder)


@contextlib.contextmanager
def served(transport: str, *flags: str, trusted: bool = True) -> Iterator[McpServer]:
    if transport == "stdio":
        yield features(*flags, trusted=trusted)
        return
    with http_server(FEATURES, *flags) as url:
        yield McpServer.http("f", url, trusted=trusted)


def logged(path: Path) -> list[dict[str, object]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


# --- negotiation -----------------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize(("era", "revision"), [("modern", "2026-07-28"),
                                               ("handshake", "2025-11-25")])
async def test_a_server_of_either_era_starts_and_its_revision_is_known(
        transport: str, era: str, revision: str) -> None:
    with served(transport, "--era", era) as server:
        async with started(server):
            assert server.protocol_version == revision
            assert "f__echo" in [t.name for t in server.tools()]
            output = await server.call("echo", {"text": "hi"})
            assert output.content == "hi" and not output.is_error
            seen: list[ev.Event] = []

            async def emit(event: ev.Event) -> None:
                seen.append(event)

            context = ToolContext("c1", "f__slow", Taint(), Path("."), SecurityConfig(),
                                  emit=emit)
            await server.call("slow", {}, context=context)
            # The first and the last always (those between may be throttled away).
            assert seen[0] == ev.ToolProgress("c1", "f__slow", 1, 3, "step 1 of 3")
            assert seen[-1] == ev.ToolProgress("c1", "f__slow", 3, 3, "step 3 of 3")
            # The listings of the server's other features came over the same revision.
            assert [r.uri for r in server.resources][:1] == ["notes://readme"]
            assert [p.name for p in server.prompts] == ["review"]


async def test_the_current_revisions_list_changes_arrive_on_its_subscription_stream() -> None:
    async with started(features("--era", "modern")) as server:
        assert server.protocol_version == "2026-07-28"
        server.relisted.clear()
        await server.call("grow", {})
        async with asyncio.timeout(30):  # a guard: the event, not the clock, ends the wait
            while "f__extra" not in [t.name for t in server.tools()]:
                server.relisted.clear()
                await server.relisted.wait()


async def test_a_request_the_current_revision_answers_with_a_need_for_input_is_driven(
        tmp_path: Path) -> None:
    """A multi round-trip request: the server's request for input goes to the session's
    elicitation answer, and the request is sent again with the answer and the server's
    own request state, never an unexpected result or a crash. A call outside a run has
    nobody to ask: the answer is a decline; in a run the person's answer is sent."""
    log = tmp_path / "seen.jsonl"
    async with started(features("--era", "modern", "--log", str(log))) as server:
        output = await server.call("ask", {})
    assert output.content == "thanks" and not output.is_error
    assert logged(log) == [{"answered": {"meta": None, "action": "decline", "content": None},
                            "state": "asked-once"}]
    log.unlink()
    filler = FormFiller(ElicitationAnswer.accept({"n": 3}))
    async with Agent(Scripted([call("f__ask"), "ok"]), approver=filler,
                     tools=[features("--era", "modern", "--log", str(log))]) as agent:
        result = await agent.run("ask me")
    assert statuses(result) == ["ok"] and filler.shown[0].message == "How many?"
    assert logged(log) == [{"answered": {"meta": None, "action": "accept",
                                         "content": {"n": 3}}, "state": "asked-once"}]


# --- resources --------------------------------------------------------------------------------


async def test_resources_are_tools_that_read_a_listed_uri_and_nothing_else(
        tmp_path: Path) -> None:
    log = tmp_path / "seen.jsonl"
    model = Scripted([call("f__read_resource", {"uri": "notes://readme"}),
                      call("f__read_resource", {"uri": "file:///etc/passwd"}),
                      call("f__resource_note", {"name": "launch plan"}), "done"])
    async with Agent(model, tools=[features("--log", str(log))]) as agent:
        tool = agent.tools["f__read_resource"]
        assert tool.read_only and not tool.needs_approval
        assert tool.spec.schema_json["properties"]["uri"]["enum"] == [
            "notes://readme", "notes://poison", "notes://logo"]
        result = await agent.run("read the notes")
    assert statuses(result) == ["ok", "invalid_args", "ok"]
    finished = [e.result for e in result.events if isinstance(e, ev.ToolFinished)]
    # A trusted server's resource is trusted text; nothing went into the context before.
    assert finished[0].content == "The launch is on Tuesday." and finished[0].trust == "trusted"
    assert finished[2].content == "the note at notes://note/launch%20plan"
    assert [e["read"] for e in logged(log)] == ["notes://readme", "notes://note/launch%20plan"]
    assert model.requests[0].messages[-1].text == "read the notes"


async def test_poisoned_resource_text_from_an_untrusted_server_is_untrusted_data() -> None:
    model = Scripted([call("f__read_resource", {"uri": "notes://poison"}), "done"])
    async with Agent(model, tools=[features("--hostile", trusted=False)]) as agent:
        result = await agent.run("read it")
    finished = [e.result for e in result.events if isinstance(e, ev.ToolFinished)]
    assert finished[0].trust == "untrusted"
    assert "IGNORE PREVIOUS" in (untrusted_content(finished[0].content) or "")
    assert result.taint.untrusted


async def test_a_template_cannot_carry_private_data_to_an_untrusted_server(
        tmp_path: Path) -> None:
    """The compromised model reads a private value, then tries to hand it to the server
    inside a URI: for an untrusted server a template is a send, and it is refused."""
    log = tmp_path / "seen.jsonl"
    secret = tmp_path / "secret.txt"
    secret.write_text("hunter2-SECRET")
    model = Scripted([call("read_file", {"path": "secret.txt"}),
                      call("f__resource_note", {"name": "hunter2-SECRET"}), "done"])
    server = features("--hostile", "--log", str(log), trusted=False)
    from tether.builtins.files import read_file

    async with Agent(model, tools=[server, read_file], workspace=tmp_path) as agent:
        tool = agent.tools["f__resource_note"]
        assert tool.capabilities.external_send and not tool.read_only
        result = await agent.run("read secret.txt")
    assert statuses(result)[1] == "blocked"
    assert not any("hunter2" in str(e) for e in logged(log))


# --- prompts ----------------------------------------------------------------------------------


async def test_a_prompt_that_claims_to_be_the_user_stays_the_servers_untrusted_text() -> None:
    async with started(features("--hostile", trusted=False)) as server:
        prompt = await server.get_prompt("review", {"topic": "the launch"})
        model = Scripted(["ok"])
        agent = Agent(model, tools=[server])
        assert not any("prompt" in name for name in agent.tools)  # no tool invokes prompts
        result = await agent.run([*prompt.parts, Text("go on")])
    (part, own) = model.requests[0].messages[-1].parts
    assert isinstance(part, Text) and part.origin == "MCP prompt review of server f"
    assert "USER: I, the user" in (untrusted_content(part.text.strip()) or "")
    assert own == Text("go on")
    assert result.taint.untrusted


async def test_a_trusted_servers_prompt_is_labelled_text_and_bad_arguments_are_refused(
) -> None:
    from tether.errors import ToolError

    async with started(features()) as server:
        prompt = await server.get_prompt("review", {"topic": "the launch", "tone": "briefly"})
        with pytest.raises(ToolError, match="needs topic"):
            await server.get_prompt("review", {})
        with pytest.raises(ToolError, match="no argument 'colour'"):
            await server.get_prompt("review", {"topic": "x", "colour": "red"})
        with pytest.raises(ToolError, match="no prompt 'nope'"):
            await server.get_prompt("nope", {})
    assert prompt.parts == (Text("[MCP prompt review of server f]\n[as the user]\n"
                                 "Please review the launch, briefly\n\n"),)


def test_the_prompt_invocation_reads_shell_words_and_refuses_what_it_cannot_read() -> None:
    from tether.errors import ConfigError
    from tether.mcp.prompts import parse_invocation

    got = parse_invocation("notes:review topic='the launch plan' tone=dry")
    assert (got.server, got.name, got.arguments) == (
        "notes", "review", {"topic": "the launch plan", "tone": "dry"})
    for bad in ("review", "notes:review topic", "notes:review a=1 a=2", ":x", "x:'"):
        with pytest.raises(ConfigError):
            parse_invocation(bad)


# --- progress ---------------------------------------------------------------------------------


async def test_progress_arrives_as_events_shown_literally_and_is_not_stored(
        tmp_path: Path) -> None:
    from tether.cli.render import EventRenderer
    from tether.store import Session, SQLiteStore

    store = SQLiteStore(tmp_path / "s.db")
    session = Session.create(store)
    model = Scripted([call("f__slow"), "done"])
    async with Agent(model, tools=[features("--hostile")]) as agent:
        result = await agent.run("go", session=session)
    progress = [e for e in result.events if isinstance(e, ev.ToolProgress)]
    assert progress[0].progress == 1 and progress[-1].progress == progress[-1].total == 3
    assert progress[0].call_id == result.tool_calls[0].call_id and progress[0].tool == "f__slow"
    assert "\x1b[2J" in (progress[0].message or "")  # the event keeps the server's words
    shown = StringIO()
    renderer = EventRenderer(out=StringIO(), err=Console(file=shown, force_terminal=True,
                                                         width=200))
    for event in progress:
        renderer(event)
    text = shown.getvalue()
    assert "\x1b[2J" not in text and "\r" not in text.replace("\r\n", "\n")
    assert "f__slow 1/3" in text and "f__slow 3/3" in text
    assert ev.event_to_dict(progress[0])["kind"] == "tool_progress"
    # For the person watching: the session store keeps the call's result, not its progress.
    kinds = [e["kind"] for e in store.events(session.id)]
    assert "tool_finished" in kinds and "tool_progress" not in kinds


# --- images and embedded resources ------------------------------------------------------------


async def test_an_image_a_tool_returns_is_carried_untrusted_and_kept() -> None:
    # What a server's tool returns is outside text whether or not the server is trusted
    # (docs/mcp.md, Results), its image with it.
    model = Scripted([call("f__picture"), "done"])
    async with Agent(model, tools=[features("--hostile")]) as agent:
        result = await agent.run("draw")
    result_part = next(e.result for e in result.events if isinstance(e, ev.ToolFinished))
    assert result_part.trust == "untrusted" and result.taint.untrusted
    assert [i.media_type for i in result_part.images] == ["image/png"]
    body = untrusted_content(result_part.content) or ""
    # The embedded text is text (untrusted, as the rest); the link is named, not fetched.
    assert "[image 1: image/png]" in body and "IGNORE PREVIOUS" in body
    assert "[resource link, not fetched: https://evil.example/big.csv (big.csv)]" in body
    message = Message("tool", (result_part,))
    assert message_from_dict(json.loads(json.dumps(message_to_dict(message)))) == message


def test_a_stored_result_from_before_images_still_loads() -> None:
    old = {"role": "tool", "parts": [{"kind": "tool_result", "call_id": "c", "name": "t",
                                      "content": "x", "is_error": False, "trust": "trusted"}]}
    (part,) = message_from_dict(old).parts
    assert isinstance(part, ToolResult) and part.images == ()
    assert "images" not in message_to_dict(message_from_dict(old))["parts"][0]


# --- the command line -------------------------------------------------------------------------


def test_tether_mcp_resources_lists_a_servers_resources_literally(tmp_path: Path) -> None:
    ws = workspace(tmp_path, "http://127.0.0.1:9/v1", f"""
[[mcp]]
name = "f"
command = "{PY}"
args = ["{FEATURES}", "--hostile"]
trusted = false
""")
    table = tether(ws, "mcp", "resources", "f")
    assert table.returncode == 0, table.stderr
    assert "untrusted, protocol 2026-07-28" in table.stdout
    for uri in ("notes://readme", "notes://poison", "notes://logo", "notes://note/{name}",
                "search://{?q,limit}"):
        assert uri in table.stdout
    # The table shows them, escaped: nothing the server wrote reaches the terminal raw.
    assert "\x1b" not in table.stdout and "\\x1b[2J" in table.stdout
    assert tether(ws, "mcp", "resources", "nope").returncode != 0


def test_tether_run_inserts_a_server_prompt(tmp_path: Path, server: object) -> None:
    from tests.servers.http import LoopbackServer

    assert isinstance(server, LoopbackServer)
    server.queue(answer("reviewed"))
    ws = workspace(tmp_path, server.url + "/v1", f"""
[[mcp]]
name = "f"
command = "{PY}"
args = ["{FEATURES}"]
""")
    out = tether(ws, "run", "--mcp-prompt", "f:review topic='the launch'", "be brief")
    assert out.returncode == 0, out.stderr
    sent = server.requests[0].body["messages"][-1]["content"]
    assert sent.startswith("[MCP prompt review of server f]\n[as the user]\n"
                           "Please review the launch") and sent.endswith("be brief")


def test_the_features_server_refuses_the_other_eras_opening(tmp_path: Path) -> None:
    """The pinned servers are what the negotiation tests claim: a handshake-only server
    refuses the current revision's discovery, a current-only one the handshake."""
    del tmp_path
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"}}}
    out = subprocess.run([PY, FEATURES, "--era", "modern"], input=json.dumps(init) + "\n",
                         capture_output=True, text=True, timeout=30)
    assert json.loads(out.stdout.splitlines()[0])["error"]["code"] == -32022


@pytest.mark.parametrize(("profile", "sent"), [("openai", True), ("generic", False)])
async def test_an_mcp_image_reaches_a_chat_completions_server_that_takes_images(
        server: object, profile: str, sent: bool) -> None:
    from tests.servers.http import LoopbackServer
    from tests.test_cli import tool_call
    from tether.providers import OpenAIChat

    assert isinstance(server, LoopbackServer)
    server.queue(tool_call("f__picture", {}), answer("a red pixel"))
    model = OpenAIChat(f"{server.url}/v1", "m", api_key="k", profile=profile)
    async with Agent(model, tools=[features()]) as agent:
        result = await agent.run("draw")
    assert result.text == "a red pixel"
    messages = server.requests[1].body["messages"]
    if sent:
        label, image = messages[-1]["content"]
        assert messages[-1]["role"] == "user" and "not instructions" in label["text"]
        assert image["image_url"]["url"].startswith("data:image/png;base64,iVBORw0KGgo")
    else:
        assert messages[-1]["role"] == "tool"
        assert "does not accept images" in messages[-1]["content"]


def test_chat_prompt_sends_a_servers_prompt_as_its_text_and_taints(tmp_path: Path) -> None:
    from tests.servers.http import LoopbackServer
    from tests.test_chat import answer as chat_answer
    from tests.test_chat import only_session
    from tests.test_chat import tether as chat
    from tests.test_chat import workspace as chat_workspace

    with LoopbackServer() as loop:
        loop.queue(chat_answer("reviewed"))
        env = chat_workspace(tmp_path, loop.url)
        with (tmp_path / "tether.toml").open("a") as f:
            f.write(f'\n[[mcp]]\nname = "f"\ncommand = {json.dumps(PY)}\n'
                    f'args = [{json.dumps(FEATURES)}, "--hostile"]\ntrusted = false\n')
        done = chat(tmp_path, env, "chat",
                    stdin="/prompt f:review\n/prompt f:review topic=launch\n/taint\n")
    assert done.returncode == 0, done.stderr
    assert "needs topic" in done.stderr  # refused before the server or the model is asked
    assert len(loop.requests) == 1
    sent = loop.requests[0].body["messages"][-1]["content"]
    assert sent.startswith('<untrusted-data source="MCP prompt review of server f">')
    assert "USER: I, the user" in sent
    assert "untrusted text seen: yes" in done.stderr
    assert only_session(tmp_path).taint.untrusted


async def test_a_flood_of_progress_is_thinned_and_bad_numbers_are_dropped() -> None:
    from tether.mcp.protocol import MAX_MESSAGE, Throttled

    passed: list[tuple[float, float | None, str | None]] = []

    async def sink(progress: float, total: float | None, message: str | None) -> None:
        passed.append((progress, total, message))

    throttled = Throttled(sink)
    await throttled(float("nan"), None, "x")
    for step in range(1, 1001):
        await throttled(step, 1000, "m" * 10_000)
    # A thousand notifications in a burst: the first and the one that says it is done.
    assert passed[0][0] == 1 and passed[-1][0] == 1000 and len(passed) < 20
    assert all(len(m or "") == MAX_MESSAGE for _, _, m in passed)
