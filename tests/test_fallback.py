"""Fallback between providers (``fallback = ["name", ...]``, ``providers.fallback``): a
request the first provider cannot answer (no connection, an overload, a server error,
after its retries, before any of its answer went out) goes to the next, with a
``ProviderRetry`` event naming it and the usage line saying who answered; any other error
is the request's and is raised as it is. Two real loopback servers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.providers.helpers import ask, collect, final, unreachable_url
from tests.servers.http import Canned, LoopbackServer
from tests.test_cli import answer
from tests.test_cli_first_hour import tether
from tether import Agent
from tether import events as ev
from tether.config.build import agent_from_config, hosted_fallbacks, provider_from_config
from tether.config.layers import load_config
from tether.errors import BadRequestError, ConfigError, MalformedResponseError
from tether.providers import OpenAIChat
from tether.providers.base import Retrying, TextChunk
from tether.providers.fallback import Fallback
from tether.providers.http.retry import RetryPolicy

ONCE = RetryPolicy(max_retries=0)


@pytest.fixture
def backup() -> Iterator[LoopbackServer]:
    with LoopbackServer() as srv:
        yield srv


def chat(url: str) -> OpenAIChat:
    return OpenAIChat(url + "/v1", "m", profile="generic", retry=ONCE)


def error(status: int) -> Canned:
    return Canned.json({"error": {"message": "down", "code": status}}, status)


@pytest.mark.parametrize("status", [500, 502, 503])
async def test_a_server_error_or_overload_goes_to_the_next_provider(
        server: LoopbackServer, backup: LoopbackServer, status: int) -> None:
    server.queue(error(status))
    backup.queue(answer("from the backup"))
    model = Fallback([("main", chat(server.url)), ("backup", chat(backup.url))])
    chunks = await collect(model, ask())
    assert final(chunks).response.message.text == "from the backup"
    [notice] = [c for c in chunks if isinstance(c, Retrying)]
    assert notice.fallback == "backup" and "provider 'main' failed" in notice.error
    # A server error may have come after work nobody reported; an overload before any.
    assert notice.usage.unreported_requests == (0 if status == 503 else 1)
    assert len(server.requests) == len(backup.requests) == 1
    await model.aclose()


async def test_an_unreachable_provider_goes_to_the_next_and_the_run_says_so(
        backup: LoopbackServer) -> None:
    backup.queue(answer("here"))
    model = Fallback([("main", chat(unreachable_url())), ("backup", chat(backup.url))])
    result = await Agent(model).run("hi")
    assert result.text == "here"
    [retry] = [e for e in result.events if isinstance(e, ev.ProviderRetry)]
    assert retry.fallback == "backup"
    # No connection was made: the failed attempt cost nothing.
    assert retry.usage.requests == 0 and result.usage.requests == 1
    await model.aclose()


async def test_an_error_of_the_request_itself_is_raised_and_nobody_else_is_asked(
        server: LoopbackServer, backup: LoopbackServer) -> None:
    server.queue(error(400))
    model = Fallback([("main", chat(server.url)), ("backup", chat(backup.url))])
    with pytest.raises(BadRequestError):
        await collect(model, ask())
    assert backup.requests == []
    await model.aclose()


async def test_an_answer_that_broke_after_its_text_went_out_is_not_asked_again_elsewhere(
        server: LoopbackServer, backup: LoopbackServer) -> None:
    server.queue(Canned.sse([{"id": "c", "choices": [{"index": 0, "delta": {"content": "Hal"},
                                                      "finish_reason": None}]}], done=False))
    model = Fallback([("main", chat(server.url)), ("backup", chat(backup.url))])
    seen = []
    with pytest.raises(MalformedResponseError):
        async for chunk in model.stream(ask(stream=True)):
            seen.append(chunk)
    assert TextChunk("Hal") in seen and backup.requests == []
    await model.aclose()


async def test_the_last_providers_failure_is_the_runs_error(
        server: LoopbackServer, backup: LoopbackServer) -> None:
    server.queue(error(503))
    backup.queue(error(503))
    model = Fallback([("main", chat(server.url)), ("backup", chat(backup.url))])
    finished = [e async for e in Agent(model).stream("hi")][-1]
    assert isinstance(finished, ev.RunFinished)
    result = finished.result
    assert result.stop_cause == "error" and "down" in str(result.error)
    await model.aclose()


def test_with_model_switches_the_first_provider_and_keeps_the_fallbacks() -> None:
    model = Fallback([("main", chat("http://127.0.0.1:1")), ("backup", chat("http://127.0.0.1:2"))])
    other = model.with_model("small")
    assert other.model == "small" and other.chain[1][1] is model.chain[1][1]


# --- configuration, doctor, the command line ----------------------------------------------


def config(tmp_path: Path, main: str, backup: str, extra: str = "") -> Path:
    (tmp_path / "tether.toml").write_text(f"""
default_provider = "main"
[providers.main]
base_url = "{main}/v1"
model = "m"
profile = "generic"
max_retries = 0
fallback = ["backup"]
[providers.backup]
base_url = "{backup}/v1"
model = "b"
profile = "generic"
{extra}
""")
    return tmp_path


def test_the_config_builds_a_fallback_chain_and_refuses_an_unknown_name(tmp_path: Path) -> None:
    cfg = load_config(config(tmp_path, "http://127.0.0.1:1", "http://127.0.0.1:2"))
    model = provider_from_config("main", cfg)
    assert isinstance(model, Fallback) and [n for n, _ in model.chain] == ["main", "backup"]
    assert isinstance(agent_from_config(config=cfg).model, Fallback)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "tether.toml").write_text((tmp_path / "tether.toml").read_text().replace(
        'fallback = ["backup"]', 'fallback = ["nobody"]'))
    with pytest.raises(ConfigError, match=r"providers\.main\.fallback names 'nobody'"):
        provider_from_config("main", load_config(bad))


def test_run_says_it_fell_back_and_who_answered(tmp_path: Path,
                                                backup: LoopbackServer) -> None:
    backup.queue(answer("Paris"))
    out = tether(config(tmp_path, unreachable_url().removesuffix("/v1"), backup.url),
                 "run", "--no-tools", "Capital of France?")
    assert out.returncode == 0, out.stderr
    assert "Paris" in out.stdout
    assert "falling back to provider backup" in out.stderr
    assert "answered by fallback backup" in out.stderr


def test_doctor_warns_when_a_local_provider_falls_back_to_a_hosted_one(tmp_path: Path) -> None:
    ws = config(tmp_path, "http://127.0.0.1:1", "http://127.0.0.1:2")
    (ws / "tether.toml").write_text((ws / "tether.toml").read_text().replace(
        'base_url = "http://127.0.0.1:2/v1"', 'base_url = "https://api.example.com/v1"'))
    assert hosted_fallbacks(load_config(ws), "main") == ["backup"]
    out = tether(ws, "doctor")
    assert "its fallback names hosted backup" in out.stdout, out.stdout
