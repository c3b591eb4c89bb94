"""What every HTTP provider adapter promises alike, run against each of the wires
(``tests/providers/wires.py``), streamed and not, over a real HTTP server on 127.0.0.1.

These are the behaviours ``providers/shell.py`` implements once for all of them: the
endpoint under ``base_url`` (with or without its trailing ``/``), the key kept out of sight,
retries by one set of rules, the connection hung up when a stream is abandoned, usage on
every answer. A wire's own mapping is tested in its own file (tests/test_<wire>.py).
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from tests.providers.helpers import FakeSleep, ask, collect, final, unreachable_url
from tests.providers.wires import WIRES, Wire
from tests.servers.http import Canned, LoopbackServer
from tether import Agent, RunResult, tool
from tether.errors import (
    AuthError,
    BadRequestError,
    NotFoundError,
    OverloadedError,
    PermissionDeniedError,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeout,
    RateLimitError,
    ServerError,
)
from tether.events import Event, ProviderRetry, RunFinished
from tether.messages import ToolCall, Usage
from tether.providers.base import Provider, Retrying, TextChunk, ToolCallChunk
from tether.providers.http.retry import RetryPolicy
from tether.providers.http.transport import Timeouts

KEY = "sk-contract-0123456789"
GATEWAY_KEY = "gw-contract-9876543210"

wires = pytest.mark.parametrize("wire", [WIRES[name] for name in sorted(WIRES)],
                                ids=sorted(WIRES))
both = pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])


def answer(wire: Wire, streamed: bool, deltas: tuple[str, ...] = ("Hel", "lo"),
           call: tuple[str, ...] | None = None) -> Canned:
    """A well-formed answer on ``wire`` saying ``"".join(deltas)`` (and making ``call``)."""
    if streamed:
        return Canned(200, wire.sse(list(deltas), list(call) if call else None),
                      {"content-type": wire.stream_type})
    assert call is None, "the whole-answer builders say text only"
    return Canned.json(wire.body("".join(deltas)))


def error(wire: Wire, status: int, message: str = "try later",
          retry_after: str | None = None) -> Canned:
    """An HTTP error as ``wire`` writes it (with a ``Retry-After`` header when given)."""
    canned = Canned.json(wire.error(status, message), status)
    if retry_after is not None:
        canned.headers["retry-after"] = retry_after
    return canned


def adapter(wire: Wire, server: LoopbackServer, **kw: Any) -> Provider:
    kw.setdefault("retry", RetryPolicy(max_retries=2))
    return wire.make(server.url + wire.prefix, api_key=KEY, **{
        "sleep": FakeSleep(), **kw})


def request_path(wire: Wire, streamed: bool) -> str:
    return wire.stream_path if streamed else wire.path


# --- answers --------------------------------------------------------------------------------


@wires
@both
async def test_an_answer_carries_its_text_and_usage(server: LoopbackServer, wire: Wire,
                                                    streamed: bool) -> None:
    server.queue(answer(wire, streamed))
    provider = adapter(wire, server)
    chunks = await collect(provider, ask(stream=streamed))
    response = final(chunks).response
    assert response.message.text == "Hello"
    assert (response.usage.input_tokens, response.usage.output_tokens,
            response.usage.requests) == (3, 2, 1)
    texts = [c.text for c in chunks if isinstance(c, TextChunk)]
    assert texts == (["Hel", "lo"] if streamed else [])  # a whole answer has no deltas
    await provider.aclose()


@wires
async def test_a_streamed_tool_call_arrives_whole(server: LoopbackServer, wire: Wire) -> None:
    server.queue(answer(wire, True, ("",), call=('{"a": 2,', ' "b": 3}')))
    provider = adapter(wire, server)
    chunks = await collect(provider, ask(stream=True))
    (made,) = [p for p in final(chunks).response.message.parts if isinstance(p, ToolCall)]
    assert made.name == "add" and json.loads(made.arguments) == {"a": 2, "b": 3}
    assert final(chunks).response.stop_reason == "tool_calls"
    firsts = [c for c in chunks if isinstance(c, ToolCallChunk) and c.id is not None]
    assert [(c.index, c.id, c.name) for c in firsts] == [(0, made.id, "add")]
    await provider.aclose()


# --- the endpoint ---------------------------------------------------------------------------


@wires
@both
@pytest.mark.parametrize("slash", ["", "/"], ids=["bare", "trailing-slash"])
async def test_base_url_reaches_the_same_path_with_or_without_a_trailing_slash(
        server: LoopbackServer, wire: Wire, streamed: bool, slash: str) -> None:
    server.queue(answer(wire, streamed))
    provider = wire.make(server.url + wire.prefix + slash, api_key=KEY)
    await collect(provider, ask(stream=streamed))
    assert server.requests[-1].path == request_path(wire, streamed)
    assert provider.base_url == server.url + wire.prefix  # type: ignore[attr-defined]
    await provider.aclose()


@wires
async def test_with_model_asks_for_the_other_model_through_the_same_client(
        server: LoopbackServer, wire: Wire) -> None:
    server.queue(answer(wire, False))
    provider = adapter(wire, server)
    other = provider.with_model("other")  # type: ignore[attr-defined]
    await collect(other, ask())
    sent = server.requests[-1]
    assert "/models/other:" in sent.path or sent.body["model"] == "other"
    assert (provider.model, other.model) == ("m", "other")
    await provider.aclose()


@wires
async def test_a_closed_adapter_opens_a_new_client_for_its_next_request(
        server: LoopbackServer, wire: Wire) -> None:
    server.queue(answer(wire, False), answer(wire, False))
    provider = adapter(wire, server)
    await collect(provider, ask())
    await provider.aclose()
    assert final(await collect(provider, ask())).response.message.text == "Hello"
    await provider.aclose()


# --- the key --------------------------------------------------------------------------------


@wires
def test_repr_names_the_endpoint_and_model_but_never_a_key(wire: Wire) -> None:
    provider = wire.make("http://127.0.0.1:1" + wire.prefix, api_key=KEY,
                         headers={"x-gateway-key": GATEWAY_KEY})
    shown = repr(provider)
    assert KEY not in shown and GATEWAY_KEY not in shown
    assert shown.startswith(type(provider).__name__ + "(")
    assert "http://127.0.0.1:1" in shown and "'m'" in shown


@wires
@both
async def test_a_key_the_server_quotes_back_is_hidden_in_the_error(
        server: LoopbackServer, wire: Wire, streamed: bool) -> None:
    server.queue(error(wire, 401, f"invalid key {KEY} (via {GATEWAY_KEY})"))
    provider = adapter(wire, server, headers={"x-gateway-key": GATEWAY_KEY})
    with pytest.raises(AuthError) as caught:
        await collect(provider, ask(stream=streamed))
    for secret in (KEY, GATEWAY_KEY):
        assert secret not in str(caught.value) and secret not in (caught.value.body or "")
    sent = server.requests[-1].headers  # both were sent, only never shown
    assert GATEWAY_KEY in sent.values() and any(KEY in v for v in sent.values())
    await provider.aclose()


# --- connections ----------------------------------------------------------------------------


@wires
async def test_abandoning_a_stream_closes_its_connection(server: LoopbackServer,
                                                         wire: Wire) -> None:
    stall = threading.Event()
    frames: list[Any] = wire.sse(["Hel", *["lo"] * 2000])
    first = next(i for i, f in enumerate(frames) if b'"Hel"' in f)
    frames.insert(first + 1, stall)
    server.queue(Canned(200, frames, {"content-type": wire.stream_type}))
    provider = adapter(wire, server)
    chunks = provider.stream(ask(stream=True))
    async for chunk in chunks:
        if isinstance(chunk, TextChunk):
            assert chunk.text == "Hel"
            break
    await chunks.aclose()  # type: ignore[attr-defined]  # what a cancelled run does
    # The hang-up is part of aclose() itself: waited for here without going back to the
    # event loop, where a finalizer could still close a stream left open (a connection
    # closed only then is one the server kept writing to, and llama-server's slot busy).
    # The stalled server sees the client gone.
    hung_up = server.disconnected.wait(10)
    stall.set()
    assert hung_up
    await provider.aclose()


@wires
@both
async def test_an_unreachable_server_is_a_connection_error_after_its_retries(
        wire: Wire, streamed: bool) -> None:
    sleep = FakeSleep()
    provider = wire.make(unreachable_url() + wire.prefix, api_key=KEY, sleep=sleep,
                         retry=RetryPolicy(max_retries=1))
    with pytest.raises(ProviderConnectionError, match="cannot reach") as caught:
        await collect(provider, ask(stream=streamed))
    assert caught.value.provider == wire.name
    assert len(sleep.waits) == 1  # a refused connection is retried like any transient error
    await provider.aclose()


# --- time ----------------------------------------------------------------------------------

@wires
async def test_a_whole_answer_is_waited_for_up_to_the_request_timeout_not_the_idle_one(
        server: LoopbackServer, wire: Wire) -> None:
    # A server sends nothing until a whole answer is written: that silence lasts as long as
    # the model writes, up to timeout_secs. The stream idle timeout (here 20 ms, a tenth of
    # the time the server takes) bounds the silence between the pieces of a stream only.
    slow = answer(wire, False)
    slow.delay = 0.2
    server.queue(slow)
    provider = adapter(wire, server, timeouts=Timeouts(read=0.02, total=60))
    chunks = await collect(provider, ask())
    assert final(chunks).response.message.text == "Hello"
    assert not any(isinstance(c, Retrying) for c in chunks) and len(server.requests) == 1
    await provider.aclose()


@wires
async def test_a_whole_answer_that_does_not_come_in_time_names_the_setting(
        server: LoopbackServer, wire: Wire) -> None:
    slow = answer(wire, False)
    slow.delay = 60  # cut short when the test's server stops
    server.queue(slow)
    provider = adapter(wire, server, retry=RetryPolicy(max_retries=0),
                       timeouts=Timeouts(read=30, total=0.2))
    with pytest.raises(ProviderTimeout, match=r"within 0.2 s \(timeout_secs\)"):
        await collect(provider, ask())
    await provider.aclose()


# --- retries --------------------------------------------------------------------------------


async def _run(provider: Provider, streamed: bool) -> tuple[list[Event], Any]:
    """An agent's run of one prompt on ``provider``: its events and its result."""
    agent = Agent(model=provider)
    try:
        if streamed:
            events = [e async for e in agent.stream("hi")]
            assert isinstance(events[-1], RunFinished)
            return events, events[-1].result
        try:
            result = await agent.run("hi")
        except ProviderError as e:
            assert isinstance(e.result, RunResult)
            result = e.result
        return list(result.events), result
    finally:
        await agent.aclose()


