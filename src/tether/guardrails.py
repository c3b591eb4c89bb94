"""Guardrails: checks of a run's prompt and of its answer, built on hooks.

A guardrail is a hook (``tether.run.hooks``) a host attaches like any other
(``Agent(hooks=[...])``, ``[[hooks]]`` in tether.toml). Its check is a function of a text
that answers None (nothing found) or the reason it trips; sync or async.

- ``InputGuardrail``: checks the prompt before the model reads it (the run's first request);
- ``OutputGuardrail``: checks every answer the model gives (its text, alone or beside tool
  calls, and a structured answer's value) before it joins the conversation and the result.

A blocking guardrail that trips ends the run with ``GuardrailTripped`` (``Agent.run`` raises
it, the result attached): the prompt never reaches the model, the answer is kept nowhere
(not the conversation, the result, the session store or an event). While a blocking output
guardrail is attached, a streamed answer's text is held back until it has judged the answer
(``TextDelta`` events come after its verdict, just before ``ModelResponded``): a terminal
never shows a tripped answer.
An advisory one is a ``Flag``: a ``HookDecided`` event, the run goes on.

``secrets_in_answer()`` is one, built in: regular expressions for credentials in an answer
(``[[hooks]] python = "tether.guardrails:secrets_in_answer"``). Its reason names the kind
of secret, never the text: events are stored.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any, Literal

from tether.errors import GuardrailTripped
from tether.providers.base import ModelResponse
from tether.run.hooks import Flag, RequestView, answer_calls

# A guardrail's check: None when the text passes, else why it trips.
Check = Callable[[str], str | Awaitable[str | None] | None]


async def _checked(check: Check, text: str) -> str | None:
    found = check(text)
    if inspect.isawaitable(found):
        found = await found
    if found is not None and not isinstance(found, str):
        raise TypeError(f"a guardrail's check answers None or a reason (str), not "
                        f"{type(found).__name__}")
    return found


class _Guardrail:
    point: Literal["before_model_request", "after_model_response"]

    def __init__(self, check: Check, *, blocking: bool = True, name: str | None = None) -> None:
        self.check = check
        self.blocking = blocking
        self.name: str = name or str(getattr(check, "__name__", type(self).__name__))

    async def _verdict(self, text: str) -> Flag | None:
        reason = await _checked(self.check, text)
        if reason is None:
            return None
        if self.blocking:
            raise GuardrailTripped(self.name, self.point, reason)
        return Flag(reason)

    def __repr__(self) -> str:
        kind = "blocking" if self.blocking else "advisory"
        return f"{type(self).__name__}({self.name!r}, {kind})"


class InputGuardrail(_Guardrail):
    """Checks a run's prompt before the model reads it (``before_model_request``, on the
    run's first request; a resumed run has no prompt of its own)."""

    point = "before_model_request"

    async def before_model_request(self, request: RequestView) -> Flag | None:
        if request.turn != 1 or request.prompt is None:
            return None
        return await self._verdict(request.prompt)


class OutputGuardrail(_Guardrail):
    """Checks every answer the model gives before it is kept or shown
    (``after_model_response``): its text (alone, or beside tool calls), and a structured
    answer's value (the answering tool's arguments: their JSON as the model wrote it, and
    each string in them). A blocking one holds a streamed answer's text back until it has
    judged it (``holds_text``)."""

    point = "after_model_response"

    @property
    def holds_text(self) -> bool:
        return self.blocking

    async def after_model_response(self, response: ModelResponse) -> Flag | None:
        flags = [await self._verdict(text) for text in _answer_texts(response)]
        return next((f for f in flags if f is not None), None)


def _answer_texts(response: ModelResponse) -> Iterator[str]:
    """Each text of a response that is an answer: its text, and each answering call's
    arguments (as written, and each string in them)."""
    text = response.message.text
    if text.strip():
        yield text
    for call in answer_calls():
        yield call.arguments
        try:
            value = call.parsed_arguments()
        except ValueError:
            continue  # not an answer the run would take: its JSON text was checked
        for leaf in _strings(value):
            if leaf.strip() and leaf != call.arguments:
                yield leaf


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


# Credentials as they are written: each pattern with the words its reason uses.
SECRET_PATTERNS: tuple[tuple[str, str], ...] = (
    ("a private key", r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----"),
    ("an AWS access key id", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    ("a GitHub token", r"\bgh[pousr]_[A-Za-z0-9]{36,}\b|\bgithub_pat_[A-Za-z0-9_]{50,}"),
    ("an API key", r"\bsk-(?:[A-Za-z0-9_-]*-)?[A-Za-z0-9]{20,}"),
    ("a Slack token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    ("a Google API key", r"\bAIza[0-9A-Za-z_-]{35}\b"),
    ("a password or secret assignment",
     r"(?i)\b(?:password|passwd|pwd|secret|api[_-]?key|access[_-]?token)\s*[=:]\s*"
     r"[\"']?[^\s\"']{6,}"),
)


def secret_check(patterns: Iterable[tuple[str, str]] = SECRET_PATTERNS) -> Check:
    """A check that trips on the first pattern found, naming its kind (not the text)."""
    compiled = [(kind, re.compile(pattern)) for kind, pattern in patterns]

    def secrets(text: str) -> str | None:
        for kind, pattern in compiled:
            if pattern.search(text):
                return f"the answer holds what looks like {kind}"
        return None

    return secrets


def secrets_in_answer(*, blocking: bool = True,
                      patterns: Iterable[tuple[str, str]] = SECRET_PATTERNS) -> OutputGuardrail:
    """The built-in output guardrail: an answer that holds what looks like a credential (a
    private key, a cloud or API key, a token, ``password=...``) is withheld (``blocking``)
    or flagged."""
    return OutputGuardrail(secret_check(patterns), blocking=blocking, name="secrets_in_answer")


__all__ = ["SECRET_PATTERNS", "Check", "InputGuardrail", "OutputGuardrail", "secret_check",
           "secrets_in_answer"]
