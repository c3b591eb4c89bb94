"""Tool lists that go stale (the current MCP revision's ``ttlMs``), as attacks.

A server that serves no change stream cannot say its tools changed; its tools list
carries a time to live (0: stale at once). The server here (tests/mcp_servers/shifting.py,
built with the SDK, on the current revision) lists ``tidy`` read-only until its first
call, then as destructive, and a call then deletes the file. A compromised model calls it
twice: the second call must be judged by what the tool says now (it needs approval; with
nobody to ask it is refused), never by the old read-only annotation. Controls: a list
within its time is not read again (the server counts its list requests), a server with no
time to live costs nothing per call, and a stale list re-read before each call still
lets a read-only tool run."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.security.conftest import Compromised, instruction, record
from tether import Agent, SubagentProfile
from tether.mcp import McpServer
from tether.providers import Scripted, call

SHIFTING = str(Path(__file__).parent.parent / "mcp_servers" / "shifting.py")


def shifting(log: Path, *flags: str) -> McpServer:
    # The server writes its log beside the files it tidies: that folder is its own.
    return McpServer.stdio("s", sys.executable, [SHIFTING, "--log", str(log), *flags],
                           cwd=str(log.parent))


def lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def twice(tool: str, path: Path) -> str:
    """The user's prompt: the path is the user's, so provenance lets both calls through
    and only the tool's annotation decides."""
    step = instruction((tool, {"path": str(path)}))
    return f"Look after {path}.\n{step}\n{step}\n"


async def test_a_tool_redefined_destructive_is_judged_by_what_it_says_now(
        tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    log = tmp_path / "server.log"
    async with Agent(Compromised().model(), [shifting(log, "--era", "modern", "--ttl", "0")]) \
            as agent:
        result = await agent.run(twice("s__tidy", victim))
    assert victim.exists(), "the stale read-only annotation let the delete run"
    first, second = [r for r in result.tool_calls if r.name == "s__tidy"]
    assert first.status == "ok" and second.status == "denied"
    # Read again before each call of its tools (ttl 0: stale at once), and the second
    # call never reached the server.
    assert lines(log) == ["list", "list", "call tidy", "list"]


async def test_a_list_within_its_time_to_live_is_not_read_again(tmp_path: Path) -> None:
    there = tmp_path / "here.txt"
    there.write_text("x")
    log = tmp_path / "server.log"
    async with Agent(Compromised().model(),
                     [shifting(log, "--era", "modern", "--ttl", "600000")]) as agent:
        result = await agent.run(twice("s__peek", there))
    assert [r.status for r in result.tool_calls] == ["ok", "ok"]
    assert lines(log) == ["list", "call peek", "call peek"]


async def test_a_stale_list_read_again_still_runs_a_read_only_tool(tmp_path: Path) -> None:
    there = tmp_path / "here.txt"
    there.write_text("x")
    log = tmp_path / "server.log"
    async with Agent(Compromised().model(), [shifting(log, "--era", "modern", "--ttl", "0")]) \
            as agent:
        result = await agent.run(twice("s__peek", there))
    assert record(result, "s__peek").status == "ok"
    assert [r.status for r in result.tool_calls] == ["ok", "ok"]
    assert lines(log) == ["list", "list", "call peek", "list", "call peek"]


async def test_a_server_without_a_time_to_live_is_not_listed_again_per_call(
        tmp_path: Path) -> None:
    # The handshake era has no ttlMs: the list stands until the server says it changed.
    there = tmp_path / "here.txt"
    there.write_text("x")
    log = tmp_path / "server.log"
    async with Agent(Compromised().model(), [shifting(log, "--era", "handshake")]) as agent:
        result = await agent.run(twice("s__peek", there))
    assert [r.status for r in result.tool_calls] == ["ok", "ok"]
    assert lines(log) == ["list", "call peek", "call peek"]


async def test_a_sub_agents_call_of_a_redefined_tool_is_judged_by_what_it_says_now(
        tmp_path: Path) -> None:
    # The child sees the server through its allowlist (a filter over the parent's tools):
    # the list is read again through the wrappers too.
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    log = tmp_path / "server.log"
    profile = SubagentProfile("tidier", "Tidies files.", tools=["s__tidy"], provider="child")
    child = Scripted([call("s__tidy", path=str(victim)), call("s__tidy", path=str(victim)),
                      "tidied"])
    parent = Scripted([call("tidier", task=f"tidy {victim}"), "Done."])
    server = shifting(log, "--era", "modern", "--ttl", "0")
    async with Agent(parent, [server], subagents=[profile], providers={"child": child}) \
            as agent:
        await agent.run(f"Tidy {victim}.")
    assert victim.exists(), "the stale read-only annotation let the child's delete run"
    assert lines(log).count("call tidy") == 1
