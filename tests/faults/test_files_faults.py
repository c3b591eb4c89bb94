"""Files from people: batch input that is not UTF-8 (or not sane JSON), a results file a
kill cut anywhere, and a tether.toml in the wrong encoding or with a NUL in it. Each is a
typed error naming the line or key, or (a cut result line) an item that runs again."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.servers.http import LoopbackServer
from tests.test_batch import chat_completion
from tests.test_batch import workspace as batch_workspace
from tether import Agent
from tether.batch import BatchError, finished_ids, read_items, run_batch
from tether.config import load_config
from tether.errors import ConfigError
from tether.providers.base import ModelRequest
from tether.providers.scripted import Scripted

WAIT = 60.0


def tether(ws: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether.cli", "-w", str(ws), *args],
                          capture_output=True, text=True, env=env, cwd=ws,
                          stdin=subprocess.DEVNULL, timeout=WAIT)


def echo(request: ModelRequest) -> str:
    return "answer to " + [m for m in request.messages if m.role == "user"][-1].text


# --- batch input ------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [
    "Caf\u00e9".encode("latin-1"),  # Latin-1 é
    b"\xff\xfe",  # bytes no UTF-8 text holds
    "\U0001f600".encode()[:3],  # an emoji cut short
    b"\xed\xa0\x80",  # a surrogate encoded as UTF-8 (CESU), which strict UTF-8 refuses
])
def test_batch_input_that_is_not_utf8_is_an_error_naming_the_line(tmp_path: Path,
                                                                    bad: bytes) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'"one"\n\n"' + bad + b'"\n"four"\n')
    with pytest.raises(BatchError) as info:
        read_items(path)
    message = str(info.value)
    assert f"{path} line 3: not UTF-8" in message and "save it as UTF-8" in message


def test_batch_input_in_utf16_is_an_error_saying_so(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text('"one"\n"two"\n', encoding="utf-16")
    with pytest.raises(BatchError, match="UTF-16"):
        read_items(path)


def test_batch_input_with_a_utf8_bom_and_crlf_line_ends_is_read(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'\xef\xbb\xbf"one"\r\n{"id": "b", "prompt": "two"}\r\n')
    assert [(i.id, i.turns) for i in read_items(path)] == [("1", ("one",)), ("b", ("two",))]


def test_a_line_separator_inside_a_prompt_does_not_split_the_line(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    # JSON allows these raw inside a string; str.splitlines splits on each of them.
    path.write_text('"one\u2028still\u2029one\u0085and one"\n"two"\n', encoding="utf-8")
    assert [i.turns for i in read_items(path)] == [("one\u2028still\u2029one\u0085and one",),
                                                   ("two",)]


@pytest.mark.parametrize("line", [
    "[" * 100_000,
    '{"id": "x", "prompt": "p", "meta": ' + "[" * 5_000 + "]" * 5_000 + "}",
    '"\\ud800 is half a character"',
    '{"prompt": ["fine", "\\udfff"]}',
], ids=["unclosed nesting", "meta nested too deep", "lone surrogate", "lone surrogate turn"])
def test_batch_input_lines_no_run_could_use_are_errors_naming_the_line(tmp_path: Path,
                                                                       line: str) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text('"one"\n' + line + "\n", encoding="utf-8")
    with pytest.raises(BatchError, match=r"line 2: "):
        read_items(path)


def test_the_command_names_the_line_that_is_not_utf8_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "in.jsonl").write_bytes(b'"one"\n"caf\xe9"\n')
    env = batch_workspace(tmp_path, "http://127.0.0.1:9")
    out = tether(tmp_path, env, "batch", "in.jsonl", "-o", "out.jsonl")
    assert out.returncode == 1
    assert "in.jsonl line 2: not UTF-8 (byte 0xe9" in out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "out.jsonl").exists()


# --- a results file cut by a kill ---------------------------------------------------------------

ITEMS = [{"id": "a", "prompt": "first"}, {"id": "b", "prompt": "second"},
         {"id": "c", "prompt": "thïrd, with ünïcödé and \U0001f600 to cut inside"}]


def _whole_results(tmp_path: Path) -> bytes:
    out = tmp_path / "whole.jsonl"
    asyncio.run(run_batch(Agent(Scripted([echo] * 3)), ITEMS, concurrency=1, out=out))
    return out.read_bytes()


def test_a_results_line_cut_at_any_byte_is_not_counted_as_done(tmp_path: Path) -> None:
    whole = _whole_results(tmp_path)
    last = whole.rstrip(b"\n").rsplit(b"\n", 1)[1]
    head = whole[:len(whole) - len(last) - 1]
    assert json.loads(last)["id"] == "c" and len(last) > len(last.decode())  # multi-byte
    out = tmp_path / "cut.jsonl"
    for cut in range(len(last)):  # every proper prefix, inside each character included
        out.write_bytes(head + last[:cut])
        assert finished_ids(out) == {"a", "b"}, cut
    out.write_bytes(head + last)  # cut exactly before its newline: the line is whole
    assert finished_ids(out) == {"a", "b", "c"}


@pytest.mark.parametrize("where", ["inside a multi-byte character", "after the id",
                                   "before the closing brace"])
def test_resume_after_a_cut_reruns_the_cut_item_only(tmp_path: Path, where: str) -> None:
    whole = _whole_results(tmp_path)
    last = whole.rstrip(b"\n").rsplit(b"\n", 1)[1]
    head = whole[:len(whole) - len(last) - 1]
    cut = {"inside a multi-byte character": last.index("\U0001f600".encode()) + 2,
           "after the id": last.index(b'"c"') + 3,
           "before the closing brace": len(last) - 1}[where]
    out = tmp_path / "out.jsonl"
    out.write_bytes(head + last[:cut])
    model = Scripted([echo] * 3)
    asyncio.run(run_batch(Agent(model), ITEMS, out=out, resume=True))
    assert len(model.requests) == 1  # only c ran again
    lines = out.read_bytes().split(b"\n")
    assert lines[-1] == b"" and lines[-3] == last[:cut]  # the cut line stays, alone
    results = [json.loads(line) for line in lines[:-3] + lines[-2:-1]]
    assert [r["id"] for r in results] == ["a", "b", "c"]
    assert results[-1]["text"] == "answer to " + ITEMS[2]["prompt"]
    assert finished_ids(out) == {"a", "b", "c"}


def test_the_command_resumes_after_a_line_cut_inside_a_character(tmp_path: Path) -> None:
    (tmp_path / "in.jsonl").write_text(
        "".join(json.dumps(item) + "\n" for item in ITEMS), encoding="utf-8")
    whole = _whole_results(tmp_path)
    emoji = whole.rindex("\U0001f600".encode())
    (tmp_path / "out.jsonl").write_bytes(whole[:emoji + 1])
    with LoopbackServer() as server:
        server.queue(chat_completion("third answer"))
        env = batch_workspace(tmp_path, server.url)
        out = tether(tmp_path, env, "batch", "in.jsonl", "-o", "out.jsonl", "--resume")
    assert out.returncode == 0, out.stderr
    assert "2 already done (skipped)" in out.stderr and len(server.requests) == 1
    assert finished_ids(tmp_path / "out.jsonl") == {"a", "b", "c"}


def test_a_results_file_that_cannot_be_written_is_a_batch_error(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    with pytest.raises(BatchError, match="cannot write results"):
        asyncio.run(run_batch(Agent(Scripted([echo])), ["x"], out=blocked / "out.jsonl"))


def test_a_model_answer_with_a_lone_surrogate_is_written_as_valid_json(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    asyncio.run(run_batch(Agent(Scripted(["half \ud800 a character"])), ["x"], out=out))
    [line] = out.read_text(encoding="utf-8").splitlines()
    assert json.loads(line)["text"] == "half \ud800 a character"
    assert finished_ids(out) == {"1"}


# --- tether.toml --------------------------------------------------------------------------------

TOML = '[agent]\nsystem_prompt = "Réponds en français, s\'il te plaît."\nmax_turns = 7\n'


def _load(ws: Path) -> Any:
    return load_config(ws, env={"TETHER_CONFIG": os.devnull})


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be"])
def test_a_utf16_tether_toml_is_a_config_error_saying_so(tmp_path: Path, encoding: str) -> None:
    (tmp_path / "tether.toml").write_bytes(TOML.encode(encoding))
    with pytest.raises(ConfigError, match=r"tether\.toml: the file is UTF-16"):
        _load(tmp_path)


@pytest.mark.parametrize("encoding", ["latin-1", "cp1252"])
def test_a_latin1_tether_toml_is_a_config_error_naming_the_line(tmp_path: Path,
                                                                encoding: str) -> None:
    (tmp_path / "tether.toml").write_bytes(TOML.encode(encoding))
    with pytest.raises(ConfigError) as info:
        _load(tmp_path)
    assert "tether.toml: line 2 is not UTF-8 (byte 0xe9)" in str(info.value)
    assert "Latin-1" in str(info.value)


def test_a_tether_toml_with_a_utf8_bom_is_read(tmp_path: Path) -> None:
    (tmp_path / "tether.toml").write_bytes(b"\xef\xbb\xbf" + TOML.encode())
    assert _load(tmp_path).agent.max_turns == 7


def test_the_user_file_is_checked_the_same_way(tmp_path: Path) -> None:
    user = tmp_path / "user.toml"
    user.write_bytes(TOML.encode("utf-16"))
    with pytest.raises(ConfigError, match=r"user\.toml: the file is UTF-16"):
        load_config(tmp_path, env={"TETHER_CONFIG": str(user)})


@pytest.mark.parametrize(("body", "key"), [
    ('[store]\npath = "/tmp/a\\u0000b.db"', "store.path"),
    ('[tools]\nworkspace = "\\u0000"', "tools.workspace"),
    ('[tools]\npython = ["ok.py", "my\\u0000tools.py"]', "tools.python.1"),
    ('[local]\ncache_dir = "x\\u0000"', "local.cache_dir"),
    ('[local]\nmodel_path = "m\\u0000.gguf"', "local.model_path"),
    ('[[mcp]]\nname = "m"\ncommand = "serve\\u0000"', "mcp.0.command"),
    ('[[mcp]]\nname = "m"\ncommand = "serve"\nargs = ["--root", "/\\u0000"]', "mcp.0.args.1"),
    ('[[mcp]]\nname = "m"\ncommand = "serve"\nenv = { HOME = "\\u0000" }', "mcp.0.env.HOME"),
    ('[providers.local]\nmodel = "q"\nheaders = { X = "a\\u0000" }',
     "providers.local.headers.X"),
])
def test_a_nul_in_a_tether_toml_value_is_a_config_error_naming_the_key(
        tmp_path: Path, body: str, key: str) -> None:
    (tmp_path / "tether.toml").write_text(body + "\n")
    named = rf"tether\.toml: {re.escape(key)} contains a NUL character"
    with pytest.raises(ConfigError, match=named):
        _load(tmp_path)


def test_a_nul_in_a_key_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "tether.toml").write_text('[mcp_env]\n"A\\u0000B" = "x"\n')
    with pytest.raises(ConfigError, match="NUL"):
        _load(tmp_path)


def test_toml_nested_too_deep_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "tether.toml").write_text("x = " + "[" * 20_000 + "]" * 20_000 + "\n")
    with pytest.raises(ConfigError, match="nest too deep"):
        _load(tmp_path)


def test_a_config_path_the_system_cannot_look_at_is_a_config_error(tmp_path: Path) -> None:
    too_long = tmp_path / ("x" * 300) / "config.toml"  # ENAMETOOLONG, even for root
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path, env={"TETHER_CONFIG": str(too_long)})


def test_the_command_reports_a_utf16_config_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "tether.toml").write_bytes(TOML.encode("utf-16"))
    env = {**os.environ, "TETHER_CONFIG": os.devnull,
           "COLUMNS": "500"}
    out = tether(tmp_path, env, "config", "show")
    assert out.returncode == 1
    assert "the file is UTF-16" in out.stderr and "Traceback" not in out.stderr
