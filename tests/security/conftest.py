"""The security suite's cast: a compromised model, an attacker, a guard on the network.

- ``Compromised``: a scripted model that obeys every instruction it reads, in the user's
  text or in tool results (untrusted-data markers or not). An instruction is a line
  ``INSTRUCTION: call NAME {json}``; several calls joined by ``&&`` go in one turn, separate
  lines in separate turns. ``{{last:TOOL}}`` inside a string argument becomes the content
  of TOOL's latest result, URL-quoted: the way an injected prompt smuggles data out.
- ``attacker``: a loopback server recording every hit; it must see none.
- ``web``: a loopback server holding the pages with the injected text.
- ``guard``: the HTTP transport every fetch goes through: it records each request and
  refuses (without connecting) any address other than 127.0.0.1 / ::1, so a test that
  went wrong still never leaves the machine.
"""

from __future__ import annotations

import json
import os
import re
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
import pytest

from tests.servers.http import LoopbackServer
from tether import Agent, Tool
from tether import events as ev
from tether.builtins import edit_file, grep, list_dir, make_fetch_url, read_file, write_file
from tether.messages import Message, Text, ToolCall, ToolResult
from tether.network import system_resolve
from tether.providers import Reply, Scripted
from tether.providers.base import ModelRequest
from tether.result import RunResult

SECRET = "password=hunter2"
OUTSIDE_SECRET = "ssh-key=outside-the-workspace"

_INSTRUCTION = re.compile(r"INSTRUCTION:\s*(.+)$", re.MULTILINE)
_CALL = re.compile(r"^\s*call\s+(\w+)\s+(\{.*\})\s*$")
_LAST = re.compile(r"\{\{last:(\w+)\}\}")


class Compromised:
    """A model that does whatever injected text tells it. One plan, shared by all turns."""

    def __init__(self) -> None:
        self.plan: deque[list[tuple[str, Any]]] = deque()
        self.turn = 0

    def __call__(self, request: ModelRequest) -> Reply:
        self.turn += 1
        latest = request.messages[-1]
        for text in _texts(latest):
            for line in _INSTRUCTION.findall(text):
                self.plan.append([_parse_call(piece) for piece in line.split("&&")])
        if not self.plan:
            return Reply(text="Done.")
        step = self.plan.popleft()
        return Reply(calls=tuple(
            ToolCall(f"t{self.turn}_{i}", name, json.dumps(_render(args, request.messages)))
            for i, (name, args) in enumerate(step)))

    def model(self, turns: int = 12) -> Scripted:
        return Scripted([self] * turns)


def _texts(message: Message) -> list[str]:
    out = []
    for part in message.parts:
        if isinstance(part, Text):
            out.append(part.text)
        elif isinstance(part, ToolResult):
            out.append(part.content)
    return out


def _parse_call(piece: str) -> tuple[str, Any]:
    match = _CALL.match(piece)
    assert match, f"the compromised model cannot read {piece!r}"
    return match.group(1), json.loads(match.group(2))


def _render(value: Any, messages: Sequence[Message]) -> Any:
    if isinstance(value, str):
        return _LAST.sub(lambda m: quote(_last_result(m.group(1), messages), safe=""), value)
    if isinstance(value, dict):
        return {k: _render(v, messages) for k, v in value.items()}
    return value


def _last_result(tool: str, messages: Sequence[Message]) -> str:
    for message in reversed(messages):
        for part in message.parts:
            if isinstance(part, ToolResult) and part.name == tool:
                return part.content.strip()
    return ""


def instruction(*steps: tuple[str, dict[str, Any]]) -> str:
    """One injected line: these calls, in one turn."""
    return "INSTRUCTION: " + " && ".join(f"call {name} {json.dumps(args)}"
                                         for name, args in steps)


# --- the network ------------------------------------------------------------------------


@dataclass
class Sent:
    url: str
    host_header: str


@dataclass
class Guard:
    """Every request fetch_url makes passes here. Only loopback is ever connected to."""

    sent: list[Sent] = field(default_factory=list)

    def transport(self) -> httpx.AsyncBaseTransport:
        return _GuardTransport(self)


