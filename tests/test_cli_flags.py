"""The flags a newcomer reaches for, on every command where they make sense: `--local`
(run, chat, batch, sessions resume; tools and config show say what it changes), `chat -c`
and `chat --tools`, `--no-tools` and `-T NAME`, and `--output-schema` as a file, inline JSON
or a short list of fields. Real subprocesses against a loopback Chat Completions server."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.servers.http import Canned, LoopbackServer, Recorded
from tests.test_cli import answer, tool_call, workspace
from tests.test_cli_first_hour import tether
from tether.local.server import SYSTEM_PROMPT

UNREACHABLE = "http://127.0.0.1:9/v1"


def offered(request: Recorded) -> list[str]:
    return [t["function"]["name"] for t in request.body.get("tools") or []]


def chats(server: LoopbackServer) -> list[Recorded]:
    return [r for r in server.requests if r.path.endswith("/chat/completions")]


# --- --local ------------------------------------------------------------------------------


def local_stand_in(server: LoopbackServer, *answers: Canned) -> None:
    """``server`` as a llama-server already answering on the local port: its health check
    says ok, /props names the default model (what --local checks before reusing it), chat
    requests get ``answers`` in turn, anything else (a probe) a 404."""
    from tether.local.setup import default_cache_dir, default_model_path

    replies = list(answers)
    model = str(default_model_path(default_cache_dir()))

    def respond(request: Recorded) -> Canned:
        if request.path == "/health":
            return Canned.json({"status": "ok"})
        if request.path == "/props":
            return Canned.json({"model_path": model, "build_info": "b0-stand-in"})
        if request.path.endswith("/chat/completions") and replies:
            return replies.pop(0)
        return Canned.json({"error": {"message": "not here"}}, 404)

    server.queue(*[respond] * 60)


def local_workspace(tmp_path: Path, server: LoopbackServer) -> Path:
    """A workspace whose default provider cannot be reached, and whose [local] port is
    ``server``'s: only --local reaches a model. [tools] enabled is left unset."""
    port = server.url.rsplit(":", 1)[1]
    (tmp_path / "tether.toml").write_text(f"""
default_provider = "test"
[providers.test]
kind = "openai-chat"
base_url = "{UNREACHABLE}"
model = "m"
max_retries = 0
[local]
port = {port}
""")
    return tmp_path


