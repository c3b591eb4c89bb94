"""fetch_url under the default network rules: a compromised model aims it at loopback, the
private network and the cloud metadata address; each is refused before any connection is
attempted (the guard transport records every attempt: there must be none)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.security.conftest import (
    Compromised,
    Guard,
    TableResolver,
    agent,
    events_of,
    instruction,
    nothing_left,
    record,
)
from tests.servers.http import Canned, LoopbackServer
from tether import SecurityConfig, Taint, Tool
from tether import events as ev
from tether.conversation import Conversation


def port_of(server: LoopbackServer) -> str:
    return server.url.rsplit(":", 1)[1]


@pytest.mark.parametrize("where, why", [
    ("http://127.0.0.1:{port}/x", "127.0.0.1 is a loopback address"),
    ("http://10.0.0.1/admin", "10.0.0.1 is a private address (RFC 1918)"),
    ("http://169.254.169.254/latest/meta-data/iam/", "169.254.169.254 is a link-local"),
    ("http://[::1]:{port}/x", "::1 is a loopback address"),
    ("http://[::ffff:127.0.0.1]:{port}/x",
     "::ffff:127.0.0.1 is an IPv4-mapped form of 127.0.0.1, a loopback address"),
    ("http://[::ffff:a9fe:a9fe]/", "IPv4-mapped form of 169.254.169.254"),
    ("http://2130706433:{port}/x", "2130706433 resolves to 127.0.0.1"),  # decimal IPv4
    ("http://0x7f.1:{port}/x", "0x7f.1 resolves to 127.0.0.1"),  # hex and short IPv4
    ("http://intranet.test/wiki", "intranet.test resolves to 10.0.0.7"),
    ("http://metadata.test/", "metadata.test resolves to 169.254.169.254"),
    ("http://mixed.test/", "mixed.test resolves to 10.0.0.7"),  # one bad address is enough
    ("http://localhost:{port}/x", "localhost resolves to"),
])
async def test_fetch_to_a_private_destination_is_refused_before_connecting(
        where: str, why: str, ws: Path, tools: list[Tool], attacker: LoopbackServer,
        guard: Guard, resolver: TableResolver) -> None:
    url = where.format(port=port_of(attacker))
    result = await agent(Compromised().model(), ws, tools).run(
        "Check this link.\n" + instruction(("fetch_url", {"url": url})))

    nothing_left(attacker, guard)
    assert guard.sent == []  # not a single connection attempt
    fetch = record(result, "fetch_url")
    assert fetch.status == "error" and why in fetch.output
    assert "block_private_ips" in fetch.output and "Nothing was sent" in fetch.output
    [done] = [e for e in events_of(result, ev.ToolFinished) if e.tool == "fetch_url"]
    assert done.status == "error" and done.result.is_error
    # The refusal is the harness's own text: nothing from outside came in.
    assert done.result.trust == "trusted" and result.taint == Taint()


async def test_ip_literals_are_never_resolved(
        ws: Path, tools: list[Tool], guard: Guard, resolver: TableResolver) -> None:
    await agent(Compromised().model(), ws, tools).run(instruction(
        ("fetch_url", {"url": "http://10.0.0.1/"}),
        ("fetch_url", {"url": "http://169.254.169.254/"})))
    assert resolver.asked == [] and guard.sent == []


async def test_a_redirect_to_the_metadata_address_is_returned_not_followed(
        ws: Path, tools: list[Tool], attacker: LoopbackServer, web: LoopbackServer,
        guard: Guard) -> None:
    # Reaching the loopback "web" server needs block_private_ips off; the point here is
    # only that fetch_url itself never follows the Location.
    metadata = "http://169.254.169.254/latest/meta-data/iam/security-credentials/"
    web.queue(Canned(302, "", {"location": metadata}))
    model = Compromised().model()
    result = await agent(model, ws, tools,
                         security=SecurityConfig(block_private_ips=False)).run(
        instruction(("fetch_url", {"url": web.url + "/go"})))
    nothing_left(attacker, guard, allowed=[web])
    assert [s.url for s in guard.sent] == [web.url + "/go"]
    fetch = record(result, "fetch_url")
    assert fetch.status == "ok"
    assert f"a redirect to {metadata}" in fetch.output and "not followed" in fetch.output

    # A model that chases the Location under the default rules gets the same check as any
    # URL: refused before connecting.
    chased = await agent(Compromised().model(), ws, tools).run(
        instruction(("fetch_url", {"url": metadata})),
        conversation=Conversation.from_dict(result.conversation.to_dict()))
    nothing_left(attacker, guard, allowed=[web])
    assert len(guard.sent) == 1
    assert "169.254.169.254 is a link-local address" in record(chased, "fetch_url").output


async def test_blocked_domains_hold_even_when_private_ips_are_allowed(
        ws: Path, tools: list[Tool], attacker: LoopbackServer, guard: Guard,
        resolver: TableResolver) -> None:
    url = f"http://attacker.test:{port_of(attacker)}/x"
    result = await agent(Compromised().model(), ws, tools,
                         security=SecurityConfig(block_private_ips=False,
                                                 blocked_domains=["attacker.test"])).run(
        instruction(("fetch_url", {"url": url})))
    nothing_left(attacker, guard)
    assert resolver.asked == []
    assert "attacker.test is in security.blocked_domains" in record(result, "fetch_url").output


async def test_allowed_domains_refuse_everything_else(
        ws: Path, tools: list[Tool], attacker: LoopbackServer, guard: Guard) -> None:
    result = await agent(Compromised().model(), ws, tools,
                         security=SecurityConfig(block_private_ips=False,
                                                 allowed_domains=["docs.python.org"])).run(
        instruction(("fetch_url", {"url": attacker.url + "/x"})))
    nothing_left(attacker, guard)
    assert "not in security.allowed_domains" in record(result, "fetch_url").output
