"""MCP servers' tools through the gate, against real servers written with the official SDK
(tests/mcp_servers/), over stdio and over streamable HTTP on 127.0.0.1."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Recorder, statuses
from tether import Agent, Capabilities, Decision, Taint, tool
from tether import events as ev
from tether.config import McpSection, servers_from_config
from tether.errors import ConfigError
from tether.mcp import ALLOWED_ENV, McpServer
from tether.providers import Scripted, call
from tether.sandbox import Sandbox
from tether.trust import untrusted_content

SERVERS = Path(__file__).parent / "mcp_servers"
KITCHEN = str(SERVERS / "kitchen.py")
HINTS = str(SERVERS / "hints.py")
PY = sys.executable


# The kitchen reports its pid, which these tests follow on the host: Landlock confines it
# without a PID namespace, so the pid is the host's (tests/test_sandbox.py runs a server
# inside bubblewrap).
HOST_PIDS = Sandbox(mode="landlock", network=True)


def kitchen(*flags: str, name: str = "k", **kw: Any) -> McpServer:
    kw.setdefault("sandbox", HOST_PIDS)
    return McpServer.stdio(name, PY, [KITCHEN, *flags], **kw)


@contextlib.contextmanager
def http_server(script: str, *flags: str) -> Iterator[str]:
    """The server in a child process; its first stdout line is the port, printed once the
    socket listens, so the URL is usable as soon as it is yielded."""
    proc = subprocess.Popen([PY, script, "--http", *flags], stdout=subprocess.PIPE, text=True,
                            stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        yield f"http://127.0.0.1:{int(proc.stdout.readline())}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


@contextlib.asynccontextmanager
async def started(server: McpServer) -> AsyncIterator[McpServer]:
    notices = await server.start()
    assert server.error is None, notices
    try:
        yield server
    finally:
        await server.aclose()




def pid_of(output: str) -> int:
    from tether.trust import untrusted_content

    return int(untrusted_content(output) or output)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# --- annotations -> the gate -----------------------------------------------------------------

HINT = {"T": True, "F": False, "N": None}


def expected_flags(ro: str, de: str, ow: str) -> tuple[Capabilities, bool, bool]:
    """The mapping restated from the spec: destructiveHint defaults to true, but only means
    something when readOnlyHint is not true; openWorldHint defaults to true; readOnlyHint
    defaults to false and never holds for a destructive tool."""
    destructive = de == "T" or (de == "N" and ro != "T")
    open_world = ow != "F"
    caps = Capabilities(private_data=True, untrusted_input=open_world,
                        external_send=open_world, destructive=destructive)
    return caps, destructive, ro == "T" and not destructive


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_every_hint_combination_maps_to_capabilities_approval_and_read_only(
        transport: str) -> None:
    with contextlib.ExitStack() as stack:
        if transport == "stdio":
            server = McpServer.stdio("h", PY, [HINTS])
        else:
            # Trusted here: this pins the hints alone (an untrusted server's reassuring hints
            # are dropped: tests/security/test_mcp_trust.py).
            server = McpServer.http("h", stack.enter_context(http_server(HINTS)), trusted=True)
        async with started(server):
            tools = {t.name: t for t in server.tools()}
    for ro, de, ow in itertools.product(HINT, repeat=3):
        t = tools[f"h__ro_{ro}_de_{de}_ow_{ow}"]
        caps, approval, read_only = expected_flags(ro, de, ow)
        assert (t.capabilities, t.needs_approval, t.spec.needs_approval, t.read_only) == \
            (caps, approval, approval, read_only), t.name
        assert t.origin == "mcp" and t.server == "h" and not t.cache_approval
    # No annotations at all: every default, the cautious way.
    bare = tools["h__bare"]
    assert bare.capabilities == Capabilities(True, True, True, True)
    assert bare.needs_approval and not bare.read_only


async def test_the_title_is_the_annotations_then_the_tools_own() -> None:
    async with started(McpServer.stdio("h", PY, [HINTS])) as server:
        tools = {t.name: t for t in server.tools()}
    assert tools["h__both_titles"].spec.title == "Annotation title"
    assert tools["h__tool_title"].spec.title == "Tool title only"
    assert tools["h__bare"].spec.title is None
    assert tools["h__bare"].spec.display_name == "H bare"


async def test_configured_capabilities_widen_a_tool_but_never_narrow_it() -> None:
    [server] = servers_from_config([McpSection(
        name="h", command=PY, args=[HINTS],
        capabilities={"destructive": True, "untrusted_input": True})])  # type: ignore[arg-type]
    async with started(server):
        tools = {t.name: t for t in server.tools()}
    quiet = tools["h__ro_T_de_F_ow_F"]  # read-only, not destructive, closed world
    assert quiet.capabilities == Capabilities(private_data=True, untrusted_input=True,
                                              destructive=True)
    assert quiet.needs_approval and not quiet.read_only
    assert tools["h__bare"].capabilities == Capabilities(True, True, True, True)


async def test_a_tool_keeps_the_servers_schema_and_description_under_a_prefixed_name() -> None:
    async with started(kitchen()) as server:
        echo = {t.name: t for t in server.tools()}["k__echo"]
    assert echo.spec.description == "the echo tool"
    assert echo.spec.schema_json == {"type": "object", "properties": {"text": {"type": "string"}},
                                     "required": ["text"]}
    async with started(kitchen(prefix_tools=False)) as server:
        assert "echo" in {t.name for t in server.tools()}


# --- the gate -----------------------------------------------------------------------------


async def test_a_destructive_tool_is_refused_without_approval_and_runs_when_allowed() -> None:
    model = Scripted([call("k__wipe"), "not wiped", call("k__wipe"), "wiped"])
    async with Agent(model, tools=[kitchen()]) as agent:
        refused = await agent.run("wipe it")
        approver = Recorder(Decision.allow())
        agent.approver = approver
        allowed = await agent.run("wipe it")
    assert statuses(refused) == ["denied"]
    assert model.requests[1].messages[-1].parts[0].content.startswith(  # type: ignore[union-attr]
        "Blocked by policy:")
    assert statuses(allowed) == ["ok"]
    assert [(r.tool, r.reason, r.can_cache) for r in approver.requests] == \
        [("k__wipe", "needs_approval", False)]


async def test_an_open_world_tool_runs_from_a_clean_conversation_and_arms_the_next_send(
) -> None:
    # private_data (always) + untrusted_input + external_send (open world): all three legs,
    # but a call is never armed by its own capabilities alone.
    model = Scripted([call("k__news"), call("k__news"), "ok"])
    async with Agent(model, tools=[kitchen()]) as agent:
        result = await agent.run("news?")
    assert statuses(result) == ["ok", "blocked"]
    assert result.taint == Taint(private=True, untrusted=True)


async def test_an_open_world_result_taints_the_conversation_so_a_later_send_is_blocked() -> None:
    sent: list[str] = []

    @tool(capabilities=Capabilities(external_send=True))
    def send_email(body: str) -> str:
        """Send an email."""
        sent.append(body)
        return "sent"

    model = Scripted([call("k__news"), call("send_email", body="the files"), "ok"])
    async with Agent(model, tools=[kitchen(), send_email]) as agent:
        result = await agent.run("news?")
    assert statuses(result) == ["ok", "blocked"] and sent == []
    news = next(e.result for e in result.events if isinstance(e, ev.ToolFinished))
    assert news.trust == "untrusted" and "<untrusted-data" in news.content
    assert result.taint == Taint(private=True, untrusted=True)
    assert result.blocked_sends == 1


async def test_a_closed_world_tool_still_brings_private_data_so_a_later_fetch_is_blocked() -> None:
    @tool(capabilities=Capabilities(untrusted_input=True, external_send=True))
    def fetch(url: str) -> str:
        """Fetch a URL."""
        return "page"

    model = Scripted([call("k__echo", {"text": "my diary"}), call("fetch", url="http://x"), "ok"])
    async with Agent(model, tools=[kitchen(), fetch]) as agent:
        result = await agent.run("go")
    assert statuses(result) == ["ok", "blocked"]
    assert result.blocked_sends == 1


# --- results ----------------------------------------------------------------------------------


async def test_text_parts_are_joined_images_carried_and_every_other_part_named() -> None:
    async with started(kitchen()) as server:
        output = await server.call("mixed", {})
    # An embedded text resource is text; an image is carried beside the text and marked in
    # its place; a link is named, never fetched; audio is named as omitted.
    assert output.content.split("\n") == [
        "first", "[image 1: image/png]", "second", "[audio omitted: audio/wav]",
        "embedded text", "[resource link, not fetched: file:///big.csv (big.csv)]"]
    assert [(i.media_type, i.data) for i in output.images] == [
        ("image/png", b"\x89PNG\r\n\x1a\n")]
    assert output.from_outside and not output.is_error


async def test_structured_content_is_kept_and_is_error_makes_an_error_result() -> None:
    model = Scripted([call("k__structured"), call("k__fail"), "done"])
    async with Agent(model, tools=[kitchen()]) as agent:
        result = await agent.run("go")
    finished = [e.result for e in result.events if isinstance(e, ev.ToolFinished)]
    assert finished[0].structured == {"answer": 42} and not finished[0].is_error
    assert finished[1].is_error and "the disk is full" in finished[1].content
    assert all(r.trust == "untrusted" for r in finished)  # it came from outside the process
    assert statuses(result) == ["ok", "error"]


async def test_keys_the_servers_schema_does_not_name_are_dropped_before_the_call_is_sent(
) -> None:
    model = Scripted([call("k__received", {"text": "hi", "stray": "x", "cc": "evil@example.com"}),
                      call("k__strict", {"text": "hi", "stray": "x"}), "done"])
    async with Agent(model, tools=[kitchen()]) as agent:
        result = await agent.run("go")
    finished = [e.result for e in result.events if isinstance(e, ev.ToolFinished)]
    assert json.loads(untrusted_content(finished[0].content) or "") == {"text": "hi"}
    assert result.tool_calls[0].input == {"text": "hi"}
    # A schema that forbids other keys (additionalProperties: false) refuses the call, naming
    # them; the server never sees it.
    assert statuses(result) == ["ok", "invalid_args"]
    assert "unknown argument 'stray': k__strict takes text" in finished[1].content


# --- listing ----------------------------------------------------------------------------------


async def test_tools_are_listed_across_every_page() -> None:
    async with started(kitchen()) as whole, started(kitchen("--page-size", "2")) as paged:
        assert [t.name for t in paged.tools()] == [t.name for t in whole.tools()]
        assert len(paged.tools()) == 14


async def test_a_list_changed_notification_refreshes_the_tools_before_the_next_turn() -> None:
    # The handshake era's notification, sent before the call's answer (the current
    # revision's stream of changes: tests/test_mcp_features.py).
    model = Scripted([call("k__grow"), call("k__extra", {"text": "hi"}), "done"])
    server = McpServer.stdio("k", PY, [str(SERVERS / "features.py"), "--era", "handshake"])
    async with Agent(model, tools=[server]) as agent:
        assert "k__extra" not in agent.tools
        result = await agent.run("grow")
    assert "k__extra" not in model.tool_names_offered(0)
    assert "k__extra" in model.tool_names_offered(1)
    assert statuses(result) == ["ok", "ok"]


async def test_a_tool_with_an_invalid_schema_is_left_out_with_a_notice() -> None:
    server = kitchen("--bad-schema")
    model = Scripted([call("k__dotted_name", {"text": "dots become underscores"}), "done"])
    async with Agent(model, tools=[server]) as agent:
        result = await agent.run("go")
    assert "k__broken" not in model.tool_names_offered(0)
    notices = [e for e in result.events if isinstance(e, ev.Notice)]
    assert len(notices) == 1 and notices[0].level == "warning"
    assert "'broken'" in notices[0].message and "input schema is invalid" in notices[0].message
    # A name providers would reject is made safe; the server is called by its own name.
    assert statuses(result) == ["ok"]
    assert "dots become underscores" in result.tool_calls[0].output


# --- failures -----------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_server_that_crashes_mid_call_gives_an_error_result_not_a_hung_run(
        transport: str) -> None:
    with contextlib.ExitStack() as stack:
        # Trusted over HTTP too: this is about a crash, not about believing the server (an
        # untrusted one's tools all need approval, and none is asked here).
        server = kitchen() if transport == "stdio" else \
            McpServer.http("k", stack.enter_context(http_server(KITCHEN)), trusted=True)
        model = Scripted([call("k__crash"), call("k__echo", {"text": "again"}), "it crashed"])
        async with Agent(model, tools=[server]) as agent:
            result = await agent.run("crash")
    assert statuses(result) == ["error", "error"]
    assert result.text == "it crashed"
    assert "stopped during the call" in result.tool_calls[0].output
    assert "not running" in result.tool_calls[1].output
    assert server.error is not None


async def test_a_call_that_outlasts_timeout_secs_is_an_error_result() -> None:
    server = kitchen(timeout_secs=0.5, start_timeout_secs=30)
    model = Scripted([call("k__hang"), call("k__echo", {"text": "still alive"}), "done"])
    async with Agent(model, tools=[server]) as agent:
        result = await agent.run("hang")
    assert statuses(result) == ["error", "ok"]
    assert "did not answer within 0.5s" in result.tool_calls[0].output


async def test_a_server_that_fails_to_start_is_a_notice_and_the_run_goes_on() -> None:
    broken = McpServer.stdio("broken", PY, ["-c", "import sys; sys.exit('missing API key')"])
    model = Scripted([call("k__echo", {"text": "hi"}), "done", "again"])
    async with Agent(model, tools=[broken, kitchen()]) as agent:
        first = await agent.run("go")
        second = await agent.run("again")
    notices = [e for e in first.events if isinstance(e, ev.Notice)]
    assert [(n.level, n.source) for n in notices] == [("error", "mcp:broken")]
    assert "did not start" in notices[0].message and "missing API key" in notices[0].message
    assert statuses(first) == ["ok"] and first.text == "done"
    assert not [e for e in second.events if isinstance(e, ev.Notice)]  # said once
    assert broken.error is not None and broken.tools() == ()


async def test_a_command_that_does_not_exist_is_named_in_the_notice() -> None:
    [notice] = await McpServer.stdio("x", "no-such-mcp-server-here").start()
    assert "'no-such-mcp-server-here' was not found" in notice.message


def test_a_server_name_that_cannot_prefix_tool_names_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="letters, digits"):
        servers_from_config([McpSection(name="my server", command="x")])


async def test_a_run_of_an_agent_not_entered_starts_its_servers_and_closes_them_at_its_end(
        ) -> None:
    server = kitchen()
    agent = Agent(Scripted([call("k__pid"), "done"]), tools=[server])
    result = await agent.run("go")
    assert statuses(result) == ["ok"] and result.text == "done"
    assert not [e for e in result.events if isinstance(e, ev.Notice)]
    assert not server.started and server.tools() == ()  # closed when the run ended
    assert not alive(pid_of(result.tool_calls[0].output))


def test_run_sync_of_a_configured_agent_uses_its_mcp_tools(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tether.config import agent_from_config, load_config

    _write_config(tmp_path, monkeypatch, f"""
