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


# --- the advice fits the provider -----------------------------------------------------------


def test_no_ollama_server_is_advised_to_start_ollama_at_its_url(tmp_path: Path) -> None:
    url = unreachable_url()
    (tmp_path / "tether.toml").write_text(
        f'default_provider = "o"\n[providers.o]\nkind = "ollama"\nbase_url = "{url}"\n'
        f'model = "llama3.2"\nmax_retries = 0\n')
    ran, doctor = tether(tmp_path, "run", "Hi"), tether(tmp_path, "doctor")
    provider_line = doctor.stdout[doctor.stdout.index("provider o"):].split("\n- ")[0]
    for out in (ran.stderr, provider_line):
        assert f"No Ollama server answered for provider 'o' at {url}" in out, out
        assert "`ollama serve`" in out
        assert "tether local serve" not in out and "--local" not in out
    assert ran.returncode == 1 and doctor.returncode == 1


def test_a_hosted_provider_is_advised_to_check_network_and_key(tmp_path: Path) -> None:
    # .invalid never resolves (RFC 2606): a hosted API that cannot be reached, offline.
    (tmp_path / "tether.toml").write_text(
        'default_provider = "h"\n[providers.h]\nkind = "anthropic"\n'
        'base_url = "https://api.anthropic.invalid"\nmodel = "m"\nmax_retries = 0\n')
    ran = tether(tmp_path, "run", "Hi", env={"ANTHROPIC_API_KEY": "k"})
    assert ran.returncode == 1
    assert "Check the network connection to https://api.anthropic.invalid" in ran.stderr
    assert "the API key in ANTHROPIC_API_KEY" in ran.stderr
    assert "ollama serve" not in ran.stderr and "--local" not in ran.stderr


def local_path(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A workspace after a `--local` quickstart: llama-server built and a model there (a
    GGUF of your own, so no 400 MB file is needed), the server stopped."""
    cache = tmp_path / "cache"
    binary = server_binary_path(cache)
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    (tmp_path / "own.gguf").write_bytes(b"GGUF" + b"\0" * 60)
    port = unreachable_url().rsplit(":", 1)[1]
    (tmp_path / "tether.toml").write_text(
        f'[local]\nport = {port}\nmodel_path = "{tmp_path / "own.gguf"}"\n'
        f'[providers.local]\nbase_url = "http://127.0.0.1:{port}/v1"\nmax_retries = 0\n')
    return tmp_path, {"TETHER_CACHE_DIR": str(cache)}


def test_the_local_provider_is_advised_to_run_local(tmp_path: Path) -> None:
    ws, env = local_path(tmp_path)
    ran = tether(ws, "run", "Hi", env=env)
    assert ran.returncode == 1
    assert '`tether run --local "..."` starts it' in ran.stderr, ran.stderr
    assert "ollama serve" not in ran.stderr


def test_plain_doctor_after_a_local_quickstart_says_the_local_path_is_ready(
        tmp_path: Path) -> None:
    ws, env = local_path(tmp_path)
    out = tether(ws, "doctor", env=env)
    assert out.returncode == 0, out.stdout
    line = doctor_line(out.stdout, "provider local")
    assert line.startswith("- provider local") and "the local path is ready" in line
    assert "✗" not in out.stdout


def test_doctor_local_checks_toolchain_cache_model_and_server(
        tmp_path: Path, server: LoopbackServer) -> None:
    ws, env = local_path(tmp_path)
    out = tether(ws, "doctor", "--local", env=env)
    assert out.returncode == 0, out.stdout
    assert doctor_line(out.stdout, "local toolchain").startswith("✓ local toolchain")
    assert "your model" in doctor_line(out.stdout, "local model cache")
    assert "not running" in doctor_line(out.stdout, "local server")
    # Something else on the local port: a failure naming it.
    toml = (ws / "tether.toml").read_text()
    port = server.url.rsplit(":", 1)[1]
    (ws / "tether.toml").write_text(re.sub(r"\d{2,5}", port, toml))
    server.queue(Canned(404, b"<html>nope</html>", {"content-type": "text/html"}),
                 Canned(404, b"<html>nope</html>", {"content-type": "text/html"}))
    out = tether(ws, "doctor", "--local", env=env)
    assert out.returncode == 1
    line = doctor_line(out.stdout, "local server")
    assert line.startswith("✗") and "not llama-server" in line and "<html" not in out.stdout
