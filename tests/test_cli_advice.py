"""What the CLI says when something is missing: the same advice from `run`, `chat` and
`doctor` when no model server answers, `doctor`'s look at the local model cache, and
messages that name the flag or the tether.toml key a CLI user can change, never a Python
keyword argument. Real subprocesses against loopback servers."""

from __future__ import annotations

import re
from pathlib import Path

from tests.servers.http import LoopbackServer
from tests.test_cli import answer, tool_call, workspace
from tests.test_cli_first_hour import tether

# Python's spelling of a setting (permission_mode="allow", max_turns=3), as opposed to a
# flag (--yes) or a tether.toml key ([tools] permission_mode = "allow").
PYTHON_KEYWORD = re.compile(r"\b[a-z_]+=[\"'\w]")


def test_a_refusal_shown_at_the_cli_names_the_flag_and_the_toml_key(
        tmp_path: Path, server: LoopbackServer) -> None:
    server.queue(tool_call("write_file", {"path": "a.txt", "content": "x"}),
                 answer("I could not write it."))
    ws = workspace(tmp_path, server.url + "/v1")
    (ws / "tether.toml").write_text((ws / "tether.toml").read_text().replace(
        '"calculator"', '"write_file"'))
    out = tether(ws, "run", "write a.txt")
    assert out.returncode == 2, out.stderr
    assert "nobody to ask" in out.stderr
    assert '[tools] permission_mode = "allow"' in out.stderr and "--yes" in out.stderr
    assert not PYTHON_KEYWORD.search(out.stderr), out.stderr


def test_the_run_flags_help_names_tether_toml_keys_not_python_arguments(tmp_path: Path) -> None:
    for command in ("run", "chat", "batch"):
        shown = tether(tmp_path, command, "--help")
        assert shown.returncode == 0, shown.stderr
        assert "--yes" in shown.stdout
        assert not PYTHON_KEYWORD.search(shown.stdout), (command, shown.stdout)
