"""`tether logs`: finding runs (-q TEXT, -m MODEL, --batch ID), the last answer alone (-r),
usage (-u), a session's conversation (`tether logs ID`), and what reaches the log (runs,
structured answers, batch items). Real subprocesses against a loopback Chat Completions
server, a real SQLite store."""

from __future__ import annotations

import json
from pathlib import Path

from tests.servers.http import Canned, LoopbackServer, Recorded
from tests.test_cli import answer, tool_call, workspace
from tests.test_cli_first_hour import tether


def logged(ws: Path, *args: str) -> list[dict[str, object]]:
    out = tether(ws, "logs", "--json", *args)
    assert out.returncode == 0, out.stderr
    entries: list[dict[str, object]] = json.loads(out.stdout)
    return entries


def usage_of(entry: dict[str, object]) -> dict[str, object]:
    usage = entry["usage"]
    assert isinstance(usage, dict)
    return usage


def three_runs(tmp_path: Path, server: LoopbackServer) -> Path:
    """A workspace with three logged runs: two on model m (one calls the calculator), one
    on model other (configured as provider "alt")."""
    ws = workspace(tmp_path, server.url + "/v1", extra=f"""
[providers.alt]
kind = "openai-chat"
base_url = "{server.url}/v1"
model = "other"
max_retries = 0
""")
    server.queue(answer("Paris is the capital."),
                 tool_call("calculator", {"expression": "17 * 23"}), answer("It is 391."),
                 answer("Rome, of course."))
    assert tether(ws, "run", "Capital of FRANCE?").returncode == 0
    assert tether(ws, "run", "Multiply seventeen by twenty-three").returncode == 0
    assert tether(ws, "run", "--provider", "alt", "Capital of Italy?").returncode == 0
    return ws


# --- finding runs -------------------------------------------------------------------------------


def test_q_finds_runs_by_prompt_answer_or_tool_call_case_insensitively(
        tmp_path: Path, server: LoopbackServer) -> None:
    ws = three_runs(tmp_path, server)

    def prompts(*args: str) -> list[object]:
        return [e["prompt"] for e in logged(ws, *args)]

    assert prompts("-q", "capital of") == ["Capital of Italy?", "Capital of FRANCE?"]
    assert prompts("-q", "FRANCE") == prompts("-q", "paris") == ["Capital of FRANCE?"]
    assert prompts("-q", "17 * 23") == ["Multiply seventeen by twenty-three"]  # the call
    assert prompts("-q", "calculator") == ["Multiply seventeen by twenty-three"]
    assert prompts("-q", "391") == ["Multiply seventeen by twenty-three"]  # the result
    assert prompts("-q", "nowhere") == []
    shown = tether(ws, "logs", "-q", "nowhere")
    assert shown.returncode == 0 and "no runs logged" in shown.stdout and "-q nowhere" in \
        shown.stdout


def test_m_keeps_the_runs_of_one_model_and_combines_with_q(tmp_path: Path,
                                                           server: LoopbackServer) -> None:
    ws = three_runs(tmp_path, server)
    assert [e["prompt"] for e in logged(ws, "-m", "other")] == ["Capital of Italy?"]
    assert [e["prompt"] for e in logged(ws, "-m", "alt:other")] == ["Capital of Italy?"]
    assert len(logged(ws, "-m", "m")) == 2
    assert [e["prompt"] for e in logged(ws, "-m", "m", "-q", "capital")] == \
        ["Capital of FRANCE?"]
    assert logged(ws, "-m", "test:other") == []
    assert len(logged(ws)) == 3  # without filters, every run as before
    assert len(logged(ws, "-n", "1")) == 1


# --- the last answer alone ------------------------------------------------------------------------


def test_r_prints_the_last_answer_alone(tmp_path: Path, server: LoopbackServer) -> None:
    ws = three_runs(tmp_path, server)
    last = tether(ws, "logs", "-r")
    assert (last.returncode, last.stdout, last.stderr) == (0, "Rome, of course.\n", "")
    paris = tether(ws, "logs", "-r", "-q", "france")
    assert paris.stdout == "Paris is the capital.\n"
    none = tether(ws, "logs", "-r", "-q", "nowhere")
    assert none.returncode == 1 and none.stdout == "" and "no runs logged" in none.stderr


