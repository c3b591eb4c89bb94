"""Many models on one local server: ``tether local serve --models-dir DIR`` (llama-server's
router) and ``tether local models``. The router's command line, the checks on the folder's
models (the GGUF magic; the model tether fetches itself by its sha256), the fake server of
tests/test_local.py started as a router, and the listing against loopback servers speaking
the router's ``/models`` and Ollama's ``/api/tags``. The figures (a second model's load
time, its cache after) are measured in benchmarks/local_models.py, not asserted here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.servers.http import Canned, LoopbackServer
from tests.test_cli_first_hour import tether
from tests.test_local import fake_cache  # noqa: F401 (a fixture)
from tether.errors import LocalSetupError
from tether.local.server import LocalServer, ServerCommand, router_models
from tether.local.setup import DEFAULT_MODEL


def folder_of(tmp_path: Path, *names: str) -> Path:
    folder = tmp_path / "models"
    folder.mkdir()
    for name in names:
        (folder / name).write_bytes(b"GGUF" + b"\x00" * 8)
    return folder


def test_the_router_command_serves_a_folder_and_no_model_of_its_own(tmp_path: Path) -> None:
    folder = folder_of(tmp_path, "a.gguf")
    argv = ServerCommand(tmp_path / "llama-server", tmp_path / "m.gguf", 9123, None,
                         threads=2, models_dir=folder, models_max=3).argv()
    joined = " ".join(argv)
    assert f"--models-dir {folder}" in joined and "--models-max 3" in joined
    assert "-m " not in joined and "--alias" not in joined
    for piece in ("--host 127.0.0.1", "--port 9123", "-c 4096", "-np 1", "--jinja"):
        assert piece in joined


def test_the_router_serves_each_model_by_its_file_name(tmp_path: Path) -> None:
    folder = folder_of(tmp_path, "qwen-small.gguf", "smollm2.gguf", "notes.txt")
    (folder / "gemma-vision").mkdir()
    (folder / "gemma-vision" / "gemma.gguf").write_bytes(b"GGUF")
    assert router_models(folder) == ["gemma-vision", "qwen-small", "smollm2"]


def test_a_file_that_is_no_gguf_is_refused_before_the_server_starts(tmp_path: Path) -> None:
    folder = folder_of(tmp_path, "good.gguf")
    (folder / "bad.gguf").write_bytes(b"<html>not a model</html>")
    with pytest.raises(LocalSetupError, match=r"bad\.gguf"):
        router_models(folder)


def test_the_model_tether_fetches_itself_keeps_its_checksum_rule_in_a_router_folder(
        tmp_path: Path) -> None:
    folder = folder_of(tmp_path, DEFAULT_MODEL.filename)  # the right name, the wrong bytes
    with pytest.raises(LocalSetupError, match=f"not {DEFAULT_MODEL.size:,}"):
        router_models(folder)


def test_an_empty_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(LocalSetupError, match=r"holds no \.gguf model"):
        router_models(folder_of(tmp_path))


async def test_a_router_server_starts_with_the_folder_and_without_the_bundled_template(
        fake_cache: Path, tmp_path: Path) -> None:  # noqa: F811
    folder = folder_of(tmp_path, "a.gguf", "b.gguf")
    async with LocalServer(port=0, cache_dir=fake_cache, auto_setup=False,
                           models_dir=folder) as server:
        argv = json.loads((server.command().binary.parent / "argv.json").read_text())
    assert argv[argv.index("--models-dir") + 1] == str(folder)
    assert "--chat-template-file" not in argv and "-m" not in argv


def test_local_models_lists_the_routers_models_and_ollamas(
        tmp_path: Path, server: LoopbackServer) -> None:
    with LoopbackServer() as ollama:
        server.queue(Canned.json({"data": [
            {"id": "qwen-small", "status": {"value": "loaded"}},
            {"id": "smollm2", "status": {"value": "unloaded"}}]}))
        ollama.queue(Canned.json({"models": [{"name": "llama3.2:latest", "size": 2_019_393_189}]}))
        port = server.url.rsplit(":", 1)[1]
        (tmp_path / "tether.toml").write_text(f"""
[local]
port = {port}
[providers.o]
kind = "ollama"
base_url = "{ollama.url}"
model = "llama3.2"
""")
        out = tether(tmp_path, "local", "models")
    assert out.returncode == 0, out.stderr
    assert "qwen-small  (loaded)" in out.stdout and "smollm2  (unloaded)" in out.stdout
    assert "provider o (ollama" in out.stdout and "llama3.2:latest  2.0 GB" in out.stdout
    assert server.requests[0].path == "/models" and ollama.requests[0].path == "/api/tags"


def test_local_models_says_what_to_do_when_nothing_answers(tmp_path: Path) -> None:
    from tests.providers.helpers import unreachable_url

    port = unreachable_url().rsplit(":", 1)[1]
    (tmp_path / "tether.toml").write_text(f"[local]\nport = {port}\n")
    out = tether(tmp_path, "local", "models")
    assert out.returncode == 1
    assert "tether local serve" in out.stdout


def test_a_router_serving_the_default_model_gives_it_the_bundled_template(
        tmp_path: Path) -> None:
    from tether.local.server import bundled_chat_template, router_preset

    default = DEFAULT_MODEL.filename.removesuffix(".gguf")
    preset = router_preset([default, "smollm2"], tmp_path / "presets.ini")
    assert preset is not None
    assert preset.read_text() == (f"version = 1\n[{default}]\nchat-template-file = "
                                  f"{bundled_chat_template()}\n")
    assert router_preset(["smollm2"], tmp_path / "other.ini") is None
    argv = ServerCommand(tmp_path / "llama-server", tmp_path / "m.gguf", 9123, None,
                         models_dir=tmp_path, models_preset=preset).argv()
    assert argv[argv.index("--models-preset") + 1] == str(preset)
