"""A server's request for input (MCP elicitation) through the host's approver, against a
real server written with the official SDK (tests/mcp_servers/asker.py), over stdio and
streamable HTTP, in both eras of the protocol (the handshake era's request to the client
during a call; the current revision's result that asks, and its retry): the typed request
the approver sees, what the server hears back, the declines when nobody can answer, and
the gate's rule for what a person sends."""

from __future__ import annotations

import asyncio
import io
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from tests.conftest import FormFiller, Recorder, statuses
from tests.servers.http import LoopbackServer
from tests.test_cli import answer, tool_call, workspace
from tests.test_mcp import http_server
from tether import Agent, Capabilities, Decision, tool
from tether import events as ev
from tether.approval import ElicitationAnswer, ElicitationRequest, FormField, elicit
from tether.bounds import Spend
from tether.cli.elicit import ask_form, elicitation_text, parse, url_text
from tether.mcp import McpServer
from tether.mcp.elicitation import FormError, form_fields, looks_secret
from tether.providers import Scripted, call
from tether.tools.tool import RunScope, ToolContext
from tether.trust import SecurityConfig, Taint, untrusted_content

ASKER = str(Path(__file__).parent / "mcp_servers" / "asker.py")
BOOKED = {"email": "ada@example.com", "guests": 2, "vegan": True, "seating": "terrace",
          "extras": ["cake"]}


ERAS = {"handshake": "2025-11-25", "modern": "2026-07-28"}


@pytest.fixture(scope="module", params=list(ERAS))
def era(request: pytest.FixtureRequest) -> str:
    """The era the asker is pinned to: each test that asks runs in both."""
    return str(request.param)


@pytest.fixture(scope="module")
def asker_url(era: str) -> Iterator[str]:
    """One asker over HTTP for the module and era (a session each test): no process per
    test."""
    with http_server(ASKER, "--era", era) as url:
        yield url


@pytest.fixture
def asker(asker_url: str) -> Callable[..., McpServer]:
    def make(trusted: bool = True) -> McpServer:
        return McpServer.http("a", asker_url, trusted=trusted)
    return make


def heard(result: Any) -> Any:
    """What the server said it heard back, from the last tool result of a run."""
    done = [e for e in result.events if isinstance(e, ev.ToolFinished)]
    content = done[-1].result.content
    return json.loads(untrusted_content(content) or content)


def notices(result: Any) -> list[str]:
    return [e.message for e in result.events if isinstance(e, ev.Notice)]


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_form_reaches_the_approver_typed_and_its_answer_reaches_the_server(
        transport: str, era: str, asker: Callable[..., McpServer]) -> None:
    filler = FormFiller(ElicitationAnswer.accept(BOOKED))
    server = McpServer.stdio("a", sys.executable, [ASKER, "--era", era]) \
        if transport == "stdio" else asker()
    model = Scripted([call("a__book"), "booked"])
    async with Agent(model, tools=[server], approver=filler) as agent:
        result = await agent.run("book a table")
        assert server.protocol_version == ERAS[era]
    assert heard(result) == {"action": "accept", "content": BOOKED}
    [request] = filler.shown
    assert (request.server, request.trusted, request.mode, request.warning) == \
        ("a", True, "form", None)
    assert request.message == "Book a table.\nFor how many?"
    fields = {f.name: f for f in request.fields}
    assert [(f.name, f.kind, f.required) for f in request.fields] == [
        ("email", "string", True), ("guests", "integer", True), ("vegan", "boolean", False),
        ("seating", "choice", False), ("extras", "choices", False)]
    assert fields["email"].format == "email" and fields["email"].title == "Your email"
    assert (fields["guests"].minimum, fields["guests"].maximum) == (1, 8)
    assert fields["seating"].choice_titles == ("Inside", "On the terrace")
    assert fields["extras"].choices == ("cake", "wine")
    # The model never sees the request: only the tool's result, as the server wrote it.
    assert not any("For how many" in str(r.messages) for r in model.requests)
    assert any("asked for input; answered: sent email, guests" in n for n in notices(result))


async def test_an_approver_that_does_not_answer_for_a_person_declines(
        asker: Callable[..., McpServer]) -> None:
    # --yes, batch, a durable run's signal approver: approve() only.
    model = Scripted([call("a__book"), "ok"])
    async with Agent(model, tools=[asker()], approver=Recorder(Decision.allow())) as agent:
        result = await agent.run("book")
    assert heard(result) == {"action": "decline", "content": None}
    assert any("declined: no person to ask" in n for n in notices(result))


