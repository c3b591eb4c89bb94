"""Wrapper toolsets: a prefixed and a filtered toolset compose over any toolset (an MCP
server's, a host's own), change only what they say they change, and are managed as the
toolset they wrap is."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from tether import Agent, Capabilities, tool
from tether import events as ev
from tether.providers import Scripted, call
from tether.tools.tool import Tool
from tether.tools.toolsets import (
    CombinedToolset,
    FilteredToolset,
    ManagedToolset,
    PrefixedToolset,
    Toolset,
)


@tool(capabilities=Capabilities(private_data=True))
def read(path: str) -> str:
    """Read a file."""
    return f"read {path}"


@tool(capabilities=Capabilities(external_send=True), needs_approval=True,
      destination_params=["to"])
def send(to: str) -> str:
    """Send."""
    return f"sent to {to}"


@tool
def search(q: str) -> str:
    """Search."""
    return f"found {q}"


class Listed:
    """A toolset without a lifetime: whatever it holds now."""

    def __init__(self, *tools: Tool) -> None:
        self.held = list(tools)

    def tools(self) -> Sequence[Tool]:
        return self.held


class Server:
    """A toolset with a lifetime, as an MCP server has: no tools until started."""

    def __init__(self, name: str, *tools: Tool) -> None:
        self.name = name
        self.held = list(tools)
        self.running = False
        self.starts = self.closes = 0

    @property
    def started(self) -> bool:
        return self.running

    async def start(self) -> Sequence[ev.Event] | None:
        self.starts += 1
        self.running = True
        return [ev.Notice("info", f"{self.name} up")]

    async def aclose(self) -> None:
        self.closes += 1
        self.running = False

    def tools(self) -> Sequence[Tool]:
        return self.held if self.running else []


# --- PrefixedToolset ---------------------------------------------------------------------------


def test_a_prefixed_toolset_names_each_tool_prefix_then_two_underscores() -> None:
    prefixed = PrefixedToolset(Listed(read, search), "files")
    assert [t.name for t in prefixed.tools()] == ["files__read", "files__search"]
    assert prefixed.named("read") == "files__read"


def test_a_prefixed_tool_changes_its_name_only() -> None:
    renamed = {t.name: t for t in PrefixedToolset(Listed(read, send), "k").tools()}
    for original in (read, send):
        copy = renamed[f"k__{original.name}"]
        assert copy.capabilities == original.capabilities
        assert copy.needs_approval == original.needs_approval
        assert copy.handler is original.handler and copy.validator is original.validator
        assert copy.destination_params == original.destination_params
        assert copy.spec.schema_json == original.spec.schema_json
        assert copy.spec.description == original.spec.description


def test_a_prefixed_tool_is_the_same_object_while_its_inner_tool_is() -> None:
    inner = Listed(read)
    prefixed = PrefixedToolset(inner, "k")
    first = prefixed.tools()[0]
    assert prefixed.tools()[0] is first  # the same object turn after turn
    inner.held = [read.__class__(read.spec, read.handler)]  # a new tool of the same name
    assert prefixed.tools()[0] is not first


async def test_two_servers_tools_of_one_name_are_both_offered_under_their_prefixes() -> None:
    model = Scripted([call("a__search", q="x"), call("b__search", q="y"), "done"])
    agent = Agent(model, tools=[PrefixedToolset(Listed(search), "a"),
                                PrefixedToolset(Listed(search), "b")])
    result = await agent.run("search twice")
    assert model.tool_names_offered(0) == ["a__search", "b__search"]
    assert [(r.name, r.status, r.output) for r in result.tool_calls] == [
        ("a__search", "ok", "found x"), ("b__search", "ok", "found y")]


async def test_without_prefixes_the_second_tool_of_a_name_is_left_out_and_said() -> None:
    model = Scripted(["done"])
    result = await Agent(model, tools=[Listed(search), Listed(search.__class__(
        search.spec, search.handler))]).run("hi")
    assert model.tool_names_offered(0) == ["search"]
    assert any(isinstance(e, ev.Notice) and "two tools are named 'search'" in e.message
               for e in result.events)


# --- FilteredToolset ---------------------------------------------------------------------------


def test_a_filtered_toolset_keeps_the_named_tools_in_the_order_named() -> None:
    filtered = FilteredToolset(Listed(read, send, search), ["search", "read", "search"])
    assert [t.name for t in filtered.tools()] == ["search", "read"]
    assert filtered.tools()[1] is read  # the tool itself, unchanged
    assert filtered.missing() == []


def test_a_name_the_inner_toolset_does_not_offer_now_is_missing() -> None:
    inner = Listed(read)
    filtered = FilteredToolset(inner, ["read", "send"])
    assert [t.name for t in filtered.tools()] == ["read"]
    assert filtered.missing() == ["send"]
    inner.held.append(send)  # offered now: kept now
    assert [t.name for t in filtered.tools()] == ["read", "send"] and not filtered.missing()


def test_a_filtered_toolset_keeps_what_a_predicate_keeps_in_the_inner_order() -> None:
    filtered = FilteredToolset(Listed(read, send, search),
                               lambda t: not t.capabilities.external_send)
    assert [t.name for t in filtered.tools()] == ["read", "search"]
    assert filtered.missing() == []


def test_a_filter_is_a_list_of_names_never_one_string() -> None:
    with pytest.raises(TypeError):
        FilteredToolset(Listed(read), "read")


def test_a_filter_over_combined_sources_sees_the_first_tool_of_a_name() -> None:
    other = search.__class__(search.spec, search.handler)
    filtered = FilteredToolset(CombinedToolset([Listed(search), Listed(other)]), ["search"])
    assert [t for t in filtered.tools()] == [search]


async def test_a_filtered_toolset_offers_the_model_only_what_it_keeps() -> None:
    model = Scripted([call("send", to="x@example.com"), "done"])
    agent = Agent(model, tools=[FilteredToolset(Listed(read, send), ["read"])])
    result = await agent.run("send it")
    assert model.tool_names_offered(0) == ["read"]
    assert [r.status for r in result.tool_calls] == ["unknown_tool"]


# --- lifetimes ----------------------------------------------------------------------------------


@pytest.mark.parametrize("wrap", [lambda s: PrefixedToolset(s, "srv"),
                                  lambda s: FilteredToolset(s, ["search"])],
                         ids=["prefixed", "filtered"])
async def test_a_wrapper_is_started_and_closed_as_the_server_it_wraps(wrap: object) -> None:
    server = Server("srv", search)
    wrapped = wrap(server)  # type: ignore[operator]
    assert isinstance(wrapped, ManagedToolset) and wrapped.name == "srv"
    assert not wrapped.started and not wrapped.tools()
    notices = await wrapped.start()
    assert wrapped.started and server.starts == 1
    assert [n.message for n in notices or ()] == ["srv up"]
    assert len(wrapped.tools()) == 1
    await wrapped.aclose()
    assert not wrapped.started and server.closes == 1


async def test_an_agent_starts_and_closes_the_server_behind_a_wrapper() -> None:
    server = Server("srv", search)
    model = Scripted([call("srv__search", q="x"), "done"])
    async with Agent(model, tools=[PrefixedToolset(server, "srv")]) as agent:
        result = await agent.run("search")
    assert [r.status for r in result.tool_calls] == ["ok"]
    assert (server.starts, server.closes) == (1, 1)


async def test_a_run_without_async_with_starts_and_closes_the_wrapped_server() -> None:
    server = Server("srv", search)
    model = Scripted([call("search", q="x"), "done"])
    result = await Agent(model, tools=[FilteredToolset(server, ["search"])]).run("search")
    assert [r.status for r in result.tool_calls] == ["ok"]
    assert (server.starts, server.closes) == (1, 1)


def test_a_wrapper_around_a_toolset_without_a_lifetime_is_always_started() -> None:
    wrapped = PrefixedToolset(Listed(read), "x")
    assert isinstance(wrapped, Toolset) and wrapped.started