@wires
@both
async def test_an_attempt_that_timed_out_is_retried_in_view_and_its_tokens_are_unknown(
        server: LoopbackServer, wire: Wire, streamed: bool) -> None:
    stall = threading.Event()
    if streamed:  # silent past the idle timeout before its first event
        silent = Canned(200, [stall, *wire.sse(["Hel", "lo"])],
                        {"content-type": wire.stream_type})
        timeouts = Timeouts(read=0.1, total=60)
    else:  # no whole answer within the request timeout
        silent = answer(wire, False)
        silent.delay = 60  # cut short when the test's server stops
        timeouts = Timeouts(read=60, total=0.1)
    server.queue(silent, answer(wire, streamed))
    try:
        events, result = await _run(adapter(wire, server, timeouts=timeouts), streamed)
    finally:
        stall.set()
    (retry,) = [e for e in events if isinstance(e, ProviderRetry)]
    assert retry.attempt == 1 and "timeout" in retry.error
    assert retry.usage == Usage.unreported()  # the server may have worked: unknown, not 0
    assert result.text == "Hello" and len(server.requests) == 2
    usage = result.usage
    assert (usage.input_tokens, usage.output_tokens) == (3, 2)  # the answer's, reported
    assert (usage.requests, usage.unreported_requests) == (2, 1)


