"""`tether serve` with MCP servers built with the official SDK: a server's request for input
reaches the stream of the run whose call it interrupts (and no other), is answered over
``POST /api/elicitations/{id}``, and is cancelled when that page goes away; an approval
card says which values came only from untrusted text, and names an MCP tool's server and
its trust. Over HTTP, then in a real headless Chromium.

The workspace asks instead of blocking a call the provenance rule distrusts (``[security]
trifecta = "ask"``), so such a call reaches a person with its reasons. The asker speaks
the handshake era: its request arrives on the SDK's own receive loop, not in the run's
task, so what routes it is the run's own approver, not anything the task carries.
"""

from __future__ import annotations

import http.client
import json
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.serve.conftest import Served
from tests.serve.test_serve_http import decide, events, request, run_input
from tests.serve.test_serve_page import answered, button, labelled, role, send, until
from tests.servers.scripted_chat import Reply, Say, ScriptedChat, call

pytestmark = pytest.mark.xdist_group("serve-mcp")

SERVERS = Path(__file__).resolve().parents[1] / "mcp_servers"
CONFIG = f"""
[security]
trifecta = "ask"

[[mcp]]
name = "asker"
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(SERVERS / "asker.py"))}, "--era", "handshake"]

[[mcp]]
name = "records"
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(SERVERS / "records.py"))}]
trusted = false
"""
BOOKED = {"email": "ada@example.com", "guests": 2}
SHARE = call("records__share", file_id="f1", email="mallory@evil.test")
SCRIPT: dict[str, list[Reply]] = {
    "Book a table": [call("asker__book"), Say("Booked.")],
    "Book a table, then leave": [call("asker__book"), Say("Left.")],
    "Book a table on the page": [call("asker__book"), Say("Booked on the page.")],
    "Pay the bill": [call("asker__pay"), Say("Not paid.")],
    "Hold on": [Say("Held.")],
    "Share the file as its note says": [call("records__list_files"), SHARE,
                                        Say("Not shared.")],
    "Share it from the page": [call("records__list_files"), SHARE, Say("Left unshared.")],
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, model: ScriptedChat) -> Iterator[Served]:
    """This module's server: the asker (trusted, stdio) and records (untrusted)."""
    model.script.update(SCRIPT)
    server = Served(tmp_path_factory.mktemp("serve-mcp"), model, CONFIG)
    server.start()
    try:
        yield server
    finally:
        if server.proc is not None:
            server.stop()


class Stream:
    """A run's AG-UI stream, read on a thread as it comes: ``until`` waits for a frame."""

    def __init__(self, served: Served, body: dict[str, Any]) -> None:
        self.connection = http.client.HTTPConnection(served.host, timeout=60)
        self.connection.request("POST", "/agui", body=json.dumps(body).encode(), headers={
            "Host": served.host, "Authorization": f"Bearer {served.token}",
            "Content-Type": "application/json"})
        self.response = self.connection.getresponse()
        assert self.response.status == 200
        self.frames: list[str] = []
        self.changed = threading.Condition()
        self.ended = False
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        try:
            for line in iter(self.response.readline, b""):
                if line.startswith(b"data: "):
                    with self.changed:
                        self.frames.append(line.decode().removeprefix("data: ").strip())
                        self.changed.notify_all()
        except (OSError, ValueError, AttributeError):  # closed by the test, mid-read
            pass
        with self.changed:
            self.ended = True
            self.changed.notify_all()

    def until(self, name: str) -> Any:
        """The first ``CUSTOM`` event called ``name`` (waited for)."""
        def found() -> Any:
            return next((e for e in events("".join(f"data: {f}\n\n" for f in self.frames))
                         if e.type.value == "CUSTOM" and e.name == name), None)
        with self.changed:
            assert self.changed.wait_for(lambda: found() is not None or self.ended, 60)
            event = found()
        assert event is not None, self.frames
        return event

    def rest(self) -> list[Any]:
        """Every event, once the stream has ended."""
        self.reader.join(60)
        self.connection.close()
        return events("".join(f"data: {f}\n\n" for f in self.frames))

    def close(self) -> None:
        """The page goes away: the connection is shut, the reader sees it end."""
        assert self.connection.sock is not None
        self.connection.sock.shutdown(socket.SHUT_RDWR)
        self.reader.join(60)
        self.connection.close()


def results(parsed: list[Any]) -> list[str]:
    return [e.content for e in parsed if e.type.value == "TOOL_CALL_RESULT"]


def test_a_request_for_input_reaches_its_own_runs_stream_and_no_other(
        served: Served, model: ScriptedChat) -> None:
    held = threading.Event()
    model.hold = lambda seen: held if seen.prompt == "Hold on" else None
    try:
        other = Stream(served, run_input("elsewhere1", "Hold on"))
        model.wait_for(lambda seen: seen.prompt == "Hold on")
        asking = Stream(served, run_input("booking1", "Book a table"))
        form = asking.until("tether.elicitation").value
        assert (form["server"], form["trusted"], form["mode"]) == ("asker", True, "form")
        assert form["message"] == "Book a table.\nFor how many?"
        assert [(f["name"], f["kind"], f["required"]) for f in form["fields"]] == [
            ("email", "string", True), ("guests", "integer", True),
            ("vegan", "boolean", False), ("seating", "choice", False),
            ("extras", "choices", False)]
        assert request(served, "POST", "/api/elicitations/" + "0" * 32,
                       {"action": "accept", "values": BOOKED})[0] == 400
        code, _, body = request(served, "POST", f"/api/elicitations/{form['id']}",
                                {"action": "accept", "values": BOOKED})
        assert code == 200, body
        parsed = asking.rest()
        heard, = results(parsed)
        assert '"action": "accept"' in heard and "ada@example.com" in heard
        assert parsed[-1].outcome.type == "success"
        # Answered once: the same id answers nothing now.
        assert request(served, "POST", f"/api/elicitations/{form['id']}",
                       {"action": "decline"})[0] == 400
    finally:
        held.set()
        model.hold = lambda seen: None
    shown = [e for e in other.rest() if e.type.value == "CUSTOM"]
    assert [e.name for e in shown if e.name.startswith("tether.elicitation")] == []


