"""What the fault tests share: a raw TCP server that writes exactly the bytes a test
scripts (tests/faults/rawserver.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.faults.rawserver import RawServer


@pytest.fixture
def raw() -> Iterator[RawServer]:
    """A server on 127.0.0.1 answering each request with the next queued script."""
    with RawServer() as srv:
        yield srv
