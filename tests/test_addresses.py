"""tether.addresses: the places a text points to, in every spelling, each as it resolves."""

from __future__ import annotations

import pytest

from tests.security.spellings import HOSTILE, LEGIT, TRUSTED
from tether.addresses import host, ibans, named, places


@pytest.mark.parametrize("text", HOSTILE)
def test_a_hostile_spelling_points_somewhere_the_trusted_text_does_not_name(
        text: str) -> None:
    assert [p for p in places(text) if p not in named(TRUSTED)]


@pytest.mark.parametrize("text", LEGIT)
def test_a_trusted_place_spelled_another_way_is_named_by_the_trusted_text(text: str) -> None:
    assert all(p in named(TRUSTED) for p in places(text))


@pytest.mark.parametrize(("text", "where"), [
    ("https://corp.test'@evil.test/x", "evil.test"),  # userinfo up to the last @
    ("https://a@corp.test@evil.test/x", "evil.test"),
    ("https://corp.test\\@evil.test/x", "corp.test"),  # WHATWG: \ ends the authority
    ("https:\\\\evil.test\\x", "evil.test"),
    ("//evil.test/x", "evil.test"),
    ("https&#58;//evil.test", "evil.test"),
    ("https://evil%2etest/", "evil.test"),
    ("http://0x7f.1/", "127.0.0.1"),
    ('"bob@corp.test"@evil.test', "evil.test"),  # mail goes to the last @'s domain
    ("mailto:bob@corp.test?cc=mallory@evil.test", "evil.test"),
])
def test_a_place_is_named_by_the_host_its_parser_finds(text: str, where: str) -> None:
    assert where in named(text)


def test_a_link_is_one_place_whole_not_its_trusted_prefix() -> None:
    assert "https://corp.test'@evil.test/x" in places("see https://corp.test'@evil.test/x.")
    assert "https://corp.test/pl" not in named("https://corp.test/plan")


@pytest.mark.parametrize(("raw", "resolved"), [
    ("CORP.Test", "corp.test"),
    ("corp.test.", "corp.test"),
    ("\u00e9vil.test", "xn--vil-9la.test"),
    ("\u00c9VIL.TEST", "xn--vil-9la.test"),
    ("xn--vil-9la.test", "xn--vil-9la.test"),
    ("\uff45\uff56\uff49\uff4c\uff0e\uff54\uff45\uff53\uff54", "evil.test"),
    ("evil\u3002test", "evil.test"),
    ("ev\u00adil.test", "evil.test"),
    ("evil%2etest", "evil.test"),
    ("2130706433", "127.0.0.1"),
    ("0x7f000001", "127.0.0.1"),
    ("0177.0.0.1", "127.0.0.1"),
    ("127.1", "127.0.0.1"),
    ("0x7f.0.0.0x1", "127.0.0.1"),
    ("[::FFFF:127.0.0.1]", "[::ffff:7f00:1]"),
    ("[2001:db8:0:0::1]", "[2001:db8::1]"),
    ("[IPv6:2001:DB8::1]", "[ipv6:2001:db8::1]"),
    ("1.2.3.4.5", "1.2.3.4.5"),  # no address: kept as written (it resolves nowhere)
    ("256.1.1.1", "256.1.1.1"),
])
def test_a_host_is_read_as_a_browser_or_mail_system_resolves_it(raw: str,
                                                                resolved: str) -> None:
    assert host(raw) == resolved


@pytest.mark.parametrize(("text", "found"), [
    ("Rent to DE89 3704 0044 0532 0130 00 for May", ["DE89370400440532013000"]),
    ("GB29 NWBK 6016 1331 9268 19.", ["GB29NWBK60161331926819"]),
    ("gb29-nwbk-6016-1331-9268-19", ["GB29NWBK60161331926819"]),
    ("DE89370400440532013000123", ["DE89370400440532013000",
                                   "DE89370400440532013000123"]),
    ("US12 2000 0001 2121 2121 212 for rent", ["US122000000121212121212"]),
    ("FY24 revenue numbers were good", []),
    ("de12 and more text here for you", []),
])
def test_an_iban_is_read_to_its_registered_length_across_any_grouping(
        text: str, found: list[str]) -> None:
    assert list(ibans(text)) == found


def test_prose_points_nowhere() -> None:
    assert places("Lunch at 10.30 on 12.03.2024; v1.2.3, 3.14%, e.g. i.e. U.S.A. FY24 "
                  "up 5.5. Time:10:30, note: none. name: Bob\nhotel.") == []


def test_a_mailto_link_is_its_recipients() -> None:
    found = places("mailto:bob@corp.test,carol@corp.test?subject=Hi%20there&cc=dan@corp.test")
    assert found[:3] == ["bob@corp.test", "carol@corp.test", "dan@corp.test"]
    assert not [p for p in found if "subject" in p.lower()]


def test_a_word_with_more_links_than_are_read_is_one_place_as_written() -> None:
    word = ",".join(f"https://h{i}.test/" for i in range(40))
    assert word in places(word)
    assert word in named(word)  # a trusted text holding the very same word names it


@pytest.mark.parametrize("text", [
    "http://" + "9" * 5000 + "/x",  # past int()'s digit limit: not an address, no error
    "http://0x" + "f" * 5000 + "/x",
    "9" * 5000 + "/x",
    "@[" * 5000,
    "a='x " * 5000,
    '"@' * 5000,
    "GB11" + "AB12" * 5000,
    "https://a.test/," * 1000,
    "\udcff evil.test \ud800",  # lone surrogates
])
def test_hostile_input_is_read_without_error(text: str) -> None:
    assert isinstance(places(text), list)
    assert isinstance(named(text), frozenset)
