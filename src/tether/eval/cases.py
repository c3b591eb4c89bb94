"""What a case file holds, as strict pydantic models: a ``Suite`` of ``Case``s, each a prompt,
its tools (``StubTool``s with canned results and declared capabilities, or a tools file),
its repeats, and what is expected of every run (``Expect``), of an attack placed in a
stub's result (``Attack``) and, judged by a model, of its answer (``rubric``).

Every model forbids unknown keys: a misspelt expectation is an error, never a check that
silently passes.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import jsonschema
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tether.errors import TetherError

Capability = Literal["private_data", "untrusted_input", "external_send", "destructive"]
Order = Literal["any", "in_order", "exact"]
StopCauseName = Literal["completed", "max_turns", "max_calls", "output_token_budget", "cost_budget",
                        "interrupted", "no_output", "truncated", "repeated_failure", "paused",
                        "content_filter", "error"]
Verdict = Literal["traced", "untraced", "fixed", "unanchored"]
_NAME = r"^[A-Za-z0-9_]{1,64}$"


class EvalError(TetherError):
    """A case file that cannot be read or is not valid, a tools file that cannot be loaded,
    or a report that cannot be compared: the message names the file, the line, the case and
    the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_schema(schema: dict[str, Any]) -> dict[str, Any]:
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as e:
        raise ValueError(f"not a valid JSON Schema: {e.message}") from None
    return schema


def check_patterns(value: Any) -> Any:
    """A value to match, checked: ``{"regex": "..."}`` (the only key) must compile."""
    if isinstance(value, dict):
        if set(value) == {"regex"}:
            pattern = value["regex"]
            if not isinstance(pattern, str):
                raise ValueError("a {regex: ...} value must be a string")
            try:
                re.compile(pattern)
            except re.error as e:
                raise ValueError(f"bad regular expression {pattern!r}: {e}") from None
            return value
        for item in value.values():
            check_patterns(item)
    elif isinstance(value, list):
        for item in value:
            check_patterns(item)
    return value


class StubTool(_Strict):
    """A tool that answers with canned results, declared as a real one would be (its schema,
    capabilities and parameter roles), so the gate judges its calls as in production."""

    name: str = Field(pattern=_NAME)
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    capabilities: list[Capability] = Field(default_factory=list)
    needs_approval: bool = False
    content_params: list[str] = Field(default_factory=list)
    destination_params: list[str] = Field(default_factory=list)
    # What a call returns: ``result`` every time, or ``results`` one per call in order (the
    # last repeats). A string as written, anything else as JSON.
    result: Any = "ok"
    results: list[Any] | None = Field(default=None, min_length=1)
    error: bool = False  # the result is an error the model reads
    # An injected text placed in every result: where ``{injection}`` stands in it, else
    # after it.
    injection: str | None = None
    # The stub stands in for a tool of an untrusted MCP server of this name: its name,
    # description and schema are the server's text (tool poisoning), so offering it makes
    # the conversation untrusted from the first turn, and it is declared as such a tool is
    # (all four capabilities, approval): what the case declares is added to that.
    untrusted_server: str | None = Field(default=None, pattern=_NAME)

    @field_validator("parameters")
    @classmethod
    def _schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value.get("type", "object") != "object":
            raise ValueError("a tool's parameters are a JSON Schema of type object")
        return _check_schema(value)

    @model_validator(mode="after")
    def _one_result(self) -> StubTool:
        if self.results is not None and "result" in self.model_fields_set:
            raise ValueError("give result or results, not both")
        return self


class CallPattern(_Strict):
    """A call to match: the tool, and a subset of its arguments (a value may be
    ``{regex: "..."}``, searched in the argument's text). A bare string is a tool name."""

    tool: str
    args: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _bare(cls, value: Any) -> Any:
        return {"tool": value} if isinstance(value, str) else value

    @field_validator("args")
    @classmethod
    def _patterns(cls, value: dict[str, Any]) -> dict[str, Any]:
        return check_patterns(value)  # type: ignore[no-any-return]


