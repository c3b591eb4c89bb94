"""`tether run --local` with something already on the local port, through the real CLI: it
reuses only the bundled llama-server serving the expected model (asked, never assumed); any
other server there is a one-line error naming the port and what answered; a busy server slow
to answer is waited for, not called "port in use". Loopback servers stand in for each."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.servers.http import Canned, LoopbackServer
from tests.test_cli import answer
from tether.local.setup import DEFAULT_MODEL


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """A cache holding the default model's file (a reused server needs no build)."""
    model = tmp_path / "cache" / "models" / DEFAULT_MODEL.filename
    model.parent.mkdir(parents=True)
    model.write_bytes(b"GGUF")
    return tmp_path / "cache"


def run_local(tmp_path: Path, cache: Path, port: int) -> subprocess.CompletedProcess[str]:
    (tmp_path / "tether.toml").write_text(f"[local]\nport = {port}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update(TETHER_CONFIG=os.devnull, TETHER_STORE=str(tmp_path / "sessions.db"),
               TETHER_CACHE_DIR=str(cache))
    return subprocess.run([sys.executable, "-m", "tether.cli", "-w", str(tmp_path), "run",
                           "--local", "What is 2+2?"], capture_output=True, text=True,
                          env=env, stdin=subprocess.DEVNULL, timeout=120)


def port_of(server: LoopbackServer) -> int:
    return int(server.url.rsplit(":", 1)[1])


def props(model_path: str | Path, **more: object) -> Canned:
    """llama-server's GET /props, as tools/server/server-context.cpp writes it."""
    return Canned.json({"model_path": str(model_path), "model_alias": "qwen",
                        "build_info": "b7000-abcdef", "total_slots": 1, **more})


def test_the_bundled_llama_server_with_the_expected_model_is_reused(
        tmp_path: Path, cache: Path, server: LoopbackServer) -> None:
    server.queue(props(cache / "models" / DEFAULT_MODEL.filename), answer("4"))
    out = run_local(tmp_path, cache, port_of(server))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "4"
    assert "using the llama-server already running" in out.stderr
    assert [r.path for r in server.requests] == ["/props", "/v1/chat/completions"]


def test_a_server_that_is_not_llama_server_is_named_in_one_line_not_dumped(
        tmp_path: Path, cache: Path, server: LoopbackServer) -> None:
    page = b"<!DOCTYPE html><html><body><h1>404 Not Found</h1>\n<p>nginx</p></body></html>"
    server.queue(Canned(404, page, {"content-type": "text/html", "server": "nginx/1.25"}))
    port = port_of(server)
    out = run_local(tmp_path, cache, port)
    assert out.returncode == 1
    [line] = out.stderr.strip().splitlines()
    assert f"port {port} on 127.0.0.1" in line and "not llama-server" in line
    assert "HTTP 404, text/html, server " in line and "nginx/1.25" in line
    assert "<html" not in out.stderr and "usage:" not in out.stderr
    assert out.stdout == ""
    assert [r.path for r in server.requests] == ["/props"]  # no model request was sent


def test_a_json_server_that_answers_every_path_is_not_taken_for_llama_server(
        tmp_path: Path, cache: Path, server: LoopbackServer) -> None:
    server.queue(Canned.json({"status": "ok", "data": []}))  # /health-like, to anything
    out = run_local(tmp_path, cache, port_of(server))
    assert out.returncode == 1 and "not llama-server" in out.stderr
    assert "HTTP 200, application/json" in out.stderr


def test_a_llama_server_with_another_model_is_refused_naming_both(
        tmp_path: Path, cache: Path, server: LoopbackServer) -> None:
    other = tmp_path / "llama-3-8b.Q4_K_M.gguf"
    other.write_bytes(b"GGUF")
    server.queue(props(other))
    port = port_of(server)
    out = run_local(tmp_path, cache, port)
    assert out.returncode == 1
    [line] = out.stderr.strip().splitlines()
    assert f"port {port}" in line and "another model" in line
    assert str(other) in line and DEFAULT_MODEL.filename in line
    assert [r.path for r in server.requests] == ["/props"]


def test_a_llama_server_serving_a_folder_of_models_is_refused(
        tmp_path: Path, cache: Path, server: LoopbackServer) -> None:
    # tether local serve --models-dir: the router's /props (server-models.cpp).
    server.queue(props("none", role="router", model_alias="llama-server"))
    out = run_local(tmp_path, cache, port_of(server))
    assert out.returncode == 1 and "folder of models" in out.stderr


def test_a_busy_server_slow_to_answer_is_waited_for_not_called_port_in_use(
        tmp_path: Path, cache: Path, server: LoopbackServer) -> None:
    # Slower than the 2 s health check that took a busy server for "port in use".
    slow = props(cache / "models" / DEFAULT_MODEL.filename)
    slow.delay = 3.0
    server.queue(slow, answer("4"))
    out = run_local(tmp_path, cache, port_of(server))
    assert out.returncode == 0, out.stderr
    assert "in use" not in out.stderr and out.stdout.strip() == "4"


def test_a_server_still_loading_its_model_is_waited_for(
        tmp_path: Path, cache: Path, server: LoopbackServer) -> None:
    loading = Canned.json({"error": {"code": 503, "message": "Loading model"}}, status=503)
    server.queue(loading, loading, props(cache / "models" / DEFAULT_MODEL.filename),
                 answer("4"))
    out = run_local(tmp_path, cache, port_of(server))
    assert out.returncode == 0, out.stderr
    assert [r.path for r in server.requests] == ["/props"] * 3 + ["/v1/chat/completions"]
