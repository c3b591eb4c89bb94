"""What crosses workflow history, as JSON: requests, responses, tool outputs, the run plan.

Everything is a plain dict built from tether's own (de)serializers (``message_to_dict``,
``usage_to_dict``, ``Taint.to_dict``, ``Decision.to_dict``, ``ToolSpec.to_dict``), so
Temporal's default JSON converter carries it and a recorded history reads the same in any
process. Nothing here imports ``temporalio``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tether import errors
from tether.messages import (
    Image,
    Labels,
    Message,
    message_from_dict,
    message_to_dict,
    part_from_dict,
    part_to_dict,
    usage_from_dict,
    usage_to_dict,
)
from tether.provenance import Source
from tether.providers.base import ModelRequest, ModelResponse, NamedToolChoice, ToolChoice
from tether.tools.spec import ToolSpec
from tether.tools.tool import Tool, ToolOutput
from tether.trust import Capabilities, SecurityConfig, Taint


def jsonable(value: Any) -> Any:
    """``value`` as JSON data (a validated argument may be a pydantic model, a tuple, a
    date): what a tool's validator reads back to the same value on the worker."""
    from pydantic_core import to_jsonable_python

    return to_jsonable_python(value, fallback=str)


def canonical(data: Any) -> bytes:
    """One byte spelling of JSON data (sorted keys, no spaces): what a reference hashes."""
    return json.dumps(data, ensure_ascii=False, sort_keys=True, separators=(",", ":"),
                      allow_nan=False).encode("utf-8", "surrogatepass")


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- model requests and responses -------------------------------------------------------------


def tool_choice_to_json(choice: ToolChoice) -> str | dict[str, str]:
    return {"name": choice.name} if isinstance(choice, NamedToolChoice) else choice


def tool_choice_from_json(value: Any) -> ToolChoice:
    if isinstance(value, dict):
        return NamedToolChoice(str(value["name"]))
    if value in ("auto", "none", "required"):
        return value  # type: ignore[no-any-return]
    raise ValueError(f"unknown tool choice {value!r}")


def request_to_dict(request: ModelRequest) -> dict[str, Any]:
    """A request without its messages (they travel beside it, inline or by reference)."""
    return {
        "system": request.system,
        "tools": [spec.to_dict() for spec in request.tools],
        "tool_choice": tool_choice_to_json(request.tool_choice),
        "max_output_tokens": request.max_output_tokens,
        "temperature": request.temperature,
        "stream": request.stream,
    }


def request_from_dict(d: Mapping[str, Any], messages: Sequence[Message]) -> ModelRequest:
    return ModelRequest(
        messages=tuple(messages),
        system=d.get("system"),
        tools=[ToolSpec.from_dict(t) for t in d.get("tools", [])],
        tool_choice=tool_choice_from_json(d.get("tool_choice", "auto")),
        max_output_tokens=d.get("max_output_tokens"),
        temperature=d.get("temperature"),
        stream=bool(d.get("stream", False)),
    )


def response_to_dict(response: ModelResponse) -> dict[str, Any]:
    return {"message": message_to_dict(response.message), "stop_reason": response.stop_reason,
            "usage": usage_to_dict(response.usage), "model": response.model, "id": response.id,
            "raw_stop_reason": response.raw_stop_reason}


def response_from_dict(d: Mapping[str, Any]) -> ModelResponse:
    return ModelResponse(message_from_dict(d["message"]), d["stop_reason"],
                         usage_from_dict(d["usage"]), d.get("model", ""), d.get("id"),
                         d.get("raw_stop_reason"))


# --- tools ------------------------------------------------------------------------------------


def capabilities_to_dict(caps: Capabilities) -> dict[str, bool]:
    return {"private_data": caps.private_data, "untrusted_input": caps.untrusted_input,
            "external_send": caps.external_send, "destructive": caps.destructive}


def capabilities_from_dict(d: Mapping[str, Any]) -> Capabilities:
    return Capabilities(bool(d.get("private_data")), bool(d.get("untrusted_input")),
                        bool(d.get("external_send")), bool(d.get("destructive")))


def tool_entry(tool: Tool) -> dict[str, Any]:
    """What the workflow knows of a worker's tool: all of it but its handler (and its
    validator, which the workflow takes from the worker's own tool of that name), the
    parameter roles the gate reads included."""
    return {"spec": tool.spec.to_dict(), "capabilities": capabilities_to_dict(tool.capabilities),
            # "source" and "source_name" are the origin and the server (the plan's keys:
            # recorded in durable histories, so they keep their spelling).
            "cache_approval": tool.cache_approval, "source": tool.origin,
            "read_only_hint": tool.read_only_hint, "source_name": tool.server,
            "spec_from_outside": tool.spec_from_outside, "idempotent": tool.idempotent,
            # What provenance traces and the approval panel lays out as text.
            "content_params": list(tool.content_params),
            "destination_params": list(tool.destination_params),
            "closed_destinations": tool.closed_destinations,
            "returns_secrets": tool.returns_secrets}


