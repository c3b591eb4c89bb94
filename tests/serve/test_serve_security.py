"""What `tether serve --host` decides before it listens, tested without listening beyond
loopback (the tests have no other network): loopback says nothing; another address warns
that the page is reachable, still needs the token and is not encrypted; every address at
once is refused, since the Host check needs the one name browsers will use."""

from __future__ import annotations

import pytest

from tether.cli import main
from tether.errors import ConfigError
from tether.serve.security import exposure, page_url, served_hosts


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.5", "::1", "[::1]", "localhost"])
def test_a_loopback_host_says_nothing(host: str) -> None:
    assert exposure(host) is None


@pytest.mark.parametrize("host", ["192.168.1.20", "10.0.0.7", "fd00::5", "tether.lan"])
def test_another_host_warns_that_the_token_is_still_needed_and_nothing_is_encrypted(
        host: str) -> None:
    warning = exposure(host)
    assert warning is not None
    assert warning.startswith(f"listening on {host}, beyond this machine")
    assert "still needs the token" in warning and "not encrypted" in warning


def test_another_host_answers_only_to_its_own_name() -> None:
    assert served_hosts("192.168.1.20", 8787) == {"192.168.1.20:8787"}
    assert served_hosts("fd00::5", 8787) == {"[fd00::5]:8787"}
    assert page_url("fd00::5", 8787, "t") == "http://[fd00::5]:8787/?token=t"


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "[::]"])
def test_every_address_at_once_is_refused_naming_what_to_give(host: str) -> None:
    with pytest.raises(ConfigError, match="give the address other machines will use"):
        exposure(host)


def test_the_command_refuses_every_address_before_it_starts_anything(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--host", "0.0.0.0", "--port", "0"]) != 0
    err = capsys.readouterr().err
    assert "listens on every address" in err