[tools]
enabled = []

[[mcp]]
name = "k"
command = {json.dumps(PY)}
args = [{json.dumps(KITCHEN)}]
""")
    agent = agent_from_config(tmp_path, config=load_config(tmp_path),
                              model=Scripted([call("k__echo", {"text": "hi"}), "done"]))
    first = agent.run_sync("echo hi")
    assert statuses(first) == ["ok"] and "hi" in first.tool_calls[0].output
    agent.model = Scripted([call("k__echo", {"text": "again"}), "done"])
    second = agent.run_sync("echo again")  # another event loop: the server starts anew
    assert statuses(second) == ["ok"] and "again" in second.tool_calls[0].output


async def test_inside_async_with_the_servers_stay_up_across_runs() -> None:
    import asyncio

    server = kitchen()
    script = Scripted([call("k__pid"), "one", call("k__pid"), "two", "a", "b"])
    async with Agent(script, tools=[server]) as agent:
        first = await agent.run("one")
        second = await agent.run("two")
        assert server.started
        # Runs side by side share the servers; neither closes them under the other.
        await asyncio.gather(agent.run("a"), agent.run("b"))
        assert server.started
    assert first.tool_calls[0].output == second.tool_calls[0].output  # one process
    assert not server.started


async def test_runs_side_by_side_of_an_agent_not_entered_share_one_start() -> None:
    import asyncio

    server = kitchen()
    agent = Agent(Scripted([call("k__pid"), call("k__pid"), "a", "b"]), tools=[server])
    a, b = await asyncio.gather(agent.run("a"), agent.run("b"))
    assert statuses(a) == statuses(b) == ["ok"]
    assert a.tool_calls[0].output == b.tool_calls[0].output
    assert not server.started


async def test_servers_start_side_by_side(tmp_path: Path) -> None:
    # Each server opens one end of a named pipe before it serves, which blocks until the
    # other end is open: one after the other, the first could never finish starting.
    fifo = tmp_path / "rendezvous"
    os.mkfifo(fifo)
    a = kitchen("--rendezvous", f"{fifo}:w", name="a", start_timeout_secs=20)
    b = kitchen("--rendezvous", f"{fifo}:r", name="b", start_timeout_secs=20)
    async with Agent(Scripted([]), tools=[a, b]) as agent:
        assert not agent.start_notices
        assert {"a__echo", "b__echo"} <= set(agent.tools)


# --- the process and its environment -----------------------------------------------------------


async def test_a_stdio_server_sees_only_the_allowed_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_TEST_SECRET", "hunter2")
    monkeypatch.setenv("PASS_ME", "yes")
    for name in ("USER", "SHELL", "LOGNAME", "TERM"):  # the SDK's own defaults
        monkeypatch.setenv(name, "x")
    server = kitchen(env={"EXTRA": "1"}, env_passthrough=["PASS_ME"])
    async with started(server):
        env = json.loads((await server.call("env", {})).content)
    assert set(env) - {"LC_CTYPE"} <= {*ALLOWED_ENV, "PASS_ME", "EXTRA"}  # LC_CTYPE: PEP 538
    assert env["PASS_ME"] == "yes" and env["EXTRA"] == "1"
    assert env["PATH"] == os.environ["PATH"]


async def test_closing_leaves_no_orphan_process() -> None:
    server = kitchen(timeout_secs=30)
    async with Agent(Scripted([]), tools=[server]):
        pid = int((await server.call("pid", {})).content)
        assert alive(pid)
    assert not alive(pid)


async def test_closing_stops_a_server_in_the_middle_of_a_call() -> None:
    import asyncio

    server = kitchen(timeout_secs=30)
    await server.start()
    pid = int((await server.call("pid", {})).content)
    hanging = asyncio.create_task(server.call("hang", {}))
    await server.aclose()
    assert not alive(pid)
    assert (await hanging).is_error


async def test_closing_while_a_server_starts_stops_the_start_at_once() -> None:
    import asyncio

    silent = McpServer.stdio("silent", PY, ["-c", "import sys; sys.stdin.read()"],
                             start_timeout_secs=300)
    starting = asyncio.create_task(silent.start())
    await asyncio.sleep(0)  # a yield, not a wait: start() runs up to its first await
    assert silent.started
    async with asyncio.timeout(30):  # far below the start timeout: the close cut it short
        await silent.aclose()
        [notice] = await starting
    assert "closed while starting" in notice.message


# --- HTTP ---------------------------------------------------------------------------------------


async def test_http_headers_come_from_the_environment_when_the_server_starts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KITCHEN_TOKEN", "Bearer s3cret")
    with http_server(KITCHEN) as url:
        server = McpServer.http("k", url, headers_env={"Authorization": "KITCHEN_TOKEN"})
        async with started(server):
            assert (await server.call("whoami", {})).content == "Bearer s3cret"
        monkeypatch.delenv("KITCHEN_TOKEN")
        [notice] = await server.start()
    assert "KITCHEN_TOKEN" in notice.message and "not set" in notice.message


# --- configuration, `tether tools`, `tether doctor` ---------------------------------------------


def _write_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    monkeypatch.setenv("TETHER_CONFIG", os.devnull)
    monkeypatch.setenv("COLUMNS", "1000")  # one line per report
    (tmp_path / "tether.toml").write_text(body)


def test_tether_tools_lists_mcp_tools_with_their_mapped_flags(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from tether.cli import main

    _write_config(tmp_path, monkeypatch, f"""
