"""What `tether` commands print when their output goes to a pipe or a file: no table or line
is wrapped or cut at a terminal's width (a narrow COLUMNS included), and every list takes
one limit rule (`-n N` / `--limit N`, 0 for all, a line saying when more were left out)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.test_cli import workspace
from tests.test_cli_first_hour import tether

# Longer than any terminal's row, with a table's other columns beside it.
LONG_NAME = "summarize_the_quarterly_revenue_report_for_the_board_of_directors_in_full"
LONG_TITLE = ("Summarize the quarterly revenue report for the board of directors, every "
              "region and every product line, with the figures")
NARROW = {"COLUMNS": "40"}


def long_tool(ws: Path) -> Path:
    (ws / "board.py").write_text(f'''
from tether import tool

@tool(name="{LONG_NAME}", title="{LONG_TITLE}")
def summarize(quarter: str) -> str:
    """Summarize a quarter."""
    return quarter
''')
    toml = ws / "tether.toml"
    toml.write_text(toml.read_text() + 'python = ["board.py"]\n')
    return ws


def row_of(out: str, marker: str) -> str:
    [row] = [line for line in out.splitlines() if marker in line]
    return row


def test_tools_piped_keeps_each_tool_on_one_whole_row(tmp_path: Path) -> None:
    ws = long_tool(workspace(tmp_path, "http://127.0.0.1:9/v1"))
    out = tether(ws, "tools", env=NARROW)
    assert out.returncode == 0, out.stderr
    row = row_of(out.stdout, LONG_NAME)  # `tether tools | grep NAME` finds it
    assert LONG_TITLE in row and "calculator" in out.stdout
    assert "…" not in out.stdout


def test_sessions_list_piped_shows_ids_and_titles_whole(tmp_path: Path) -> None:
    from tether.store import Session, SQLiteStore

    ws = workspace(tmp_path, "http://127.0.0.1:9/v1")
    store = SQLiteStore(ws / "sessions.db")
    Session.create(store, id=LONG_NAME, title=LONG_TITLE, model="a-model-with-a-long-name-q8")
    out = tether(ws, "sessions", "list", env=NARROW)
    assert out.returncode == 0, out.stderr
    row = row_of(out.stdout, LONG_NAME)
    assert LONG_TITLE in row and "a-model-with-a-long-name-q8" in row
    assert "…" not in out.stdout


def test_sessions_show_and_logs_piped_print_each_message_whole(tmp_path: Path) -> None:
    from tether.messages import Message
    from tether.store import Session, SQLiteStore

    ws = workspace(tmp_path, "http://127.0.0.1:9/v1")
    store = SQLiteStore(ws / "sessions.db")
    session = Session.create(store, id="s1", title="long")
    prompt = " ".join(f"ask{n}" for n in range(120))
    answer = " ".join(f"word{n}" for n in range(200))
    session.conversation().append(Message.user(prompt))
    session.conversation().append(Message.assistant(answer))
    shown = tether(ws, "sessions", "show", "s1", env=NARROW)
    assert shown.returncode == 0, shown.stderr
    assert prompt in row_of(shown.stdout, "ask0 ") and answer in row_of(shown.stdout, "word0 ")
    logged = tether(ws, "logs", env=NARROW)
    assert logged.returncode == 0, logged.stderr
    assert prompt in row_of(logged.stdout, "ask0 ")


def sessions(ws: Path, count: int) -> None:
    from tether.store import Session, SQLiteStore

    store = SQLiteStore(ws / "sessions.db")
    for n in range(count):
        Session.create(store, id=f"s{n:02}", title=f"prompt {n}")


def test_sessions_list_says_when_more_are_stored_and_0_lists_them_all(tmp_path: Path) -> None:
    ws = workspace(tmp_path, "http://127.0.0.1:9/v1")
    sessions(ws, 23)
    default = tether(ws, "sessions", "list")
    assert default.returncode == 0, default.stderr
    assert default.stdout.count("prompt ") == 20
    assert "20 shown; more are stored (-n 0 lists all)" in default.stderr
    everything = tether(ws, "sessions", "list", "--limit", "0")
    assert everything.stdout.count("prompt ") == 23 and "more" not in everything.stderr
    three = tether(ws, "sessions", "list", "-n", "3", "--json")
    assert len(json.loads(three.stdout)) == 3 and "3 shown" in three.stderr
    exact = tether(ws, "sessions", "list", "-n", "23")
    assert exact.stdout.count("prompt ") == 23 and "more" not in exact.stderr
    negative = tether(ws, "sessions", "list", "--limit", "-1")
    assert negative.returncode == 1 and "0 (all) or more" in negative.stderr


def test_logs_follow_the_same_limit_rule(tmp_path: Path) -> None:
    ws = workspace(tmp_path, "http://127.0.0.1:9/v1")
    sessions(ws, 12)
    default = tether(ws, "logs")
    assert default.returncode == 0, default.stderr
    assert default.stdout.count("> ") == 10
    assert "10 shown; more are stored (-n 0 lists all)" in default.stderr
    everything = tether(ws, "logs", "--limit", "0")
    assert everything.stdout.count("> ") == 12 and "more" not in everything.stderr


def test_a_piped_chat_shows_an_approval_without_wrapping_its_lines(tmp_path: Path) -> None:
    from tests.servers.http import LoopbackServer
    from tests.test_chat import answer, tool_call
    from tests.test_chat import tether as chat
    from tests.test_chat import workspace as chat_workspace

    long_path = "reports/" + "q" * 150 + ".txt"
    with LoopbackServer() as server:
        server.queue(tool_call("c1", "write_file", path=long_path, content="x"),
                     answer("Left alone."))
        env = {**chat_workspace(tmp_path, server.url), **NARROW}
        done = chat(tmp_path, env, "chat", "--no-store", stdin="write the report\nn\n")
    assert done.returncode == 0, done.stderr
    assert long_path in row_of(done.stderr, "qqqq")
    assert "Approval needed" in done.stderr and "╭" not in done.stderr
