"""Tools that misbehave: they hang past their timeout (sync or async, cancellable or not),
raise CancelledError or exceptions a future cannot carry, or return what cannot be shown.
Each ends in a tool error result the model can read, and the run goes on."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import statuses
from tests.servers.http import LoopbackServer
from tests.test_cli import answer, tether, tool_call, workspace
from tether import Agent, Tool, ToolSpec, tool
from tether.providers import Scripted, call


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Holds a sync tool; set at teardown, so the abandoned thread ends with the test."""
    event = threading.Event()
    yield event
    event.set()


def test_a_sync_tool_past_its_timeout_does_not_hold_run_sync(release: threading.Event) -> None:
    entered, finished = threading.Event(), threading.Event()

    @tool
    def stuck() -> str:
        """Blocks until the test releases it."""
        entered.set()
        release.wait()
        finished.set()
        return "late"

    model = Scripted([call("stuck"), "gave up on it"])
    # 0.2 s is the bound under test, not a wait for something to happen.
    result = Agent(model, tools=[stuck], tool_timeout_secs=0.2).run_sync("go")
    assert entered.is_set() and not finished.is_set()  # returned while the tool still runs
    assert result.text == "gave up on it" and statuses(result) == ["error"]
    said = result.tool_calls[0].output
    assert "did not finish within 0.2s" in said
    assert "may still be running" in said and "may still take effect" in said
    told = model.requests[1].messages[-1].parts[0]
    assert told.is_error and told.content == said  # type: ignore[union-attr]


def test_the_cli_returns_promptly_when_a_sync_tool_never_returns(
        tmp_path: Path, server: LoopbackServer) -> None:
    (tmp_path / "forever.py").write_text(
        "import threading\n"
        "from tether import tool\n\n"
        "@tool\n"
        "def forever() -> str:\n"
        "    \"\"\"Never returns.\"\"\"\n"
        "    threading.Event().wait()\n"
        "    return 'never'\n")
    server.queue(tool_call("forever", {}), answer("It timed out."))
    ws = workspace(tmp_path, server.url + "/v1",
                   'python = ["forever.py"]\n[agent]\ntool_timeout_secs = 0.3\n')
    out = tether(ws, "run", "go")  # bounded by subprocess.run's timeout, far above 0.3 s
    assert out.returncode == 0, out.stderr
    assert "It timed out." in out.stdout
    sent = server.requests[1].body["messages"][-1]
    assert sent["role"] == "tool" and "did not finish within 0.3s" in sent["content"]


async def test_an_async_tool_that_ignores_its_cancellation_is_abandoned_at_the_timeout() -> None:
    release = asyncio.Event()

    @tool
    async def stubborn() -> str:
        """Swallows the first cancellation and keeps going."""
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await release.wait()
        return "late"

    model = Scripted([call("stubborn"), "moved on"])
    try:
        result = await Agent(model, tools=[stubborn], tool_timeout_secs=0.2).run("go")
    finally:
        release.set()
    assert result.text == "moved on" and statuses(result) == ["error"]
    assert "did not finish within 0.2s" in result.tool_calls[0].output


@pytest.mark.parametrize("how", ["raises", "awaits a cancelled future", "sync raises"])
async def test_a_tool_raising_cancelled_error_is_an_error_result_not_a_dead_run(how: str) -> None:
    async def raises() -> str:
        raise asyncio.CancelledError

    async def awaits_a_cancelled_future() -> str:
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        future.cancel()
        return await future

    def sync_raises() -> str:
        raise asyncio.CancelledError

    fn = {"raises": raises, "awaits a cancelled future": awaits_a_cancelled_future,
          "sync raises": sync_raises}[how]
    flaky = tool(name="flaky", description="Cancels itself.")(fn)
    model = Scripted([call("flaky"), "the tool was cancelled"])
    result = await Agent(model, tools=[flaky]).run("go")
    assert result.stop_cause == "completed" and result.text == "the tool was cancelled"
    assert statuses(result) == ["error"]
    assert "CancelledError" in result.tool_calls[0].output
    assert result.conversation.messages[-2].role == "tool"  # answered: valid to continue


async def test_cancelling_the_run_still_cancels_the_running_tool() -> None:
    entered, cancelled = asyncio.Event(), asyncio.Event()

    @tool
    async def wait_forever() -> str:
        """Waits until cancelled."""
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    run = asyncio.create_task(Agent(Scripted([call("wait_forever")]),
                                    tools=[wait_forever]).run("go"))
    await entered.wait()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert cancelled.is_set()


@pytest.mark.parametrize("error", [StopIteration, StopAsyncIteration, SystemExit, KeyError])
async def test_a_sync_tool_raising_what_a_future_cannot_carry_is_an_error_result(
        error: type[BaseException]) -> None:
    def broken() -> str:
        raise error("inside")

    model = Scripted([call("broken"), "it broke"])
    # No timeout: a result lost on its way back would hang here.
    result = await Agent(model, tools=[tool(name="broken", description="Breaks.")(broken)],
                         tool_timeout_secs=None).run("go")
    assert statuses(result) == ["error"] and result.text == "it broke"
    assert error.__name__ in result.tool_calls[0].output


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text for this")


def _nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


class _Unspeakable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no words for this")


async def test_an_exception_whose_message_fails_is_still_an_error_result() -> None:
    @tool
    def mumble() -> str:
        """Fails without words."""
        raise _Unspeakable

    result = await Agent(Scripted([call("mumble"), "it mumbled"]), tools=[mumble]).run("go")
    assert statuses(result) == ["error"] and "_Unspeakable" in result.tool_calls[0].output


@pytest.mark.parametrize("value", [_Unprintable(), _nested(100_000)],
                         ids=["str raises", "nested too deep"])
async def test_a_tool_result_that_cannot_be_rendered_is_an_error_result(value: Any) -> None:
    @tool
    def odd() -> Any:
        """Returns something odd."""
        return value

    model = Scripted([call("odd"), "odd indeed"])
    result = await Agent(model, tools=[odd]).run("go")
    assert statuses(result) == ["error"] and result.text == "odd indeed"


async def test_a_handler_that_is_not_async_is_an_error_result() -> None:
    def handler(arguments: dict[str, Any], ctx: Any) -> str:
        return "not awaitable"

    plain = Tool(ToolSpec("plain", "A hand-built tool.", {"type": "object", "properties": {}}),
                 handler)  # type: ignore[arg-type]
    result = await Agent(Scripted([call("plain"), "done"]), tools=[plain]).run("go")
    assert statuses(result) == ["error"] and result.text == "done"


def test_run_sync_with_a_hung_tool_leaves_no_thread_that_blocks_interpreter_exit(
        tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text(
        "import threading\n"
        "from tether import Agent, tool\n"
        "from tether.providers import Scripted, call\n\n"
        "@tool\n"
        "def forever() -> str:\n"
        "    \"\"\"Never returns.\"\"\"\n"
        "    threading.Event().wait()\n"
        "    return 'never'\n\n"
        "agent = Agent(Scripted([call('forever'), 'done']), tools=[forever],\n"
        "              tool_timeout_secs=0.2)\n"
        "print(agent.run_sync('go').text)\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "done"