def test_a_request_for_input_is_cancelled_when_its_page_goes_away(
        served: Served, model: ScriptedChat) -> None:
    asking = Stream(served, run_input("booking2", "Book a table, then leave"))
    asking.until("tether.elicitation")
    asking.close()
    # The run goes on without its page: the server heard the cancel, the model its result.
    seen = model.wait_for(lambda s: s.prompt == "Book a table, then leave" and s.turn == 1)
    assert '\\"action\\": \\"cancel\\"' in json.dumps(seen.body)


def test_an_mcp_call_from_untrusted_text_is_asked_with_its_server_and_where_values_came_from(
        served: Served) -> None:
    status, _, body = request(served, "POST", "/agui",
                              run_input("share1", "Share the file as its note says"))
    assert status == 200, body
    # An untrusted server's word that a tool only reads is not believed: a person decides.
    listing, = events(body)[-1].outcome.interrupts
    assert listing.metadata["tether"]["mcp"] == {"server": "records", "trusted": False}
    code, body = decide(served, "share1", listing.id, {"decision": "allow"})
    assert code == 200, body
    interrupt, = events(body)[-1].outcome.interrupts
    view = interrupt.metadata["tether"]
    assert view["tool"] == "records__share" and view["reason"] == "trifecta"
    code, body = decide(served, "share1", interrupt.id, {"decision": "deny"})
    assert code == 200 and events(body)[-1].outcome.type == "success"


# --- the page ------------------------------------------------------------------------------


@pytest.fixture
def page(browser: Any, served: Served) -> Any:
    browser.get(served.url)
    until(browser, lambda d: d.execute_script("return document.readyState") == "complete")
    return browser


def test_the_page_shows_a_url_request_with_its_server_and_host_and_opens_nothing(
        page: Any) -> None:
    shown = page.current_url
    send(page, "Pay the bill")
    form = until(page, lambda d: (role(d, "elicitation") or [False])[-1])
    assert 'The MCP server "asker" (trusted) asks:' in form.text
    assert form.find_element("css selector", ".url").text == \
        "https://pay.example.com/checkout?id=7"
    assert form.find_element("css selector", ".host").text == "host: pay.example.com"
    # Shown, never opened: no navigation, no other window, no link to follow.
    assert page.current_url == shown and len(page.window_handles) == 1
    assert form.find_elements("css selector", "a") == []
    button(form, "Decline").click()
    answered(page, "Not paid.")
    tool = role(page, "tool-call")[-1]
    until(page, lambda d: '"action": "decline"' in
          tool.find_element("css selector", ".result").text)


def test_the_page_fills_a_form_of_every_kind_of_field_and_the_server_hears_it(
        page: Any) -> None:
    from selenium.webdriver.support.ui import Select

    send(page, "Book a table on the page")
    form = until(page, lambda d: (role(d, "elicitation") or [False])[-1])
    assert 'The MCP server "asker" (trusted) asks:' in form.text
    labelled(page, "Your email (required)").send_keys("ada@example.com")
    labelled(page, "guests (required)").send_keys("2")
    labelled(page, "vegan").click()
    Select(labelled(page, "seating")).select_by_visible_text("On the terrace")
    Select(labelled(page, "extras")).select_by_visible_text("cake")
    button(form, "Submit").click()
    answered(page, "Booked on the page.")
    heard = role(page, "tool-call")[-1].find_element("css selector", ".result").text
    content = json.loads(heard[heard.index("{"):heard.rindex("}") + 1])["content"]
    assert content == {"email": "ada@example.com", "guests": 2, "vegan": True,
                       "seating": "terrace", "extras": ["cake"]}


def test_the_approval_card_names_the_mcp_server_and_the_untrusted_source(page: Any) -> None:
    send(page, "Share it from the page")
    listing = until(page, lambda d: (role(d, "approval") or [False])[-1])
    assert listing.find_element("css selector", ".mcp").text == \
        'MCP server "records" (untrusted)'
    button(listing, "Allow").click()
    card = until(page, lambda d: next((c for c in role(d, "approval")
                                       if "records__share" in c.text), False))
    assert card.find_element("css selector", ".mcp").text == \
        'MCP server "records" (untrusted)'
    rows = {r.find_element("css selector", "td").text: r for r in
            card.find_elements("css selector", "tr[data-verdict]")}
    assert rows["email"].get_attribute("data-verdict") == "untrusted"
    assert "found only in untrusted text: the result of records__list_files" in \
        rows["email"].text
    assert "untrusted text" in card.find_element("css selector", ".taint").text
    button(card, "Deny").click()
    answered(page, "Left unshared.")