@wires
async def test_an_attempt_the_server_refused_before_any_work_costs_nothing(
        server: LoopbackServer, wire: Wire) -> None:
    server.queue(error(wire, 429, retry_after="0"), answer(wire, False))
    events, result = await _run(adapter(wire, server), False)
    (retry,) = [e for e in events if isinstance(e, ProviderRetry)]
    assert retry.usage == Usage()
    assert (result.usage.input_tokens, result.usage.requests,
            result.usage.unreported_requests) == (3, 1, 0)


@wires
async def test_the_attempt_a_run_ends_on_is_counted_too(server: LoopbackServer,
                                                        wire: Wire) -> None:
    server.queue(error(wire, 500, "boom"))
    _, result = await _run(adapter(wire, server), False)
    assert result.stop_cause == "error"
    # The server may have written tokens it never reported: unknown, never 0.
    assert result.usage == Usage.unreported()



@wires
@both
async def test_a_rate_limit_is_retried_after_the_wait_the_server_asked_for(
        server: LoopbackServer, wire: Wire, streamed: bool) -> None:
    sleep = FakeSleep()
    server.queue(error(wire, 429, retry_after="3"), answer(wire, streamed))
    provider = adapter(wire, server, sleep=sleep)
    chunks = await collect(provider, ask(stream=streamed))
    assert sleep.waits == [3.0]
    (notice,) = [c for c in chunks if isinstance(c, Retrying)]
    assert (notice.attempt, notice.wait_secs) == (1, 3.0)
    assert final(chunks).response.message.text == "Hello"
    assert [r.path for r in server.requests] == [request_path(wire, streamed)] * 2
    await provider.aclose()


