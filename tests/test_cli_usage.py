"""The command line's own small promises, through the real `tether` process: an unknown flag
is shown with its command's usage, a command given no action exits one way everywhere, the
README names every extra, and `tether config init` names every provider kind."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import get_args

import pytest

ROOT = Path(__file__).resolve().parent.parent


def tether(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update(TETHER_CONFIG=os.devnull, TETHER_STORE=str(cwd / "sessions.db"))
    return subprocess.run([sys.executable, "-m", "tether.cli", "-w", str(cwd), *args],
                          capture_output=True, text=True, env=env, cwd=cwd,
                          stdin=subprocess.DEVNULL, timeout=60)


@pytest.mark.parametrize("command", [
    ["run", "--bogus", "hi"], ["run", "hi", "--bogus"], ["chat", "--bogus"],
    ["sessions", "list", "--bogus"], ["sessions", "show", "x", "--bogus"],
    ["config", "show", "--bogus"], ["local", "serve", "--bogus"], ["doctor", "--bogus"],
    ["mcp", "prompts", "s", "--bogus"], ["logs", "--bogus"], ["tools", "--bogus"],
    ["run", "one", "two"]])
def test_an_unknown_argument_prints_that_commands_usage(tmp_path: Path,
                                                        command: list[str]) -> None:
    out = tether(tmp_path, *command)
    assert out.returncode == 1
    # The command's own usage and error, never the top-level `tether COMMAND ...` line.
    name = " ".join(w for w in command[:2] if not w.startswith("-") and w not in
                    ("hi", "one", "x"))
    assert f"usage: tether {name}" in out.stderr, out.stderr
    assert f"tether {name}: error: unrecognized arguments" in out.stderr
    assert "COMMAND ..." not in out.stderr
    assert "Traceback" not in out.stderr


def test_an_unknown_flag_before_the_command_is_tethers_own(tmp_path: Path) -> None:
    out = tether(tmp_path, "--bogus", "run", "hi")
    assert out.returncode == 1
    assert "usage: tether [-h]" in out.stderr and "tether: error:" in out.stderr


@pytest.mark.parametrize("command", [[], ["sessions"], ["config"], ["local"], ["mcp"]])
def test_a_command_given_no_action_prints_its_help_and_exits_1(tmp_path: Path,
                                                              command: list[str]) -> None:
    out = tether(tmp_path, *command)
    assert out.returncode == 1, out
    assert out.stdout.startswith(f"usage: {' '.join(['tether', *command])} [-h]"), out.stdout
    assert out.stderr == ""


def test_the_readme_names_every_extra() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    readme = (ROOT / "README.md").read_text()
    setup = readme[readme.index("## Set up"):readme.index("## Quickstart")]
    named = set(re.findall(r"'\.\[(\w+)\]'", setup)) | set(re.findall(r"`(\w+)` brings", setup))
    assert named == set(extras), sorted(set(extras) ^ named)


def test_config_init_names_every_provider_kind(tmp_path: Path) -> None:
    from tether.config.schema import ProviderKind

    out = tether(tmp_path, "config", "init")
    assert out.returncode == 0, out.stderr
    written = (tmp_path / "tether.toml").read_text()
    [kinds] = [line for line in written.splitlines() if line.startswith("kind = ")]
    listed = {k.strip() for k in kinds.split("#", 1)[1].split("|")}
    assert listed == set(get_args(ProviderKind))
