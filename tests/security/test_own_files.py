"""tether's own files, wherever they are. A compromised model with every write approved
(``permission_mode="allow"``) aims write_file and edit_file at the files tether itself
uses, wherever the configuration layers put them: the session store, the local cache, the
user config (``TETHER_CONFIG`` too), every tether.toml loaded (with ``[tools] workspace``
a wider folder), the ``[tools] python`` files. Every write is refused and changes nothing.
The built-ins get these paths as values (``SecurityConfig.protected_paths``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.security.conftest import Compromised, instruction, snapshot
from tests.servers.http import Canned, LoopbackServer
from tether import SecurityConfig, ToolContext, ToolOutput
from tether.builtins import edit_file, write_file
from tether.builtins import workspace as confinement
from tether.config import agent_from_config, load_config
from tether.trust import CLEAN

TOOL_FILE = "from tether import tool\n\n@tool\ndef hello() -> str:\n    \"\"\"Hi.\"\"\"\n    " \
            "return 'hi'\n"


@pytest.fixture
def home(tmp_path: Path) -> dict[str, Any]:
    """A home folder that is the file tools' workspace, with tether's files all over it:
    a project whose tether.toml widens ``[tools] workspace`` to home, a user config named
    by TETHER_CONFIG, stores and caches named by each layer and by the environment."""
    home = tmp_path / "home"
    project = home / "proj"
    (project / "tools").mkdir(parents=True)
    (project / "tools" / "mine.py").write_text(TOOL_FILE)
    (project / "tether.toml").write_text(
        '[tools]\nworkspace = "' + str(home) + '"\npermission_mode = "allow"\n'
        'python = ["proj/tools/mine.py"]\n'
        '[store]\npath = "' + str(home / "project-store" / "s.db") + '"\n'
        '[local]\ncache_dir = "' + str(home / "project-cache") + '"\n')
    (home / "dotfiles").mkdir()
    (home / "dotfiles" / "tether.toml").write_text(
        '[store]\npath = "' + str(home / "user-store" / "s.db") + '"\n'
        '[local]\ncache_dir = "' + str(home / "user-cache") + '"\n')
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
           "XDG_DATA_HOME": str(home / ".local" / "share"),
           "XDG_CACHE_HOME": str(home / ".cache"),
           "TETHER_CONFIG": str(home / "dotfiles" / "tether.toml"),
           "TETHER_STORE": str(home / "env-store" / "s.db"),
           "TETHER_CACHE_DIR": str(home / "env-cache")}
    for folder in ("project-store", "user-store", "env-store", "project-cache", "user-cache",
                   "env-cache", ".cache/tether/bin", ".local/share/tether", ".config/tether"):
        (home / folder).mkdir(parents=True, exist_ok=True)
    for store in ("project-store", "user-store", "env-store"):
        (home / store / "s.db").write_bytes(b"SQLite format 3\x00")
        (home / store / "s.db-wal").write_bytes(b"")
    (home / ".local/share/tether/sessions.db").write_bytes(b"SQLite format 3\x00")
    (home / ".cache/tether/bin/llama-server").write_text("#!/bin/sh\n")
    (home / "env-cache" / "llama-server").write_text("#!/bin/sh\n")
    (home / ".config/tether/config.toml").write_text("")
    return {"home": home, "project": project, "env": env}


OWN = [
    "proj/tether.toml", "proj/tools/mine.py", "proj/tools/__pycache__/mine.cpython-311.pyc",
    "dotfiles/tether.toml", ".config/tether/config.toml",
    "project-store/s.db", "project-store/s.db-wal", "project-store/s.db-journal",
    "user-store/s.db", "user-store/s.db-shm", "env-store/s.db", "env-store/s.db-wal",
    ".local/share/tether/sessions.db", "project-cache/anything", "user-cache/bin/x",
    "env-cache/llama-server", ".cache/tether/bin/llama-server",
]


async def test_every_file_tether_uses_is_refused_to_an_approved_write(
        home: dict[str, Any]) -> None:
    root: Path = home["home"]
    cfg = load_config(home["project"], env=home["env"])
    steps = [("write_file", {"path": p, "content": "pwned"}) for p in OWN]
    steps += [("write_file", {"path": str(root / p), "content": "pwned"}) for p in OWN[:4]]
    steps += [("edit_file", {"path": "proj/tether.toml", "old_text": "allow",
                             "new_text": "deny"})]
    before = snapshot(root)
    agent = agent_from_config(home["project"], config=cfg)
    agent.model = Compromised().model()
    assert agent.workspace == root.resolve() and agent.permission_mode == "allow"
    result = await agent.run(instruction(*steps))

    assert snapshot(root) == before
    refusals = [r for r in result.tool_calls if r.name in ("write_file", "edit_file")]
    assert len(refusals) == len(steps)
    for r in refusals:
        assert r.status == "error" and ("tether's own files" in r.output
                                        or "own configuration" in r.output), r
    # An ordinary file beside them is writable: the rule names files, not the home folder.
    ctx = ToolContext("c", "write_file", CLEAN, root, agent.security)
    out = await write_file.handler({"path": "proj/notes.txt", "content": "ok"}, ctx)
    assert isinstance(out, ToolOutput) and not out.is_error


def test_the_protected_paths_come_from_every_layer(home: dict[str, Any]) -> None:
    root: Path = home["home"]
    agent = agent_from_config(home["project"], config=load_config(home["project"],
                                                                  env=home["env"]))
    protected = {str(p) for p in agent.security.protected_paths}
    for expected in ("project-store/s.db", "user-store/s.db", "env-store/s.db",
                     "project-cache", "user-cache", "env-cache", "dotfiles/tether.toml",
                     "proj/tether.toml", "proj/tools/mine.py", ".config/tether",
                     ".cache/tether", ".local/share/tether/sessions.db"):
        assert any(p.endswith(expected) for p in protected), expected
    assert str(Path(__file__).parents[2] / "src" / "tether") in protected  # its own code
    assert all(str(root) in p or "tether" in p for p in protected)


async def test_a_hard_link_to_the_store_inside_the_workspace_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "elsewhere" / "sessions.db"
    store.parent.mkdir()
    store.write_bytes(b"SQLite format 3\x00")
    ws = tmp_path / "ws"
    ws.mkdir()
    os.link(store, ws / "innocent.db")
    ctx = ToolContext("c", "write_file", CLEAN, ws, SecurityConfig(protected_paths=(store,)))
    out = await write_file.handler({"path": "innocent.db", "content": "pwned"}, ctx)
    assert isinstance(out, ToolOutput) and out.is_error and "tether's own files" in out.content
    assert store.read_bytes() == b"SQLite format 3\x00"


async def test_the_builtins_use_the_paths_they_are_given_and_look_nothing_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    monkeypatch.setenv("TETHER_STORE", str(ws / "s.db"))
    given = SecurityConfig(protected_paths=(ws / "guarded.txt",))
    assert ws / "s.db" not in given.protected_paths
    ctx = ToolContext("c", "write_file", CLEAN, ws, given)
    free = await write_file.handler({"path": "s.db", "content": "x"}, ctx)
    guarded = await write_file.handler({"path": "guarded.txt", "content": "x"}, ctx)
    assert isinstance(free, ToolOutput) and not free.is_error
    assert isinstance(guarded, ToolOutput) and guarded.is_error
    # The default names the environment's places, as a value made when it is built.
    assert Path(os.environ["TETHER_STORE"]) in SecurityConfig().protected_paths


@pytest.mark.parametrize("spelling", ["PROJ/Tether.TOML", "proj/TETHER.toml",
                                      "Env-Store/S.DB", "ENV-CACHE/new-binary",
                                      ".Git/hooks/pre-commit"])
async def test_on_a_file_system_that_ignores_case_every_spelling_is_refused(
        home: dict[str, Any], spelling: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # This machine's file system keeps case; the rule asks the file system which it does.
    monkeypatch.setattr(confinement, "_case_insensitive", lambda path: True)
    root: Path = home["home"]
    agent = agent_from_config(home["project"], config=load_config(home["project"],
                                                                  env=home["env"]))
    ctx = ToolContext("c", "write_file", CLEAN, root, agent.security)
    out = await write_file.handler({"path": spelling, "content": "pwned"}, ctx)
    assert isinstance(out, ToolOutput) and out.is_error, spelling
    assert not (root / spelling).exists()


async def test_on_a_file_system_that_keeps_case_another_spelling_is_another_file(
        home: dict[str, Any]) -> None:
    root: Path = home["home"]
    if (root / "PROJ").exists():  # pragma: no cover - a case-insensitive file system
        pytest.skip("this file system ignores case")
    assert not confinement._case_insensitive(root / "proj" / "tether.toml")
    agent = agent_from_config(home["project"], config=load_config(home["project"],
                                                                  env=home["env"]))
    ctx = ToolContext("c", "write_file", CLEAN, root, agent.security)
    out = await write_file.handler({"path": "proj/TETHER.toml", "content": "fine"}, ctx)
    assert isinstance(out, ToolOutput) and not out.is_error


async def test_edit_file_refuses_the_python_tool_files_even_approved(
        home: dict[str, Any]) -> None:
    agent = agent_from_config(home["project"], config=load_config(home["project"],
                                                                  env=home["env"]))
    ctx = ToolContext("c", "edit_file", CLEAN, home["home"], agent.security)
    out = await edit_file.handler({"path": "proj/tools/mine.py", "old_text": "'hi'",
                                   "new_text": "__import__('os').system('curl evil')"}, ctx)
    assert isinstance(out, ToolOutput) and out.is_error
    assert (home["project"] / "tools" / "mine.py").read_text() == TOOL_FILE


def test_a_module_reference_protects_the_module_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tether.config.tool_files import python_files

    (tmp_path / "myowntools").mkdir()
    (tmp_path / "myowntools" / "__init__.py").write_text(TOOL_FILE)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert python_files(["myowntools:hello"]) == [
        tmp_path / "myowntools" / "__init__.py", tmp_path / "myowntools" / "__pycache__"]
    assert python_files(["no_such_module_anywhere"]) == []


def test_tether_run_refuses_writes_to_its_own_files_from_the_command_line(
        home: dict[str, Any]) -> None:
    import json

    root: Path = home["home"]
    text = (home["project"] / "tether.toml").read_text()
    calls = [{"id": f"w{i}", "type": "function", "function": {
        "name": "write_file", "arguments": json.dumps({"path": p, "content": "pwned"})}}
        for i, p in enumerate(["proj/tether.toml", "project-store/s.db", "env-cache/x",
                               "dotfiles/tether.toml", "proj/tools/mine.py"])]
    with LoopbackServer() as server:
        (home["project"] / "tether.toml").write_text(
            f'default_provider = "loop"\n[providers.loop]\nkind = "openai-chat"\n'
            f'base_url = "{server.url}/v1"\nmodel = "m"\nmax_retries = 0\n' + text)
        before = snapshot(root)
        server.queue(Canned.json({"id": "x", "model": "m", "choices": [{
            "index": 0, "finish_reason": "tool_calls",
            "message": {"role": "assistant", "content": None, "tool_calls": calls}}]}),
            Canned.json({"id": "y", "model": "m", "choices": [{
                "index": 0, "finish_reason": "stop",
                "message": {"role": "assistant", "content": "Done."}}]}))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TETHER_", "XDG_"))}
        env.update(home["env"])
        proc = subprocess.run([sys.executable, "-m", "tether.cli", "-w", str(home["project"]),
                               # --no-log: the stores here are stand-ins, to be protected
                               "run", "--no-log", "--yes", "--json", "go"],
                              capture_output=True, text=True, env=env, timeout=60,
                              cwd=home["project"], stdin=subprocess.DEVNULL)
    assert proc.returncode in (0, 2), proc.stderr
    result = json.loads(proc.stdout)
    assert [c["status"] for c in result["tool_calls"]] == ["error"] * 5
    assert snapshot(root) == before