@wires
async def test_a_wait_beyond_the_cap_fails_at_once_naming_the_wait(
        server: LoopbackServer, wire: Wire) -> None:
    sleep = FakeSleep()
    server.queue(error(wire, 429, retry_after="120"))
    provider = adapter(wire, server, sleep=sleep, retry=RetryPolicy(retry_after_cap=60))
    with pytest.raises(RateLimitError, match="120s"):
        await collect(provider, ask())
    assert sleep.waits == [] and len(server.requests) == 1
    await provider.aclose()


@wires
@both
@pytest.mark.parametrize("status", [429, 503, 529])
async def test_rate_limits_and_overload_are_retried_with_backoff_then_succeed(
        server: LoopbackServer, wire: Wire, streamed: bool, status: int) -> None:
    sleep = FakeSleep()
    server.queue(error(wire, status), error(wire, status), answer(wire, streamed))
    provider = adapter(wire, server, sleep=sleep)
    response = final(await collect(provider, ask(stream=streamed))).response
    assert response.message.text == "Hello" and len(server.requests) == 3
    policy = RetryPolicy()
    assert len(sleep.waits) == 2 and all(0 < w <= policy.max_delay for w in sleep.waits)
    await provider.aclose()


@wires
@pytest.mark.parametrize(("status", "kind"), [(429, RateLimitError), (503, OverloadedError)],
                         ids=["429", "503"])
async def test_retries_give_up_after_the_budget_with_the_last_error(
        server: LoopbackServer, wire: Wire, status: int, kind: type[ProviderError]) -> None:
    sleep = FakeSleep()
    server.queue(*[error(wire, status)] * 3)
    provider = adapter(wire, server, sleep=sleep, retry=RetryPolicy(max_retries=2))
    with pytest.raises(kind):
        await collect(provider, ask())
    assert len(server.requests) == 3 and len(sleep.waits) == 2
    await provider.aclose()


