"""What every provider adapter promises alike without a server (the promises that need
one are in tests/test_provider_contract.py)."""

from __future__ import annotations

import pytest

from tests.providers.wires import WIRES
from tether.providers.base import Provider


@pytest.mark.parametrize("wire", sorted(WIRES))
def test_with_model_is_a_copy_on_another_model_sharing_the_http_client(wire: str) -> None:
    # A sub-agent on another model calls with_model on every delegation: a copy with a
    # client of its own would leave one connection pool behind each time.
    spec = WIRES[wire]
    provider = spec.make("http://127.0.0.1:1" + spec.prefix, model="a")
    other = provider.with_model("b")  # type: ignore[attr-defined]
    assert isinstance(other, Provider) and other is not provider
    assert (provider.model, other.model) == ("a", "b")
    assert other.name == provider.name == wire
    assert other._transport is provider._transport  # type: ignore[attr-defined]