async def test_an_answer_that_does_not_fit_the_form_is_declined_not_sent(
        asker: Callable[..., McpServer]) -> None:
    wrongs = ({**BOOKED, "guests": 99}, {**BOOKED, "seating": "roof"}, {"guests": 2},
              {**BOOKED, "card": "4111"}, {**BOOKED, "vegan": "yes"})
    filler = FormFiller(ElicitationAnswer.accept({}))
    model = Scripted([step for _ in wrongs for step in (call("a__book"), "ok")])
    async with Agent(model, tools=[asker()], approver=filler) as agent:
        for wrong in wrongs:
            filler.answer = ElicitationAnswer.accept(wrong)
            result = await agent.run("book")
            assert heard(result) == {"action": "decline", "content": None}, wrong


async def test_a_form_tether_cannot_show_is_declined_without_asking(
        asker: Callable[..., McpServer]) -> None:
    filler = FormFiller(ElicitationAnswer.accept({"card": {}}))
    async with Agent(Scripted([call("a__nested"), "ok"]), tools=[asker()],
                     approver=filler) as agent:
        result = await agent.run("pay")
    assert heard(result)["action"] == "decline" and filler.shown == []


async def test_a_url_request_carries_the_whole_url_and_accepting_sends_no_content(
        asker: Callable[..., McpServer]) -> None:
    filler = FormFiller(ElicitationAnswer.accept({"ignored": "x"}))
    async with Agent(Scripted([call("a__pay"), "ok"]), tools=[asker()],
                     approver=filler) as agent:
        result = await agent.run("pay")
    assert heard(result) == {"action": "accept", "content": None}
    [request] = filler.shown
    assert request.mode == "url" and request.url == "https://pay.example.com/checkout?id=7"


async def test_a_person_who_declines_or_dismisses_is_heard_as_such(
        asker: Callable[..., McpServer]) -> None:
    filler = FormFiller(ElicitationAnswer.decline())
    model = Scripted([call("a__book"), "ok", call("a__book"), "ok"])
    async with Agent(model, tools=[asker()], approver=filler) as agent:
        for answer in (ElicitationAnswer.decline(), ElicitationAnswer.cancel()):
            filler.answer = answer
            result = await agent.run("book")
            assert heard(result) == {"action": answer.action, "content": None}


async def test_a_server_that_keeps_asking_during_one_call_is_declined_unasked(
        asker: Callable[..., McpServer]) -> None:
    # One request after the other; in the current revision one a round, five rounds of
    # one call: the cap counts the call's requests across its rounds.
    filler = FormFiller(ElicitationAnswer.accept({"password": "yes"}))
    async with Agent(Scripted([call("a__nag"), "ok"]), tools=[asker()],
                     approver=filler) as agent:
        result = await agent.run("go")
    assert heard(result) == ["accept"] * 3 + ["decline"] * 2 and len(filler.shown) == 3
    capped = [n for n in notices(result) if "asked more than 3 times" in n]
    assert len(capped) == 1  # told once, however often the server asks


class OneAtATime(FormFiller):
    """A form filler that notes how many of its requests were open at once."""

    def __init__(self, answer: ElicitationAnswer) -> None:
        super().__init__(answer)
        self.open = self.most_open = 0

    async def elicit(self, request: ElicitationRequest) -> ElicitationAnswer:
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        try:
            await asyncio.sleep(0)  # a turn for any other request already waiting to ask
            return await super().elicit(request)
        finally:
            self.open -= 1


async def test_requests_made_at_once_are_put_to_the_person_one_at_a_time_and_capped(
        asker: Callable[..., McpServer]) -> None:
    # Five forms at once: in the current revision one round of five requests, which the
    # SDK's driver answers side by side; in the handshake era five requests side by side.
    filler = OneAtATime(ElicitationAnswer.accept({"password": "yes"}))
    async with Agent(Scripted([call("a__flood"), "ok"]), tools=[asker()],
                     approver=filler) as agent:
        result = await agent.run("go")
    said = heard(result)
    assert sorted(said) == ["accept"] * 3 + ["decline"] * 2
    assert sorted(r.message for r in filler.shown) == \
        [f"Form {i}?" for i, action in enumerate(said) if action == "accept"]
    assert filler.most_open == 1