@wires
@both
@pytest.mark.parametrize(("status", "kind"), [
    (400, BadRequestError), (401, AuthError), (403, PermissionDeniedError),
    (404, NotFoundError), (500, ServerError)], ids=["400", "401", "403", "404", "500"])
async def test_errors_waiting_does_not_cure_are_typed_and_not_retried(
        server: LoopbackServer, wire: Wire, streamed: bool, status: int,
        kind: type[ProviderError]) -> None:
    sleep = FakeSleep()
    server.queue(error(wire, status, "no"))
    provider = adapter(wire, server, sleep=sleep)
    with pytest.raises(kind) as caught:
        await collect(provider, ask(stream=streamed))
    assert type(caught.value) is kind and caught.value.status == status
    assert caught.value.provider == wire.name
    assert len(server.requests) == 1 and sleep.waits == []
    await provider.aclose()


@wires
async def test_an_error_in_a_200_before_any_content_is_retried_like_its_status(
        server: LoopbackServer, wire: Wire) -> None:
    sleep = FakeSleep()
    server.queue(Canned.json(wire.error(503, "overloaded")), answer(wire, False))
    provider = adapter(wire, server, sleep=sleep)
    response = final(await collect(provider, ask())).response
    assert response.message.text == "Hello" and len(sleep.waits) == 1
    await provider.aclose()


# --- an answer cut by the output token limit -------------------------------------------------


def limited(wire: Wire, streamed: bool, call: tuple[str, ...] | None = None) -> Canned:
    """An answer saying "Hello" (and making ``call``, streamed only) that ``wire`` says the
    output token limit cut."""
    if streamed:
        return Canned(200, wire.limited_sse(["Hel", "lo"], list(call) if call else None),
                      {"content-type": wire.stream_type})
    return Canned.json(wire.limited_body("Hello"))


async def run(agent: Agent, streamed: bool) -> RunResult:
    if not streamed:
        return await agent.run("hi")
    results = [e.result async for e in agent.stream("hi") if isinstance(e, RunFinished)]
    return results[-1]


@wires
@both
async def test_an_answer_the_output_token_limit_cut_ends_the_run_truncated(
        server: LoopbackServer, wire: Wire, streamed: bool) -> None:
    server.queue(limited(wire, streamed))
    provider = adapter(wire, server)
    response = final(await collect(provider, ask(stream=streamed))).response
    assert response.stop_reason == "max_tokens" and response.message.text == "Hello"
    server.queue(limited(wire, streamed))
    result = await run(Agent(provider, context="off"), streamed)
    assert (result.stop_cause, result.text) == ("truncated", "Hello")
    await provider.aclose()


@wires
async def test_a_call_in_an_answer_the_output_token_limit_cut_never_runs(
        server: LoopbackServer, wire: Wire) -> None:
    ran: list[int] = []

    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        ran.append(a + b)
        return a + b

    # The arguments parse: a cut call is never run, whatever it looks like.
    server.queue(limited(wire, True, call=('{"a": 2,', ' "b": 3}')))
    provider = adapter(wire, server)
    result = await run(Agent(provider, tools=[add], context="off"), True)
    assert result.stop_cause == "truncated" and ran == [] and len(server.requests) == 1
    assert result.conversation.unanswered_calls == []
    await provider.aclose()


def test_every_http_adapter_is_in_the_contract_and_speaks_the_loops_protocols() -> None:
    from tether.providers import shell
    from tether.providers.base import SwitchesModel

    made = [w.make("http://127.0.0.1:1" + w.prefix, api_key=KEY) for w in WIRES.values()]
    assert {type(p).__name__ for p in made} == {
        "OpenAIChat", "OpenAIResponses", "Anthropic", "Gemini", "Ollama"}
    assert all(isinstance(p, shell.HTTPModel) for p in made)
    assert all(isinstance(p, Provider) and isinstance(p, SwitchesModel) for p in made)
