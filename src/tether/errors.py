"""One hierarchy for everything tether raises: ``TetherError`` and its kinds.

Every message says what happened and, where there is one, what to do about it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias

from tether.textrepair import repair

if TYPE_CHECKING:
    from tether.messages import Message, Usage

# Why a structured-output run has no answer (``OutputFailure.reason``).
OutputFailureReason: TypeAlias = Literal["prose", "bound", "mismatch", "provider",
                                         "empty_prompt", "truncated", "filtered", "rejected"]


class RunRecord(Protocol):
    """What an error says of the run it ended: ``tether.result.RunResult`` is the one.

    Errors sit under every value a result is made of (its conversation, its events), so
    they name it by this much of it: what is made of values above them (the conversation,
    valid to continue; the events; the tool calls; the taint; the pending calls) is typed
    loosely here, and ``isinstance(error.result, RunResult)`` gives their types."""

    @property
    def text(self) -> str: ...
    @property
    def stop_cause(self) -> str: ...
    @property
    def usage(self) -> Usage: ...
    @property
    def turns(self) -> int: ...
    @property
    def blocked_sends(self) -> int: ...
    @property
    def malformed_tool_args(self) -> int: ...
    @property
    def messages(self) -> list[Message]: ...
    @property
    def error(self) -> TetherError | None: ...
    @property
    def output(self) -> Any: ...
    @property
    def cost_usd(self) -> float | None: ...
    @property
    def new_messages(self) -> list[Message]: ...
    @property
    def conversation(self) -> Any: ...
    @property
    def events(self) -> Sequence[Any]: ...
    @property
    def tool_calls(self) -> Sequence[Any]: ...
    @property
    def taint(self) -> Any: ...
    @property
    def pending(self) -> Sequence[Any]: ...
    def to_dict(self) -> dict[str, Any]: ...


class TetherError(Exception):
    """Base class of every error tether raises on purpose.

    ``result`` is the run it ended, when it ended one: ``Agent.run`` and ``Agent.resume``
    raise a provider's failure with the ``RunResult`` attached (its conversation is valid
    to continue)."""

    result: RunRecord | None = None


class ConfigError(TetherError):
    """A configuration value (code or tether.toml) is wrong; the message names it."""


class LocalSetupError(TetherError):
    """`tether local` could not build llama-server or fetch a model; the message says what
    is missing (cmake, a compiler, pip) or what failed, and where the log is."""


class ToolError(TetherError):
    """A tool could not be declared or called as written (raised to the host, not the model)."""


class ProviderError(TetherError):
    """A model provider failed. ``retryable`` says whether trying again may help.

    ``usage`` is what the failed request is known to have spent: the tokens a server
    reported before it failed (an Anthropic stream's input tokens before an
    ``overloaded_error``), ``Usage()`` when it cannot have spent any (no connection was
    made), None when nobody knows."""

    retryable: bool = False
    usage: Usage | None = None

    def __init__(
        self,
        message: str,
        *,
        provider: str = "",
        status: int | None = None,
        body: str | None = None,
    ) -> None:
        # Messages quote what servers sent: a lone surrogate in them would fail later, when
        # the message is printed or stored.
        message = repair(message)
        super().__init__(message)
        self.message = message
        self.provider = provider
        self.status = status
        self.body = body if body is None else repair(body)


class AuthError(ProviderError):
    """HTTP 401: the API key is missing or wrong."""


class PermissionDeniedError(ProviderError):
    """HTTP 403: the key is valid but may not use this model or endpoint."""


class NotFoundError(ProviderError):
    """HTTP 404: wrong base URL or unknown model."""


class BadRequestError(ProviderError):
    """HTTP 400/422: the provider rejected the request as malformed."""


class ContextOverflowError(BadRequestError):
    """The conversation no longer fits the model's context window.

    ``prompt_tokens`` and ``window`` are what the server's error said (the prompt's size
    and the window, in tokens), each read by the wire that raised it from its server's own
    words or fields; None where it did not say."""

    def __init__(self, message: str, *, prompt_tokens: int | None = None,
                 window: int | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.prompt_tokens = prompt_tokens
        self.window = window


class RateLimitError(ProviderError):
    """HTTP 429. ``retry_after`` is the wait the provider asked for, in seconds."""

    retryable = True

    def __init__(self, message: str, *, retry_after: float | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.retry_after = retry_after


class OverloadedError(ProviderError):
    """HTTP 503/529: the provider is temporarily overloaded."""

    retryable = True

    def __init__(self, message: str, *, retry_after: float | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.retry_after = retry_after


class ServerError(ProviderError):
    """HTTP 5xx other than overload: the provider failed on its side."""


class ModelOutputParseError(ServerError):
    """The server could not read the model's own output as an answer or as a call of an
    offered tool (llama-server's HTTP 500, or an ``error`` event in its stream).

    It is retried once, with a request that can succeed where the same one would fail again
    (Chat Completions: the tools withheld, or sampling warmer when a call is required); the
    message says what to try when that fails too.
    """

    retryable = True


class ProviderTimeout(ProviderError):
    """The provider did not answer (or a stream stalled) within the configured time."""

    retryable = True


class ProviderConnectionError(ProviderError):
    """The provider could not be reached (refused, reset, DNS)."""

    retryable = True


class MalformedResponseError(ProviderError):
    """The provider answered with something that is not its documented wire format."""


class PendingStateError(TetherError):
    """A saved pending state cannot be read (wrong shape, or a newer format), or decisions
    do not answer the calls that are pending."""


class OutputFailure(TetherError):
    """A structured-output run ended without a valid answer.

    ``reason`` is one of ``prose``, ``bound``, ``mismatch``, ``provider``, ``empty_prompt``,
    ``truncated`` (the answer was cut by an output token limit before it was complete),
    ``filtered`` (the provider filtered or refused the answer),
    ``rejected`` (an output validator sent the model back with ``ModelRetry`` until the
    output retries ran out; ``validation_error`` is its last message).
    ``result`` keeps the transcript, usage and events of the run.
    """

    def __init__(
        self,
        reason: OutputFailureReason,
        message: str,
        *,
        result: RunRecord | None = None,
        validation_error: str | None = None,
        bound: str | None = None,
        error: BaseException | None = None,
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.result = result
        self.validation_error = validation_error
        self.bound = bound
        self.error = error


class HookError(TetherError):
    """A hook failed, hung past ``hook_timeout_secs`` or answered what it may not answer:
    the run it was part of ends with this error (hooks fail closed). ``hook`` names the
    hook, ``point`` where it ran (``before_tool_call``...)."""

    def __init__(self, message: str, *, hook: str = "", point: str = "") -> None:
        super().__init__(message)
        self.hook = hook
        self.point = point


class GuardrailTripped(HookError):
    """A blocking guardrail found what it checks for: the run ends with this error (the
    prompt never reaches the model; an answer is withheld). ``reason`` is the check's."""

    def __init__(self, guardrail: str, point: str, reason: str) -> None:
        super().__init__(f"guardrail {guardrail} tripped: {reason}", hook=guardrail,
                         point=point)
        self.reason = reason


class ModelRetry(Exception):
    """Raised by an output validator: the answer is refused and the model is sent back with
    this message (``OutputSpec(...).with_validator(fn)``, ``Agent.run(...,
    output_validators=[fn])``), up to the agent's ``output_retries``."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class SandboxUnavailable(TetherError):
    """A sandboxed tool cannot run: no confinement mechanism works on this machine (or the
    one asked for is missing). The message says how to install bubblewrap or how to opt out
    (``[sandbox] mode = "none"``); nothing runs unconfined in its place."""


class A2AError(TetherError):
    """A remote agent (Agent2Agent protocol, ``tether.a2a``) could not be reached, or its
    answer broke the protocol (an agent card that does not parse, an interface on another
    host, a task that failed). ``from_outside`` says the message quotes what the remote
    sent (outside text)."""

    def __init__(self, message: str, *, from_outside: bool = False) -> None:
        super().__init__(message)
        self.from_outside = from_outside


class A2ALimitError(A2AError):
    """A remote agent was cut off at a bound: it sent more bytes or events than
    ``A2AAgent.max_bytes`` / ``max_events`` allow, or did not finish within
    ``timeout_secs``. A remote that streams forever or sends a huge body ends here."""
