"""Does a turn cost more as the conversation grows? tether's own CPU per turn at turns 10, 100
and 1,000 of one long run.

One run of a scripted model (in this process; it only hands back the next call) through
the real ``Agent`` and gate: each turn reads a page of outside text (``untrusted_input``:
the conversation holds untrusted text from the first turn, so every consequential call is
traced) and sends an email to the address the user gave, its body a line of its own (no
address in it), so the gate traces the recipient against every text the model has seen.
The CPU time of this process (``time.process_time``) is taken as each model request
starts; a turn's cost is the difference between two requests. Printed: the mean over the
ten turns ending at turn 10, 100 and 1,000 (the run has as many turns as the last mark).

What the gate does per turn does not grow with the conversation: a traced value is looked
up under its first word in an index of the texts' words (``tether.tokens.Index``,
extended by each turn's new texts) and checked only in the texts listed there; everything
else (collecting the sources, their labels, the values the model wrote, the secrets) is
kept on the conversation as messages are appended (``tether.provenance.SourceIndex``), so
a turn reads only its own new messages.

The context fitter counts each message once and replays its fitting only over the request
points since the last (``tether.run.context.plan.Replay``; a trimmed view's left-out
messages are listed again only when the cut moves), so its share is flat too.
``--window TOKENS`` gives the model a context window (a server's, as llama-server's
``/props`` states it): the fitter then plans every request, and past the window trims the
conversation (each request is then a view of it: the view stays about the window's size).

usage: .venv/bin/python benchmarks/long_run.py [--window TOKENS] [TURNS...]
       (default 10 100 1000, no window)
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable

from tether import Agent, Capabilities, tool
from tether.messages import Message, Text, ToolCall, Usage
from tether.providers.base import Completed, ModelRequest, ModelResponse, StreamChunk

WINDOW = 10
PAGE = ("Weather report for the valley: light rain in the morning, clearing by noon, "
        "winds from the west at 10 to 15 km/h, highs of 14 degrees. ") * 2


class Model:
    """A model that answers at once (no estimate of its own: ``Scripted`` counts every
    message to make up its usage, which is the model's cost, not tether's) and reports a
    usage, as a server does (tether calibrates its token estimate with it)."""

    name = model = "bench"

    def __init__(self, turn: Callable[[ModelRequest], Message],
                 window: int | None = None) -> None:
        self.turn = turn
        self.window = window

    async def context_window(self) -> int | None:
        return self.window

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        message = self.turn(request)
        stop = "tool_calls" if message.tool_calls else "end_turn"
        yield Completed(ModelResponse(message, stop, Usage(1000, 20, requests=1),
                                      model=self.model))

    async def aclose(self) -> None:
        return None


def run(turns: int, window: int | None = None) -> list[float]:
    """The CPU time (ms) of each turn of one run of ``turns`` turns."""
    marks: list[float] = []

    @tool(capabilities=Capabilities(untrusted_input=True))
    def read_page(n: int) -> str:
        """Read page n of the news."""
        return f"Page {n}. {PAGE}"

    @tool(capabilities=Capabilities(external_send=True), destination_params=["to"],
          content_params=["body"])
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        return "sent"

    def turn(request: ModelRequest) -> Message:
        marks.append(time.process_time())
        n = len(marks)
        if n > turns:
            return Message("assistant", (Text("Done."),))
        return Message("assistant", (
            ToolCall(f"r{n}", "read_page", f'{{"n": {n}}}'),
            ToolCall(f"s{n}", "send_email",
                     f'{{"to": "bob@corp.test", "body": "Summary {n}: rain then sun"}}')))

    agent = Agent(Model(turn, window), [read_page, send_email], max_turns=turns + 1)
    result = asyncio.run(agent.run("Read the news and mail each page's gist to bob@corp.test."))
    assert result.stop_cause == "completed", result.stop_cause
    assert all(r.status == "ok" for r in result.tool_calls), "a call was refused"
    return [1000 * (b - a) for a, b in itertools.pairwise(marks)]


def main() -> None:
    args = sys.argv[1:]
    window = None
    if args[:1] == ["--window"]:
        window, args = int(args[1]), args[2:]
    marks = [int(a) for a in args] or [10, 100, 1000]
    costs = run(max(marks), window)
    told = f"a {window}-token window" if window else "no window known"
    print(f"tether's own CPU per turn (a read of outside text and a traced send per turn, "
          f"{told}; mean of the {WINDOW} turns ending at each mark):")
    for mark in marks:
        window = costs[max(0, mark - WINDOW):mark]
        print(f"  turn {mark:>5}: {statistics.fmean(window):6.2f} ms "
              f"(median {statistics.median(window):.2f} ms)")


if __name__ == "__main__":
    main()
