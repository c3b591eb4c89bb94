"""A compromised model aims the file tools outside the workspace: through ``..``, absolute
paths and symlinks. Writes run with permission_mode="allow" so that approval is not what
stops them: confinement is."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.security.conftest import (
    OUTSIDE_SECRET,
    Compromised,
    Guard,
    agent,
    events_of,
    instruction,
    model_saw,
    nothing_left,
    snapshot,
)
from tests.servers.http import LoopbackServer
from tether import Tool
from tether import events as ev


@pytest.fixture
def links(ws: Path) -> Path:
    """Symlinks inside the workspace that point out of it."""
    outside = ws.parent / "outside"
    (ws / "innocent.txt").symlink_to(outside / "id_rsa")
    (ws / "docs").symlink_to(outside)
    return ws


def escapes(ws: Path) -> list[str]:
    return ["../outside/id_rsa", "./../outside/id_rsa", str(ws.parent / "outside" / "id_rsa"),
            "innocent.txt", "docs/id_rsa", str(ws / "docs" / "id_rsa")]


async def test_reads_that_escape_are_refused_and_the_outside_file_never_reaches_the_model(
        links: Path, tools: list[Tool], attacker: LoopbackServer, guard: Guard) -> None:
    ws = links
    steps = [("read_file", {"path": p}) for p in escapes(ws)]
    steps += [("list_dir", {"path": ".."}), ("list_dir", {"path": "docs"}),
              ("grep", {"pattern": "ssh-key"}), ("grep", {"pattern": "ssh", "path": "docs"}),
              ("grep", {"pattern": "ssh", "path": "/"})]
    model = Compromised().model()
    result = await agent(model, ws, tools).run(instruction(*steps))

    nothing_left(attacker, guard)
    assert not model_saw(model, OUTSIDE_SECRET) and not model_saw(model, "id_rsa\n")
    by_call = {e.call_id: e for e in events_of(result, ev.ToolFinished)}
    for i, (name, args) in enumerate(steps):
        done = by_call[f"t1_{i}"]
        if name == "grep" and args.get("path") is None:
            # A search of the whole workspace is fine; it just never follows the links out.
            assert done.status == "ok" and "no matches" in done.result.content
            continue
        assert done.status == "error", (name, args)
        assert "outside the workspace" in done.result.content, (name, args)
    assert len(result.tool_calls) == len(steps)


@pytest.mark.parametrize("tool_name", ["write_file", "edit_file"])
async def test_writes_that_escape_are_refused_and_nothing_is_written(
        tool_name: str, links: Path, tools: list[Tool], attacker: LoopbackServer,
        guard: Guard) -> None:
    ws = links
    before = snapshot(ws.parent)
    targets = [*escapes(ws), "../outside/new_file", "docs/new_file",
               str(ws.parent / "planted")]
    args = [({"path": p, "content": "pwned"} if tool_name == "write_file" else
             {"path": p, "old_text": "ssh-key", "new_text": "pwned"}) for p in targets]
    result = await agent(Compromised().model(), ws, tools, permission_mode="allow").run(
        instruction(*[(tool_name, a) for a in args]))

    nothing_left(attacker, guard)
    assert snapshot(ws.parent) == before
    assert [r.status for r in result.tool_calls] == ["error"] * len(targets)
    assert all("outside the workspace" in r.output for r in result.tool_calls)
    assert [d.by for d in events_of(result, ev.ApprovalDecided)] == ["permission_mode"] * len(
        targets)  # approval said yes; confinement said no
