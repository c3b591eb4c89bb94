"""What the CLI says when something is missing: the same advice from `run`, `chat` and
`doctor` when no model server answers, `doctor`'s look at the local model cache, and
messages that name the flag or the tether.toml key a CLI user can change, never a Python
keyword argument. Real subprocesses against loopback servers."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from tests.providers.helpers import unreachable_url
from tests.servers.http import Canned, LoopbackServer
from tests.test_cli import answer, tool_call, workspace
from tests.test_cli_first_hour import models, tether
from tether.local.setup import (
    DEFAULT_MODEL,
    ModelSource,
    default_model_path,
    model_problem,
    server_binary_path,
)

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


# --- no model server answers: the same advice everywhere --------------------------------------


def advice_for(out: str, provider: str, url: str) -> bool:
    """Whether ``out`` holds `tether run`'s advice for a local server nobody runs."""
    return (f"No model server answered for provider {provider!r} at {url}" in out
            and "tether local serve" in out and f"[providers.{provider}]" in out)


def test_run_chat_and_doctor_give_the_same_advice_when_no_server_answers(
        tmp_path: Path) -> None:
    url = unreachable_url() + "/v1"
    ws = workspace(tmp_path, url)
    ran = tether(ws, "run", "Hi")
    chatted = tether(ws, "chat", stdin="Hi\n/exit\n")
    doctor = tether(ws, "doctor")
    assert ran.returncode == 1 and advice_for(ran.stderr, "test", url), ran.stderr
    assert chatted.returncode == 0 and advice_for(chatted.stderr, "test", url), chatted.stderr
    assert doctor.returncode == 1 and advice_for(doctor.stdout, "test", url), doctor.stdout
    assert "Traceback" not in ran.stderr + chatted.stderr + doctor.stderr


def test_chat_advises_for_the_provider_it_switched_to(tmp_path: Path) -> None:
    url = unreachable_url() + "/v1"
    ws = workspace(tmp_path, "http://127.0.0.1:9/v1", extra=f"""
[providers.other]
kind = "openai-chat"
base_url = "{url}"
model = "o"
max_retries = 0
""")
    chatted = tether(ws, "chat", stdin="/model other:o\nHi\n/exit\n")
    assert advice_for(chatted.stderr, "other", url), chatted.stderr


def test_doctor_gives_no_start_a_server_advice_for_a_server_that_answered_with_an_error(
        tmp_path: Path, server: LoopbackServer) -> None:
    server.queue(Canned(500, b"broken", {"content-type": "text/plain"}))
    out = tether(workspace(tmp_path, server.url + "/v1"), "doctor")
    assert out.returncode == 1 and "answered HTTP 500" in out.stdout
    assert "No model server answered" not in out.stdout


# --- doctor and the local model cache ---------------------------------------------------------


def doctor_line(out: str, label: str) -> str:
    return next(line for line in out.splitlines() if label in line)


def test_doctor_says_what_local_setup_would_do_for_an_empty_cache_without_failing(
        tmp_path: Path, server: LoopbackServer) -> None:
    server.queue(models("llamacpp"))
    cache = tmp_path / "cache"
    out = tether(workspace(tmp_path, server.url + "/v1"), "doctor",
                 env={"TETHER_CACHE_DIR": str(cache)})
    assert out.returncode == 0, out.stdout + out.stderr
    line = doctor_line(out.stdout, "local model cache")
    assert line.startswith(f"- local model cache {cache}")
    assert "`tether local setup` would build llama-server" in line
    assert f"fetch {DEFAULT_MODEL.filename}" in line and "check its sha256" in line


def test_doctor_finds_a_cached_model_that_is_not_the_published_one(
        tmp_path: Path, server: LoopbackServer) -> None:
    server.queue(models("llamacpp"))
    cache = tmp_path / "cache"
    binary = server_binary_path(cache)
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    model = default_model_path(cache)
    model.parent.mkdir(parents=True)
    model.write_bytes(b"GGUF" + b"\0" * 100)  # a download cut short
    out = tether(workspace(tmp_path, server.url + "/v1"), "doctor",
                 env={"TETHER_CACHE_DIR": str(cache)})
    assert out.returncode == 1
    line = doctor_line(out.stdout, "local model cache")
    assert line.startswith("✗") and f"has 104 bytes, not {DEFAULT_MODEL.size:,}" in line


def test_the_cached_model_is_checked_by_its_sha256_not_only_its_size(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + b"\1" * 60)
    same_size = ModelSource("m.gguf", 64, hashlib.sha256(b"GGUF" + b"\1" * 60).hexdigest(), ())
    assert model_problem(model, same_size) is None
    changed = ModelSource("m.gguf", 64, "0" * 64, ())
    problem = model_problem(model, changed)
    assert problem is not None and "not the published model" in problem
    assert "delete it" in problem


def test_doctor_checks_a_model_of_your_own_is_gguf(tmp_path: Path,
                                                   server: LoopbackServer) -> None:
    server.queue(models("llamacpp"))
    (tmp_path / "notes.txt").write_text("not a model")
    ws = workspace(tmp_path, server.url + "/v1",
                   extra=f'[local]\nmodel_path = "{tmp_path / "notes.txt"}"\n')
    out = tether(ws, "doctor", env={"TETHER_CACHE_DIR": str(tmp_path / "cache")})
    assert out.returncode == 1
    line = doctor_line(out.stdout, "local model cache")
    assert line.startswith("✗") and "[local] model_path" in line and "not a GGUF" in line
