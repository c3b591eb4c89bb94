"""A server's request for input against a compromised model and a hostile server: the
model cannot answer it (it never sees it), a form asking for a secret is flagged to the
person, and an untrusted server asking while the conversation holds private data is a send
from an armed conversation: refused with the call under the default policy, put to the
person with tether's warning under ``trifecta = "ask"``, and on a decline nothing is sent.
Each in both eras of the protocol (a request during the call; the current revision's
result that asks), and the current revision's request state is the server's own opaque
data: passed back to it intact, never read, shown or given to the model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FormFiller, Recorder, statuses
from tests.security.conftest import Compromised, instruction
from tests.test_mcp import http_server
from tether import Agent, Capabilities, Decision, SecurityConfig, tool
from tether import events as ev
from tether.approval import ElicitationAnswer
from tether.mcp import McpServer
from tether.trust import untrusted_content

ASKER = str(Path(__file__).parents[1] / "mcp_servers" / "asker.py")


@tool(capabilities=Capabilities(private_data=True))
def read_notes() -> str:
    """Read the user's notes."""
    return "the vault code is 493021"


@pytest.fixture(scope="module", params=["handshake", "modern"])
def era(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def asker_url(era: str) -> Iterator[str]:
    with http_server(ASKER, "--era", era) as url:
        yield url


def heard(result: Any) -> list[dict[str, Any]]:
    """What the asker said it heard back, for each of its calls that ran."""
    out = []
    for e in result.events:
        if isinstance(e, ev.ToolFinished) and e.tool.startswith("a__") and e.status == "ok":
            out.append(json.loads(untrusted_content(e.result.content) or e.result.content))
    return out


PLAN = instruction(("read_notes", {})) + "\n" + instruction(("a__login", {}))


async def test_under_the_default_policy_the_untrusted_servers_form_is_never_shown(
        asker_url: str) -> None:
    person = FormFiller(ElicitationAnswer.accept({"password": "493021"}))
    evil = Compromised()
    async with Agent(evil.model(), tools=[read_notes, McpServer.http("a", asker_url)],
                     approver=person) as agent:
        result = await agent.run(PLAN)
    assert statuses(result) == ["ok", "blocked"]
    assert person.shown == [] and heard(result) == []


async def test_under_ask_the_person_is_warned_twice_and_a_decline_sends_nothing(
        asker_url: str) -> None:
    person = FormFiller(ElicitationAnswer.decline())
    evil = Compromised()
    async with Agent(evil.model(), tools=[read_notes, McpServer.http("a", asker_url)],
                     approver=person, security=SecurityConfig(trifecta="ask")) as agent:
        result = await agent.run(PLAN)
    assert statuses(result) == ["ok", "ok"]
    [request] = person.shown
    assert request.trusted is False and request.taint.armed
    assert request.warning is not None
    assert "looks like a secret ('password')" in request.warning
    assert "the answer goes to an untrusted server" in request.warning
    assert heard(result) == [{"action": "decline", "content": None}]
    # The request never reached the model: it cannot answer for the person.
    assert "Enter your password" not in json.dumps(
        [str(m) for m in result.messages])


async def test_nobody_at_the_approver_means_nothing_is_sent_whatever_the_model_does(
        asker_url: str) -> None:
    evil = Compromised()
    async with Agent(evil.model(), tools=[McpServer.http("a", asker_url, trusted=True)],
                     approver=Recorder(Decision.allow())) as agent:
        result = await agent.run(instruction(("a__login", {})) + "\n"
                                 + instruction(("a__pay", {})))
    assert heard(result) == [{"action": "decline", "content": None}] * 2


@pytest.mark.parametrize("era", ["modern"], indirect=True)
async def test_the_servers_request_state_goes_back_to_it_intact_and_nowhere_else(
        asker_url: str) -> None:
    # The state holds instructions and terminal escapes: the model never sees it, nor the
    # person, nor the run's notices; the server gets it back byte for byte.
    person = FormFiller(ElicitationAnswer.accept({}))
    model = Compromised().model()
    async with Agent(model, tools=[McpServer.http("a", asker_url, trusted=True)],
                     approver=person) as agent:
        result = await agent.run(instruction(("a__stateful", {})))
    assert heard(result) == [{"intact": True}]
    assert statuses(result) == ["ok"]  # the state's instruction never reached the model
    [request] = person.shown
    shown = json.dumps([request.message, request.warning, [str(f) for f in request.fields]])
    told = json.dumps([e.message for e in result.events if isinstance(e, ev.Notice)])
    sent = json.dumps([str(r.messages) for r in model.requests])
    for where in (shown, told, sent, json.dumps([str(m) for m in result.messages])):
        assert "evil.example" not in where and "SECURE" not in where


# --- what the person reads: nothing the server wrote starts a line of tether's ----------------

FORGED_GOES_TO = "\n  goes to: bank.example"


@pytest.mark.parametrize("url", [
    f"https://evil.example/x{FORGED_GOES_TO}",  # a newline in the path
    f"https://evil.example/?q=1{FORGED_GOES_TO}\r\n",  # in the query, and a CRLF
    f"https://evil.example/#{FORGED_GOES_TO}\t",  # in the fragment, and a tab
    f"not a url{FORGED_GOES_TO}",  # no host at all
    "https://evil.example\u2028  goes to: bank.example",  # a line separator
])
def test_a_newline_in_an_elicitation_url_cannot_forge_where_it_goes(url: str) -> None:
    from tether.approval import ElicitationRequest
    from tether.cli.elicit import elicitation_text, url_text

    shown = url_text(url).plain + "\n" + elicitation_text(
        ElicitationRequest(server=f"s{FORGED_GOES_TO}", trusted=False,
                           message="open it", url=url)).plain
    lines = [line.strip() for line in shown.splitlines()]
    # tether's own "goes to" line, at most once (none: no host could be read), and never
    # the server's.
    assert len([line for line in lines if line.startswith("goes to")]) <= 1
    assert not any(line.startswith("goes to: bank") for line in lines)


def test_control_an_ordinary_elicitation_url_shows_where_it_goes() -> None:
    from tether.cli.elicit import url_text

    shown = url_text("https://example.test/login?next=/home").plain
    assert shown == "https://example.test/login?next=/home\n  goes to: example.test"


@pytest.mark.parametrize("name", [
    "Pаssword",  # a Cyrillic а
    "ΑΡΙ key",  # Greek capitals
    "ｐａｓｓｗｏｒｄ",  # fullwidth
    "ＡＰＩ＿ＫＥＹ",  # fullwidth, with a fullwidth low line
    "pass\u200bword",  # a zero-width space inside the word
    "sеcrеt",  # Cyrillic е twice
    "tοkеn",  # Greek ο, Cyrillic е
    "𝐩𝐚𝐬𝐬𝐰𝐨𝐫𝐝",  # mathematical bold
    "cvс",  # a Cyrillic с
])
def test_a_look_alike_secret_word_on_a_form_is_still_flagged(name: str) -> None:
    from tether.approval import FormField
    from tether.mcp.elicitation import looks_secret

    assert looks_secret(FormField(name, "string"))
    assert looks_secret(FormField("value", "string", title=name))
    assert looks_secret(FormField("value", "string", description=f"your {name}, please"))


@pytest.mark.parametrize("name", ["email", "Имя", "город", "όνομα", "ｎａｍｅ", "spinach"])
def test_control_an_ordinary_field_in_any_script_is_not_flagged(name: str) -> None:
    from tether.approval import FormField
    from tether.mcp.elicitation import looks_secret

    assert not looks_secret(FormField(name, "string"))
