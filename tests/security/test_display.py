"""What a person sees is what runs. Text a model, a tool or a server wrote reaches every
surface (approval panels, the run's progress and answer, tool lists, sessions, doctor) as
it is: rich markup printed as brackets, never interpreted; controls, escapes, bidi
overrides, zero-width and tag characters made visible; lone surrogates never a crash."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.panel import Panel

from tests.servers.http import Canned, LoopbackServer
from tests.test_chat import tether, workspace
from tether import Agent, Capabilities, SubagentProfile, Tool, ToolSpec, tool
from tether.approval import ApprovalRequest
from tether.cli.approver import approval_text
from tether.cli.render import EventRenderer
from tether.display import json_dumps, literal
from tether.providers.scripted import Scripted, call, calls
from tether.store import Session, SQLiteStore
from tether.trust import Taint

ODD = ["[bold]bold?[/]", "[/]", "[link=https://evil.example]click[/link]", ":warning:",
       "\x1b[2J", "\x1b]8;;https://evil.example\x07link\x1b]8;;\x07", "safe\rEVIL",
       "\u202eevil.exe", "zero\u200bwidth", "\ufeffbom", "tag\U000e0041\U000e0042",
       "lone \ud800 surrogate", "\x9b31m", "line\u2028break", "nul\x00", "del\x7f",
       "joiner\u2066\u2069", "var\ufe0fsel"]
HIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e"
                    "\u2060-\u2069\ufe00-\ufe0f\ufeff\U000e0000-\U000e007f\ud800-\udfff]")
HOSTILE = str(Path(__file__).parents[1] / "mcp_servers" / "hostile.py")


def assert_literal(output: str) -> None:
    found = HIDDEN.search(output)
    assert found is None, f"a hidden character {found.group()!r} reached the person: " \
                          f"{output[max(0, found.start() - 40):found.end() + 40]!r}"


def console() -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, width=5000, force_terminal=False, color_system=None,
                   highlight=False), buffer


# --- the rule ----------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ODD)
def test_literal_makes_every_hidden_character_visible_and_keeps_the_rest(text: str) -> None:
    shown = literal(text)
    assert_literal(shown)
    assert "[" not in text or "[" in shown  # brackets stay brackets
    shown.encode("utf-8")  # printable anywhere


def test_newlines_and_tabs_lay_text_out_and_letters_stay_letters() -> None:
    assert literal("a\n\tb é 日本 🙂") == "a\n\tb é 日本 🙂"
    assert literal("\x1b[2J") == "\\x1b[2J" and literal("\u202e") == "\\u202e"
    assert literal("\U000e0041") == "\\U000e0041"


@pytest.mark.parametrize("text", ODD)
def test_json_output_is_the_same_value_with_nothing_hidden(text: str) -> None:
    out = json_dumps({"text": text, "é": ["日本"]}, indent=2)
    assert_literal(out)
    assert json.loads(out) == {"text": text, "é": ["日本"]}
    assert "é" in out and "日本" in out


# --- the approval panel ------------------------------------------------------------------------


def panel(request: ApprovalRequest) -> str:
    con, buffer = console()
    con.print(Panel(approval_text(request), title="Approval needed"))
    return buffer.getvalue()


@pytest.mark.parametrize("text", ODD)
def test_the_approval_panel_shows_the_machine_name_and_every_argument_literally(
        text: str) -> None:
    content = f"first line\n{text}\n" + "x" * 3000 + "\nlast line"
    request = ApprovalRequest("c1", "write_file", f"Harmless {text}",
                              {"path": f"notes{text}.txt", "content": content},
                              "needs_approval", f"{text} needs approval.", Taint(),
                              Capabilities(destructive=True), content_params=("content",))
    shown = panel(request)
    assert_literal(shown)
    assert "(write_file)" in shown.splitlines()[1]  # beside the title, on its line
    for line in content.split("\n"):  # the whole content, line by line, nothing cut
        assert literal(line) in shown
    assert literal(text) in shown and "destructive" in shown


def test_an_edit_is_shown_as_the_lines_it_removes_and_adds() -> None:
    request = ApprovalRequest("c1", "edit_file", "Edit file",
                              {"path": "app.py", "old_text": "a = 1\nb = 2\nc = 3",
                               "new_text": "a = 1\nb = [red]20[/]\x1b[2J\nc = 3"},
                              "needs_approval", "Edit file needs approval.", Taint(),
                              content_params=("old_text", "new_text"))
    lines = [line.strip("│ ").rstrip() for line in panel(request).splitlines()]
    assert "- b = 2" in lines and "+ b = [red]20[/]\\x1b[2J" in lines
    assert "a = 1" in lines and "c = 3" in lines


def test_a_server_title_cannot_pose_as_another_tool_in_the_panel() -> None:
    request = ApprovalRequest("c1", "evil__wipe_everything", "Read file", {}, "needs_approval",
                              "Read file needs approval before it runs.", Taint())
    first = panel(request).splitlines()[1]
    assert "Read file" in first and "(evil__wipe_everything)" in first


# --- the run's progress, in process -------------------------------------------------------------


def test_the_progress_lines_and_the_answer_show_every_odd_text_literally() -> None:
    odd = " | ".join(ODD)

    @tool(title=f"Title {odd}")
    def lookup(query: str) -> str:
        """Look something up."""
        return f"result {odd}"

    profile = SubagentProfile("helper", "Help.", tools=["lookup"], provider="child")
    child = Scripted([call("lookup", query=odd), f"child says {odd}"])
    model = Scripted([calls(("lookup", {"query": odd}), (f"no_such{odd}", {"x": odd}),
                            ("helper", {"task": odd})), f"The answer: {odd}"])
    out = io.StringIO()
    con, err = console()
    renderer = EventRenderer(out=out, err=con)
    agent = Agent(model, tools=[lookup], subagents=[profile], providers={"child": child})
    import asyncio

    async def run() -> None:
        async for event in agent.stream("go"):
            renderer(event)

    asyncio.run(run())
    assert_literal(out.getvalue())
    assert_literal(err.getvalue())
    assert literal(f"The answer: {odd}") in out.getvalue()
    for piece in ("[bold]bold?[/]", "\\x1b[2J", "\\u202e", "\\ud800", "(lookup)"):
        assert piece in err.getvalue(), piece


# --- the command line ---------------------------------------------------------------------------


def chat_answer(text: str) -> Canned:
    return Canned.json({"id": "x", "model": "m", "choices": [{
        "index": 0, "finish_reason": "stop",
        "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 5}})


def chat_calls(*items: tuple[str, str, dict[str, Any]]) -> Canned:
    return Canned.json({"id": "x", "model": "m", "choices": [{
        "index": 0, "finish_reason": "tool_calls",
        "message": {"role": "assistant", "content": None, "tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, n, a in items]}}], "usage": {"prompt_tokens": 5, "completion_tokens": 5}})


def clean(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr
    assert_literal(proc.stdout)
    assert_literal(proc.stderr)


def test_tether_run_prints_the_answer_tool_names_and_results_literally(tmp_path: Path) -> None:
    odd = " | ".join(ODD)
    with LoopbackServer() as server:
        server.queue(chat_calls(("c1", "read_file", {"path": f"notes{odd}"}),
                                ("c2", f"evil{odd}", {"x": odd})),
                     chat_answer(f"Answer {odd}"),
                     chat_calls(("c1", "read_file", {"path": "notes.txt"})),
                     chat_answer(f"Answer {odd}"))
        env = workspace(tmp_path, server.url)
        shown = tether(tmp_path, env, "run", "go")
        as_json = tether(tmp_path, env, "run", "--json", "go")
    clean(shown)
    clean(as_json)
    # A lone surrogate a server sends is repaired to U+FFFD as it arrives (see
    # tests/faults/test_provider_text.py); everything else reaches the person as sent.
    received = f"Answer {odd}".replace("\ud800", "\ufffd")
    assert shown.returncode == 0 and literal(received) in shown.stdout
    assert "\\x1b[2J" in shown.stderr and "[bold]bold?[/]" in shown.stderr
    assert json.loads(as_json.stdout)["text"] == received  # the value, exactly


def test_tether_tools_and_doctor_show_what_a_server_wrote_literally(tmp_path: Path) -> None:
    with LoopbackServer() as server:
        env = workspace(tmp_path, server.url)
        failing = ("import sys; sys.stderr.write('[bold red]all good[/] \\x1b[2J\\u202e'); "
                   "sys.exit(3)")
        with (tmp_path / "tether.toml").open("a") as f:
            f.write(f'\n[[mcp]]\nname = "hostile"\ncommand = {json.dumps(sys.executable)}\n'
                    f'args = [{json.dumps(HOSTILE)}]\n'
                    f'\n[[mcp]]\nname = "broken"\ncommand = {json.dumps(sys.executable)}\n'
                    f'args = ["-c", {json.dumps(failing)}]\n')
        table = tether(tmp_path, env, "tools")
        rows = tether(tmp_path, env, "tools", "--json")
        doctor = tether(tmp_path, env, "doctor")
    for proc in (table, rows, doctor):
        clean(proc)
    assert "[bold green]Safe notes[/] \\x1b[2J" in table.stdout
    assert "hostile__notes" in table.stdout
    by_name = {r["name"]: r for r in json.loads(rows.stdout)}
    assert by_name["hostile__notes"]["title"].startswith("[bold green]Safe notes[/] \x1b[2J")
    assert "[bold red]all good[/] \\x1b[2J\\u202e" in doctor.stdout


def test_tether_sessions_list_and_show_print_titles_and_transcripts_literally(
        tmp_path: Path) -> None:
    odd = " | ".join(ODD)

    @tool
    def lookup(query: str) -> str:
        """Look it up."""
        return f"found {odd}"

    store = SQLiteStore(tmp_path / "sessions.db")
    session = Session.create(store, provider=f"p{odd}", model=f"m{odd}", id="odd",
                             title=f"Title {odd}")
    Agent(Scripted([call("lookup", query=odd, id=f"id{odd}"), f"Answer {odd}"]),
          tools=[lookup]).run_sync(f"Prompt {odd}", session=session)
    store.close()
    with LoopbackServer() as server:
        env = workspace(tmp_path, server.url)
        listed = tether(tmp_path, env, "sessions", "list")
        listed_json = tether(tmp_path, env, "sessions", "list", "--json")
        shown = tether(tmp_path, env, "sessions", "show", "odd", "--events")
        shown_json = tether(tmp_path, env, "sessions", "show", "odd", "--json")
    for proc in (listed, listed_json, shown, shown_json):
        clean(proc)
        assert proc.returncode == 0, proc.stderr
    assert "[bold]bold?[/]" in listed.stdout and "\\x1b[2J" in listed.stdout
    assert "found [bold]bold?[/] | [/] | [link=https://evil.example]click[/link]" in \
        shown.stdout
    # The store keeps a lone surrogate as U+FFFD (it cannot be UTF-8); the rest as written.
    stored = f"Answer {odd}".replace("\ud800", "\ufffd")
    assert json.loads(shown_json.stdout)["messages"][-1]["parts"][0]["text"] == stored


def test_the_chat_approval_panel_shows_the_exact_write_that_would_run(tmp_path: Path) -> None:
    odd = " | ".join(ODD)
    content = "line one\n" + odd + "\n" + "y" * 500 + "\nline four\n"
    with LoopbackServer() as server:
        server.queue(chat_calls(("w1", "write_file", {"path": "out.txt", "content": content})),
                     chat_answer("I did not write it."))
        env = {**workspace(tmp_path, server.url), "COLUMNS": "2000"}
        proc = tether(tmp_path, env, "chat", "--no-store", stdin="write it\nn\n/exit\n")
    clean(proc)
    assert not (tmp_path / "out.txt").exists()
    panel_text = proc.stderr
    assert "Write file (write_file)" in panel_text
    for line in content.splitlines():
        assert literal(line) in panel_text, line


def test_a_tool_whose_spec_title_is_markup_is_listed_as_text(tmp_path: Path) -> None:
    spec = ToolSpec("plain_name", "desc", {"type": "object", "properties": {}},
                    title="[blink]Title[/] \x1b[5m")

    async def handler(arguments: dict[str, Any], ctx: Any) -> str:
        return "ok"

    agent = Agent(Scripted([]), tools=[Tool(spec, handler)])
    con, buffer = console()
    from tether.display import plain

    con.print(plain(agent.tools["plain_name"].spec.display_name))
    assert buffer.getvalue().strip() == "[blink]Title[/] \\x1b[5m"