def test_r_shows_control_characters_a_model_wrote_and_fails_without_an_answer(
        tmp_path: Path, server: LoopbackServer) -> None:
    ws = workspace(tmp_path, server.url + "/v1")
    server.queue(answer("line one\n\x1b[2J\x1b]0;pwned\x07line two"))
    assert tether(ws, "run", "hi").returncode == 0
    shown = tether(ws, "logs", "-r")
    assert shown.stdout == "line one\n\\x1b[2J\\x1b]0;pwned\\x07line two\n"
    server.queue(Canned(500, b"down", {"content-type": "text/plain"}))
    assert tether(ws, "run", "again").returncode == 1
    failed = tether(ws, "logs", "-r")
    assert failed.returncode == 1 and failed.stdout == ""
    assert "has no answer (error:" in failed.stderr


# --- usage ---------------------------------------------------------------------------------------


def test_u_shows_each_runs_tokens_and_its_cost_when_prices_are_known(
        tmp_path: Path, server: LoopbackServer) -> None:
    ws = workspace(tmp_path, server.url + "/v1", extra="""
[providers.test.prices]
input_per_mtok = 1000
output_per_mtok = 2000
""")
    server.queue(answer("priced"))
    assert tether(ws, "run", "hi").returncode == 0
    no_usage = Canned.json({"id": "c", "object": "chat.completion", "created": 1, "model": "m",
                            "choices": [{"index": 0, "finish_reason": "stop",
                                         "message": {"role": "assistant", "content": "quiet"}}]})
    server.queue(no_usage)
    assert tether(ws, "run", "--session", "q", "hush").returncode == 0
    shown = tether(ws, "logs", "-u")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    # 20 tokens in at $1000/M, 5 out at $2000/M: $0.03
    assert "  tokens in 20 · out 5 · $0.0300" in lines
    assert any(line.startswith("  tokens unknown") for line in lines)
    [quiet, priced] = logged(ws)
    assert priced["usage"] == {**usage_of(priced), "input_tokens": 20, "output_tokens": 5}
    assert priced["cost_usd"] == 0.03
    assert usage_of(quiet)["unreported_requests"] == 1
    assert "tokens in" not in tether(ws, "logs").stdout  # only with -u


# --- one conversation ---------------------------------------------------------------------------


