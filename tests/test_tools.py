"""ToolSpec (seed 001), humanize_tool_name, @tool, and the rule for argument keys a schema
does not name."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.conftest import Recorder, statuses
from tether import Agent, Capabilities, Decision, Tool, ToolSpec, humanize_tool_name, tool
from tether.errors import ToolError
from tether.providers import Scripted, call
from tether.tools.tool import ArgumentError, ToolContext, unknown_arguments
from tether.trust import SecurityConfig, Taint


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("read_file", "Read file"),
        ("delete-file", "Delete file"),
        ("calculator", "Calculator"),
        ("", ""),
        ("READ_FILE", "Read file"),
        ("get__weather", "Get weather"),
        ("_leading_and_trailing_", "Leading and trailing"),
        ("readFile", "Readfile"),  # no camelCase split
        ("fs.read/file", "Fs.read/file"),  # . and / are not separators
        ("  spaced\tout\nname ", "Spaced out name"),
        ("mixed-sep_arated name", "Mixed sep arated name"),
        ("___", ""),
    ],
)
def test_humanize_tool_name_follows_the_seed_rules(name: str, expected: str) -> None:
    assert humanize_tool_name(name) == expected


def test_display_name_prefers_the_title() -> None:
    assert ToolSpec("read_file", "", {}).display_name == "Read file"
    assert ToolSpec("read_file", "", {}, title="Open a document").display_name == "Open a document"
    # An empty title is still a curated label (None is the only "absent").
    assert ToolSpec("read_file", "", {}, title="").display_name == ""


def test_to_dict_omits_the_safe_defaults() -> None:
    d = ToolSpec("echo", "Echo.", {"type": "object"}).to_dict()
    assert d == {"name": "echo", "description": "Echo.", "schema_json": {"type": "object"}}
    assert "needs_approval" not in d and "title" not in d


def test_to_dict_keeps_needs_approval_and_title_when_set() -> None:
    d = ToolSpec("rm", "Remove.", {}, title="Delete", needs_approval=True).to_dict()
    assert d["needs_approval"] is True and d["title"] == "Delete"


def test_a_payload_without_needs_approval_deserializes_as_ungated() -> None:
    spec = ToolSpec.from_dict({"name": "old", "description": "An old payload", "schema_json": {}})
    assert spec.needs_approval is False and spec.title is None


@pytest.mark.parametrize(
    "spec",
    [
        ToolSpec("a", "b", {"type": "object", "properties": {"x": {"type": "integer"}}}),
        ToolSpec("a", "b", {}, title="A", needs_approval=True),
        ToolSpec("a", "b", {}, needs_approval=True),
        ToolSpec("a", "b", {}, title="Ünïcode ✓"),
    ],
)
def test_tool_spec_round_trips_through_json(spec: ToolSpec) -> None:
    assert ToolSpec.from_json(json.dumps(json.loads(spec.to_json()))) == spec


def test_tool_builds_schema_and_description_from_the_function() -> None:
    @tool
    def add(a: int, b: int = 1) -> int:
        """Add two integers.

        Args:
            a: The first number.
            b: The second number,
                defaulting to one.
        """
        return a + b

    assert isinstance(add, Tool)
    assert add.spec.name == "add"
    assert add.spec.description == "Add two integers."
    schema = add.spec.schema_json
    assert schema["type"] == "object"
    assert schema["required"] == ["a"]
    assert schema["properties"]["a"] == {"type": "integer", "description": "The first number."}
    assert schema["properties"]["b"]["description"] == "The second number, defaulting to one."
    assert schema["properties"]["b"]["default"] == 1
    assert "title" not in schema


def test_tool_reads_sphinx_style_parameter_docs() -> None:
    @tool
    def greet(name: str) -> str:
        """Greet someone.

        :param name: who to greet
        """
        return f"hi {name}"

    assert greet.spec.schema_json["properties"]["name"]["description"] == "who to greet"


def test_tool_variants_set_name_title_approval_and_capabilities() -> None:
    @tool(name="rm_rf", title="Delete everything", needs_approval=True,
          capabilities=Capabilities(destructive=True))
    def nuke() -> str:
        """Delete."""
        return "gone"

    assert nuke.spec.name == "rm_rf"
    assert nuke.spec.display_name == "Delete everything"
    assert nuke.needs_approval and nuke.capabilities.destructive and not nuke.read_only


def test_destructive_implies_approval_even_if_not_declared() -> None:
    @tool(capabilities=Capabilities(destructive=True))
    def wipe() -> None:
        """Wipe."""

    assert wipe.spec.needs_approval is False
    assert wipe.needs_approval is True


def test_arguments_are_validated_before_the_function_runs() -> None:
    ran = []

    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        ran.append((a, b))
        return a + b

    with pytest.raises(ArgumentError, match="b"):
        add.validate({"a": 1})
    with pytest.raises(ArgumentError, match="a"):
        add.validate({"a": "not a number", "b": 2})
    with pytest.raises(ArgumentError, match="object"):
        add.validate([1, 2])
    assert ran == []
    assert add.validate({"a": "3", "b": 4}) == {"a": 3, "b": 4}


def _ctx() -> ToolContext:
    return ToolContext("c1", "t", Taint(), Path("."), SecurityConfig())


def test_sync_and_async_functions_both_become_async_handlers() -> None:
    @tool
    def sync_double(x: int) -> int:
        """Double."""
        return 2 * x

    @tool
    async def async_double(x: int) -> int:
        """Double."""
        await asyncio.sleep(0)
        return 2 * x

    async def both() -> tuple[int, int]:
        return (await sync_double.handler({"x": 2}, _ctx()),
                await async_double.handler({"x": 3}, _ctx()))

    assert asyncio.run(both()) == (4, 6)


def test_a_tool_context_parameter_is_injected_and_hidden_from_the_schema() -> None:
    @tool
    def who(ctx: ToolContext, x: int) -> str:
        """Who am I."""
        return f"{ctx.call_id}:{x}"

    assert list(who.spec.schema_json["properties"]) == ["x"]
    # A handler is typed to give an awaitable; a function's is a coroutine.
    assert asyncio.run(who.handler({"x": 1}, _ctx())) == "c1:1"  # type: ignore[arg-type]


def test_var_args_cannot_be_described_and_are_rejected() -> None:
    def bad(*args: int) -> None:
        """Bad."""

    with pytest.raises(ToolError, match=r"\*args"):
        tool(bad)


def test_a_raw_schema_tool_is_validated_with_json_schema() -> None:
    async def handler(args: dict[str, object], ctx: ToolContext) -> str:
        return "ok"

    t = Tool.from_schema("search", "Search.", {
        "type": "object", "properties": {"q": {"type": "string", "minLength": 1}},
        "required": ["q"], "additionalProperties": False}, handler)
    assert t.validate({"q": "x"}) == {"q": "x"}
    with pytest.raises(ArgumentError, match="'q' is a required property"):
        t.validate({})
    with pytest.raises(ArgumentError, match="q"):
        t.validate({"q": ""})


# --- argument keys a schema does not name --------------------------------------------------


def _raw(schema: dict[str, object]) -> Tool:
    async def handler(args: dict[str, object], ctx: ToolContext) -> str:
        return "ok"

    return Tool.from_schema("t", "T.", schema, handler)


TEXT: dict[str, object] = {"type": "object", "properties": {"text": {"type": "string"}},
                           "required": ["text"]}


def test_a_function_tool_drops_keys_it_does_not_take_and_its_schema_does_not_forbid_them(
) -> None:
    ran: list[tuple[int, int]] = []

    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        ran.append((a, b))
        return a + b

    assert "additionalProperties" not in add.spec.schema_json
    assert add.validate({"a": 1, "b": 2, "c": 3, "note": "x"}) == {"a": 1, "b": 2}
    model = Scripted([call("add", {"a": 1, "b": 2, "c": 3}), "3"])
    result = Agent(model, tools=[add]).run_sync("1+2?")
    assert ran == [(1, 2)] and statuses(result) == ["ok"]
    assert result.tool_calls[0].input == {"a": 1, "b": 2}


def test_a_raw_schema_that_names_its_properties_drops_other_keys() -> None:
    assert _raw(TEXT).validate({"text": "x", "stray": 1}) == {"text": "x"}
    no_params = _raw({"type": "object", "properties": {}})
    assert no_params.validate({"stray": 1}) == {}


def test_a_schema_that_forbids_other_keys_refuses_them_by_name() -> None:
    strict = _raw({**TEXT, "additionalProperties": False})
    with pytest.raises(ArgumentError, match=r"unknown arguments 'a', 'b': t takes text"):
        strict.validate({"text": "x", "a": 1, "b": 2})
    assert strict.validate({"text": "x"}) == {"text": "x"}
    # The same with no validator of its own, and for unevaluatedProperties.
    bare = Tool(ToolSpec("t", "T.", {**TEXT, "unevaluatedProperties": False}),
                _raw(TEXT).handler)
    with pytest.raises(ArgumentError, match="unknown argument 'a'"):
        bare.validate({"text": "x", "a": 1})


def test_a_schema_that_accepts_other_keys_keeps_them_as_it_says() -> None:
    assert _raw({**TEXT, "additionalProperties": True}).validate({"text": "x", "n": 1}) == \
        {"text": "x", "n": 1}
    typed = _raw({**TEXT, "additionalProperties": {"type": "integer"}})
    assert typed.validate({"text": "x", "n": 1}) == {"text": "x", "n": 1}
    with pytest.raises(ArgumentError, match="'s' is not of type 'integer'"):
        typed.validate({"text": "x", "n": "s"})


@pytest.mark.parametrize("schema", [
    {"type": "object"},  # names no parameter: nothing is unknown
    {**TEXT, "patternProperties": {"^x_": {"type": "integer"}}},
    {"type": "object", "properties": {"text": {"type": "string"}},
     "allOf": [{"properties": {"more": {"type": "string"}}}]},
])
def test_a_schema_that_says_more_about_its_keys_is_left_to_its_validator(
        schema: dict[str, object]) -> None:
    t = _raw(schema)
    assert unknown_arguments(schema, {"text": "x", "x_1": 1, "more": "m"}).keys == ()
    assert t.validate({"text": "x", "x_1": 1, "more": "m"}) == {"text": "x", "x_1": 1,
                                                                "more": "m"}


def test_a_call_that_misses_a_parameter_names_the_keys_that_were_ignored() -> None:
    @tool
    def calc(expression: str) -> str:
        """Calculate."""
        return expression

    with pytest.raises(ArgumentError) as raised:
        calc.validate({"expresion": "6*7"})
    assert "expression: Field required" in str(raised.value)
    assert "ignored argument 'expresion': calc takes expression" in str(raised.value)


async def test_a_structured_answer_drops_keys_its_schema_does_not_name() -> None:
    from tether import OutputSpec

    spec = OutputSpec("report", "The city.", {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    reservation = spec.reserve()
    model = Scripted([call(reservation.tool_name, {"city": "Paris", "note": "sunny"})])
    report = await Agent(model).prepare("City?", output=reservation).output()
    assert report.value == {"city": "Paris"}


def test_a_dropped_key_is_never_run_approved_or_recorded() -> None:
    sent: list[dict[str, object]] = []

    async def send(args: dict[str, object], ctx: ToolContext) -> str:
        sent.append(args)
        return "sent"

    mail = Tool.from_schema("send", "Send a note.", {
        "type": "object", "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
        "required": ["to", "body"]}, send, needs_approval=True)
    approver = Recorder(Decision.allow())
    model = Scripted([call("send", {"to": "me@example.com", "body": "hi",
                                    "bcc": "evil@example.com"}), "done"])
    result = Agent(model, tools=[mail], approver=approver).run_sync("mail me")
    assert sent == [{"to": "me@example.com", "body": "hi"}]
    assert [r.arguments for r in approver.requests] == [{"to": "me@example.com", "body": "hi"}]
    assert result.tool_calls[0].input == {"to": "me@example.com", "body": "hi"}


def test_a_tool_is_not_idempotent_unless_it_says_so() -> None:
    from tether.builtins import calculator, edit_file, read_file

    @tool
    def send(to: str) -> str:
        """Send."""
        return to

    @tool(idempotent=True)
    def look(key: str) -> str:
        """Look up."""
        return key

    assert send.idempotent is False
    assert look.idempotent is True
    assert Tool.from_schema("t", "d", {"type": "object"}, send.handler).idempotent is False
    # Pure reads are safe to run twice; an edit is not (the second finds its old text gone).
    assert read_file.idempotent and calculator.idempotent and not edit_file.idempotent
