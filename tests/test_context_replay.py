"""The context fitter's own cost per turn stays flat (tether.run.context.plan.Replay): each
message is counted once as the conversation grows, the fitting is replayed only over the
request points since the last plan, and what it plans is what a fitting from scratch plans."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator

import pytest

from tether import Agent, tool
from tether.messages import Image, Message, Text, ToolCall, ToolResult
from tether.providers import Scripted, call
from tether.run.context import plan as plan_module
from tether.run.context.plan import (
    Budget,
    Estimate,
    Replay,
    blocks,
    build_view,
    kept_below,
    plan_fit,
    shorten_message,
    shortening_limits,
    trim_note,
)
from tether.settings import ContextConfig


def _growing(rounds: int) -> Iterator[list[Message]]:
    """A conversation as it grows, one request point at a time: results of varied sizes
    (some large enough to shorten), an image, now and then a new user message."""
    messages: list[Message] = [Message("user", (Text("look"), Image(data=b"\x89PNG")))]
    for i in range(rounds):
        messages.append(Message("assistant", (ToolCall(f"c{i}", "t", "{}"),
                                              ToolCall(f"d{i}", "t", "{}"))))
        size = (i * 37) % 900 + 20
        messages.append(Message("tool", (ToolResult(f"c{i}", "t", "r" * size),
                                         ToolResult(f"d{i}", "t", "s" * (size // 3)))))
        if i % 7 == 6:
            messages.append(Message.assistant(f"answer {i}"))
            messages.append(Message.user(f"and then {i}?"))
        yield messages


@pytest.mark.parametrize("window", [1024, 2048, 8192])
@pytest.mark.parametrize("pins", [(), (0,)])
def test_a_replay_kept_as_the_conversation_grows_plans_what_a_fresh_fitting_does(
        window: int, pins: tuple[int, ...]) -> None:
    budget, estimate = Budget(window, 256), Estimate()
    replay = Replay()
    for messages in _growing(60):
        kept = replay.plan(messages, budget, estimate, 40, pins=pins)
        fresh = plan_fit(list(messages), budget, estimate, 40, pins=pins)
        assert kept == fresh
        note = trim_note(len(kept.dropped))
        view = build_view(messages, kept, budget, estimate, note)
        assert view == _plain_view(messages, kept.dropped, kept.shortened, budget, note)


@pytest.mark.parametrize("pins", [(), (0,), (0, 9, 40)])
def test_a_plan_leaves_out_whole_blocks_in_order_keeping_only_the_pinned_below_the_cut(
        pins: tuple[int, ...]) -> None:
    budget, estimate = Budget(1024, 256), Estimate()
    replay = Replay()
    for messages in _growing(60):
        dropped = replay.plan(messages, budget, estimate, 40, pins=pins).dropped
        assert list(dropped) == sorted(set(dropped))
        end = dropped[-1] + 1 if dropped else 0
        last_user = max(i for i, m in enumerate(messages) if m.role == "user")
        for start, stop in blocks(messages[:end]):
            block = set(range(start, stop))
            if block <= set(dropped):
                continue
            assert not block & set(dropped)  # a block is left out whole or kept whole
            assert block & {*pins, last_user}  # and kept below the cut only when pinned


def test_the_kept_messages_below_the_cut_are_found_from_the_left_out_ones() -> None:
    rng = random.Random(7)
    for _ in range(500):
        end = rng.randrange(1, 300)
        kept = set(rng.sample(range(end), rng.randrange(0, min(end, 15))))
        dropped = tuple(i for i in range(end) if i not in kept)
        below = set(range(dropped[-1] + 1)) - set(dropped) if dropped else set()
        assert kept_below(dropped) == sorted(below)


def _plain_view(messages: list[Message], dropped: tuple[int, ...],
                shortened: tuple[int, ...], budget: Budget, note: str) -> tuple[Message, ...]:
    """The view made the plain way: every message not left out, shortened as planned."""
    min_chars, keep_chars = shortening_limits(budget, Estimate())
    view = [shorten_message(m, min_chars, keep_chars) or m if i in shortened else m
            for i, m in enumerate(messages) if i not in dropped]
    if dropped:
        if view and view[0].role == "user":
            view[0] = Message("user", (Text(note + "\n\n"), *view[0].parts))
        else:
            view.insert(0, Message.user(note))
    return tuple(view)


def test_a_replay_counts_each_message_once(monkeypatch: pytest.MonkeyPatch) -> None:
    counted: dict[int, int] = {}
    size = plan_module.message_size

    def counting(message: Message) -> tuple[int, int]:
        counted[id(message)] = counted.get(id(message), 0) + 1
        return size(message)

    monkeypatch.setattr(plan_module, "message_size", counting)
    replay = Replay()
    budget, estimate = Budget(1 << 20, 256), Estimate()  # nothing to fit: counting alone
    for messages in _growing(80):
        replay.plan(messages, budget, estimate, 0)
        replay.tokens(messages, estimate)
        replay.chars(messages)
    assert counted and max(counted.values()) == 1


def test_a_replay_reads_again_what_is_not_the_conversation_it_read_grown() -> None:
    budget, estimate = Budget(1024, 256), Estimate()
    replay = Replay()
    *_, messages = _growing(30)
    replay.plan(messages, budget, estimate, 0)
    changed = [*messages[:-1], Message("tool", (ToolResult("x", "t", "z" * 4000),))]
    assert replay.plan(changed, budget, estimate, 0) == plan_fit(changed, budget, estimate, 0)
    shorter = messages[:9]
    assert replay.chars(shorter) == sum(plan_module.message_chars(m) for m in shorter)
    assert replay.plan(shorter, budget, estimate, 0) == plan_fit(shorter, budget, estimate, 0)


def test_a_long_run_counts_each_message_of_its_conversation_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Through the real Agent and fitter: a conversation under its window is sent whole, and
    # the fitter's count of it (the window's check, the plan, the calibration) reads each
    # message once, however many requests it goes with.
    counted: dict[int, int] = {}
    size = plan_module.message_size

    def counting(message: Message) -> tuple[int, int]:
        counted[id(message)] = counted.get(id(message), 0) + 1
        return size(message)

    monkeypatch.setattr(plan_module, "message_size", counting)

    @tool
    def lookup(n: int) -> str:
        """Look a record up."""
        return f"record {n}: " + "data " * 40

    turns = 40
    model = Scripted([call("lookup", n=i) for i in range(turns)] + ["done"])
    agent = Agent(model, [lookup], context=ContextConfig("trim", window=1 << 20),
                  max_turns=turns + 2)
    result = asyncio.run(agent.run("Look records up."))
    assert result.stop_cause == "completed"
    assert len(result.conversation.messages) > 2 * turns
    assert counted and max(counted.values()) == 1