async def test_one_calls_requests_reach_the_approver_one_at_a_time_in_the_order_they_came(
        ) -> None:
    import mcp_types

    from tether.mcp.elicitation import Elicitations

    def form(i: int) -> mcp_types.ElicitRequestFormParams:
        return mcp_types.ElicitRequestFormParams(message=f"Form {i}?", requested_schema={
            "type": "object", "properties": {"x": {"type": "string"}}})

    filler = OneAtATime(ElicitationAnswer.accept({"x": "y"}))
    agent = Agent(Scripted(["unused"]), approver=filler)
    context = ToolContext(call_id="c1", tool_name="a__t", taint=Taint(), workspace=Path.cwd(),
                          security=SecurityConfig(),
                          run=RunScope(agent=agent, path=(), interrupt=None,
                                       spend=Spend(agent.settings)))
    asking = Elicitations(McpServer.http("a", "http://127.0.0.1:9/mcp", trusted=True))
    with asking.during(context):
        answers = await asyncio.gather(*(asking.answer(form(i)) for i in range(5)))
    assert [a.action for a in answers] == ["accept"] * 3 + ["decline"] * 2
    assert [r.message for r in filler.shown] == ["Form 0?", "Form 1?", "Form 2?"]
    assert filler.most_open == 1


@pytest.mark.parametrize("era", ["modern"], indirect=True)
async def test_a_server_that_asks_round_after_round_is_given_up_and_its_asks_capped(
        asker: Callable[..., McpServer]) -> None:
    # The current revision: a result that asks, every round, never the call's result.
    filler = FormFiller(ElicitationAnswer.accept({"password": "yes"}))
    async with Agent(Scripted([call("a__endless"), "ok"]), tools=[asker()],
                     approver=filler) as agent:
        result = await agent.run("go")
    [done] = [e for e in result.events if isinstance(e, ev.ToolFinished)]
    assert done.result.is_error
    assert "given up: the server still asked for input after 10 rounds" in \
        done.result.content
    assert len(filler.shown) == 3
    assert len([n for n in notices(result) if "asked more than 3 times" in n]) == 1


@pytest.mark.parametrize("era", ["modern"], indirect=True)
@pytest.mark.parametrize(("tool", "refusal"), [("sample", "Sampling not supported"),
                                               ("roots", "List roots not supported")])
async def test_a_round_that_asks_for_what_tether_does_not_offer_ends_as_a_refusal(
        tool: str, refusal: str, asker: Callable[..., McpServer]) -> None:
    # Sampling and roots are not offered: such a request in a round ends the call as the
    # server's refusal, and the form of the same round is not left waiting on the person.
    filler = Stuck()
    async with Agent(Scripted([call(f"a__{tool}"), "ok"]), tools=[asker()],
                     approver=filler) as agent:
        result = await agent.run("go")
    [done] = [e for e in result.events if isinstance(e, ev.ToolFinished)]
    assert done.result.is_error and f"refused the call to a__{tool}: {refusal}" in \
        done.result.content
    assert "answered" not in done.result.content  # never retried


# --- the gate's rule for what a person sends -------------------------------------------------

@tool(capabilities=Capabilities(private_data=True))
def diary() -> str:
    """Read the diary."""
    return "dear diary"


async def test_an_untrusted_servers_request_in_a_private_conversation_is_asked_with_a_warning(
        asker: Callable[..., McpServer]) -> None:
    # trifecta = "ask": the call is put to the approver as an armed send, then the request
    # for input reaches the person with tether's warning.
    filler = FormFiller(ElicitationAnswer.accept(BOOKED))
    model = Scripted([call("diary"), call("a__book"), "ok"])
    async with Agent(model, tools=[diary, asker(trusted=False)], approver=filler,
                     security=SecurityConfig(trifecta="ask")) as agent:
        result = await agent.run("read my diary, then book")
    assert statuses(result) == ["ok", "ok"]
    [request] = filler.shown
    assert request.trusted is False and request.taint == Taint(private=True, untrusted=True)
    assert request.warning is not None and "untrusted server" in request.warning


