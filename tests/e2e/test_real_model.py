"""tether against a real model: llama-server built from the PyPI sdist, serving
Qwen2.5-Coder-0.5B-Instruct (see docs/local.md and ../shared/fixtures/local-model/README.md).

The server is built and the model fetched once per machine (``tether local setup``, cached
under ``~/.cache/tether`` or ``TETHER_CACHE_DIR``); this module then starts one server for
the session. Without cmake or a C++ compiler it skips, saying which is missing.

It is a 0.5B model: the asserts are on structure (which tool, which argument, the tool's
value in the answer), never on wording. Temperature 0 with one server slot makes it
deterministic.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tether import Agent, OutputSpec, tool
from tether.config.tool_files import load_tools
from tether.errors import LocalSetupError
from tether.events import ProviderRetry, RunFinished, TextDelta, ToolCallRequested
from tether.local import SYSTEM_PROMPT, LocalServer, free_port, health
from tether.local.setup import default_cache_dir, find_toolchain, is_set_up
from tether.providers.openai_chat import OpenAIChat
from tether.tools.tool import Tool

ROOT = Path(__file__).resolve().parents[2]
WEATHER = ROOT / "examples" / "weather.py"

# One worker (pytest-xdist --dist loadgroup; tests/conftest.py makes pytest 9.2 keep the
# group) runs the real-model tests, one llama-server at a time.
pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="session"),
              pytest.mark.xdist_group("real_model")]


def _toolchain_or_skip() -> None:
    """Skip, with the precise reason, only when the build cannot happen on this machine."""
    if is_set_up(default_cache_dir()):
        return
    try:
        find_toolchain()
    except LocalSetupError as e:
        pytest.skip(f"real-model e2e: llama-server is not built and cannot be: {e}")


# The servers the tests start use one thread. llama-server's threads wait for each other
# spinning (OpenMP), so with one per core beside the other pytest worker (two cores in CI)
# each token took several times longer than on one thread; one leaves that worker a core.
THREADS = 1


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def server() -> AsyncIterator[LocalServer]:
    _toolchain_or_skip()
    # Builds and downloads on a fresh machine (minutes; `tether local setup` beforehand
    # shows the progress), otherwise starts from the cache in about a second.
    async with LocalServer(port=0, cache_dir=default_cache_dir(), threads=THREADS) as running:
        yield running


def _agent(server: LocalServer, tools: list[Any], **kw: Any) -> Agent:
    model = OpenAIChat(server.base_url, "qwen", profile="llama-server")
    kw.setdefault("system_prompt", SYSTEM_PROMPT)
    kw.setdefault("max_turns", 4)
    return Agent(model, tools, temperature=0.0, **kw)


def _weather() -> Tool:
    (weather,) = load_tools(f"{WEATHER}:get_weather")
    assert isinstance(weather, Tool)
    return weather


async def _forecast(city: str) -> str:
    value: str = await _weather().handler({"city": city}, None)  # type: ignore[arg-type]
    return value


def _degrees(forecast: str) -> str:
    """``Paris: light rain, 26°C`` -> ``26``: the part of the tool's value to find again."""
    return forecast.rsplit(", ", 1)[1].removesuffix("°C")


PROMPT = "What's the weather in Paris? Use the weather tool."


async def test_the_model_calls_the_tool_with_the_city_and_answers_with_its_value(
        server: LocalServer) -> None:
    async with _agent(server, [_weather()]) as agent:
        result = await agent.run(PROMPT)
    first = result.tool_calls[0]
    assert (first.name, first.status) == ("get_weather", "ok")
    assert first.input["city"].strip().lower() == "paris"
    assert result.stop_cause == "completed"
    assert _degrees(await _forecast("Paris")) in result.text
    # The final answer is words, not a tool call written as JSON.
    assert not result.text.lstrip().startswith("{")


async def test_streaming_yields_text_deltas_and_assembles_the_streamed_tool_call(
        server: LocalServer) -> None:
    deltas: list[str] = []
    requested: list[str] = []
    result = None
    async with _agent(server, [_weather()]) as agent:
        async for event in agent.stream(PROMPT):
            if isinstance(event, TextDelta):
                deltas.append(event.text)
            elif isinstance(event, ToolCallRequested):
                requested.append(event.call.name)
                # The call was put together from the stream's argument fragments.
                assert event.call.parsed_arguments()["city"].strip().lower() == "paris"
            elif isinstance(event, RunFinished):
                result = event.result
    assert result is not None and result.stop_cause == "completed"
    assert requested[0] == "get_weather"
    assert len(deltas) > 1, "the answer should arrive in several pieces"
    assert "".join(deltas).endswith(result.text)
    assert _degrees(await _forecast("Paris")) in result.text


