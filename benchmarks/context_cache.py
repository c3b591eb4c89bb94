"""Does fitting a long session into a small window keep llama-server's prompt cache hitting?

Starts the real local llama-server (``tether local setup`` must have run; see docs/local.md)
with a window large enough for the whole session, then plays the same tool-using session
(N user turns, each: the model reads a record of about 250 tokens with a tool, then
answers) three ways, each on a fresh conversation:

- ``off``: the whole conversation is sent every time (the baseline: nothing is fitted).
- ``trim``: fitted into a configured ``window`` smaller than the server's (tether's
  default: shorten old results, then leave whole turns out down to the low-water mark).
- ``trim, one step``: the same with ``low_water=1.0``: just enough is left out each
  time, so the sent prefix changes on nearly every turn (what the large steps avoid).

For each it prints the prompt tokens the server counted, how many of them it served from
its cache (``usage.prompt_tokens_details.cached_tokens``), the share, the fittings and the
wall time. The server keeps one slot (``-np 1``), so each request can reuse the previous
one's prefix; the first request of each way may reuse the system prompt and tools of the
way before.

usage: python benchmarks/context_cache.py [--turns 20] [--window 2048] [--server-context 8192]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass

from tether import Agent, Conversation
from tether import events as ev
from tether.local import SYSTEM_PROMPT, LocalServer
from tether.messages import Usage
from tether.providers.openai_chat import OpenAIChat
from tether.settings import ContextConfig
from tether.tools.function import tool


@tool
def read_record(n: int) -> str:
    """Read record number n from the archive.

    Args:
        n: The record's number.
    """
    return f"Record {n}: the code is K{n * 7}. " + "Archived notes follow. " * 40


@dataclass
class Figures:
    name: str
    usage: Usage
    requests: int
    fittings: int
    errors: int
    seconds: float

    def row(self) -> str:
        share = self.usage.cache_read_tokens / max(1, self.usage.input_tokens)
        return (f"{self.name:<16} {self.requests:>8} {self.usage.input_tokens:>13,} "
                f"{self.usage.cache_read_tokens:>13,} {share:>7.1%} {self.fittings:>8} "
                f"{self.errors:>6} {self.seconds:>8.0f}")


async def session(server: LocalServer, name: str, context: ContextConfig,
                  turns: int) -> Figures:
    model = OpenAIChat(server.base_url, "qwen", profile="llama-server")
    conversation = Conversation()
    usage, requests, fittings, errors = Usage(), 0, 0, 0
    started = time.perf_counter()
    async with Agent(model, [read_record], system_prompt=SYSTEM_PROMPT, max_turns=3,
                     max_output_tokens=64, temperature=0.0, context=context) as agent:
        for turn in range(turns):
            async for event in agent.stream(
                    f"What is the code of record {turn}? Use the read_record tool.",
                    conversation=conversation):
                if isinstance(event, ev.ModelResponded):
                    usage, requests = usage + event.usage, requests + 1
                elif isinstance(event, ev.ContextFitted):
                    fittings += 1
                elif isinstance(event, ev.RunFinished) and event.result.stop_cause == "error":
                    errors += 1
    return Figures(name, usage, requests, fittings, errors, time.perf_counter() - started)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--window", type=int, default=2048)
    parser.add_argument("--server-context", type=int, default=8192)
    args = parser.parse_args()
    ways = [
        ("off", ContextConfig("off")),
        ("trim", ContextConfig("trim", window=args.window)),
        ("trim, one step", ContextConfig("trim", window=args.window, low_water=1.0)),
    ]
    async with LocalServer(port=0, context=args.server_context, auto_setup=False) as server:
        print(f"llama-server -c {args.server_context}; fitted window {args.window}; "
              f"{args.turns} turns")
        print(f"{'way':<16} {'requests':>8} {'prompt tokens':>13} {'from cache':>13} "
              f"{'share':>7} {'fittings':>8} {'errors':>6} {'seconds':>8}")
        for name, context in ways:
            print((await session(server, name, context, args.turns)).row(), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