async def test_an_untrusted_servers_request_in_a_clean_conversation_has_no_send_warning(
        asker: Callable[..., McpServer]) -> None:
    filler = FormFiller(ElicitationAnswer.accept(BOOKED))
    async with Agent(Scripted([call("a__book"), "ok"]), tools=[asker(trusted=False)],
                     approver=filler, security=SecurityConfig(trifecta="ask")) as agent:
        result = await agent.run("book")
    assert heard(result)["action"] == "accept"
    assert filler.shown[0].warning is None


async def test_under_block_an_untrusted_servers_request_in_an_armed_conversation_is_not_asked(
        asker: Callable[..., McpServer]) -> None:
    # The gate refuses such a call before it runs; should one run anyway (a host calling
    # the tool itself in an armed conversation), its request for input is refused too.
    filler = FormFiller(ElicitationAnswer.accept(BOOKED))
    server = asker(trusted=False)
    async with Agent(Scripted(["unused"]), tools=[server], approver=filler) as agent:
        seen: list[ev.Event] = []

        async def emit(event: ev.Event) -> None:
            seen.append(event)

        context = ToolContext(
            call_id="c1", tool_name="a__book", taint=Taint(private=True, untrusted=True),
            workspace=Path.cwd(), security=SecurityConfig(), emit=emit,
            run=RunScope(agent=agent, path=("c1",), interrupt=None,
                         spend=Spend(agent.settings)))
        output = await server.call("book", {}, context=context)
    assert json.loads(output.content) == {"action": "decline", "content": None}
    assert filler.shown == []
    assert any("not asked: this conversation holds private data" in e.message
               for e in seen if isinstance(e, ev.Notice))


async def test_a_form_asking_for_a_password_is_flagged_and_nothing_is_sent_unless_typed(
        asker: Callable[..., McpServer]) -> None:
    # The compromised model cannot answer for the person: the request never reaches it.
    declined = FormFiller(ElicitationAnswer.decline())
    model = Scripted([call("a__login"), "ok"])
    async with Agent(model, tools=[asker()], approver=declined) as agent:
        result = await agent.run("log in")
    [request] = declined.shown
    assert request.warning is not None and "looks like a secret ('password')" in request.warning
    assert heard(result) == {"action": "decline", "content": None}
    assert not any("password" in str(r.messages).lower() for r in model.requests[:1])
    shown = elicitation_text(request).plain
    assert "Enter your password to continue." in shown and "looks like a secret" in shown


@pytest.mark.parametrize(("name", "title", "description"), [
    ("password", None, None), ("apiKey", None, None), ("value", "API key", None),
    ("code", None, "the one-time code we texted you"), ("pin", None, None),
    ("card_number", None, None), ("x", "Seed phrase", None)])
def test_a_field_that_names_a_credential_looks_secret(
        name: str, title: str | None, description: str | None) -> None:
    assert looks_secret(FormField(name, "string", title=title, description=description))


@pytest.mark.parametrize("name", ["email", "guests", "spinach", "tokenizer_name", "pineapple"])
def test_an_ordinary_field_does_not_look_secret(name: str) -> None:
    assert not looks_secret(FormField(name, "string"))


@pytest.mark.parametrize("schema", [
    {"type": "array"}, {"type": "object", "properties": {"x": {"type": "object"}}},
    {"type": "object", "properties": {"x": {"type": "string", "format": "password"}}},
    {"type": "object", "properties": {"x": {"type": "string", "enum": [1, 2]}}},
    {"type": "object", "properties": {"x": {"type": "string", "enum": ["a", "a"]}}},
    {"type": "object", "properties": {"x": {"type": "integer", "minimum": "0"}}},
    {"type": "object", "properties": {"x": {"type": "integer", "default": "two"}}},
    {"type": "object", "properties": {f"f{i}": {"type": "string"} for i in range(41)}},
])
def test_a_schema_that_is_not_a_flat_form_is_refused(schema: dict[str, Any]) -> None:
    with pytest.raises(FormError):
        form_fields(schema)


# --- asking at the terminal ------------------------------------------------------------------

def test_what_the_person_sees_is_literal_and_a_url_has_its_host_marked() -> None:
    request = ElicitationRequest(
        server="pay\x1b[2J", trusted=False, message="Pay here \x1b[31mSECURE\x1b[0m\nnow",
        url="https://pаypal.com.evil.example/login")  # a Cyrillic а
    text = elicitation_text(request)
    assert "\x1b" not in text.plain
    assert "pay\\x1b[2J" in text.plain and "│ Pay here \\x1b[31mSECURE" in text.plain
    assert "(untrusted)" in text.plain and "tether will not open it" in text.plain
    url = url_text(request.url or "")
    assert url.plain.startswith("https://pаypal.com.evil.example/login\n")
    assert "goes to: xn--" in url.plain
    marked = [url.plain[s.start:s.end] for s in url.spans if "reverse" in str(s.style)]
    assert marked == ["pаypal.com.evil.example"]