async def test_the_gate_refuses_a_tool_that_needs_approval_when_nobody_can_approve(
        server: LocalServer) -> None:
    ran: list[str] = []

    @tool(needs_approval=True)
    def delete_file(path: str) -> str:
        """Delete a file from the disk.

        Args:
            path: The file to delete.
        """
        ran.append(path)
        return f"deleted {path}"

    async with _agent(server, [delete_file], max_turns=3) as agent:
        result = await agent.run("Delete the file notes.txt. Use the delete_file tool.")
    assert result.tool_calls, "the model should have tried the tool"
    assert result.tool_calls[0].name == "delete_file"
    assert all(r.status == "denied" for r in result.tool_calls)
    assert "needs approval" in result.tool_calls[0].output
    assert ran == []


async def test_structured_output_answers_in_the_schema(server: LocalServer) -> None:
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "temperature_c": {"type": "integer"},
        },
        "required": ["city", "temperature_c"],
        "additionalProperties": False,
    }
    spec = OutputSpec("weather_report", "Report the city and its temperature in Celsius.",
                      schema)
    async with _agent(server, []) as agent:
        report = await agent.prepare("In Paris it is 21°C today. Report it.",
                                     output=spec).output()
    assert report.value["city"].strip().lower() == "paris"
    assert report.value["temperature_c"] == 21


async def test_tether_run_local_starts_a_server_answers_with_the_tool_and_stops_it(
        server: LocalServer, tmp_path: Path) -> None:
    """The README's promise, as a user types it (with the session's build cache)."""
    port = free_port()
    (tmp_path / "tether.toml").write_text(f"[local]\nport = {port}\n")
    env = {**os.environ, "TETHER_CACHE_DIR": str(server.cache_dir)}
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "tether.cli", "-w", str(tmp_path), "run", "--local", "--json",
         "--tools", str(WEATHER), PROMPT],
        capture_output=True, text=True, env=env, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["tool_calls"][0]["name"] == "get_weather"
    assert result["tool_calls"][0]["input"]["city"].strip().lower() == "paris"
    assert result["stop_cause"] == "completed"
    assert f"ready at http://127.0.0.1:{port}/v1" in done.stderr
    assert _degrees(await _forecast("Paris")) in result["text"]
    assert not any(word in result["text"].lower() for word in LEAKS), result["text"]
    # The server that run started was stopped when it finished.
    assert await health(port) is None


def _tether_run_local(server: LocalServer, home: Path, prompt: str,
                      cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``tether run --local PROMPT`` as a user types it, at the repository's root (whose
    tether.toml offers examples/weather.py) or in another folder (``cwd``: the calculator
    alone), on the session's server: a user config file's ``[local] port`` points at it,
    so the command reuses it instead of starting another."""
    user = home / "config.toml"
    user.write_text(f"[local]\nport = {server.port}\n")
    env = {**os.environ, "TETHER_CONFIG": str(user), "TETHER_CACHE_DIR": str(server.cache_dir),
           "TETHER_STORE": str(home / "sessions.db")}
    return subprocess.run([sys.executable, "-m", "tether.cli", "run", "--local", prompt],
                          cwd=cwd, capture_output=True, text=True, env=env, timeout=300,
                          stdin=subprocess.DEVNULL)


def _where(name: str, tmp_path: Path) -> Path:
    """The repository's root, or an empty folder outside it."""
    if name == "repository":
        return ROOT
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    return outside


# Words of the examples a chat template ever held (the bundled one held "What is the capital
# of Italy? Rome."): none may reach an answer about something else.
LEAKS = ("italy", "rome", "double(x)", "how can i help")


async def test_the_readme_quickstart_answers_with_the_weather_tool(
        server: LocalServer, tmp_path: Path) -> None:
    done = await asyncio.to_thread(_tether_run_local, server, tmp_path, PROMPT)
    assert done.returncode == 0, done.stderr
    assert f"using the llama-server already running at {server.base_url}" in done.stderr
    assert "✓ get_weather Paris" in done.stderr and "1 tool call(s)" in done.stderr
    assert _degrees(await _forecast("Paris")) in done.stdout
    assert not any(word in done.stdout.lower() for word in LEAKS), done.stdout


