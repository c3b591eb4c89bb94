"""Asking a Chat Completions server again after it could not read its own model's output.

llama-server answers HTTP 500 (``ModelOutputParseError``) when the model's output is
neither plain text nor a call of an offered tool. Sent again as it was, at temperature 0,
the request would only fail again: these say what to send instead (the tools withheld, the
streamed text continued, or a warmer temperature).
"""

from __future__ import annotations

from typing import Any

from tether.errors import ModelOutputParseError, ProviderError

# The lowest temperature the retry after a model-output parse error samples at.
PARSE_RETRY_TEMPERATURE = 0.7


def after_parse_error(error: ProviderError, body: dict[str, Any]) -> dict[str, Any]:
    """The body for the retry after ``error``: after a ``ModelOutputParseError``, the same
    request with the tools withheld when the model was free to answer in words (tools
    offered with ``tool_choice`` "auto"), else ``warmer_after_parse_error``'s; after any
    other error, ``body`` unchanged.

    llama-server answers HTTP 500 when the model's output is neither plain text nor a call
    of an offered tool. Small models write that when they mean to answer in words: a call
    of a tool nobody offered (measured with the 0.5B default model: "capital" for "What is
    the capital of France?", "hello" for "Say hello."), or code whose braces the server
    reads as the start of a call. Asked again without tools, the server cannot fail to
    read the answer, and the model answers in words; the run's next turn offers the tools
    again. Sent again as it was, at temperature 0 the server would only repeat the failure.
    """
    if not isinstance(error, ModelOutputParseError):
        return body
    if body.get("tools") and body.get("tool_choice", "auto") == "auto":
        return {k: v for k, v in body.items()
                if k not in ("tools", "tool_choice", "parallel_tool_calls")}
    return warmer_after_parse_error(error, body)


def continue_after_parse_error(error: ProviderError, body: dict[str, Any],
                               text: str) -> dict[str, Any] | None:
    """The body that has the server go on from ``text`` after a ``ModelOutputParseError``
    that came once ``text`` had streamed out (None after any other error).

    llama-server streams the text before what it takes for a call, then fails to read the
    call: code whose ``{`` it took for one ("To declare a struct in Go, use ``type P struct
    {``..."). The text is shown already; asked again without the tools and with it as the
    start of the assistant's answer, the server continues it.
    """
    if not isinstance(error, ModelOutputParseError):
        return None
    out = {k: v for k, v in body.items() if k not in ("tools", "tool_choice",
                                                      "parallel_tool_calls")}
    out["messages"] = [*body["messages"], {"role": "assistant", "content": text}]
    return out


def warmer_after_parse_error(error: ProviderError, body: dict[str, Any]) -> dict[str, Any]:
    """The body for the retry after ``error``: after a ``ModelOutputParseError``, with the
    temperature raised to at least ``PARSE_RETRY_TEMPERATURE``; otherwise unchanged.

    llama-server at temperature 0 (tether's local default) is deterministic: the same
    request would get the same unparseable output. A body without a temperature gets one
    too, since the server's own default may be 0 (``--temp 0``). Used where the tools cannot
    be withheld: a call is required (``tool_choice`` "required" or a named tool).
    """
    if not isinstance(error, ModelOutputParseError):
        return body
    current = body.get("temperature")
    floor = current if isinstance(current, int | float) else 0.0
    return {**body, "temperature": max(PARSE_RETRY_TEMPERATURE, floor)}