def test_chat_local_talks_to_the_local_server_with_what_local_sets(
        tmp_path: Path, server: LoopbackServer) -> None:
    local_stand_in(server, answer("Hello."))
    ws = local_workspace(tmp_path, server)
    out = tether(ws, "chat", "--local", stdin="hi\n/exit\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "Hello.\n"
    [sent] = chats(server)
    assert sent.body["messages"][0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert sent.body["temperature"] == 0
    assert offered(sent) == ["calculator"]  # the small default model's short list


def test_batch_and_sessions_resume_take_local_too(tmp_path: Path,
                                                  server: LoopbackServer) -> None:
    local_stand_in(server, answer("Four."), answer("Noted."), answer("Five."))
    ws = local_workspace(tmp_path, server)
    (ws / "in.jsonl").write_text('"2+2?"\n')
    batch = tether(ws, "batch", str(ws / "in.jsonl"), "-o", str(ws / "out.jsonl"), "--local")
    assert batch.returncode == 0, batch.stderr
    assert json.loads((ws / "out.jsonl").read_text())["text"] == "Four."
    ran = tether(ws, "run", "--json", "--local", "remember 4")
    assert ran.returncode == 0, ran.stderr
    session = json.loads(ran.stdout)["session_id"]
    resumed = tether(ws, "sessions", "resume", session, "and 5?", "--local")
    assert resumed.returncode == 0, resumed.stderr
    assert "Five." in resumed.stdout
    assert len(chats(server)) == 3  # all three on the local server


def test_tools_and_config_show_say_what_local_changes_without_starting_a_server(
        tmp_path: Path, server: LoopbackServer) -> None:
    ws = local_workspace(tmp_path, server)
    tools = tether(ws, "tools", "--local", "--json")
    assert tools.returncode == 0, tools.stderr
    assert [r["name"] for r in json.loads(tools.stdout)] == ["calculator"]
    said = tools.stderr
    port = server.url.rsplit(":", 1)[1]
    assert f"--local: provider local, a llama-server at http://127.0.0.1:{port}/v1" in said
    assert "adds the system prompt" in said and SYSTEM_PROMPT in said
    assert "offers the built-ins calculator only" in said
    shown = tether(ws, "config", "show", "--local")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert any(line.startswith('default_provider = "local"') and line.endswith("# --local")
               for line in lines)
    assert any(line.startswith("# --local: adds the system prompt") for line in lines)
    plain = tether(ws, "config", "show")
    assert "--local" not in plain.stdout
    assert server.requests == []  # neither asked a server anything


# --- chat -c and chat --tools ---------------------------------------------------------------


def test_chat_c_continues_the_most_recent_session(tmp_path: Path,
                                                  server: LoopbackServer) -> None:
    server.queue(answer("Noted: 7."), answer("You said 7."))
    ws = workspace(tmp_path, server.url + "/v1")
    assert tether(ws, "chat", stdin="Remember 7.\n").returncode == 0
    again = tether(ws, "chat", "-c", stdin="What did I say?\n")
    assert again.returncode == 0, again.stderr
    sent = server.requests[1].body["messages"]
    assert [m["content"] for m in sent] == ["Remember 7.", "Noted: 7.", "What did I say?"]
    nothing = tether(ws, "chat", "-c", "--no-store", stdin="hi\n")
    assert nothing.returncode == 1 and "--no-store" in nothing.stderr


def test_chat_tools_offers_the_tools_of_a_file(tmp_path: Path, server: LoopbackServer) -> None:
    server.queue(answer("Done."))
    ws = workspace(tmp_path, server.url + "/v1")
    (ws / "loud.py").write_text('from tether import tool\n\n@tool\ndef shout(text: str) -> str:'
                                '\n    """Shout."""\n    return text.upper()\n')
    out = tether(ws, "chat", "--tools", str(ws / "loud.py"), stdin="shout hi\n")
    assert out.returncode == 0, out.stderr
    assert offered(server.requests[0]) == ["calculator", "shout"]


# --- --no-tools and -T ----------------------------------------------------------------------


def failing_mcp(ws: Path) -> Path:
    """An MCP server that fails to start, and a tool file that says when it is loaded."""
    (ws / "loaded.py").write_text('import sys\nprint("tool file loaded", file=sys.stderr)\n'
                                  'from tether import tool\n\n@tool\ndef ping() -> str:\n'
                                  '    """Ping."""\n    return "pong"\n')
    toml = ws / "tether.toml"
    toml.write_text(toml.read_text().replace("[tools]\n", '[tools]\npython = ["loaded.py"]\n')
                    + f'\n[[mcp]]\nname = "gone"\ncommand = '
                                       f'{json.dumps(sys.executable)}\n'
                                       f'args = ["-c", "raise SystemExit(\'no token\')"]\n')
    return ws


def test_no_tools_offers_nothing_and_starts_no_server(tmp_path: Path,
                                                      server: LoopbackServer) -> None:
    server.queue(answer("Hi."), answer("Hi."))
    ws = failing_mcp(workspace(tmp_path, server.url + "/v1"))
    with_tools = tether(ws, "run", "hi")
    assert "no token" in with_tools.stderr  # the server was started (and failed)
    assert "tool file loaded" in with_tools.stderr
    none = tether(ws, "run", "--no-tools", "hi")
    assert none.returncode == 0, none.stderr
    assert "tools" not in server.requests[1].body and "no token" not in none.stderr
    assert "tool file loaded" not in none.stderr
    chat = tether(ws, "tools", "--no-tools", "--json")
    assert json.loads(chat.stdout) == []
    both = tether(ws, "run", "--no-tools", "-T", "calculator", "hi")
    assert both.returncode == 1 and "choose one" in both.stderr


def test_t_offers_just_the_named_tools_a_built_in_included(tmp_path: Path,
                                                          server: LoopbackServer) -> None:
    server.queue(answer("Read."), answer("Hi."))
    ws = workspace(tmp_path, server.url + "/v1")  # [tools] enabled = ["calculator"]
    out = tether(ws, "run", "-T", "read_file", "read notes")
    assert out.returncode == 0, out.stderr
    assert offered(server.requests[0]) == ["read_file"]
    chat = tether(ws, "chat", "--tool", "calculator", stdin="hi\n")
    assert chat.returncode == 0, chat.stderr
    assert offered(server.requests[1]) == ["calculator"]


def test_t_naming_no_tool_is_an_error_listing_the_tools(tmp_path: Path,
                                                       server: LoopbackServer) -> None:
    ws = workspace(tmp_path, server.url + "/v1")
    out = tether(ws, "run", "-T", "calculater", "hi")
    assert out.returncode == 1
    assert "-T calculater: no such tool" in out.stderr and "calculator" in out.stderr
    assert server.requests == []
    toml = ws / "tether.toml"
    toml.write_text(toml.read_text() + 'disabled = ["shell"]\n')
    refused = tether(ws, "tools", "-T", "shell")
    assert refused.returncode == 1 and "[tools] disabled" in refused.stderr


def test_t_picks_mcp_tools_by_their_server_name_once_the_server_starts(tmp_path: Path) -> None:
    kitchen = Path(__file__).parent / "mcp_servers" / "kitchen.py"
    ws = workspace(tmp_path, UNREACHABLE)
    toml = ws / "tether.toml"
    toml.write_text(toml.read_text() + f'\n[[mcp]]\nname = "k"\ncommand = '
                                       f'{json.dumps(sys.executable)}\n'
                                       f'args = [{json.dumps(str(kitchen))}]\n')
    listed = tether(ws, "tools", "--json", "-T", "k__echo", "-T", "calculator")
    assert listed.returncode == 0, listed.stderr
    assert [r["name"] for r in json.loads(listed.stdout)] == ["k__echo", "calculator"]
    missing = tether(ws, "tools", "-T", "k__nope")
    assert missing.returncode == 1
    assert "-T k__nope: no such tool" in missing.stderr and "k__echo" in missing.stderr


def test_a_sub_agent_offered_by_t_keeps_the_tools_of_its_profile(
        tmp_path: Path, server: LoopbackServer) -> None:
    server.queue(tool_call("helper", {"task": "read notes.txt"}), answer("The notes say hi."),
                 answer("Done."))
    ws = workspace(tmp_path, server.url + "/v1")
    toml = ws / "tether.toml"
    toml.write_text(toml.read_text().replace('["calculator"]', '["calculator", "read_file"]')
                    + '\n[[subagents]]\nname = "helper"\ndescription = "Reads files."\n'
                      'tools = ["read_file"]\n')
    out = tether(ws, "run", "-T", "helper", "what do the notes say?")
    assert out.returncode == 0, out.stderr
    assert offered(server.requests[0]) == ["helper"]  # the model you talk to: just helper
    assert offered(server.requests[1]) == ["read_file"]  # the helper: its profile's tools


# --- --output-schema: a file, inline JSON, a short form ---------------------------------------


def answering(arguments: dict[str, object], seen: list[dict[str, object]]) -> object:
    """A responder that records the answering tool's schema and calls it with
    ``arguments``."""

    def respond(request: Recorded) -> Canned:
        tools = {t["function"]["name"]: t["function"] for t in request.body["tools"]}
        (name,) = [n for n in tools if n.startswith("answer_")]
        seen.append(tools[name]["parameters"])
        return tool_call(name, arguments)

    return respond


def test_output_schema_takes_inline_json(tmp_path: Path, server: LoopbackServer) -> None:
    schema = {"type": "object", "properties": {"value": {"type": "integer"}},
              "required": ["value"]}
    seen: list[dict[str, object]] = []
    server.queue(answering({"value": 391}, seen))  # type: ignore[arg-type]
    out = tether(workspace(tmp_path, server.url + "/v1"), "run", "--output-schema",
                 json.dumps(schema), "17*23?")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"value": 391} and seen == [schema]


def test_output_schema_takes_a_short_list_of_fields(tmp_path: Path,
                                                    server: LoopbackServer) -> None:
    seen: list[dict[str, object]] = []
    server.queue(answering({"name": "Ada", "age": 36, "tags": ["maths"]}, seen))  # type: ignore[arg-type]
    out = tether(workspace(tmp_path, server.url + "/v1"), "run", "--output-schema",
                 "name, age int, tags list[str]: a few keywords", "Who wrote the first program?")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"name": "Ada", "age": 36, "tags": ["maths"]}
    assert seen == [{"type": "object",
                     "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                    "tags": {"type": "array", "items": {"type": "string"},
                                             "description": "a few keywords"}},
                     "required": ["name", "age", "tags"], "additionalProperties": False}]


