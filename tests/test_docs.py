"""The runnable examples in the docs run (those driven by the scripted model)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def runnable_blocks() -> list[tuple[str, int, str]]:
    out = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for n, match in enumerate(BLOCK.finditer(page.read_text())):
            code = match.group(1)
            if "Scripted(" in code and "asyncio.run(" in code:
                out.append((page.name, n, code))
    return out


@pytest.mark.parametrize(("page", "n", "code"), runnable_blocks(),
                         ids=[f"{p}#{n}" for p, n, _ in runnable_blocks()])
def test_doc_example_runs(page: str, n: int, code: str) -> None:
    exec(compile(code, f"{page}#{n}", "exec"), {"__name__": f"doc_{n}"})


def test_the_profile_table_in_the_providers_doc_matches_the_profiles() -> None:
    from tether.providers.profiles import PROFILES

    text = (ROOT / "docs" / "providers.md").read_text()
    table = text[text.index("| profile | `required` |"):]  # the profiles' table, not the kinds'
    for name, profile in PROFILES.items():
        row = next(line for line in table.splitlines() if line.startswith(f"| `{name}` |"))
        cells = [c.strip() for c in row.strip("|").split("|")][1:]
        expected = [profile.supports_tool_choice_required, profile.supports_named_tool_choice,
                    profile.supports_parallel_calls, profile.supports_stream_usage,
                    profile.supports_json_schema_output, profile.supports_seed]
        assert [c.startswith("yes") for c in cells] == expected, name


def test_the_readme_python_example_runs_as_written_from_a_file(tmp_path: Path) -> None:
    """Pasted into a file and run with python (no top-level await), against a loopback
    Chat Completions server standing where the example points."""
    import json
    import os
    import subprocess
    import sys

    from tests.servers.http import Canned, LoopbackServer

    def reply(message: dict[str, object], finish: str) -> Canned:
        return Canned.json({"id": "c", "object": "chat.completion", "created": 1, "model": "qwen",
                            "choices": [{"index": 0, "message": {"role": "assistant", **message},
                                         "finish_reason": finish}],
                            "usage": {"prompt_tokens": 12, "completion_tokens": 3}})

    def add(a: int, b: int) -> Canned:
        return reply({"content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "add", "arguments": json.dumps({"a": a, "b": b})}}]},
            "tool_calls")

    code = next(BLOCK.finditer((ROOT / "README.md").read_text())).group(1)
    assert "await agent.run" not in code.replace("# in async code: await agent.run", "")
    with LoopbackServer() as server:
        server.queue(add(2, 3), reply({"content": "5"}, "stop"),
                     add(4, 5), reply({"content": "9"}, "stop"))
        script = tmp_path / "example.py"
        script.write_text(code.replace("http://127.0.0.1:8080/v1", server.url + "/v1"))
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              timeout=60, cwd=tmp_path,
                              env={**os.environ, "TETHER_CONFIG": os.devnull})
        sent = [r.body for r in server.requests]
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "5 completed 24 2" and lines[1] == "add {'a': 2, 'b': 3} ok"
    assert "tool_finished" in lines and lines[-1] == "run_finished"
    assert [m["content"] for m in sent[1]["messages"] if m["role"] == "tool"] == ["5"]
    # The streamed run asks for usage, though the example names no profile.
    assert "stream_options" not in sent[0]
    assert sent[2]["stream"] is True and sent[2]["stream_options"] == {"include_usage": True}
