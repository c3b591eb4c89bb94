"""How a request is retried: one policy for every adapter, the rules a wire declares beyond
it, and the budget both retrying layers spend.

One retry policy for all adapters: 429, 503, 529 and transport errors are retried with
exponential backoff, honouring Retry-After up to a cap; a Retry-After beyond the cap fails
at once, naming the wait; a model-output parse error (llama-server's 500) is retried once.
Everything else fails on the first error.

A wire's request is retried in one place, ``retry_before_first_chunk``: it opens an attempt
again when the attempt fails before any content, whether with an error status (an attempt
is one ``HTTPTransport.attempt``) or inside a 200 (a streamed llama-server parse error, an
Anthropic ``overloaded_error`` event). ``HTTPTransport.send`` retries a POST on its own for
callers that read no stream. Every attempt spends the request's one ``RetryBudget``, so a
request makes at most ``1 + max_retries`` attempts whatever failed.
"""

from __future__ import annotations

import random
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from tether.errors import BadRequestError, ModelOutputParseError, ProviderError
from tether.messages import Message, Text
from tether.providers.base import (
    Completed,
    Retrying,
    StreamChunk,
    TextChunk,
    attempt_usage,
    retry_reason,
)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``max_retries`` further attempts after the first; waits grow from ``base_delay``
    doubling up to ``max_delay``; a provider's Retry-After is honoured up to
    ``retry_after_cap`` seconds, beyond which the request fails at once."""

    max_retries: int = 2
    base_delay: float = 0.5
    max_delay: float = 8.0
    retry_after_cap: float = 60.0

    def backoff(self, attempt: int) -> float:
        delay: float = min(self.max_delay, self.base_delay * (2 ** (attempt - 1)))
        return delay * (0.5 + random.random() / 2)  # jitter keeps clients from marching in step


Sleep = Callable[[float], Awaitable[None]]

Revise = Callable[[ProviderError, Any], Any]
"""How a request body changes for the attempt after ``error`` (return it unchanged to resend
it as it was)."""

Resume = Callable[[ProviderError, Any, str], Any | None]
"""The body that asks the server to go on from ``text``, an answer's text that has gone out
before ``error`` broke it off, or None (it cannot be continued)."""


@dataclass(frozen=True, slots=True)
class RetryRules:
    """What one wire's requests do beyond ``RetryPolicy`` when an attempt fails: its
    server's quirks, declared once by its codec (``WireCodec.retry_rules``) and read by
    ``RetryBudget`` alone, never threaded through the transport as callbacks.

    - ``optional_fields``: fields tether adds to a body that a server may refuse (a
      ``BadRequestError`` whose body or message names one, e.g. ``stream_options``): the
      request is sent again at once without it, outside ``max_retries``, and the field is
      in ``RetryBudget.dropped`` (the wire leaves it out of later requests).
    - ``revise``: the body for the attempt after a retried error (None: the same body);
      a pure function of the error and the body.
    - ``resume``: the body that continues an answer broken off after its text went out
      (None: this wire's answers are never continued).

    The defaults are a wire without quirks.
    """

    optional_fields: tuple[str, ...] = ()
    revise: Revise | None = None
    resume: Resume | None = None


def retry_wait(
    policy: RetryPolicy, error: ProviderError, attempt: int, parse_retries: int
) -> float | None:
    """Seconds to wait after attempt number ``attempt`` failed with ``error``, or None to
    give up now. ``parse_retries`` is how many model-output parse errors were retried already.

    A Retry-After beyond the cap gives up and names the wait in the error's message.
    """
    if not error.retryable or attempt > policy.max_retries:
        return None
    if isinstance(error, ModelOutputParseError):
        # The server is not busy, the model's output was unreadable: no wait helps.
        return None if parse_retries >= 1 else 0.0
    retry_after = getattr(error, "retry_after", None)
    if retry_after is not None:
        if retry_after > policy.retry_after_cap:
            # Waiting longer than the cap would look like a hang: fail now, name the wait.
            error.args = (
                f"{error.message} (the provider asked to retry after {retry_after:g}s, "
                f"more than retry_after_cap_secs={policy.retry_after_cap:g}s)",
            )
            return None
        return float(retry_after)
    return policy.backoff(attempt)


class RetryBudget:
    """One request's attempts against its ``RetryPolicy``, and the body the next one sends.

    Shared by whatever retries the request (``retry_before_first_chunk``, and
    ``HTTPTransport.send`` where a caller has it retry), so the request makes at most
    ``1 + policy.max_retries`` attempts in all and retries a ``ModelOutputParseError`` at
    most once, whichever layer saw the failures. ``attempts`` counts the requests sent.
    ``rules`` are the wire's (``RetryRules``): the body for the attempt after an error
    (``OpenAIChat`` withholds the tools after a parse error; without a rule every attempt
    sends the same body), an optional field a server refused sent again at once without it
    (not counted against ``max_retries``; ``dropped`` names it), and an answer whose text
    went out before it broke off continued (``resume_after``).
    """

    __slots__ = ("_refused", "attempts", "body", "dropped", "parse_retries", "policy",
                 "rules")

    def __init__(self, policy: RetryPolicy, body: Any,
                 rules: RetryRules = RetryRules(), *, dropped: set[str] | None = None) -> None:
        self.policy = policy
        self.body = body
        self.rules = rules
        self.attempts = 0
        self.parse_retries = 0
        # A set of the caller's (a provider's refused fields) is added to as a field is
        # dropped, so the caller's next requests leave it out too.
        self.dropped: set[str] = set() if dropped is None else dropped
        self._refused: ProviderError | None = None

    @property
    def resumable(self) -> bool:
        """Whether an answer broken off after some text can be continued at all."""
        return self.rules.resume is not None

    def resume_after(self, error: ProviderError, text: str) -> float | None:
        """The answer broke off with ``error`` after ``text`` went out: seconds to wait
        before asking the server to go on from it, or None to give up (the retry policy
        says no, or the wire cannot continue it)."""
        resume = self.rules.resume
        if resume is None or error is self._refused:
            return None
        wait = retry_wait(self.policy, error, self.attempts, self.parse_retries)
        body = None if wait is None else resume(error, self.body, text)
        if body is None:
            self._refused = error
            return None
        if isinstance(error, ModelOutputParseError):
            self.parse_retries += 1
        self.body = body
        return wait

    def wait_for(self, error: ProviderError) -> float | None:
        """The current attempt failed with ``error``: seconds to wait before the next one,
        or None to give up. Deciding to retry spends the budget and revises the body."""
        if error is self._refused:
            # The transport gave up on it and it surfaced through the stream: one verdict
            # per error (a second would also name a Retry-After wait twice).
            return None
        instead = self._without_refused_field(error)
        if instead is not None:
            self.body = instead
            return 0.0
        wait = retry_wait(self.policy, error, self.attempts, self.parse_retries)
        if wait is None:
            self._refused = error
            return None
        if isinstance(error, ModelOutputParseError):
            self.parse_retries += 1
        if self.rules.revise is not None:
            self.body = self.rules.revise(error, self.body)
        return wait

    def _without_refused_field(self, error: ProviderError) -> Any | None:
        """The body without the optional field (``RetryRules.optional_fields``) that
        ``error`` refuses by name, or None: a server that does not know a field tether added
        (an older or stricter one) may refuse the request for it, and the field is worth
        asking for, not worth failing."""
        if not isinstance(error, BadRequestError) or not isinstance(self.body, dict):
            return None
        said = error.body or error.message
        for field in self.rules.optional_fields:
            if field in self.body and field in said:
                self.dropped.add(field)
                return {k: v for k, v in self.body.items() if k != field}
        return None


async def retry_before_first_chunk(
    open_stream: Callable[[], AsyncGenerator[StreamChunk, None]],
    budget: RetryBudget,
    sleep: Sleep,
) -> AsyncGenerator[StreamChunk, None]:
    """The chunks of ``open_stream()``, opened again when it raises a retryable
    ``ProviderError`` before any content came out.

    Content is any chunk but a ``Retrying`` notice (text, reasoning, a tool call,
    ``Completed``): once some has gone to the caller a retry would repeat it, so a later
    error is raised as it is. Before that, the error (an error event inside a streamed 200,
    an error object in a 200 body, a stream that broke or stalled before its first token)
    is retried by ``budget``'s rules, announced with a ``Retrying`` notice.
    ``open_stream`` must send ``budget.body`` through ``HTTPTransport.attempt(...,
    budget=budget)`` (or ``send``), so every attempt is counted in the one budget.

    One exception: an answer that broke off after only text went out is continued where
    the wire can ask for that (``RetryBudget.resume_after``; llama-server's parse error
    after text). The next attempt asks the server to go on from the text shown; what of it
    the server sends again is dropped, and its ``Completed`` holds the whole text.
    """
    shown = ""  # the text already out, of an answer being continued
    while True:
        chunks = open_stream()
        content = False
        # This attempt's text, while it is only text (None: nothing to continue from).
        texts: list[str] | None = [] if budget.resumable else None
        echo = shown  # what the server may send again of the text it continues
        try:
            async for chunk in chunks:
                if isinstance(chunk, Retrying):
                    yield chunk
                    continue
                content = True
                if isinstance(chunk, TextChunk):
                    if echo:
                        unechoed, echo = _unechoed(chunk, echo)
                        if unechoed is None:
                            continue
                        chunk = unechoed
                    if texts is not None:
                        texts.append(chunk.text)
                elif isinstance(chunk, Completed):
                    if shown:
                        chunk = _continued(chunk, shown)
                else:
                    texts = None  # reasoning or a call went out: no text to go on from
                yield chunk
            return
        except ProviderError as error:
            if not content:
                wait = budget.wait_for(error)
            elif texts:
                so_far = shown + "".join(texts)
                wait = budget.resume_after(error, so_far)
                if wait is not None:
                    shown = so_far
            else:
                wait = None
            if wait is None:
                raise
            notice = Retrying(budget.attempts, wait, str(error), usage=attempt_usage(error),
                              reason=retry_reason(error))
        finally:
            await chunks.aclose()
        # Only a retried error gets here: a finished stream returned, any other error raised.
        yield notice
        await sleep(wait)


def _unechoed(chunk: TextChunk, echo: str) -> tuple[TextChunk | None, str]:
    """``chunk`` without what it repeats of ``echo`` (the text a continued answer already
    showed, which some servers send again first), and what of ``echo`` is still to come."""
    text = chunk.text
    if echo.startswith(text):
        return None, echo[len(text):]
    if text.startswith(echo):
        return TextChunk(text[len(echo):]), ""
    return chunk, ""  # this server does not send it again


def _continued(completed: Completed, shown: str) -> Completed:
    """The ``Completed`` of a continued answer, holding the text shown before it too."""
    message = completed.response.message
    if message.text.startswith(shown):
        return completed  # the server's answer already holds it
    parts = list(message.parts)
    at = next((i for i, p in enumerate(parts) if isinstance(p, Text)), None)
    if at is None:
        parts.insert(0, Text(shown))
    else:
        parts[at] = Text(shown + parts[at].text)  # type: ignore[union-attr]
    return Completed(replace(completed.response, message=Message(message.role, tuple(parts))))