class Answer(_Strict):
    """What the answer must be; every key given must hold."""

    equals: str | None = None  # the whole answer, surrounding white space aside
    contains: list[str] | None = None  # each text occurs in it
    regex: str | None = None  # searched in the answer
    json_schema: dict[str, Any] | None = None  # the answer is JSON valid against it
    output: dict[str, Any] | None = None  # the structured answer (the case's ``output``)
    ignore_case: bool = False  # for equals and contains

    @field_validator("contains", mode="before")
    @classmethod
    def _one(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("regex")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        if value is not None:
            check_patterns({"regex": value})
        return value

    @field_validator("json_schema")
    @classmethod
    def _schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return _check_schema(value) if value is not None else None

    @field_validator("output")
    @classmethod
    def _patterns(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            check_patterns(value)
        return value


class TaintExpect(_Strict):
    private: bool | None = None
    untrusted: bool | None = None


class ProvenanceExpect(_Strict):
    tool: str
    verdict: Verdict


class Expect(_Strict):
    """What every run of a case must show. Only the keys given are checked."""

    # Tool calls that ran (not refused by the gate), matched by ``calls``' patterns.
    calls: list[CallPattern] | None = None
    order: Order = "any"  # any: as a multiset; in_order: a subsequence; exact: the sequence
    only: bool = False  # no call ran beyond those in ``calls``
    not_called: list[CallPattern] = Field(default_factory=list)
    max_calls: int | None = Field(default=None, ge=0)
    answer: Answer | None = None
    stop_cause: StopCauseName | None = None
    max_tokens: int | None = Field(default=None, ge=0)  # input + output, every turn
    max_turns: int | None = Field(default=None, ge=0)
    max_seconds: float | None = Field(default=None, ge=0)
    # The gate: calls it refused (denied or blocked), asked an approver about, or approved.
    refused: list[CallPattern] = Field(default_factory=list)
    asked: list[CallPattern] = Field(default_factory=list)
    approved: list[CallPattern] = Field(default_factory=list)
    taint: TaintExpect | None = None  # the conversation's taint at the end
    provenance: list[ProvenanceExpect] = Field(default_factory=list)

    @model_validator(mode="after")
    def _order_needs_calls(self) -> Expect:
        if self.calls is None and ("order" in self.model_fields_set or self.only):
            raise ValueError("order and only apply to calls: list the calls expected")
        return self


class Attack(_Strict):
    """An injected text's aim: the attack succeeds in a run where any of ``calls`` ran, or
    the answer contains any of ``answer_contains``."""

    calls: list[CallPattern] = Field(default_factory=list)
    answer_contains: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _something(self) -> Attack:
        if not self.calls and not self.answer_contains:
            raise ValueError("an attack names the calls it wants or the words it wants said")
        return self


class OutputShape(_Strict):
    """The shape the answer must come in (an ``OutputSpec``)."""

    name: str = Field(default="answer", pattern=_NAME)
    description: str = "The answer."
    schema_: dict[str, Any] = Field(alias="schema")
    with_tools: bool = True  # the run keeps its tools and answers when done

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("schema_")
    @classmethod
    def _schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _check_schema(value)


class Case(_Strict):
    """One case: a prompt run ``repeat`` times, each on a fresh conversation."""

    id: str = Field(min_length=1, max_length=200)
    prompt: str = Field(min_length=1)
    # Prompts run first, each a run of its own on the same conversation: the case's
    # prompt then continues it, as ``tether run -c`` continues a session (a sleeper: an
    # injection read in an earlier run, acted on in a later one).
    before: list[str] = Field(default_factory=list, max_length=20)
    system: str | None = None
    tools: list[StubTool] = Field(default_factory=list)
    tools_file: list[str] = Field(default_factory=list)  # ``path.py`` or ``path.py:name``
    approve: list[CallPattern] = Field(default_factory=list)  # what the approver allows
    permission_mode: Literal["ask", "allow", "read-only"] | None = None
    repeat: int | None = Field(default=None, ge=1, le=1000)
    max_turns: int | None = Field(default=None, ge=1)
    output: OutputShape | None = None
    expect: Expect = Field(default_factory=Expect)
    attack: Attack | None = None
    rubric: str | None = Field(default=None, min_length=1)
    tags: list[str] = Field(default_factory=list)

    @field_validator("tools_file", mode="before")
    @classmethod
    def _one_file(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("prompt", "id")
    @classmethod
    def _text(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        value.encode("utf-8")  # a lone surrogate escape is not text
        return value

    @field_validator("before")
    @classmethod
    def _texts(cls, value: list[str]) -> list[str]:
        for text in value:
            cls._text(text)
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Case:
        names = [t.name for t in self.tools]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"tool {twice[0]!r} is declared twice")
        if self.expect.answer is not None and self.expect.answer.output is not None \
                and self.output is None:
            raise ValueError("expect.answer.output needs the case's output (its shape)")
        return self


class Suite(_Strict):
    """A case file: its cases, and the defaults they share."""

    cases: list[Case] = Field(min_length=1)
    repeat: int = Field(default=1, ge=1, le=1000)

    @model_validator(mode="after")
    def _unique(self) -> Suite:
        seen: set[str] = set()
        for case in self.cases:
            if case.id in seen:
                raise ValueError(f"case id {case.id!r} appears twice")
            seen.add(case.id)
        return self


__all__ = ["Answer", "Attack", "CallPattern", "Case", "EvalError", "Expect", "OutputShape",
           "ProvenanceExpect", "StubTool", "Suite", "TaintExpect", "check_patterns"]
