"""What the test modules share: a loopback HTTP server, a PostgreSQL server, a sleep that
never waits, an approver that records what it was asked, and one that also fills in the
forms MCP servers ask a person for."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.providers.helpers import FakeSleep
from tests.servers.http import LoopbackServer
from tests.servers.postgres import PostgresServer, PostgresUnavailable
from tether.approval import ApprovalRequest, Decision, ElicitationAnswer, ElicitationRequest


class Recorder:
    """An approver that gives one decision and keeps every request it was asked."""

    def __init__(self, decision: Decision) -> None:
        self.decision = decision
        self.requests: list[ApprovalRequest] = []

    async def approve(self, request: ApprovalRequest) -> Decision:
        self.requests.append(request)
        return self.decision


class FormFiller(Recorder):
    """An approver that allows every call and answers every request for input with one
    answer, keeping each request it was shown (``shown``)."""

    def __init__(self, answer: ElicitationAnswer) -> None:
        super().__init__(Decision.allow())
        self.answer = answer
        self.shown: list[ElicitationRequest] = []

    async def elicit(self, request: ElicitationRequest) -> ElicitationAnswer:
        self.shown.append(request)
        return self.answer


def statuses(result: Any) -> list[str]:
    """What became of each tool call of a RunResult."""
    return [r.status for r in result.tool_calls]


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    """A real HTTP server on 127.0.0.1 playing back queued responses."""
    with LoopbackServer() as srv:
        yield srv


@pytest.fixture
def sleep() -> FakeSleep:
    """A sleep that records the waits it is asked for and returns at once."""
    return FakeSleep()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A real PostgreSQL server on 127.0.0.1 for the whole test session, started on first
    use. Missing binaries fail the tests that need it (they are not skipped)."""
    try:
        server = PostgresServer()
    except PostgresUnavailable as e:
        pytest.fail(str(e), pytrace=False)
    try:
        server.start()
    except PostgresUnavailable as e:
        server.stop()
        pytest.fail(str(e), pytrace=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh, empty database on the test server, dropped afterwards (with any connection
    a test left open)."""
    url = postgres_server.database()
    try:
        yield url
    finally:
        postgres_server.drop(url)


@pytest.fixture(autouse=True, scope="session")
def _runs_log_to_a_store_of_the_tests() -> Iterator[None]:
    """Every ``tether run`` logs to the session store: the commands the tests start log to a
    file of this test session, never to the user's own store (a test that needs its own
    store sets TETHER_STORE itself)."""
    import os
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tether-test-store-") as folder:
        previous = os.environ.get("TETHER_STORE")
        os.environ["TETHER_STORE"] = os.path.join(folder, "sessions.db")
        try:
            yield
        finally:
            if previous is None:
                os.environ.pop("TETHER_STORE", None)
            else:
                os.environ["TETHER_STORE"] = previous


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep each ``xdist_group`` on one worker (``--dist loadgroup``), as the mark says.

    xdist tells its scheduler a test's group by appending ``@group`` to the test's id, which
    it writes to ``item._nodeid``; pytest 9.2 keeps the id in ``item._id``, so the write is
    lost and the groups are spread over both workers (pytest-dev/pytest-xdist#1386): two
    llama-servers, each with a thread per core, then fight the other worker for two cores,
    and every real-model test runs several times slower. This writes the suffix where pytest
    9.2 reads it, on the workers only (xdist sets ``loadgroup`` there), and does nothing
    where the id already carries it (an xdist that fixed the bug, an older pytest)."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        groups = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                         for m in item.iter_markers("xdist_group")})
        suffix = "@" + "_".join(groups)
        if not groups or item.nodeid.endswith(suffix) or not hasattr(item, "_id"):
            continue
        item._id = type(item._id).parse(item.nodeid + suffix)
