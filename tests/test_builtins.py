"""The built-in tools, called one at a time: what each does, and where each stops.

Network tests talk to loopback servers only; the tests that need fetch_url to succeed
against 127.0.0.1 say so with ``SecurityConfig(block_private_ips=False)``.
"""

from __future__ import annotations

import os
import select
import ssl
import threading
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import tether.builtins as builtins
from tests.conftest import statuses
from tests.servers.http import Canned, LoopbackServer
from tether import Agent, SecurityConfig, Tool, ToolContext, ToolOutput
from tether.builtins import (
    DEFAULT_ENABLED,
    FetchLimits,
    builtin_names,
    calculator,
    edit_file,
    fetch_url,
    grep,
    list_dir,
    make_fetch_url,
    make_shell,
    read_file,
    select_builtins,
    write_file,
)
from tether.builtins.fetch import domain_refusal
from tether.builtins.html_text import html_to_text
from tether.builtins.workspace import WorkspaceError, confine
from tether.errors import ConfigError
from tether.messages import ToolResult
from tether.network import blocked_address
from tether.providers import Scripted
from tether.providers import call as calling
from tether.sandbox import Sandbox
from tether.trust import CLEAN

OPEN_NETWORK = SecurityConfig(block_private_ips=False)


async def call(t: Tool, workspace: Path, security: SecurityConfig | None = None,
               **arguments: Any) -> ToolOutput:
    ctx = ToolContext("call_1", t.name, CLEAN, workspace, security or SecurityConfig())
    out = await t.handler(t.validate(arguments), ctx)
    assert isinstance(out, ToolOutput)
    return out


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A workspace with a few files, beside an ``outside`` folder holding a secret."""
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "notes.txt").write_text("alpha\nbeta\ngamma\n")
    (root / "src" / "app.py").write_text("import os\n\ndef main():\n    return 42\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP SECRET password=hunter2\n")
    return root


def snapshot(root: Path) -> dict[str, bytes | str]:
    """Every path under ``root`` with its bytes (or symlink target), to prove nothing moved."""
    out: dict[str, bytes | str] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(folder) / name
            key = p.relative_to(root).as_posix()
            if p.is_symlink():
                out[key] = "-> " + os.readlink(p)
            elif p.is_file():
                out[key] = p.read_bytes()
            else:
                out[key] = "dir"
    return out


# --- the registry ------------------------------------------------------------------------


def test_defaults_hold_the_file_and_fetch_tools_but_not_shell() -> None:
    assert set(DEFAULT_ENABLED) == {"calculator", "read_file", "list_dir", "grep",
                                    "write_file", "edit_file", "fetch_url"}
    assert "shell" not in [t.name for t in select_builtins(None)]
    assert [t.name for t in select_builtins(["shell"])] == ["shell"]


def test_disabled_removes_a_default_and_unknown_names_are_a_config_error() -> None:
    names = [t.name for t in select_builtins(None, ["fetch_url"])]
    assert "fetch_url" not in names and "read_file" in names
    with pytest.raises(ConfigError, match=r"'sh'.*built-ins: .*shell"):
        select_builtins(["sh"])


def test_every_builtin_is_exported_by_tether_builtins() -> None:
    for name in builtins.builtin_names():
        assert name in builtins.__all__
        assert getattr(builtins, name).name == name


def test_capabilities_are_declared_as_the_security_model_says() -> None:
    by_name = {t.name: t for t in select_builtins([*DEFAULT_ENABLED, "shell"])}
    for name in ("read_file", "list_dir", "grep"):
        assert by_name[name].capabilities.flags() == ["private_data"]
        assert by_name[name].read_only
    for name in ("write_file", "edit_file"):
        assert by_name[name].capabilities.flags() == ["destructive"]
        assert by_name[name].needs_approval
    assert by_name["fetch_url"].capabilities.flags() == ["untrusted_input", "external_send"]
    # The shell runs sandboxed without network by default: it cannot send.
    assert by_name["shell"].capabilities.flags() == ["private_data", "destructive"]
    assert by_name["shell"].needs_approval and not by_name["shell"].cache_approval
    online = make_shell(sandbox=Sandbox(network=True))
    assert online.capabilities.flags() == ["private_data", "external_send", "destructive"]
    unconfined = make_shell(sandbox=Sandbox(mode="none", network=False))
    assert unconfined.capabilities.external_send


# --- confinement -------------------------------------------------------------------------


def test_paths_inside_the_workspace_resolve_including_dotdot_that_stays_inside(ws: Path) -> None:
    assert confine(ws, "src/../notes.txt").shown == "notes.txt"
    assert confine(ws, str(ws / "src" / "app.py")).shown == "src/app.py"
    assert confine(ws, ".").shown == "."


@pytest.mark.parametrize("path, why", [
    ("../outside/secret.txt", "'..' climbs out of the workspace"),
    ("src/../../outside/secret.txt", "'..' climbs out"),
    ("/etc/passwd", "absolute path to a place outside"),
])
def test_escapes_are_refused_saying_why(ws: Path, path: str, why: str) -> None:
    with pytest.raises(WorkspaceError, match=why):
        confine(ws, path)


def test_a_symlink_that_points_outside_is_refused(ws: Path) -> None:
    (ws / "link.txt").symlink_to(ws.parent / "outside" / "secret.txt")
    (ws / "linkdir").symlink_to(ws.parent / "outside")
    for path in ("link.txt", "linkdir/secret.txt", str(ws / "linkdir" / "secret.txt")):
        with pytest.raises(WorkspaceError, match="symlink that points outside"):
            confine(ws, path)


def test_empty_and_nul_paths_are_refused(ws: Path) -> None:
    with pytest.raises(WorkspaceError, match="empty"):
        confine(ws, " ")
    with pytest.raises(WorkspaceError, match="NUL"):
        confine(ws, "notes\x00.txt")


# --- read_file ---------------------------------------------------------------------------


async def test_read_file_returns_the_text(ws: Path) -> None:
    out = await call(read_file, ws, path="notes.txt")
    assert out.content == "alpha\nbeta\ngamma\n" and not out.is_error


async def test_read_file_pages_with_offset_and_limit_and_says_where_to_go_on(ws: Path) -> None:
    (ws / "big.txt").write_text("".join(f"line {i}\n" for i in range(1, 101)))
    out = await call(read_file, ws, path="big.txt", offset=10, limit=5)
    assert out.content.startswith("line 10\nline 11\n")
    assert "line 14\n" in out.content and "line 15\n" not in out.content
    assert "offset=15" in out.content
    last = await call(read_file, ws, path="big.txt", offset=99, limit=5)
    assert last.content == "line 99\nline 100\n"
    past = await call(read_file, ws, path="big.txt", offset=500)
    assert past.is_error and "100 lines" in past.content


async def test_read_file_stops_at_its_size_bound_and_names_the_next_offset(ws: Path) -> None:
    (ws / "wide.txt").write_text(("x" * 999 + "\n") * 300)  # 300 kB
    out = await call(read_file, ws, path="wide.txt")
    assert "size bound reached" in out.content
    shown = out.content.count("x" * 999)
    assert shown * 1000 <= 100_000 and f"offset={shown + 1}" in out.content


async def test_read_file_refuses_binaries_directories_and_missing_files(ws: Path) -> None:
    (ws / "blob.bin").write_bytes(b"\x00\x01\x02")
    for path, said in (("blob.bin", "binary"), ("src", "directory"), ("nope.txt",
                                                                      "does not exist")):
        out = await call(read_file, ws, path=path)
        assert out.is_error and said in out.content


async def test_read_file_refuses_escapes(ws: Path) -> None:
    (ws / "link.txt").symlink_to(ws.parent / "outside" / "secret.txt")
    for path in ("../outside/secret.txt", str(ws.parent / "outside" / "secret.txt"),
                 "link.txt"):
        out = await call(read_file, ws, path=path)
        assert out.is_error and "outside the workspace" in out.content
        assert "hunter2" not in out.content


# --- list_dir ----------------------------------------------------------------------------


async def test_list_dir_marks_folders_and_symlinks(ws: Path) -> None:
    (ws / "link").symlink_to(ws / "notes.txt")
    out = await call(list_dir, ws)
    assert out.content.splitlines() == ["link@", "notes.txt", "src/"]


async def test_list_dir_refuses_outside_and_files(ws: Path) -> None:
    (ws / "linkdir").symlink_to(ws.parent / "outside")
    for path in ("..", "linkdir", "/"):
        out = await call(list_dir, ws, path=path)
        assert out.is_error and "outside the workspace" in out.content
    out = await call(list_dir, ws, path="notes.txt")
    assert out.is_error and "read_file" in out.content


# --- grep --------------------------------------------------------------------------------


async def test_grep_prints_file_line_and_text_of_each_match(ws: Path) -> None:
    out = await call(grep, ws, pattern=r"^(beta|def)")
    assert out.content.splitlines() == ["notes.txt:2: beta", "src/app.py:3: def main():"]


async def test_grep_filters_by_glob_and_ignores_case_on_request(ws: Path) -> None:
    out = await call(grep, ws, pattern="IMPORT", include="*.py", ignore_case=True)
    assert out.content == "src/app.py:1: import os"


async def test_grep_bounds_its_results(ws: Path) -> None:
    (ws / "many.txt").write_text("hit\n" * 50)
    out = await call(grep, ws, pattern="hit", max_results=3)
    assert out.content.count("many.txt:") == 3 and "stopped at 3 matches" in out.content


async def test_grep_reports_a_bad_pattern_clearly(ws: Path) -> None:
    out = await call(grep, ws, pattern="(unclosed")
    assert out.is_error and "not a valid Python regular expression" in out.content


async def test_grep_never_reads_through_symlinks_that_leave_the_workspace(ws: Path) -> None:
    (ws / "link.txt").symlink_to(ws.parent / "outside" / "secret.txt")
    (ws / "linkdir").symlink_to(ws.parent / "outside")
    (ws / "inside_link.txt").symlink_to(ws / "notes.txt")
    out = await call(grep, ws, pattern="hunter2|gamma")
    assert "hunter2" not in out.content
    assert out.content.splitlines() == ["inside_link.txt:3: gamma", "notes.txt:3: gamma"]
    refused = await call(grep, ws, pattern="hunter2", path="../outside")
    assert refused.is_error and "outside the workspace" in refused.content


async def test_grep_skips_vcs_and_cache_folders(ws: Path) -> None:
    (ws / ".git").mkdir()
    (ws / ".git" / "config").write_text("gamma\n")
    out = await call(grep, ws, pattern="gamma")
    assert out.content == "notes.txt:3: gamma"


# --- write_file and edit_file ------------------------------------------------------------


async def test_write_file_creates_folders_and_overwrites(ws: Path) -> None:
    out = await call(write_file, ws, path="new/deep/file.txt", content="hello\n")
    assert out.content == "Created new/deep/file.txt (6 bytes)"
    assert (ws / "new" / "deep" / "file.txt").read_text() == "hello\n"
    again = await call(write_file, ws, path="notes.txt", content="x")
    assert again.content.startswith("Overwrote notes.txt") and (ws / "notes.txt").read_text() \
        == "x"


async def test_write_file_refuses_every_escape_and_writes_nothing(ws: Path) -> None:
    (ws / "link.txt").symlink_to(ws.parent / "outside" / "secret.txt")
    (ws / "linkdir").symlink_to(ws.parent / "outside")
    before = snapshot(ws.parent)
    for path in ("../escape.txt", str(ws.parent / "escape.txt"), "link.txt",
                 "linkdir/new.txt", "src/../../outside/secret.txt"):
        out = await call(write_file, ws, path=path, content="pwned")
        assert out.is_error and "outside the workspace" in out.content, path
    assert snapshot(ws.parent) == before


async def test_tools_may_not_change_the_agents_own_config_or_git_internals(ws: Path) -> None:
    (ws / "tether.toml").write_text('[security]\ntrifecta = "block"\n')
    (ws / ".git" / "hooks").mkdir(parents=True)
    before = snapshot(ws)
    for path in ("tether.toml", "./tether.toml", "src/../tether.toml", ".git/hooks/pre-commit",
                 ".git/config", "sub/.git/hooks/post-checkout"):
        out = await call(write_file, ws, path=path, content="pwned")
        assert out.is_error and ("own configuration" in out.content or ".git" in out.content), path
    edit = await call(edit_file, ws, path="tether.toml", old_text='"block"', new_text='"allow"')
    assert edit.is_error and "security policy" in edit.content
    assert snapshot(ws) == before
    # A tether.toml deeper in the workspace is an ordinary file (only the workspace's own is).
    assert not (await call(write_file, ws, path="docs/tether.toml", content="x")).is_error


async def test_edit_file_replaces_exactly_one_occurrence(ws: Path) -> None:
    out = await call(edit_file, ws, path="src/app.py", old_text="return 42",
                     new_text="return 43")
    assert out.content == "Edited src/app.py: replaced 1 occurrence at line 4"
    assert (ws / "src" / "app.py").read_text().endswith("    return 43\n")


async def test_edit_file_refuses_a_missing_match_and_changes_nothing(ws: Path) -> None:
    out = await call(edit_file, ws, path="notes.txt", old_text="delta", new_text="x")
    assert out.is_error and "old_text was not found in notes.txt" in out.content
    assert (ws / "notes.txt").read_text() == "alpha\nbeta\ngamma\n"


async def test_edit_file_refuses_an_ambiguous_match_naming_the_lines(ws: Path) -> None:
    (ws / "dup.txt").write_text("a = 1\nb = 2\na = 1\n")
    out = await call(edit_file, ws, path="dup.txt", old_text="a = 1", new_text="a = 9")
    assert out.is_error and "matches 2 times in dup.txt (at lines 1, 3)" in out.content
    assert (ws / "dup.txt").read_text() == "a = 1\nb = 2\na = 1\n"


async def test_edit_file_keeps_crlf_line_endings(ws: Path) -> None:
    (ws / "win.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    out = await call(edit_file, ws, path="win.txt", old_text="one\ntwo", new_text="1\n2")
    assert not out.is_error
    assert (ws / "win.txt").read_bytes() == b"1\r\n2\r\nthree\r\n"


async def test_edit_file_refuses_escapes(ws: Path) -> None:
    (ws / "link.txt").symlink_to(ws.parent / "outside" / "secret.txt")
    before = snapshot(ws.parent)
    for path in ("../outside/secret.txt", "link.txt"):
        out = await call(edit_file, ws, path=path, old_text="hunter2", new_text="x")
        assert out.is_error and "outside the workspace" in out.content
    assert snapshot(ws.parent) == before


# --- fetch_url: what it returns ----------------------------------------------------------


def test_html_is_reduced_to_readable_text() -> None:
    html = ("<html><head><title>The  Title</title><style>p{}</style></head><body>"
            "<script>alert('x')</script><h1>Head</h1><p>One <b>two</b>&amp; three.</p>"
            "<p>See <a href='https://example.org/a'>this</a>.</p></body></html>")
    assert html_to_text(html) == ("The Title\n\nHead\n\nOne two& three.\n\n"
                                  "See this (https://example.org/a).")


async def test_fetch_returns_readable_text_of_a_page(ws: Path) -> None:
    page = "<html><body><h1>Hello</h1><script>evil()</script><p>World</p></body></html>"
    with LoopbackServer() as srv:
        srv.queue(Canned(200, page, {"content-type": "text/html; charset=utf-8"}))
        out = await call(fetch_url, ws, OPEN_NETWORK, url=srv.url + "/page")
    assert out.content.startswith(f"URL: {srv.url}/page\nStatus: 200 OK\n")
    assert out.content.endswith("Hello\n\nWorld") and "evil" not in out.content
    assert out.from_outside is True and not out.is_error


async def test_fetch_passes_json_through_and_does_not_show_binaries(ws: Path) -> None:
    with LoopbackServer() as srv:
        srv.queue(Canned.json({"a": 1}), Canned(200, b"\x89PNG\x00\x00",
                                                {"content-type": "image/png"}))
        data = await call(fetch_url, ws, OPEN_NETWORK, url=srv.url)
        image = await call(fetch_url, ws, OPEN_NETWORK, url=srv.url)
    assert data.content.endswith('{"a": 1}')
    assert image.content.endswith("(6 bytes of image/png; not shown as text)")


async def test_fetch_cuts_the_body_at_its_size_bound(ws: Path) -> None:
    tool = make_fetch_url(limits=FetchLimits(max_bytes=100))
    with LoopbackServer() as srv:
        srv.queue(Canned(200, "q" * 5000, {"content-type": "text/plain"}))
        out = await call(tool, ws, OPEN_NETWORK, url=srv.url)
    assert out.content.count("q") == 100 and "[... body cut at 100 bytes]" in out.content


async def test_fetch_gives_up_on_a_stalled_server_within_its_time_bound(ws: Path) -> None:
    tool = make_fetch_url(limits=FetchLimits(timeout_secs=0.3))
    never = threading.Event()
    with LoopbackServer() as srv:
        srv.queue(Canned(200, ["partial", never], {"content-type": "text/plain"}))
        out = await call(tool, ws, OPEN_NETWORK, url=srv.url)
    assert out.is_error and "did not answer within 0.3s" in out.content


async def test_fetch_marks_an_error_page_as_an_error_from_outside(ws: Path) -> None:
    with LoopbackServer() as srv:
        srv.queue(Canned(404, "no such page", {"content-type": "text/plain"}))
        out = await call(fetch_url, ws, OPEN_NETWORK, url=srv.url)
    assert out.is_error and out.from_outside and "Status: 404" in out.content


async def test_fetch_returns_a_redirect_without_following_it(ws: Path) -> None:
    with LoopbackServer() as srv:
        srv.queue(Canned(302, "", {"location": "/elsewhere?x=1"}), Canned(200, "followed!"))
        out = await call(fetch_url, ws, OPEN_NETWORK, url=srv.url + "/start")
        assert [r.path for r in srv.requests] == ["/start"]
    assert f"a redirect to {srv.url}/elsewhere?x=1" in out.content
    assert "not followed" in out.content and "followed!" not in out.content


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://127.0.0.1/x",
                                 "javascript:alert(1)", "example.com/page", "gopher://x"])
async def test_fetch_refuses_schemes_other_than_http_and_https(ws: Path, url: str) -> None:
    out = await call(fetch_url, ws, OPEN_NETWORK, url=url)
    assert out.is_error and "only http and https" in out.content
    assert out.from_outside is False


# --- fetch_url: where it may go ----------------------------------------------------------


class Resolver:
    """A resolver for made-up names (RFC 2606 ``.test``), recording every question."""

    def __init__(self, table: dict[str, Sequence[str]]) -> None:
        self.table = table
        self.asked: list[str] = []

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.asked.append(host)
        if host not in self.table:
            raise OSError(f"unknown host {host}")
        return self.table[host]


async def test_the_connection_is_pinned_to_the_checked_address(ws: Path) -> None:
    resolver = Resolver({"site.test": ["127.0.0.1"]})
    tool = make_fetch_url(resolve=resolver)
    with LoopbackServer() as srv:
        port = srv.url.rsplit(":", 1)[1]
        srv.queue(Canned(200, "hi", {"content-type": "text/plain"}))
        out = await call(tool, ws, OPEN_NETWORK, url=f"http://site.test:{port}/p?q=1")
    assert not out.is_error and out.content.endswith("hi")
    assert resolver.asked == ["site.test"]  # resolved once: what was checked is what is used
    assert srv.requests[0].headers["host"] == f"site.test:{port}"
    assert srv.requests[0].path == "/p?q=1"


async def test_an_unreachable_address_falls_through_to_the_next_checked_one(ws: Path) -> None:
    resolver = Resolver({"two.test": ["::1", "127.0.0.1"]})  # nothing listens on ::1 here
    tool = make_fetch_url(resolve=resolver)
    with LoopbackServer() as srv:
        srv.queue(Canned(200, "second address", {"content-type": "text/plain"}))
        port = srv.url.rsplit(":", 1)[1]
        out = await call(tool, ws, OPEN_NETWORK, url=f"http://two.test:{port}/")
    assert out.content.endswith("second address") and resolver.asked == ["two.test"]


@pytest.mark.parametrize("host, security, refused", [
    ("evil.test", SecurityConfig(blocked_domains=["evil.test"]), "blocked_domains"),
    ("a.b.evil.test", SecurityConfig(blocked_domains=[".evil.test"]), "blocked_domains"),
    ("notevil.test", SecurityConfig(blocked_domains=["evil.test"]), None),
    ("docs.good.test", SecurityConfig(allowed_domains=["good.test"]), None),
    ("good.test.evil.test", SecurityConfig(allowed_domains=["good.test"]), "allowed_domains"),
    ("notgood.test", SecurityConfig(allowed_domains=["good.test"]), "allowed_domains"),
    ("bad.good.test", SecurityConfig(allowed_domains=["good.test"],
                                     blocked_domains=["bad.good.test"]), "blocked_domains"),
    ("GOOD.TEST.", SecurityConfig(allowed_domains=["good.test"]), None),
    ("127.0.0.1", SecurityConfig(allowed_domains=["good.test"]), "allowed_domains"),
])
def test_domain_lists_match_whole_label_suffixes_blocked_first(
        host: str, security: SecurityConfig, refused: str | None) -> None:
    from tether.builtins.fetch import _normalize_host

    why = domain_refusal(_normalize_host(host), security)
    assert (why is None) if refused is None else (why is not None and refused in why)


async def test_a_domain_refusal_happens_before_resolution(ws: Path) -> None:
    resolver = Resolver({"evil.test": ["127.0.0.1"]})
    tool = make_fetch_url(resolve=resolver)
    out = await call(tool, ws, SecurityConfig(blocked_domains=["evil.test"],
                                              block_private_ips=False),
                     url="http://evil.test/")
    assert out.is_error and "blocked_domains" in out.content and resolver.asked == []


@pytest.mark.parametrize("address, why", [
    ("127.0.0.1", "loopback"), ("127.8.9.10", "loopback"), ("10.0.0.1", "RFC 1918"),
    ("172.16.5.4", "RFC 1918"), ("192.168.1.1", "RFC 1918"),
    ("169.254.169.254", "link-local"), ("100.64.0.1", "carrier-grade NAT"),
    ("0.0.0.0", "unspecified"), ("224.0.0.1", "multicast"), ("255.255.255.255", "reserved"),
    ("198.18.0.1", "benchmarking"), ("192.0.2.1", "documentation"),
    ("::1", "loopback"), ("::", "unspecified"), ("fd00::1", "unique local"),
    ("fc00::1", "unique local"), ("fe80::1", "link-local"), ("fe80::1%1", "link-local"),
    ("ff02::1", "multicast"), ("fec0::1", "site-local"),
    ("::ffff:127.0.0.1", "IPv4-mapped form of 127.0.0.1, a loopback"),
    ("::ffff:169.254.169.254", "IPv4-mapped form of 169.254.169.254, a link-local"),
    ("::ffff:8.8.8.8", "IPv4-mapped address"),
    ("::127.0.0.1", "IPv4-compatible form of 127.0.0.1"),
    ("2002:7f00:1::", "6to4 form of 127.0.0.1"), ("2002:a00:1::", "6to4 form of 10.0.0.1"),
    ("64:ff9b::a9fe:a9fe", "NAT64 form of 169.254.169.254"),
    ("64:ff9b:1::1", "local-use NAT64"), ("2001::1", "Teredo"),
    ("2001:db8::1", "documentation"),
])
def test_private_and_special_addresses_are_blocked_naming_why(address: str, why: str) -> None:
    reason = blocked_address(address)
    assert reason is not None and why in reason


@pytest.mark.parametrize("address", ["8.8.8.8", "93.184.216.34", "2606:4700:4700::1111",
                                     "2a00:1450:4001:82b::200e", "64:ff9b::808:808"])
def test_public_addresses_pass(address: str) -> None:
    assert blocked_address(address) is None


# --- fetch_url over TLS: pinned to the IP, verified for the name --------------------------


@pytest.fixture
def tls_site(tmp_path: Path) -> Iterator[tuple[str, ssl.SSLContext, list[str], list[str]]]:
    """An HTTPS server on 127.0.0.1 with a certificate for ``secure.test`` from a test CA.
    Yields (base port, a client context trusting the CA, SNI names seen, Host headers)."""
    pytest.importorskip("cryptography")
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tether test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(1)
          .not_valid_before(now - datetime.timedelta(days=1))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "secure.test")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(2)
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("secure.test")]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    cert_file, key_file = tmp_path / "leaf.pem", tmp_path / "leaf.key"
    cert_file.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    sni: list[str] = []
    hosts: list[str] = []
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert_file, key_file)

    def record_sni(sock: Any, name: str | None, ctx: Any) -> None:
        sni.append(str(name))

    server_ctx.sni_callback = record_sni

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            hosts.append(self.headers.get("host", ""))
            body = b"secret handshake ok"
            self.send_response(200)
            self.send_header("content-type", "text/plain")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    class QuietServer(ThreadingHTTPServer):
        def handle_error(self, request: Any, client_address: Any) -> None:
            pass  # a client that rejects the certificate is part of the test

    httpd = QuietServer(("127.0.0.1", 0), Handler)
    httpd.socket = server_ctx.wrap_socket(httpd.socket, server_side=True,
                                          do_handshake_on_connect=False)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    client_ctx = ssl.create_default_context(
        cadata=ca.public_bytes(serialization.Encoding.PEM).decode())
    try:
        yield str(httpd.server_address[1]), client_ctx, sni, hosts
    finally:
        httpd.shutdown()
        httpd.server_close()


async def test_https_connects_to_the_checked_ip_but_verifies_the_hostname(
        ws: Path, tls_site: tuple[str, ssl.SSLContext, list[str], list[str]]) -> None:
    import httpx

    port, client_ctx, sni, hosts = tls_site
    resolver = Resolver({"secure.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]})
    tool = make_fetch_url(resolve=resolver,
                          transport=lambda: httpx.AsyncHTTPTransport(verify=client_ctx))
    ok = await call(tool, ws, OPEN_NETWORK, url=f"https://secure.test:{port}/")
    assert not ok.is_error and ok.content.endswith("secret handshake ok")
    assert sni == ["secure.test"] and hosts == [f"secure.test:{port}"]
    # Same IP, another name: the certificate is checked against the name, so it fails.
    wrong = await call(tool, ws, OPEN_NETWORK, url=f"https://other.test:{port}/")
    assert wrong.is_error and "certificate" in wrong.content.lower()
    assert hosts == [f"secure.test:{port}"]


# --- shell -------------------------------------------------------------------------------


async def test_shell_runs_in_the_workspace_and_reports_the_exit_code(ws: Path) -> None:
    shell = make_shell()
    out = await call(shell, ws, command="pwd; echo oops >&2")
    assert out.content == f"{ws}\noops\n\n[exit code 0]" and not out.is_error
    failed = await call(shell, ws, command="exit 3")
    assert failed.is_error and failed.content == "[exit code 3]"


async def test_shell_caps_its_output(ws: Path) -> None:
    shell = make_shell(max_output_bytes=1000)
    out = await call(shell, ws, command="head -c 50000 /dev/zero | tr '\\0' 'z'")
    assert out.content.count("z") == 1000 and "49000 more bytes not shown" in out.content


async def test_shell_kills_its_whole_process_group_on_timeout(ws: Path) -> None:
    shell = make_shell(timeout_secs=0.5)
    # The sandbox numbers its processes in a PID namespace of its own: the background job
    # is found here by its command line (a duration no other process uses).
    token = f"{60 + os.getpid() % 1000}.{len(str(ws))}"
    out = await call(shell, ws, command=f"sleep {token} & echo started; wait")
    assert out.is_error and "did not finish within 0.5s" in out.content
    assert "started" in out.content
    for pid in processes_running(["sleep", token]):
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue  # already gone entirely
        try:
            # The pidfd becomes readable when the process has exited: wait for that event.
            readable, _, _ = select.select([fd], [], [], 10)
            assert readable, f"the background process {pid} survived the timeout"
        finally:
            os.close(fd)


def processes_running(argv: list[str]) -> list[int]:
    """The pids of the live processes whose command line is ``argv``."""
    wanted = "\0".join(argv).encode() + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes() == wanted:
                    found.append(int(entry.name))
            except OSError:  # it ended while we looked
                continue
    return found


async def test_tools_may_not_change_tethers_own_config_sessions_or_cache(
        ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The workspace is "home": tether's folders are inside it.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(ws / ".config"))
    monkeypatch.setenv("TETHER_STORE", str(ws / "state" / "sessions.db"))
    monkeypatch.setenv("TETHER_CACHE_DIR", str(ws / "cache" / "tether"))
    for path in (".config/tether/config.toml", "state/sessions.db",
                 "cache/tether/bin/llama-server"):
        out = await call(write_file, ws, path=path, content="pwned")
        assert out.is_error and "tether's own files" in out.content, path
        assert not (ws / path).exists()
    assert not (await call(write_file, ws, path=".config/other/app.toml", content="x")).is_error


# --- failures are error results ------------------------------------------------------------

# A call of each built-in that cannot succeed, as a model would make it.
FAILING_CALLS: dict[str, dict[str, Any]] = {
    "calculator": {"expression": "hello"},
    "read_file": {"path": "missing.txt"},
    "list_dir": {"path": "missing"},
    "grep": {"pattern": "("},
    "write_file": {"path": "src", "content": "x"},  # a folder
    "edit_file": {"path": "notes.txt", "old_text": "absent", "new_text": "x"},
    "fetch_url": {"url": "http://127.0.0.1:9/"},  # a private address
    "shell": {"command": "exit 3"},
}


def test_every_builtin_has_a_failing_call_in_the_table() -> None:
    assert sorted(FAILING_CALLS) == builtin_names()


@pytest.mark.parametrize("name", sorted(FAILING_CALLS))
def test_a_builtins_failure_is_an_error_result_never_a_success(ws: Path, name: str) -> None:
    model = Scripted([calling(name, FAILING_CALLS[name]), "It did not work."])
    agent = Agent(model, select_builtins([name]), workspace=ws, permission_mode="allow")
    result = agent.run_sync("go")
    assert statuses(result) == ["error"], result.tool_calls
    (answer,) = model.requests[1].messages[-1].parts
    assert isinstance(answer, ToolResult) and answer.is_error


@pytest.mark.parametrize(("expression", "says"), [
    ("hello", "only evaluates arithmetic"),
    ("1 / 0", "division by zero"),
    ("sqrt(-1)", "math domain error"),
    ("(-8) ** 0.5", "not a real number"),
    ("1e308 * 10", "not a finite number"),
    ("9 ** 999 * 9 ** 999 * 9 ** 999 * 9 ** 999 * 9 ** 999", "more than 4300 digits"),
    ("1" + " + 1" * 20_000, "nests too deep"),
    ("min()", "min expected"),
])
async def test_the_calculator_says_why_it_failed_as_an_error(ws: Path, expression: str,
                                                             says: str) -> None:
    out = await call(calculator, ws, expression=expression)
    assert out.is_error and says in out.content


async def test_the_calculator_answers_arithmetic(ws: Path) -> None:
    assert (await call(calculator, ws, expression="17 * 23")).content == "391"
    assert (await call(calculator, ws, expression="7 / 2")).content == "3.5"
    assert (await call(calculator, ws, expression="10 / 2")).content == "5"


@pytest.mark.parametrize("name", sorted(FAILING_CALLS))
def test_a_builtin_drops_an_argument_key_it_does_not_take(name: str) -> None:
    (builtin,) = select_builtins([name])
    assert "additionalProperties" not in builtin.spec.schema_json
    arguments = FAILING_CALLS[name]
    assert builtin.validate({**arguments, "stray": 1, "note": "x"}) == \
        builtin.validate(arguments)
