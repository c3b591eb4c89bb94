"""Fixtures shared by the test modules: a loopback HTTP server and a sleep that never waits."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.servers.http import LoopbackServer


class FakeSleep:
    """Records the waits the retry policy asked for; never waits."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    """A real HTTP server on 127.0.0.1 playing back queued responses."""
    with LoopbackServer() as srv:
        yield srv


@pytest.fixture
def sleep() -> FakeSleep:
    return FakeSleep()
