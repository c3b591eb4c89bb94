"""What only the PostgreSQL store does: its schema and migrations in a shared database, its
pool, its URL (and the password in it, never shown), and how tether picks it. Against a
real server on loopback (tests/servers/postgres.py); what every store does is
tests/test_store_conformance.py."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.servers.postgres import PASSWORD, PASSWORD_USER, PostgresServer
from tether import Agent, Capabilities, Decision, tool
from tether.approval import ApprovalRequest
from tether.cli.sessions import configured_store
from tether.config import load_config
from tether.errors import ConfigError
from tether.providers.scripted import Scripted, call
from tether.store import Session, SQLiteStore, StoreError, default_store_url, open_store
from tether.store.postgres import SCHEMA_VERSION, PostgresStore, mask_url, migrate
from tether.trust import Taint


@pytest.fixture
def opened() -> Iterator[list[PostgresStore]]:
    """Stores a test opens, closed at its end."""
    stores: list[PostgresStore] = []
    yield stores
    for store in stores:
        store.close()


def _open(opened: list[PostgresStore], url: str, **options: float) -> PostgresStore:
    store = PostgresStore(url, **options)  # type: ignore[arg-type]
    opened.append(store)
    return store


@tool(needs_approval=True, capabilities=Capabilities(destructive=True))
def delete_note(name: str) -> str:
    """Delete a note."""
    return f"deleted {name}"


class _Deferring:
    async def approve(self, request: ApprovalRequest) -> Decision:
        return Decision.defer()


# --- the schema -------------------------------------------------------------------------------


def test_a_version_1_database_is_migrated_and_its_sessions_continue(
        postgres_url: str, opened: list[PostgresStore]) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        assert migrate(conn, target=1) == 0
        conn.execute("INSERT INTO tether.sessions (id, created, updated, title) VALUES "
                     "('old', 1.0, 1.0, 'from v1')")
        message = json.dumps({"role": "user", "parts": [{"kind": "text", "text": "hi"}]})
        conn.execute("INSERT INTO tether.messages VALUES ('old', 0, 'user', %s, false, false, "
                     "1.0)", (message,))
        conn.execute("INSERT INTO tether.taint (session_id, private, untrusted, cause, created) "
                     "VALUES ('old', false, true, 'fetch', 1.0)")

    store = _open(opened, postgres_url)
    assert store.schema_version == SCHEMA_VERSION == 3
    session = Session.load("old", store)
    assert [m.text for m in session.messages] == ["hi"]
    assert session.taint == Taint(private=False, untrusted=True)
    # The messages stored before v3 are searched like new ones.
    assert [i.id for i in store.list(text="HI")] == ["old"] and store.list(text="ho") == []
    # What v2 added works on the migrated database: a paused run keeps its pending calls.
    Agent(Scripted([call("delete_note", name="x", id="d1")]), tools=[delete_note],
          approver=_Deferring()).run_sync("delete x", session=session)
    pending = Session.load("old", store).pending
    assert pending is not None and [c.call_id for c in pending.calls] == ["d1"]


def test_a_database_written_by_a_newer_tether_is_refused_naming_the_versions(
        postgres_url: str, opened: list[PostgresStore]) -> None:
    _open(opened, postgres_url).close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("UPDATE tether.schema_version SET version = 99")
    with pytest.raises(StoreError, match=r"newer tether \(schema version 99; this one knows "
                                         r"up to 3\)"):
        PostgresStore(postgres_url)


def test_processes_opening_an_empty_database_at_once_create_the_schema_once(
        postgres_url: str, opened: list[PostgresStore]) -> None:
    count = 5
    start = threading.Barrier(count)
    errors: list[BaseException] = []
    lock = threading.Lock()

    def open_one() -> None:
        start.wait(timeout=60)
        try:
            store = PostgresStore(postgres_url)
        except BaseException as e:  # reported in the test's thread
            errors.append(e)
            return
        with lock:
            opened.append(store)

    threads = [threading.Thread(target=open_one) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert len(opened) == count and {s.schema_version for s in opened} == {3}
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT version FROM tether.schema_version").fetchall() == [(3,)]


def test_the_tables_live_in_their_own_schema_beside_the_databases_own(
        postgres_url: str, opened: list[PostgresStore]) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn:  # the application's own
        conn.execute("CREATE TABLE public.sessions (id INTEGER PRIMARY KEY, who TEXT)")
        conn.execute("INSERT INTO public.sessions VALUES (1, 'a web login')")
    store = _open(opened, postgres_url)
    Session.create(store, id="s1", title="ours")
    assert [i.id for i in store.list()] == ["s1"]
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT * FROM public.sessions").fetchall() == [(1, "a web login")]


def test_a_role_that_may_not_create_the_schema_is_told_so_and_one_made_for_it_works(
        postgres_server: PostgresServer, postgres_url: str,
        opened: list[PostgresStore]) -> None:
    database = postgres_url.rsplit("/", 1)[1]
    role = f"app_{database}"
    postgres_server.sql(f"CREATE ROLE {role} LOGIN")
    limited = postgres_server.url(database).replace("tether@", f"{role}@")
    try:
        with pytest.raises(StoreError, match="permission denied") as refused:
            PostgresStore(limited)
        assert f"{role}@127.0.0.1" in str(refused.value)
        # The database's owner makes the schema for the role; tether creates its tables.
        postgres_server.sql(f"CREATE SCHEMA tether AUTHORIZATION {role}", postgres_url)
        store = _open(opened, limited)
        Session.create(store, id="x")
        assert store.schema_version == 3 and [i.id for i in store.list()] == ["x"]
    finally:
        for store in opened:
            store.close()
        opened.clear()
        postgres_server.drop(postgres_url)
        postgres_server.sql(f"DROP ROLE {role}")


# --- the pool -------------------------------------------------------------------------------


def test_connections_the_server_dropped_are_replaced_without_failing_a_write(
        postgres_url: str, opened: list[PostgresStore]) -> None:
    store = _open(opened, postgres_url, max_size=2)
    session = Session.create(store)
    database = postgres_url.rsplit("/", 1)[1]
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        # With a timeout, pg_terminate_backend returns once the backend has exited: its
        # connection is closed by then.
        ended = admin.execute(
            "SELECT pg_terminate_backend(pid, 60000) FROM pg_stat_activity WHERE datname = %s "
            "AND application_name = 'tether' AND pid <> pg_backend_pid()",
            (database,)).fetchall()
    assert ended and all(row[0] for row in ended)
    store.record_taint(session.id, Taint(private=True), "after the server dropped us")
    assert store.load(session.id).taint.private


def test_a_server_restart_between_two_writes_costs_no_write(
        postgres_server: PostgresServer, postgres_url: str,
        opened: list[PostgresStore]) -> None:
    store = _open(opened, postgres_url, max_size=2)
    session = Session.create(store)
    store.append_event(session.id, "r", {"kind": "before"})
    postgres_server.restart()
    store.append_event(session.id, "r", {"kind": "after"})
    assert [e["kind"] for e in store.events(session.id)] == ["before", "after"]


def test_a_pool_smaller_than_the_writers_makes_them_wait_not_fail(
        postgres_url: str, opened: list[PostgresStore]) -> None:
    store = _open(opened, postgres_url, max_size=1)
    start = threading.Barrier(4)
    errors: list[BaseException] = []

    def write(n: int) -> None:
        start.wait(timeout=60)
        try:
            for k in range(10):
                Session.create(store, id=f"w{n}-{k}")
        except BaseException as e:  # reported in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors and len(store.list(limit=100)) == 40


# --- the URL and its password -----------------------------------------------------------------


@pytest.mark.parametrize(("url", "shown"), [
    ("postgresql://app:s3cret@db.internal:5432/tether",
     "postgresql://app:***@db.internal:5432/tether"),
    ("postgres://app@db/tether", "postgres://app@db/tether"),
    ("postgresql://app:p%40ss%3Aw@[::1]:5432/t?sslmode=require",
     "postgresql://app:***@[::1]:5432/t?sslmode=require"),
    ("postgresql://db/tether?user=app&password=hunter2&sslmode=verify-full",
     "postgresql://db/tether?user=app&password=***&sslmode=verify-full"),
    ("postgresql://app:pw@h1:5432,h2:5432/t?sslpassword=x", "postgresql://app:***@h1:5432,h2:5432/t"
                                                            "?sslpassword=***"),
    ("postgresql://a:b@c@host/db", "postgresql://a:***@host/db"),
    ("postgresql://app:pw@host", "postgresql://app:***@host"),
])
def test_a_url_is_shown_without_its_password(url: str, shown: str) -> None:
    assert mask_url(url) == shown


def test_a_password_is_used_and_never_shown(
        postgres_server: PostgresServer, postgres_url: str,
        opened: list[PostgresStore]) -> None:
    database = postgres_url.rsplit("/", 1)[1]
    good = postgres_server.url(database, password=PASSWORD)
    store = _open(opened, good)
    Session.create(store, id="s")
    assert PASSWORD not in store.where and PASSWORD not in repr(store)
    assert store.where == f"postgresql://{PASSWORD_USER}:***@127.0.0.1:{postgres_server.port}/" \
        f"{database}"

    wrong = postgres_server.url(database, password="not-" + PASSWORD)
    with pytest.raises(StoreError, match="password authentication failed") as failed:
        PostgresStore(wrong)
    assert "not-" not in str(failed.value) and PASSWORD_USER + ":***@" in str(failed.value)


@pytest.mark.parametrize("url", [
    "postgresql://app:%zzS3cretPw@127.0.0.1:5432/db",  # libpq quotes the bad escape
    "postgresql://app:S3cretPw@127.0.0.1:notaport/db",
    "postgresql://app:S3cretPw@127.0.0.1:5432/db?bogus=S3cretPw",
    "postgresql://127.0.0.1/db?password=S3cretPw&bogus=1",
])
def test_a_malformed_url_is_a_store_error_that_never_echoes_the_password(url: str) -> None:
    with pytest.raises(StoreError) as failed:
        PostgresStore(url, connect_timeout=2)
    assert "S3cretPw" not in str(failed.value)
    assert "***" in str(failed.value)


def test_an_unreachable_server_is_a_store_error_naming_where(
        postgres_server: PostgresServer) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"postgresql://app:S3cretPw@127.0.0.1:{port}/tether"
    with pytest.raises(StoreError, match=rf"cannot open the session store "
                                         rf"postgresql://app:\*\*\*@127\.0\.0\.1:{port}/tether"):
        PostgresStore(url, connect_timeout=2)


def test_a_url_that_is_not_postgres_is_refused() -> None:
    with pytest.raises(StoreError, match="not a PostgreSQL URL"):
        PostgresStore("mysql://app:pw@host/db")


# --- choosing the store -----------------------------------------------------------------------


def test_the_store_url_comes_from_env_then_config_and_the_file_stays_the_default(
        tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TETHER_STORE", "TETHER_STORE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    plain = open_store()
    assert isinstance(plain, SQLiteStore)
    assert plain.path == tmp_path / "data" / "tether" / "sessions.db"
    assert default_store_url() is None

    (tmp_path / "tether.toml").write_text(f'[store]\nurl = "{postgres_url}"\n')
    cfg = load_config(tmp_path, env={})
    assert default_store_url(cfg.store.url) == postgres_url
    from_config = configured_store(cfg)  # what `tether` opens in this workspace
    assert isinstance(from_config, PostgresStore) and from_config.where == postgres_url
    assert configured_store(cfg) is from_config  # opened once per process
    assert open_store(url=postgres_url) is from_config
    from_config.close()
    assert configured_store(cfg) is not from_config  # a closed one is opened anew
    configured_store(cfg).close()
    with pytest.raises(ConfigError, match="not both"):
        open_store(tmp_path / "s.db", url=postgres_url)

    monkeypatch.setenv("TETHER_STORE", str(tmp_path / "env.db"))  # the environment wins
    assert default_store_url(cfg.store.url) is None
    assert isinstance(configured_store(cfg), SQLiteStore)
    monkeypatch.setenv("TETHER_STORE_URL", postgres_url)
    with pytest.raises(ConfigError, match=r"TETHER_STORE .* and TETHER_STORE_URL .* are both"):
        configured_store(cfg)
    monkeypatch.delenv("TETHER_STORE")
    (tmp_path / "tether.toml").write_text('[store]\npath = "s.db"\n')
    assert default_store_url(load_config(tmp_path, env={}).store.url) == postgres_url
    session = Session.create(title="from the environment")  # the default store: Postgres
    again = Session.load(session.id)
    assert again.info.title == "from the environment"
    assert isinstance(again.store, PostgresStore)
    again.store.close()


def test_store_path_and_url_together_are_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "tether.toml").write_text(
        '[store]\npath = "s.db"\nurl = "postgresql://app:S3cretPw@db/t"\n')
    with pytest.raises(ConfigError, match=r"store: .*path .* or url .*not both"):
        load_config(tmp_path, env={})
    (tmp_path / "tether.toml").write_text('[store]\nurl = "mysql://app:S3cretPw@db/t"\n')
    with pytest.raises(ConfigError, match="must be a PostgreSQL URL") as bad:
        load_config(tmp_path, env={})
    assert "S3cretPw" not in str(bad.value)


def test_the_config_never_shows_the_store_password(tmp_path: Path) -> None:
    (tmp_path / "tether.toml").write_text('[store]\nurl = "postgresql://app:S3cretPw@db/t"\n')
    cfg = load_config(tmp_path, env={})
    assert cfg.store.url == "postgresql://app:S3cretPw@db/t"  # what connects
    assert cfg.model_dump(mode="json")["store"]["url"] == "postgresql://app:***@db/t"
    assert "S3cretPw" not in repr(cfg) and "S3cretPw" not in str(cfg.store)


# --- the optional dependency --------------------------------------------------------------------


def test_import_tether_and_a_config_naming_postgres_do_not_load_psycopg(tmp_path: Path) -> None:
    (tmp_path / "tether.toml").write_text('[store]\nurl = "postgresql://app@db/t"\n')
    code = ("import sys, tether, tether.store, tether.store.postgres\n"
            "from tether.config import load_config\n"
            f"load_config({str(tmp_path)!r}, env={{}})\n"
            "print(sorted(m for m in sys.modules if m.startswith('psycopg')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"


def test_without_psycopg_the_store_says_which_extra_to_install() -> None:
    code = ("import sys; sys.modules['psycopg'] = None\n"
            "from tether.store.postgres import PostgresStore\n"
            "from tether.store import StoreError\n"
            "try:\n    PostgresStore('postgresql://app@127.0.0.1:9/t')\n"
            "except StoreError as e:\n    print(e)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert "pip install 'tether[postgres]'" in done.stdout