async def test_the_form_is_asked_field_by_field_until_each_answer_fits() -> None:
    fields = form_fields({"type": "object", "required": ["guests"], "properties": {
        "guests": {"type": "integer", "minimum": 1, "maximum": 8},
        "seating": {"type": "string", "enum": ["inside", "terrace"]},
        "note": {"type": "string"}, "vegan": {"type": "boolean", "default": False}}})
    request = ElicitationRequest(server="a", trusted=True, message="m", fields=fields)
    typed = iter(["y", "", "lots", "99", "3", "5", "2", "", "", "y"])
    said: list[str] = []

    async def read(prompt: Any) -> str:
        return next(typed)

    answer = await ask_form(request, read, lambda line: said.append(line.plain))
    assert answer == ElicitationAnswer.accept({"guests": 3, "seating": "terrace",
                                               "vegan": False})
    assert said[:4] == ["This field is required.", "a whole number, please",
                        "That is more than 8.", "one of 1-2, please"]


async def test_no_at_the_first_question_or_at_send_declines() -> None:
    request = ElicitationRequest(server="a", trusted=True, message="m",
                                 fields=(FormField("x", "string"),))
    for lines in (["n"], ["y", "hello", "n"]):
        typed = iter(lines)

        async def read(prompt: Any, typed: Any = typed) -> str:
            return str(next(typed))

        assert (await ask_form(request, read, lambda _: None)).action == "decline"


def test_typed_text_is_read_as_its_fields_kind() -> None:
    assert parse(FormField("n", "number"), "2.5") == 2.5
    assert parse(FormField("b", "boolean"), "Yes") is True
    assert parse(FormField("c", "choices", choices=("a", "b")), "2, a") == ["b", "a"]
    with pytest.raises(ValueError):
        parse(FormField("i", "integer"), "2.5")


async def test_the_console_approver_declines_without_a_terminal() -> None:
    from tether.cli.approver import ConsoleApprover

    approver = ConsoleApprover(Console(file=io.StringIO(), force_terminal=False))
    request = ElicitationRequest(server="a", trusted=True, message="m")
    answer = await elicit(approver, request, timeout=None)
    assert answer.action == "decline" and answer.reason == "no terminal to ask a person at"


# --- elicit() fails closed -------------------------------------------------------------------

class Stuck:
    """An approver whose person never answers (until cancelled)."""

    def __init__(self) -> None:
        self.asked, self.given_up = asyncio.Event(), asyncio.Event()

    async def approve(self, request: Any) -> Decision:
        return Decision.allow()

    async def elicit(self, request: ElicitationRequest) -> ElicitationAnswer:
        self.asked.set()
        try:
            await asyncio.Event().wait()
        finally:
            self.given_up.set()
        raise AssertionError("never answered")


class Broken:
    async def elicit(self, request: ElicitationRequest) -> Any:
        raise RuntimeError("the form fell over")


class Wrong:
    async def elicit(self, request: ElicitationRequest) -> Any:
        return {"action": "accept"}


async def test_elicit_declines_on_a_timeout_an_error_and_an_answer_of_the_wrong_type() -> None:
    request = ElicitationRequest(server="a", trusted=True, message="m")
    assert (await elicit(Stuck(), request, timeout=0.01)).reason == \
        "nobody answered within 0.01s"
    failed = await elicit(Broken(), request, timeout=None)
    assert failed.action == "decline" and "the form fell over" in (failed.reason or "")
    assert (await elicit(Wrong(), request, timeout=None)).action == "decline"
    assert (await elicit(object(), request, timeout=None)).action == "decline"


async def test_an_interrupt_while_the_person_is_asked_cancels() -> None:
    request = ElicitationRequest(server="a", trusted=True, message="m")
    stuck, interrupt = Stuck(), asyncio.Event()
    asking = asyncio.ensure_future(elicit(stuck, request, None, interrupt))
    await stuck.asked.wait()
    interrupt.set()
    assert (await asking).action == "cancel"