@pytest.mark.parametrize(("given", "says"), [
    ("name, age integer", "the field 'age' has the unknown type 'integer'"),
    ("name, full-name", "'full-name' is not a field"),
    ("name, full name", "the field 'full' has the unknown type 'name'"),
    ("name, name int", "the field 'name' is named twice"),
    (" , ", "no fields given"),
    ('{"type": "object", ', "the inline schema is not valid JSON"),
    ('{"type": "array"}', "the top level must be an object"),
    ("missing.json", "cannot read a JSON Schema"),
])
def test_an_invalid_output_schema_is_a_usage_error_before_any_request(
        tmp_path: Path, server: LoopbackServer, given: str, says: str) -> None:
    out = tether(workspace(tmp_path, server.url + "/v1"), "run", "--output-schema", given, "go")
    assert out.returncode == 1 and says in out.stderr, out.stderr
    assert server.requests == []


def test_the_short_form_splits_on_newlines_when_there_are_some() -> None:
    from tether.cli.output_schema import short_schema

    schema = short_schema("title: the title, in full\nyear int: when, roughly\n")
    assert schema["properties"] == {
        "title": {"type": "string", "description": "the title, in full"},
        "year": {"type": "integer", "description": "when, roughly"}}
    assert schema["required"] == ["title", "year"]


def test_a_refusal_names_the_flag_not_a_python_keyword(tmp_path: Path,
                                                      server: LoopbackServer) -> None:
    server.queue(tool_call("write_file", {"path": "x.txt", "content": "x"}), answer("Ok."))
    ws = workspace(tmp_path, server.url + "/v1")
    out = tether(ws, "run", "-T", "write_file", "write x")  # nobody at a terminal to ask
    assert out.returncode == 2, out.stderr
    told = server.requests[1].body["messages"][-1]["content"]
    assert "--yes" in told and 'permission_mode = "allow"' in told
    assert 'permission_mode="allow"' not in told
    helped = " ".join(tether(ws, "run", "--help").stdout.split())
    assert '[tools] permission_mode = "allow"' in helped and "permission_mode=" not in helped