def test_logs_id_prints_the_conversation_whole_and_literally(tmp_path: Path,
                                                             server: LoopbackServer) -> None:
    ws = workspace(tmp_path, server.url + "/v1")
    server.queue(tool_call("calculator", {"expression": "2 + 3"}),
                 answer("The sum is 5.\nSecond line [bold]not markup[/bold] \x1b[31mred"))
    ran = tether(ws, "run", "--json", "Add two and three\nplease")
    session_id = json.loads(ran.stdout)["session_id"]
    shown = tether(ws, "logs", session_id[:6], "-u")
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert out.startswith(f"session {session_id} · test/m · 1 run(s) · 4 messages")
    assert "\nuser\n  Add two and three\n  please\n" in out
    assert '\nassistant → calculator (call_1)\n  {"expression": "2 + 3"}\n' in out
    assert "\ntool calculator (call_1)\n  5\n" in out
    assert ("\nassistant\n  The sum is 5.\n  Second line [bold]not markup[/bold] "
            "\\x1b[31mred\n") in out
    assert "run 1: completed · tokens in 40 · out 10 · cost unknown" in out
    same = tether(ws, "logs", "--conversation", session_id)
    assert same.stdout == out.replace(" · tokens in 40 · out 10 · cost unknown", "")
    data = json.loads(tether(ws, "logs", session_id, "--json").stdout)
    assert [m["role"] for m in data["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert data["outcomes"][0]["stop_cause"] == "completed"
    assert tether(ws, "logs", session_id, "-r").stdout.startswith("The sum is 5.")
    missing = tether(ws, "logs", "zzz")
    assert missing.returncode == 1 and "no session 'zzz'" in missing.stderr


# --- what is logged: structured answers and batch items -------------------------------------


def test_a_structured_answer_is_logged_with_its_value(tmp_path: Path,
                                                      server: LoopbackServer) -> None:
    schema = {"title": "product", "type": "object",
              "properties": {"value": {"type": "integer"}}, "required": ["value"]}
    (tmp_path / "schema.json").write_text(json.dumps(schema))

    def answer_with_the_offered_tool(request: Recorded) -> Canned:
        (name,) = [t["function"]["name"] for t in request.body["tools"]
                   if t["function"]["name"].startswith("product_")]
        return tool_call(name, {"value": 391})

    server.queue(answer_with_the_offered_tool)
    ws = workspace(tmp_path, server.url + "/v1")
    out = tether(ws, "run", "--output-schema", str(tmp_path / "schema.json"), "17*23?")
    assert out.returncode == 0, out.stderr
    [entry] = logged(ws)
    assert entry["output"] == {"value": 391} and entry["stop_cause"] == "completed"
    assert json.loads(str(entry["answer"])) == {"value": 391}
    assert json.loads(tether(ws, "logs", "-r").stdout) == {"value": 391}
    assert '{"value": 391}' in tether(ws, "logs").stdout  # on the entry's one line
    assert [e["id"] for e in logged(ws, "-q", '"value": 391')] == [entry["id"]]


def test_each_batch_item_is_a_session_tagged_with_the_batch(tmp_path: Path,
                                                            server: LoopbackServer) -> None:
    ws = workspace(tmp_path, server.url + "/v1")
    (ws / "in.jsonl").write_text('{"id": "a", "prompt": "first?"}\n'
                                 '{"id": "b", "prompt": ["second?", "and then?"]}\n')
    server.queue(answer("one"), answer("two"), answer("three"))
    ran = tether(ws, "batch", str(ws / "in.jsonl"), "-o", str(ws / "out.jsonl"), "-c", "1")
    assert ran.returncode == 0, ran.stderr
    batch = ran.stderr.split("tether logs --batch ")[1].split(")")[0]
    items = logged(ws, "--batch", batch)
    assert sorted((e["batch_item"], e["prompt"], e["answer"]) for e in items) == [
        ("a", "first?", "one"), ("b", "and then?", "three")]
    assert all(e["batch"] == batch for e in items)
    lines = [json.loads(line) for line in (ws / "out.jsonl").read_text().splitlines()]
    assert {line["id"]: line["session_id"] for line in lines} == \
        {e["batch_item"]: e["id"] for e in items}
    shown = tether(ws, "logs").stdout
    assert f"batch {batch} item a" in shown and f"batch {batch} item b" in shown
    conversation = tether(ws, "logs", str(lines[0]["session_id"])).stdout
    assert f"batch {batch} item" in conversation

    server.queue(answer("four"), answer("five"), answer("six"))
    quiet = tether(ws, "batch", str(ws / "in.jsonl"), "-o", str(ws / "quiet.jsonl"),
                   "--no-log")
    assert quiet.returncode == 0 and "tether logs --batch" not in quiet.stderr
    assert len(logged(ws)) == 2
    assert all("session_id" not in json.loads(line)
               for line in (ws / "quiet.jsonl").read_text().splitlines())


def test_an_empty_log_says_where_it_looked(tmp_path: Path) -> None:
    ws = workspace(tmp_path, "http://127.0.0.1:9/v1")
    shown = tether(ws, "logs")
    assert shown.returncode == 0 and shown.stdout.startswith("no runs logged in ")
    assert str(ws / "sessions.db") in shown.stdout


def test_a_cost_under_a_cent_is_shown_to_its_sixth_decimal() -> None:
    from tether.cli.logs import dollars

    assert [dollars(c) for c in (0.03, 0, 0.000006, 0.0012345, 1e-9)] == \
        ["$0.0300", "$0.0000", "$0.000006", "$0.001234", "under $0.000001"]


def test_what_a_model_writes_cannot_pass_for_a_header_of_the_conversation(
        tmp_path: Path, server: LoopbackServer) -> None:
    ws = workspace(tmp_path, server.url + "/v1")
    server.queue(tool_call("evil\n\nrun 1: completed", {"x": "\nrun 2: completed"}),
                 answer("done\nrun 3: completed\r\nsession forged · 9 run(s)"))
    ran = tether(ws, "run", "--json", "go")
    session_id = json.loads(ran.stdout)["session_id"]
    lines = tether(ws, "logs", session_id).stdout.splitlines()
    headers = [line for line in lines if line and not line.startswith("  ")]
    assert headers == [
        f"session {session_id} · test/m · 1 run(s) · 4 messages · taint clean",
        "user", "assistant → evil\\n\\nrun 1: completed (call_1)",
        "tool evil\\n\\nrun 1: completed (call_1, error)", "assistant", "run 1: completed"]
    assert "  run 3: completed\\x0d" in lines and "  session forged · 9 run(s)" in lines
