"""Guardrails: checks of a run's prompt and of its answer, built on hooks.

A guardrail is a hook (``tether.run.hooks``) a host attaches like any other
(``Agent(hooks=[...])``, ``[[hooks]]`` in tether.toml). Its check is a function of a text
that answers None (nothing found) or the reason it trips; sync or async.

- ``InputGuardrail``: checks the prompt before the model reads it (the run's first request);
- ``OutputGuardrail``: checks a text answer (a response with no tool calls) before it joins
  the conversation and the result.

A blocking guardrail that trips ends the run with ``GuardrailTripped`` (``Agent.run`` raises
it, the result attached): the prompt never reaches the model, the answer is kept nowhere
(not the conversation, the result or an event; a stream has shown its text as it came, so
a host that streams to a person and must not show it buffers, or runs without streaming).
An advisory one is a ``Flag``: a ``HookDecided`` event, the run goes on.

``secrets_in_answer()`` is one, built in: regular expressions for credentials in an answer
(``[[hooks]] python = "tether.guardrails:secrets_in_answer"``). Its reason names the kind
of secret, never the text: events are stored.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Literal

from tether.errors import GuardrailTripped
from tether.providers.base import ModelResponse
from tether.run.hooks import Flag, RequestView

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
    """Checks a text answer (a response with text and no tool calls) before it is kept
    (``after_model_response``)."""

    point = "after_model_response"

    async def after_model_response(self, response: ModelResponse) -> Flag | None:
        message = response.message
        if message.tool_calls or not message.text.strip():
            return None
        return await self._verdict(message.text)


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
