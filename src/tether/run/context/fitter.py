"""The fitter: what one agent learns about one model's window, and the fitting of each
request it sends, without laundering the conversation's taint.

``ContextFitter`` holds what one agent knows about one model (its window, how many
characters make a token, the last summary) and wraps the model's stream: before each
request it plans a fitting (``tether.run.context.plan``), has what is left out summarized
when the strategy says so (``...summary``), and sends the view. A ``ContextOverflowError``
before the first chunk (the server counted more than the estimate) is learned from (the
numbers the wire read from the server's error: ``prompt_tokens``, ``window``) and the
request fitted tighter and sent once more.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Collection, Sequence

from tether import events as ev
from tether.errors import ContextOverflowError, TetherError
from tether.messages import Message, Usage
from tether.providers.base import Completed, ModelRequest, Provider, Retrying, StreamChunk
from tether.run.context.plan import (
    NOTE_TOKENS,
    SMALL_REQUEST_CHARS,
    Budget,
    Estimate,
    Replay,
    build_view,
    fixed_chars,
    trim_note,
)
from tether.run.context.summary import Summaries, summary_note, transcript
from tether.run.interrupts import abandon
from tether.settings import ContextConfig
from tether.trust import Taint

# The reserve for the answer when neither the configuration nor max_output_tokens sets
# one: a quarter of the window, at most this.
DEFAULT_RESERVE_TOKENS = 1024
# How far the model's own counts may move the estimate: a server's usage is outside input
# too, and one that reports a tenth of the real prompt must not switch fitting off (nor
# one that reports ten times more trim everything away).
MIN_SCALE, MAX_SCALE = 0.5, 4.0

def with_advice(error: ContextOverflowError, advice: str) -> ContextOverflowError:
    """The same error, its message ending with what to do."""
    return ContextOverflowError(f"{error.message.rstrip('. ')}. {advice}.",
                                provider=error.provider, status=error.status, body=error.body,
                                prompt_tokens=error.prompt_tokens, window=error.window)


# --- the fitter -------------------------------------------------------------------------------


class ContextFitter:
    """What one agent knows about one model's window, and the fitting of its requests.

    ``stream(request, ...)`` fits the request, yields a ``ContextFitted`` event when a
    fitting happened, then the model's chunks. A ``ContextOverflowError`` before the first
    chunk (the server counted more than the estimate) triggers one tighter fitting and a
    retry; a second one is raised with advice.
    """

    def __init__(self, config: ContextConfig, provider: Provider,
                 max_output_tokens: int | None = None) -> None:
        self.config = config
        self.provider = provider
        self.summaries = Summaries(config.summarizer or provider)
        self.max_output_tokens = max_output_tokens
        self.estimate = Estimate()
        self.window: int | None = config.window
        self.window_source = "configured" if config.window is not None else ""
        self._asked = False
        self._calibrated = False
        self._announced: list[int] = []  # conversations already told they are fitted
        # Each conversation's messages counted and its fitting replayed as it grows (by the
        # conversation's identity; a Replay checks it is given the messages it read, grown).
        self._replays: dict[int, Replay] = {}

    def _replay(self, owner: object) -> Replay:
        if owner is None:
            return Replay()
        replay = self._replays.pop(id(owner), None) or Replay()
        if len(self._replays) >= 16:  # the conversations of the latest runs
            del self._replays[next(iter(self._replays))]
        self._replays[id(owner)] = replay  # the newest last
        return replay

    # --- the stream -----------------------------------------------------------------------

    def stream(
        self, request: ModelRequest, *, taint: Taint, pins: Collection[int] = (),
        owner: object = None,
    ) -> AsyncIterator[StreamChunk | ev.ContextFitted]:
        """``request`` fitted, then sent; see the class docstring."""
        if self.config.strategy == "off":
            return self._unfitted(request)
        return self._fitting(request, taint, pins, owner)

    async def _unfitted(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        """``request`` sent as it is (fitting is off): an overflow says what to set."""
        try:
            chunks = self.provider.stream(request)
            try:
                async for chunk in chunks:
                    yield chunk
            except BaseException:
                await abandon(chunks)
                raise
        except ContextOverflowError as error:
            raise with_advice(error, "The conversation no longer fits the model's "
                              "context window and context fitting is off: set [agent] "
                              "context = \"trim\" (Agent(context=\"trim\")), or start a "
                              "new conversation") from None

    async def _fitting(
        self, request: ModelRequest, taint: Taint, pins: Collection[int], owner: object,
    ) -> AsyncIterator[StreamChunk | ev.ContextFitted]:
        """``request`` fitted and sent, then, when the server says it did not fit before
        its first chunk, learned from, fitted tighter and sent once more. (One generator
        with the provider's stream read in it: every chunk crosses it.)"""
        replay = self._replay(owner)
        for reason in ("window", "overflow"):
            sent, event, raw = await self._fitted(request, taint, pins, owner, reason, replay)
            if event is not None:
                yield event
            # The view's unscaled estimate when it is one (the plan's), else the replay
            # counts the conversation's messages.
            counted = replay if raw is None else raw
            started = False
            try:
                chunks = self.provider.stream(sent)
                try:
                    async for chunk in chunks:
                        if not isinstance(chunk, Retrying):
                            started = True
                        if isinstance(chunk, Completed):
                            self.observe(sent, chunk.response.usage, counted)
                        yield chunk
                except BaseException:
                    await abandon(chunks)
                    raise
                return
            except ContextOverflowError as error:
                if started:
                    raise
                if reason == "overflow":
                    raise self._still_over(error) from None
                self._learn(error, sent)

    def _still_over(self, error: ContextOverflowError) -> ContextOverflowError:
        window = f"{self.window} tokens" if self.window else "unknown"
        return with_advice(error, (
            f"It still did not fit after tether fitted it (window {window}, "
            f"{self.window_source or 'estimated'}). Set [providers.NAME] context_window "
            f"to the server's real window, give the server a larger one (llama-server "
            f"-c), lower max_output_tokens, or start a new conversation"))

    # --- fitting --------------------------------------------------------------------------

    async def _fitted(
        self, request: ModelRequest, taint: Taint, pins: Collection[int], owner: object,
        reason: str, replay: Replay,
    ) -> tuple[ModelRequest, ev.ContextFitted | None, int | None]:
        """The request to send, the event saying it was fitted, and (for a fitted view) its
        unscaled estimate, as the plan counted it."""
        messages = request.messages
        window = await self._window_for(request, replay, force=reason == "overflow")
        if window is None:
            return request, None, None
        await self._calibrate(messages)
        budget = Budget(window, self._reserve(window), self.config.low_water)
        estimate = self.estimate
        summarize = self.config.strategy == "summarize"
        summary_tokens = max(64, min(300, budget.high // 5))
        note_tokens = NOTE_TOKENS + (summary_tokens + 24 if summarize else 0)
        plan = replay.plan(messages, budget, estimate, estimate.fixed(request), pins=pins,
                           note_tokens=note_tokens)
        announced = owner is not None and id(owner) in self._announced
        if not plan.fitted:
            return request, None, None
        usage = Usage()
        error = ""
        summarized = 0
        note = trim_note(len(plan.dropped))
        if summarize and plan.dropped:
            left_out = [messages[i] for i in plan.dropped]
            try:
                summary, usage = await self.summaries.standing_for(
                    left_out, taint, budget, summary_tokens, self.estimate)
            except TetherError as e:  # a summarizer that failed: trimmed instead, and said
                error = f"the summary failed ({e}); the messages were left out unsummarized"
            else:
                if summary is not None:
                    note = summary_note(len(plan.dropped), summary)
                    summarized = len(plan.dropped)
        view = build_view(messages, plan, budget, estimate, note)
        sent = dataclasses.replace(request, messages=view)
        # The view's own count: it holds about a window's worth, however long the
        # conversation (the conversation's count is the Replay's, kept as it grew).
        raw = Estimate(estimate.chars_per_token).request(sent)
        if owner is not None and not announced:
            self._announced = [*self._announced[-255:], id(owner)]
        if not (plan.acted or reason == "overflow" or not announced or usage.requests):
            return sent, None, raw
        event = ev.ContextFitted(
            strategy=self.config.strategy,
            reason=reason if plan.acted or reason == "overflow" else "continued",
            window=window,
            tokens_before=plan.tokens_before,
            tokens_after=estimate.fixed(request) + sum(estimate.message(m) for m in view),
            messages_before=len(messages),
            messages_sent=len(messages) - len(plan.dropped),
            dropped=len(plan.dropped),
            shortened=len(plan.shortened),
            summarized=summarized,
            usage=usage,
            note=error,
        )
        return sent, event, raw

    def _reserve(self, window: int) -> int:
        reserve = self.config.reserve or self.max_output_tokens \
            or min(DEFAULT_RESERVE_TOKENS, window // 4)
        return min(reserve, window // 2)

    async def _window_for(self, request: ModelRequest, replay: Replay, *,
                          force: bool) -> int | None:
        if self.window is not None:
            return self.window
        if self._asked:
            return None  # nobody could say
        chars = fixed_chars(request) + replay.chars(request.messages)
        if chars <= SMALL_REQUEST_CHARS and not force:
            return None  # too small to need a window
        self._asked = True
        ask = getattr(self.provider, "context_window", None)
        if ask is None or not callable(ask):
            return None
        window = await ask()
        if isinstance(window, int) and not isinstance(window, bool) and window >= 256:
            self.window, self.window_source = window, "from the server"
        return self.window

    async def _calibrate(self, messages: Sequence[Message]) -> None:
        """Before the first fitting, the server's tokenizer (where it has one) says how many
        characters this conversation's text makes a token."""
        if self._calibrated:
            return
        self._calibrated = True
        count = getattr(self.provider, "count_tokens", None)
        if count is None or not callable(count):
            return
        sample = transcript(messages)[-16_000:]
        if len(sample) < 200:
            self._calibrated = False  # too little to go by; try again with more text
            return
        tokens = await count(sample)
        if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0:
            ratio = max(1.0, min(8.0, len(sample) / tokens))
            self.estimate = dataclasses.replace(self.estimate, chars_per_token=ratio)

    def observe(self, request: ModelRequest, usage: Usage,
                counted: Replay | int | None = None) -> None:
        """Calibrate with the prompt tokens the model counted for ``request``. The scale
        moves only when it is off by more than a little (under-counting by 2%, over-counting
        by 15%), so the fitting's cut points stay put. ``counted`` spares a count of every
        message: the conversation's ``Replay`` (its messages counted as they came), or the
        unscaled estimate of a fitted view."""
        if not usage.input_tokens:  # unreported (None) or nothing to go by
            return
        unscaled = Estimate(self.estimate.chars_per_token)
        if isinstance(counted, int):
            raw = counted
        elif counted is not None:
            raw = unscaled.fixed(request) + counted.tokens(request.messages, unscaled)
        else:
            raw = unscaled.request(request)
        if raw <= 0:
            return
        seen = usage.input_tokens / raw
        current = self.estimate.scale
        if seen > current * 1.02 or seen < current * 0.85:
            self.estimate = Estimate(self.estimate.chars_per_token, _bounded(seen))
        self._calibrated = True

    def _learn(self, error: ContextOverflowError, sent: ModelRequest) -> None:
        """An overflow says the estimate or the window was wrong: take the server's numbers
        where it gives them, else count a quarter more tokens and a window no larger than
        what was just refused."""
        prompt, window = error.prompt_tokens, error.window
        estimated = self.estimate.request(sent)
        if window is not None:
            self.window, self.window_source = window, "as the server's error stated"
        elif self.window is None:
            self.window, self.window_source = max(256, int(estimated * 0.9)), "estimated"
        if prompt is not None and estimated > 0:
            scale = self.estimate.scale * prompt / estimated
            self.estimate = dataclasses.replace(
                self.estimate, scale=_bounded(max(self.estimate.scale, scale) * 1.05))
        else:
            self.estimate = dataclasses.replace(self.estimate,
                                                scale=_bounded(self.estimate.scale * 1.25))


def _bounded(scale: float) -> float:
    return max(MIN_SCALE, min(MAX_SCALE, scale))


__all__ = ["ContextFitter", "with_advice"]