@pytest.mark.parametrize("where", ["repository", "outside"])
async def test_a_plain_question_is_answered_in_words_without_a_tool(
        server: LocalServer, tmp_path: Path, where: str) -> None:
    # Offered the weather tool and the calculator, the model used to "call" a tool named
    # capital, which llama-server refused with HTTP 500.
    done = await asyncio.to_thread(_tether_run_local, server, tmp_path,
                                   "What is the capital of France? One word.",
                                   _where(where, tmp_path))
    assert done.returncode == 0, done.stderr
    assert "paris" in done.stdout.lower()
    assert "0 tool call(s)" in done.stderr and "stopped" not in done.stderr


@pytest.mark.parametrize("where", ["repository", "outside"])
async def test_the_readme_calculator_example_answers_with_the_calculators_value(
        server: LocalServer, tmp_path: Path, where: str) -> None:
    # Outside the repository the calculator was the only tool, and after "✓ calculator 391"
    # the model answered "The capital of Italy is Rome.": the example inside the template.
    done = await asyncio.to_thread(_tether_run_local, server, tmp_path,
                                   "What is 17 * 23? Use the calculator.",
                                   _where(where, tmp_path))
    assert done.returncode == 0, done.stderr
    assert "✓ calculator 391" in done.stderr and "1 tool call(s)" in done.stderr
    assert "391" in done.stdout
    assert not any(word in done.stdout.lower() for word in LEAKS), done.stdout


def _stand_in(name: str, description: str, *params: str) -> Tool:
    async def never(arguments: dict[str, Any], ctx: Any) -> str:
        raise AssertionError(f"{name} should not run")

    schema = {"type": "object", "properties": {p: {"type": "string"} for p in params},
              "required": list(params)}
    return Tool.from_schema(name, description, schema, never)


def _eight_tools() -> list[Tool]:
    return [
        _stand_in("calculator", "Evaluate an arithmetic expression.", "expression"),
        _stand_in("read_file", "Read a text file.", "path"),
        _stand_in("list_dir", "List a folder.", "path"),
        _stand_in("grep", "Search files for a pattern.", "pattern"),
        _stand_in("write_file", "Write a text file.", "path", "content"),
        _stand_in("edit_file", "Replace text in a file.", "path", "old", "new"),
        _stand_in("fetch_url", "Fetch a web page.", "url"),
        _stand_in("get_weather", "Get today's weather forecast for a city.", "city"),
    ]


# Measured: offered these eight tools and told to "use the weather tool", the 0.5B model
# calls a "weather" tool that does not exist, and llama-server refuses its own output with
# "does not match the expected ... format": HTTP 500 on a plain request, an `error` event
# inside a 200 stream. At temperature 0 the same request fails the same way again.


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "streamed"])
async def test_output_the_server_cannot_read_is_asked_again_once_without_the_tools(
        server: LocalServer, streamed: bool) -> None:
    async with _agent(server, _eight_tools()) as agent:
        if streamed:
            finished = [e async for e in agent.stream(PROMPT)][-1]
            assert isinstance(finished, RunFinished)
            result = finished.result
        else:
            result = await agent.run(PROMPT)
    parse_retries = [e for e in result.events if isinstance(e, ProviderRetry)
                     and "does not match the expected" in e.error]
    assert len(parse_retries) == 1
    # Without tools the server cannot fail to read the answer: the model answers in words
    # (about the weather it could not look up), and the failed attempt is in the usage.
    assert result.stop_cause == "completed" and result.text.strip(), result.error
    assert result.tool_calls == []
    assert result.usage.unreported_requests == 1 and result.usage.requests == 2


async def test_the_model_finds_a_deferred_tool_with_search_tools_and_calls_it(
        server: LocalServer) -> None:
    """The 0.5B model searches for the tool it is told to use, finds it and calls it with
    the city on the next turn (search_tools stays offered once it found something: with it
    gone from the request, this model answered in words instead). It then repeats the call
    until max_turns rather than answering, whatever the search's answer says (tried: four
    wordings of it, measured over two prompts, with and without other deferred tools), so
    the forecast reaching the answer is not asserted here."""
    from tether.events import ToolsRevealed
    from tether.tools.search import SEARCH_TOOL
    from tether.tools.toolsets import DeferredToolset

    async with _agent(server, [DeferredToolset([_weather()])], max_turns=3) as agent:
        result = await agent.run(PROMPT)
    first = result.tool_calls[0]
    assert (first.name, first.status) == (SEARCH_TOOL, "ok")
    assert "weather" in first.input["query"].lower()
    revealed = [e.names for e in result.events if isinstance(e, ToolsRevealed)]
    assert revealed and revealed[0][0] == "get_weather"
    assert len(result.tool_calls) > 1, result.text
    second = result.tool_calls[1]
    assert (second.name, second.status, second.input.get("city")) == (
        "get_weather", "ok", "Paris")
    assert second.output == await _forecast("Paris")
