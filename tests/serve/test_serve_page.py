"""The page of `tether serve` in a real headless Chromium: a person types, reads the
streamed answer, and decides the calls that wait, with the gate's reasons on the card.
Elements are found by what a person sees: the textbox labelled "Message", the buttons
"Send", "Allow", "Deny", and the roles the page names (``data-role``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.serve.conftest import Served
from tests.servers.scripted_chat import Reply, Say, ScriptedChat, call

pytestmark = pytest.mark.xdist_group("serve-browser")

HOSTILE = '<img src=x onerror="window.__pwned = 1">'
SCRIPT: dict[str, list[Reply]] = {
    "Say hello": [Say("Hello from the scripted model")],
    "Show me markup": [Say(HOSTILE)],
    "Write denied.txt please": [call("write_file", path="denied.txt", content="no\n"),
                                Say("I left denied.txt alone.")],
    "Write allowed.txt please": [call("write_file", path="allowed.txt", content="yes\n"),
                                 Say("Wrote allowed.txt.")],
    "Write later.txt please": [call("write_file", path="later.txt", content="later\n"),
                               Say("Wrote later.txt.")],
}
WAIT = 30


@pytest.fixture(scope="module", autouse=True)
def _script(model: ScriptedChat) -> None:
    model.script.update(SCRIPT)


@pytest.fixture
def page(browser: Any, served: Served) -> Any:
    """The page, freshly opened at the URL tether serve printed."""
    browser.get(served.url)
    until(browser, lambda d: d.execute_script("return document.readyState") == "complete")
    return browser


def until(driver: Any, condition: Any) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT).until(condition)


def labelled(driver: Any, label: str) -> Any:
    from selenium.webdriver.common.by import By

    target = driver.find_element(By.XPATH, f"//label[normalize-space()='{label}']")
    return driver.find_element(By.ID, target.get_attribute("for"))


def button(scope: Any, name: str) -> Any:
    from selenium.webdriver.common.by import By

    return scope.find_element(By.XPATH, f".//button[normalize-space()='{name}']")


def role(scope: Any, name: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(scope.find_elements(By.CSS_SELECTOR, f'[data-role="{name}"]'))


def send(driver: Any, text: str) -> None:
    labelled(driver, "Message").send_keys(text)
    button(driver, "Send").click()


def answered(driver: Any, text: str) -> Any:
    """The assistant message that says ``text``, once it has arrived whole."""
    def found(d: Any) -> Any:
        for message in role(d, "assistant"):
            if message.get_attribute("data-streaming") is None and text in message.text:
                return message
        return False
    return until(driver, found)


def approval_card(driver: Any) -> Any:
    return until(driver, lambda d: (role(d, "approval") or [False])[-1])


def test_a_prompt_gets_its_answer_streamed_onto_the_page(page: Any, served: Served) -> None:
    assert served.token not in page.current_url  # taken out of the address bar
    send(page, "Say hello")
    answered(page, "Hello from the scripted model")
    until(page, lambda d: "Say hello" in d.find_element("id", "sessions").text)


def test_a_hostile_answer_is_shown_as_text_and_runs_nothing(page: Any) -> None:
    send(page, "Show me markup")
    message = answered(page, HOSTILE)
    assert message.find_element("css selector", ".text").text == HOSTILE
    assert page.find_elements("css selector", "#conversation img") == []
    assert page.execute_script("return window.__pwned") is None


def test_deny_keeps_the_file_unwritten(page: Any, served: Served) -> None:
    send(page, "Write denied.txt please")
    card = approval_card(page)
    # The gate's reasons: the tool, where the path came from, the taint, the diff.
    assert "Write file" in card.text and "write_file" in card.text
    row = card.find_element("css selector", "tr[data-verdict]")
    assert row.get_attribute("data-verdict") == "user"
    assert "denied.txt" in row.text and "from your own words" in row.text
    assert "nothing private or untrusted" in card.text
    assert "+ no" in card.find_element("css selector", ".diff").text
    labelled(page, "Reason (told to the model when you deny)").send_keys("not now")
    button(card, "Deny").click()
    answered(page, "I left denied.txt alone.")
    tool = role(page, "tool-call")[-1]
    until(page, lambda d: tool.find_element("css selector", ".status").text == "denied")
    assert not (served.workspace / "denied.txt").exists()


def test_allow_writes_the_file(page: Any, served: Served) -> None:
    send(page, "Write allowed.txt please")
    card = approval_card(page)
    assert button(card, "Allow for session").is_displayed()
    button(card, "Allow").click()
    answered(page, "Wrote allowed.txt.")
    assert (served.workspace / "allowed.txt").read_text() == "yes\n"
    tool = role(page, "tool-call")[-1]
    assert tool.find_element("css selector", ".status").text == "ok"
    assert "Created allowed.txt" in tool.find_element("css selector", ".result").text


def test_a_pending_approval_is_still_there_after_a_restart(page: Any, served: Served,
                                                           browser: Any) -> None:
    send(page, "Write later.txt please")
    approval_card(page)
    served.restart()  # a new token: the person opens the new URL
    browser.get(served.url)
    session = until(browser, lambda d: next(
        (b for b in d.find_elements("css selector", "#sessions button")
         if "Write later.txt please" in b.text), False))
    assert "waiting for approval" in session.text
    session.click()
    card = approval_card(browser)
    assert "later.txt" in card.text
    save_screenshot(browser)
    button(card, "Allow").click()
    answered(browser, "Wrote later.txt.")
    assert (served.workspace / "later.txt").read_text() == "later\n"


def save_screenshot(driver: Any) -> None:
    """The page with an approval card, for docs/serve.md (TETHER_SCREENSHOT=PATH)."""
    import os

    target = os.environ.get("TETHER_SCREENSHOT")
    if target:
        driver.save_screenshot(str(Path(target)))
