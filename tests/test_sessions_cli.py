"""`tether run --session`, `tether sessions ...` and `tether doctor` work the same on the
SQLite file and on a PostgreSQL database (a real server on loopback), and never print the
database's password. The real `tether` command in a child process, against a loopback
Chat Completions server."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.servers.http import LoopbackServer
from tests.servers.postgres import PASSWORD, PostgresServer
from tests.test_chat import answer, tether, tool_call, workspace
from tether import Agent, Capabilities, tool
from tether.providers.scripted import Scripted, call
from tether.run.pending import DeferringApprover
from tether.store import Session, SessionStore, SQLiteStore
from tether.store.postgres import mask_url


@dataclass
class CliStore:
    """Where the CLI keeps its sessions in one test, and a way to read them from here."""

    kind: str
    shown: str  # how the CLI names it
    url: str | None = None
    opened: list[SessionStore] = field(default_factory=list)

    def open(self, tmp_path: Path) -> SessionStore:
        if self.url is not None:
            from tether.store.postgres import PostgresStore

            store: SessionStore = PostgresStore(self.url)
        else:
            store = SQLiteStore(tmp_path / "sessions.db")
        self.opened.append(store)
        return store

    def configure(self, tmp_path: Path, env: dict[str, str]) -> dict[str, str]:
        """The workspace's env (tests.test_chat.workspace) pointed at this store: the
        database by ``[store] url`` in tether.toml (the file TETHER_STORE would override)."""
        if self.url is not None:
            del env["TETHER_STORE"]
            toml = tmp_path / "tether.toml"
            toml.write_text(toml.read_text() + f'[store]\nurl = "{self.url}"\n')
        return env


@pytest.fixture(params=["sqlite", "postgres"])
def cli_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CliStore]:
    if request.param == "postgres":
        server: PostgresServer = request.getfixturevalue("postgres_server")
        database = request.getfixturevalue("postgres_url").rsplit("/", 1)[1]
        url = server.url(database, password=PASSWORD)  # a role that must give its password
        chosen = CliStore("postgres", mask_url(url), url)
    else:
        chosen = CliStore("sqlite", str(tmp_path / "sessions.db"))
    try:
        yield chosen
    finally:
        for store in chosen.opened:
            store.close()


def test_sessions_are_run_listed_shown_and_removed_alike_on_every_store(
        tmp_path: Path, cli_store: CliStore) -> None:
    with LoopbackServer() as server:
        server.queue(tool_call("c1", "read_file", path="notes.txt"), answer("It says 0417."),
                     answer("The code is 0417."))
        env = cli_store.configure(tmp_path, workspace(tmp_path, server.url))
        first = tether(tmp_path, env, "run", "--session", "notes", "What does notes.txt say?")
        second = tether(tmp_path, env, "run", "--session", "notes", "And the code?")
    assert first.returncode == 0, first.stderr
    assert second.returncode == 0 and second.stdout == "The code is 0417.\n", second.stderr
    assert len(server.requests[2].body["messages"]) == 5  # the whole conversation was sent

    listed = tether(tmp_path, env, "sessions", "list")
    as_json = tether(tmp_path, env, "sessions", "list", "--json")
    shown = tether(tmp_path, env, "sessions", "show", "notes")
    shown_json = tether(tmp_path, env, "sessions", "show", "notes", "--json", "--events")
    assert listed.returncode == 0, listed.stderr
    assert f"sessions ({cli_store.shown})" in listed.stdout.replace("\n", "")
    assert "notes" in listed.stdout and "private" in listed.stdout
    [info] = json.loads(as_json.stdout)
    assert (info["id"], info["messages"], info["last_stop"]) == ("notes", 6, "completed")
    assert info["taint"] == {"private": True, "untrusted": False}
    assert "taint: private · 6 messages · 2 run(s)" in shown.stdout
    detail = json.loads(shown_json.stdout)
    assert [m["role"] for m in detail["messages"]] == \
        ["user", "assistant", "tool", "assistant", "user", "assistant"]
    assert [o["stop_cause"] for o in detail["outcomes"]] == ["completed", "completed"]
    assert any(e["kind"] == "tool_finished" for e in detail["events"])

    # What the CLI wrote, a host reads through the store API.
    session = Session.load("notes", cli_store.open(tmp_path))
    assert session.taint.private and session.messages[2].tool_results[0].content \
        .startswith("door code 0417")

    removed = tether(tmp_path, env, "sessions", "rm", "notes", "missing")
    assert removed.returncode == 1 and removed.stdout == "deleted notes\n"
    assert f"no session missing in {cli_store.shown}" in removed.stderr.replace("\n", "")
    empty = tether(tmp_path, env, "sessions", "list")
    assert empty.stdout.replace("\n", "") == f"no sessions in {cli_store.shown}"
    for done in (first, second, listed, as_json, shown, shown_json, removed, empty):
        assert PASSWORD not in done.stdout + done.stderr


def test_a_session_paused_by_a_host_is_decided_from_the_command_line_on_every_store(
        tmp_path: Path, cli_store: CliStore) -> None:
    @tool(needs_approval=True, capabilities=Capabilities(destructive=True))
    def write_file(path: str, content: str) -> str:
        """Write a file."""
        return "not run here"

    session = Session.create(cli_store.open(tmp_path), provider="loop", model="m", id="paused")
    Agent(Scripted([call("write_file", path="out.txt", content="hi", id="w1")]),
          tools=[write_file], approver=DeferringApprover()).run_sync("write hi", session=session)

    with LoopbackServer() as server:
        server.queue(answer("Wrote it."))
        env = cli_store.configure(tmp_path, workspace(tmp_path, server.url))
        blocked = tether(tmp_path, env, "run", "--session", "paused", "anything else?")
        shown = tether(tmp_path, env, "sessions", "show", "paused")
        resumed = tether(tmp_path, env, "sessions", "resume", "paused", "--allow", "w1")
    assert blocked.returncode == 1 and "paused waiting for approval of w1" in blocked.stderr
    assert "paused, waiting for decisions:" in shown.stdout
    assert resumed.returncode == 0 and resumed.stdout == "Wrote it.\n", resumed.stderr
    assert (tmp_path / "out.txt").read_text() == "hi"
    reloaded = Session.load("paused", cli_store.open(tmp_path))
    assert reloaded.pending is None and reloaded.info.last_stop == "completed"


def test_doctor_names_the_store_it_is_configured_with_and_its_schema(
        tmp_path: Path, cli_store: CliStore) -> None:
    env = cli_store.configure(tmp_path, workspace(tmp_path, "http://127.0.0.1:9"))
    Session.create(cli_store.open(tmp_path), id="one")
    done = tether(tmp_path, env, "doctor")
    line = next(x for x in done.stdout.splitlines() if "session store" in x)
    kind = "PostgreSQL 1" if cli_store.kind == "postgres" else "SQLite"
    assert line.startswith(f"✓ session store {cli_store.shown} ({kind}")
    assert line.endswith("writable (schema v3, 1 session(s))")
    assert PASSWORD not in done.stdout + done.stderr


def test_doctor_reports_a_database_it_cannot_reach_without_its_password(
        tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = workspace(tmp_path, "http://127.0.0.1:9")
    del env["TETHER_STORE"]
    env["TETHER_STORE_URL"] = f"postgresql://app:S3cretPw@127.0.0.1:{port}/tether"
    done = tether(tmp_path, env, "doctor")
    line = next(x for x in done.stdout.splitlines() if "session store" in x)
    assert line.startswith(f"✗ session store cannot open the session store "
                           f"postgresql://app:***@127.0.0.1:{port}/tether")
    assert done.returncode == 1 and "S3cretPw" not in done.stdout + done.stderr


def test_config_show_never_prints_the_store_password(tmp_path: Path) -> None:
    env = workspace(tmp_path, "http://127.0.0.1:9")
    toml = tmp_path / "tether.toml"
    toml.write_text(toml.read_text() + '[store]\nurl = "postgresql://app:S3cretPw@db/t"\n')
    done = tether(tmp_path, env, "config", "show")
    assert done.returncode == 0, done.stderr
    assert 'store.url = "postgresql://app:***@db/t"' in done.stdout
    json_done = tether(tmp_path, env, "config", "show", "--json")
    assert '"url": "postgresql://app:***@db/t"' in json_done.stdout
    assert "S3cretPw" not in json_done.stdout + json_done.stderr
    assert "S3cretPw" not in done.stdout + done.stderr
