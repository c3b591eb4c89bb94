"""The router (``tether local serve --models-dir DIR``) with a real model: the cached
Qwen2.5-Coder-0.5B in a folder of its own, served by llama-server's router, one short
request through ``tether run`` to the model by its file's name.

It uses the model ``tether local setup`` cached (``~/.cache/tether`` or
``TETHER_CACHE_DIR``) and skips, saying so, when there is none: a router test must not
start a build. Cheap on purpose: one request of a few tokens; the figures (a second
model's load time) are benchmarks/local_models.py's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tether.local import free_port
from tether.local.setup import default_cache_dir, default_model_path, is_set_up

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("real_model")]


def test_the_router_serves_a_real_model_by_its_file_name_to_tether_run(tmp_path: Path) -> None:
    cache = default_cache_dir()
    if not is_set_up(cache):
        pytest.skip("real-model e2e: no cached llama-server and model (run `tether local "
                    "setup`); the router test does not build one")
    folder = tmp_path / "models"
    folder.mkdir()
    # A name of its own: the router serves a model by its file's name.
    (folder / "coder.gguf").symlink_to(default_model_path(cache))
    port = free_port()
    env = {**os.environ, "TETHER_CONFIG": os.devnull, "TETHER_STORE": str(tmp_path / "s.db")}
    serve = subprocess.Popen(
        [sys.executable, "-m", "tether.cli", "-w", str(tmp_path), "local", "serve",
         "--models-dir", str(folder), "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        start_new_session=True)
    ready = threading.Event()
    said: list[str] = []

    def read() -> None:
        assert serve.stdout is not None
        for line in serve.stdout:
            said.append(line)
            if "Ctrl-C stops it." in line:
                ready.set()
        ready.set()  # it exited: the wait below ends at once

    threading.Thread(target=read, daemon=True).start()
    try:
        assert ready.wait(180) and serve.poll() is None, "".join(said)
        assert "llama-server (router) ready" in "".join(said)
        assert "model names 'coder'" in "".join(said), "".join(said)
        (tmp_path / "tether.toml").write_text(f"""
default_provider = "router"
[providers.router]
kind = "openai-chat"
base_url = "http://127.0.0.1:{port}/v1"
model = "coder"
profile = "llama-server"
max_retries = 0
[agent]
max_output_tokens = 16
temperature = 0.0
""")
        run = subprocess.run(
            [sys.executable, "-m", "tether.cli", "-w", str(tmp_path), "run", "--no-tools",
             "Say hello in one word."], capture_output=True, text=True, env=env,
            stdin=subprocess.DEVNULL, timeout=240)
        assert run.returncode == 0, run.stdout + run.stderr
        assert run.stdout.strip(), run.stderr
    finally:
        os.killpg(serve.pid, signal.SIGINT)  # Ctrl-C: the server is stopped before it exits
        try:
            serve.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(serve.pid, signal.SIGKILL)
            serve.wait(10)