async def test_a_prompt_ends_when_its_call_does(asker_url: str, era: str) -> None:
    # The call's timeout_secs runs while the person is asked: in the handshake era the one
    # request is in flight meanwhile; in the current revision none is, and the bound is
    # on the call's rounds together, the person's answers included.
    stuck = Stuck()
    server = McpServer.http("a", asker_url, trusted=True, timeout_secs=0.5)
    async with Agent(Scripted([call("a__book"), "ok"]), tools=[server],
                     approver=stuck) as agent:
        result = await agent.run("book")
        # The prompt is given up (the person is asked no more); the bound is only so a
        # failure fails instead of hanging.
        await asyncio.wait_for(stuck.given_up.wait(), 30)
    [done] = [e for e in result.events if isinstance(e, ev.ToolFinished)]
    said = "did not answer within 0.5s" if era == "handshake" else \
        "given up: it did not finish within 0.5s"
    assert stuck.asked.is_set() and done.result.is_error and said in done.result.content


# --- end to end at a terminal ----------------------------------------------------------------

def test_tether_run_at_a_terminal_asks_the_form_field_by_field_and_sends_the_answer(
        tmp_path: Path, server: LoopbackServer, era: str) -> None:
    from tests.terminal import Terminal

    server.queue(tool_call("a__book", {}), answer("Booked."))
    ws = workspace(tmp_path, server.url + "/v1",
                   f'[[mcp]]\nname = "a"\ncommand = {json.dumps(sys.executable)}\n'
                   f'args = [{json.dumps(ASKER)}, "--era", "{era}"]\n')
    env = {**os.environ, "TETHER_CONFIG": os.devnull, "TETHER_STORE": str(ws / "s.db"),
           "COLUMNS": "100", "TERM": "dumb"}
    terminal = Terminal(["-w", str(ws), "run", "book a table"], env, wait=60)
    try:
        for marker, keys in [(b"Fill in the form? y=yes, n=decline [y/n] (n): ", b"y"),
                             (b"email, required): ", b"not an email"),
                             (b"email, required): ", b"ada@example.com"),
                             (b"8, required): ", b"2"), (b"[no]: ", b""),
                             (b"On the terrace): ", b"2"), (b"wine): ", b"1"),
                             (b"Send? [y/n] (n): ", b"y")]:
            terminal.read_until(marker)
            terminal.press(keys + b"\r")
        terminal.read_until(None)
        code = terminal.proc.wait(timeout=60)
    finally:
        terminal.close()
    text = terminal.text
    assert code == 0, text
    assert "MCP server a (trusted) asks you to fill in a form" in text
    assert "│ Book a table." in text and "│ For how many?" in text
    assert "That is not an email address." in text
    sent = json.dumps(server.requests[1].body)
    assert '\\"action\\": \\"accept\\"' in sent
    assert all(f'\\"{k}\\": {v}' in sent for k, v in [
        ("email", '\\"ada@example.com\\"'), ("guests", "2"), ("vegan", "false"),
        ("seating", '\\"terrace\\"'), ("extras", '[\\"cake\\"]')]), sent


async def test_a_request_with_no_call_or_with_calls_of_two_runs_in_flight_is_declined() -> None:
    import mcp_types

    from tether.mcp.elicitation import Elicitations

    params = mcp_types.ElicitRequestFormParams(message="m", requested_schema={
        "type": "object", "properties": {"x": {"type": "string"}}})
    server = McpServer.http("a", "http://127.0.0.1:9/mcp", trusted=True)
    asking = Elicitations(server)
    assert (await asking.answer(params)).reason == "no call of the server is running"
    fillers = [FormFiller(ElicitationAnswer.accept({"x": "y"})) for _ in range(2)]
    agents = [Agent(Scripted(["unused"]), approver=f) for f in fillers]
    contexts = [ToolContext(call_id=f"c{i}", tool_name="a__t", taint=Taint(),
                            workspace=Path.cwd(), security=SecurityConfig(),
                            run=RunScope(agent=a, path=(), interrupt=None,
                                         spend=Spend(a.settings)))
                for i, a in enumerate(agents)]
    with asking.during(contexts[0]):
        assert (await asking.answer(params)).action == "accept"
        with asking.during(contexts[1]):
            answer = await asking.answer(params)
    assert answer.action == "decline" and "several runs" in (answer.reason or "")
    assert [len(f.shown) for f in fillers] == [1, 0]