def output_to_dict(output: ToolOutput) -> dict[str, Any]:
    return {"content": output.content, "is_error": output.is_error,
            "structured": jsonable(output.structured), "from_outside": output.from_outside,
            "usage": usage_to_dict(output.usage) if output.usage is not None else None,
            "taint": output.taint.to_dict() if output.taint is not None else None,
            # The result's labelled values and what it wrote, in history (issue 29).
            "labels": Labels(fields=output.fields, written=output.written,
                             readers=output.readers).to_dict(),
            **({"images": [part_to_dict(i) for i in output.images]} if output.images else {})}


def output_from_dict(d: Mapping[str, Any]) -> ToolOutput:
    labels = Labels.from_dict(d.get("labels"))
    images = tuple(part_from_dict(i) for i in d.get("images", ()))
    return ToolOutput(str(d["content"]), bool(d.get("is_error")), d.get("structured"),
                      d.get("from_outside"),
                      usage_from_dict(d["usage"]) if d.get("usage") is not None else None,
                      Taint.from_dict(d["taint"]) if d.get("taint") is not None else None,
                      fields=labels.fields, written=labels.written, readers=labels.readers,
                      images=tuple(i for i in images if isinstance(i, Image)))


# --- what shapes the gate -----------------------------------------------------------------


def security_to_dict(security: SecurityConfig) -> dict[str, Any]:
    """Every field of ``security`` as JSON (sequences as lists, paths as strings): a durable
    run judges its calls by the very settings the worker's own agent has, whatever field
    is added to them."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(security):
        value = getattr(security, f.name)
        if isinstance(value, list | tuple):
            value = [str(v) if isinstance(v, Path) else v for v in value]
        out[f.name] = value
    return out


def security_from_dict(d: Mapping[str, Any]) -> SecurityConfig:
    """The ``SecurityConfig`` a plan records. A field the plan lacks (one recorded by an
    older tether) keeps its default, except ``protected_paths``: those are the worker's,
    and reading the default would read this process's environment."""
    known = {f.name for f in dataclasses.fields(SecurityConfig)}
    values: dict[str, Any] = {"protected_paths": ()}
    values.update((k, tuple(v) if isinstance(v, list) else v) for k, v in d.items()
                  if k in known)
    return SecurityConfig(**values)


def source_to_dict(source: Source) -> dict[str, Any]:
    d: dict[str, Any] = {"name": source.name, "text": source.text, "trusted": source.trusted,
                         "private": source.private}
    if source.fields:
        d["fields"] = [f.to_dict() for f in source.fields]
    if source.tool:
        d["tool"] = source.tool
    if source.readers is not None:
        d["readers"] = list(source.readers)
    return d


def source_from_dict(d: Mapping[str, Any]) -> Source:
    """A source as recorded; its field labels read as a saved result's are (a label that
    is not one is dropped: its value is of the untrusted rest)."""
    saved = Labels.from_dict({"fields": d.get("fields"),
                              **({"readers": d["readers"]} if "readers" in d else {})})
    return Source(str(d["name"]), str(d["text"]), d.get("trusted") is True,
                  bool(d.get("private")), saved.fields, str(d.get("tool") or ""),
                  saved.readers)


# --- provider errors --------------------------------------------------------------------------

# The error kinds a model activity may report, by name: nothing else is ever constructed
# from what a worker sent.
_PROVIDER_ERRORS: dict[str, type[errors.ProviderError]] = {
    cls.__name__: cls for cls in (
        errors.ProviderError, errors.AuthError, errors.PermissionDeniedError,
        errors.NotFoundError, errors.BadRequestError, errors.ContextOverflowError,
        errors.RateLimitError, errors.OverloadedError, errors.ServerError,
        errors.ModelOutputParseError, errors.ProviderTimeout, errors.ProviderConnectionError,
        errors.MalformedResponseError)
}


def error_to_dict(error: errors.TetherError) -> dict[str, Any]:
    return {"type": type(error).__name__, "message": str(error),
            "provider": getattr(error, "provider", ""), "status": getattr(error, "status", None),
            "retry_after": getattr(error, "retry_after", None)}


def error_from_dict(d: Mapping[str, Any], provider: str) -> errors.TetherError:
    """The provider error a worker reported, as the loop would have seen it in process."""
    message = str(d.get("message", "the model request failed"))
    cls = _PROVIDER_ERRORS.get(str(d.get("type")))
    if cls is None:
        return errors.ProviderError(message, provider=provider)
    status = d.get("status") if isinstance(d.get("status"), int) else None
    kw: dict[str, Any] = {"provider": str(d.get("provider") or provider), "status": status}
    if cls in (errors.RateLimitError, errors.OverloadedError):
        retry_after = d.get("retry_after")
        kw["retry_after"] = float(retry_after) if isinstance(retry_after, int | float) else None
    return cls(message, **kw)