[tools]
enabled = []

[[mcp]]
name = "k"
command = {json.dumps(PY)}
args = [{json.dumps(KITCHEN)}]
""")
    assert main(["-w", str(tmp_path), "tools", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["k__wipe"]["needs_approval"] and not rows["k__wipe"]["read_only"]
    assert rows["k__wipe"]["capabilities"] == ["private_data", "destructive"]
    assert rows["k__news"]["capabilities"] == ["private_data", "untrusted_input", "external_send"]
    assert rows["k__echo"]["read_only"] and rows["k__echo"]["source"] == "mcp"


def test_tether_doctor_starts_each_mcp_server_and_reports_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from tether.cli import main

    _write_config(tmp_path, monkeypatch, f"""
[[mcp]]
name = "good"
command = {json.dumps(PY)}
args = [{json.dumps(KITCHEN)}]

[[mcp]]
name = "bad"
command = {json.dumps(PY)}
args = ["-c", "raise SystemExit('no token')"]

[[mcp]]
name = "off"
url = "http://127.0.0.1:9/mcp"
disabled = true
""")
    main(["-w", str(tmp_path), "doctor"])
    out = capsys.readouterr().out
    lines = {m.group(1): line for line in out.splitlines()
             if (m := re.match(r"[✓✗] (mcp \S+)", line))}
    assert lines["mcp good"].startswith("✓") and "14 tools" in lines["mcp good"]
    assert lines["mcp bad"].startswith("✗") and "no token" in lines["mcp bad"]
    assert lines["mcp off"].startswith("✓") and "disabled" in lines["mcp off"]


def test_importing_the_cli_and_the_bridge_does_not_import_the_sdk() -> None:
    code = "import sys, tether.cli, tether.mcp; print('mcp' in sys.modules)"
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