def test_ctrl_c_at_the_form_cancels_it_and_interrupts_the_run(
        tmp_path: Path, server: LoopbackServer, era: str) -> None:
    from tests.terminal import Terminal

    server.queue(tool_call("a__book", {}), answer("never asked for"))
    ws = workspace(tmp_path, server.url + "/v1",
                   f'[[mcp]]\nname = "a"\ncommand = {json.dumps(sys.executable)}\n'
                   f'args = [{json.dumps(ASKER)}, "--era", "{era}"]\n')
    env = {**os.environ, "TETHER_CONFIG": os.devnull, "TETHER_STORE": str(ws / "s.db"),
           "COLUMNS": "100", "TERM": "dumb"}
    terminal = Terminal(["-w", str(ws), "run", "book a table"], env, wait=60)
    try:
        terminal.read_until(b"Fill in the form? y=yes, n=decline [y/n] (n): ")
        terminal.press(b"\x03")  # once, and no Enter
        terminal.read_until(None)
        code = terminal.proc.wait(timeout=60)
    finally:
        terminal.close()
    assert code == 130, terminal.text
    assert "asked for input; cancelled: the run was interrupted" in terminal.text
    assert len(server.requests) == 1  # the model is not asked again


# --- during a resource read and a prompt fetch ------------------------------------------------


async def test_a_form_asked_during_a_resource_read_reaches_the_approver_as_in_a_call(
        era: str, asker: Callable[..., McpServer]) -> None:
    filler = FormFiller(ElicitationAnswer.accept(BOOKED))
    model = Scripted([call("a__read_resource", uri="asker://booking"), "read"])
    async with Agent(model, tools=[asker()], approver=filler) as agent:
        result = await agent.run("read the booking")
    assert heard(result) == {"action": "accept", "content": BOOKED}
    [request] = filler.shown
    assert (request.server, request.message, request.mode) == ("a", "Which booking?", "form")
    assert any("asked for input; answered: sent email, guests" in n for n in notices(result))


async def test_a_form_asked_while_a_prompt_is_filled_reaches_the_person_and_without_one_declines(
        era: str, asker: Callable[..., McpServer]) -> None:
    from tether.cli.mcp_lists import fetch_prompt
    from tether.mcp.prompts import parse_invocation

    filler = FormFiller(ElicitationAnswer.accept(BOOKED))
    async with Agent(Scripted(["-"]), tools=[asker()], approver=filler) as agent:
        parts = await fetch_prompt(agent, parse_invocation("a:booking"))
        server = next(t for t in agent.toolsets if isinstance(t, McpServer))
        # A host's own fetch, with no context: nobody to ask, so the server hears a decline.
        unasked = await server.get_prompt("booking", {})
    assert '"action": "accept"' in str(parts) and "ada@example.com" in str(parts)
    [request] = filler.shown
    assert (request.server, request.message) == ("a", "Book for the prompt.")
    assert '"action": "decline"' in str(unasked.parts)


def test_tether_run_mcp_prompt_asks_the_person_at_the_terminal(
        tmp_path: Path, server: LoopbackServer, era: str) -> None:
    from tests.terminal import Terminal

    server.queue(answer("Noted."))
    ws = workspace(tmp_path, server.url + "/v1",
                   f'[[mcp]]\nname = "a"\ncommand = {json.dumps(sys.executable)}\n'
                   f'args = [{json.dumps(ASKER)}, "--era", "{era}"]\n')
    env = {**os.environ, "TETHER_CONFIG": os.devnull, "TETHER_STORE": str(ws / "s.db"),
           "COLUMNS": "100", "TERM": "dumb"}
    terminal = Terminal(["-w", str(ws), "run", "--mcp-prompt", "a:booking", "go"], env,
                        wait=60)
    try:
        terminal.read_until(b"Fill in the form? y=yes, n=decline [y/n] (n): ")
        terminal.press(b"n\r")
        terminal.read_until(None)
        code = terminal.proc.wait(timeout=60)
    finally:
        terminal.close()
    text = terminal.text
    assert code == 0, text
    assert "MCP server a (trusted) asks you to fill in a form" in text
    assert "│ Book for the prompt." in text
    sent = json.dumps(server.requests[0].body)
    assert 'Booked as {\\"action\\": \\"decline\\"' in sent, sent