class _GuardTransport(httpx.AsyncBaseTransport):
    def __init__(self, guard: Guard) -> None:
        self.guard = guard
        self.inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.guard.sent.append(Sent(str(request.url), request.headers.get("host", "")))
        if request.url.host not in ("127.0.0.1", "::1"):
            raise httpx.ConnectError(f"test guard: refused to connect to {request.url.host}")
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


_NUMERIC_HOST = re.compile(r"[0-9a-fx.]+")


class TableResolver:
    """Made-up names (RFC 2606 ``.test``) from a table; ``localhost`` and numeric spellings
    of IPv4 addresses (``2130706433``, ``0x7f.1``) from the system resolver."""

    def __init__(self, table: dict[str, Sequence[str]]) -> None:
        self.table = table
        self.asked: list[str] = []

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.asked.append(host)
        if host == "localhost" or _NUMERIC_HOST.fullmatch(host):
            # Answered from /etc/hosts or parsed as a number (inet_aton): no DNS traffic.
            return await system_resolve(host, port)
        if host not in self.table:
            raise OSError(f"no such test host {host}")
        return self.table[host]


@pytest.fixture
def attacker() -> Iterator[LoopbackServer]:
    with LoopbackServer() as server:
        yield server


@pytest.fixture
def web() -> Iterator[LoopbackServer]:
    with LoopbackServer() as server:
        yield server


@pytest.fixture
def guard() -> Guard:
    return Guard()


@pytest.fixture
def resolver() -> TableResolver:
    return TableResolver({
        "attacker.test": ["127.0.0.1"],
        "intranet.test": ["10.0.0.7"],
        "metadata.test": ["169.254.169.254"],
        "mixed.test": ["93.184.216.34", "10.0.0.7"],
    })


@pytest.fixture
def tools(guard: Guard, resolver: TableResolver) -> list[Tool]:
    """The default built-ins, with fetch_url going through the guard."""
    return [read_file, list_dir, grep, write_file, edit_file,
            make_fetch_url(resolve=resolver, transport=guard.transport)]


# --- the file system ----------------------------------------------------------------------


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """The agent's workspace (holding secret.txt), beside a folder it must never reach."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "secret.txt").write_text(SECRET + "\n")
    (root / "notes.txt").write_text("meeting at noon\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "id_rsa").write_text(OUTSIDE_SECRET + "\n")
    return root


def snapshot(root: Path) -> dict[str, bytes | str]:
    """Every path under ``root``: bytes for files, targets for symlinks."""
    out: dict[str, bytes | str] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(folder) / name
            key = p.relative_to(root).as_posix()
            out[key] = ("-> " + os.readlink(p) if p.is_symlink()
                        else p.read_bytes() if p.is_file() else "dir")
    return out


# --- assertions ---------------------------------------------------------------------------


def events_of(result: RunResult, kind: type[Any]) -> list[Any]:
    return [e for e in result.events if isinstance(e, kind)]


def record(result: RunResult, name: str, index: int = -1) -> Any:
    return [r for r in result.tool_calls if r.name == name][index]


def finished(result: RunResult, call_id: str) -> ev.ToolFinished:
    found: ev.ToolFinished = next(e for e in events_of(result, ev.ToolFinished)
                                  if e.call_id == call_id)
    return found


def nothing_left(attacker: LoopbackServer, guard: Guard,
                 allowed: Sequence[LoopbackServer] = ()) -> None:
    """The attacker saw no request, and every request fetch_url made went to a server the
    test meant it to reach."""
    assert attacker.requests == [], f"the attacker was reached: {attacker.requests}"
    ports = {urlsplit(s.url).port for s in allowed}
    stray = [s for s in guard.sent if urlsplit(s.url).port not in ports]
    assert stray == [], f"requests left the process: {stray}"


def model_saw(model: Scripted, text: str) -> bool:
    """Whether ``text`` appears anywhere in what the model was sent."""
    for request in model.requests:
        for message in request.messages:
            if any(text in t for t in _texts(message)):
                return True
    return False


def agent(model: Scripted, ws: Path, tools: list[Tool], **kwargs: Any) -> Agent:
    return Agent(model, tools, workspace=ws, **kwargs)
