"""A real PostgreSQL server on 127.0.0.1, in a temporary folder, for the store tests.

The system's own PostgreSQL binaries (``initdb``, ``pg_ctl``: on Debian the ``postgresql``
package, in ``/usr/lib/postgresql/<version>/bin``; ``TETHER_TEST_PG_BIN`` names another
folder) make a fresh cluster with trust authentication for loopback, which listens on a
free port and keeps its socket in the temporary folder. ``pg_ctl -w`` returns once the
server accepts connections, so nothing waits by the clock. PostgreSQL refuses to run as
root: as root (CI) the cluster belongs to an unprivileged user (``TETHER_TEST_PG_USER``,
else ``postgres`` where the package made it, else ``nobody``) and the binaries run through
``runuser``.

``python tests/servers/postgres.py`` starts one and prints its URL until stdin closes.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

USER = "tether"  # the cluster's superuser, the one the tests connect as
# A role that must give its password (SCRAM) over TCP, for the tests that a password is
# used and never shown; everyone else is trusted on loopback.
PASSWORD_USER, PASSWORD = "tether_pw", "s3cret-Pa55:w/rd"
HBA = f"""\
local all all trust
host all {PASSWORD_USER} 127.0.0.1/32 scram-sha-256
host all all 127.0.0.1/32 trust
"""
START_ATTEMPTS = 3  # a free port can be taken by another process before the server binds it


class PostgresUnavailable(RuntimeError):
    """The PostgreSQL server binaries are missing or the server would not start."""


def find_binaries() -> Path:
    """The folder holding ``initdb`` and ``pg_ctl``, newest PostgreSQL first."""
    given = os.environ.get("TETHER_TEST_PG_BIN")
    candidates: list[Path] = [Path(given)] if given else []
    found = shutil.which("initdb")
    if found:
        candidates.append(Path(found).resolve().parent)

    def version(path: Path) -> tuple[int, ...]:
        return tuple(int(n) for n in re.findall(r"\d+", path.parent.name)) or (0,)

    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=version, reverse=True)
    for folder in candidates:
        if (folder / "initdb").is_file() and (folder / "pg_ctl").is_file():
            return folder
    raise PostgresUnavailable(
        "the PostgreSQL server binaries (initdb, pg_ctl) were not found on PATH, in "
        "/usr/lib/postgresql/*/bin or in TETHER_TEST_PG_BIN; the store tests run against a "
        "real server: install it (Debian: apt-get install -y postgresql; .ci/run does)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_as() -> list[str]:
    """The command prefix that runs a binary as a user PostgreSQL accepts (not root)."""
    if os.geteuid() != 0:
        return []
    user = os.environ.get("TETHER_TEST_PG_USER")
    if not user:
        for name in ("postgres", "nobody"):
            with contextlib.suppress(KeyError):
                pwd.getpwnam(name)
                user = name
                break
    if not user or not shutil.which("runuser"):
        raise PostgresUnavailable("running as root, PostgreSQL needs an unprivileged user "
                                  "and runuser: set TETHER_TEST_PG_USER to one")
    return ["runuser", "-u", user, "--"]


class PostgresServer:
    """One throwaway cluster. ``start()`` returns once it accepts connections; ``stop()``
    shuts it down and removes its folder. ``database()`` makes a fresh database and gives
    its URL."""

    def __init__(self, *, durable: bool = False) -> None:
        # Tests trade crash safety of the throwaway cluster for speed (fsync off); a
        # benchmark keeps the server's durable defaults.
        self.durable = durable
        self.bin = find_binaries()
        self.prefix = _run_as()
        self.root = Path(tempfile.mkdtemp(prefix="tether-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = 0
        self.started = False
        if self.prefix:
            shutil.chown(self.root, user=self.prefix[2])

    def _run(self, *command: str) -> str:
        done = subprocess.run([*self.prefix, *command], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=120)
        if done.returncode != 0:
            raise PostgresUnavailable(f"{Path(command[0]).name} failed ({done.returncode}):\n"
                                      f"{done.stdout}{done.stderr}{self._log_tail()}")
        return done.stdout

    def _log_tail(self) -> str:
        try:
            return "\nserver log:\n" + "\n".join(self.log.read_text().splitlines()[-20:])
        except OSError:
            return ""

    def start(self) -> None:
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", USER, "-A", "trust",
                  "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
        hba = self.data / "pg_hba.conf"
        hba.write_text(HBA)
        if self.prefix:
            shutil.chown(hba, user=self.prefix[2])
        for attempt in range(START_ATTEMPTS):
            self.port = _free_port()
            options = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} "
                       f"-c max_connections=200")
            if not self.durable:
                options += " -c fsync=off -c full_page_writes=off"
            try:
                self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log),
                          "-w", "-t", "60", "-o", options, "start")
            except PostgresUnavailable:
                if attempt == START_ATTEMPTS - 1:
                    raise
                continue
            self.started = True
            self.sql(f"CREATE ROLE {PASSWORD_USER} LOGIN SUPERUSER PASSWORD '{PASSWORD}'")
            return

    def restart(self) -> None:
        """Stop the server (ending every connection) and start it again on the same port,
        with the same options; returns once it accepts connections."""
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-m",
                  "fast", "-w", "-t", "60", "restart")

    def stop(self) -> None:
        try:
            if self.started:
                self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w",
                          "stop")
                self.started = False
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def url(self, database: str = "postgres", *, password: str | None = None) -> str:
        """The URL of ``database``; with ``password``, as the role that must give one."""
        if password is None:
            return f"postgresql://{USER}@127.0.0.1:{self.port}/{database}"
        from urllib.parse import quote

        return (f"postgresql://{PASSWORD_USER}:{quote(password, safe='')}@127.0.0.1:"
                f"{self.port}/{database}")

    def database(self) -> str:
        """A new empty database; its URL."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        self.sql(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop(self, url: str) -> None:
        """Drop the database of ``url``, ending any connection still open on it."""
        name = url.rsplit("/", 1)[1]
        self.sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def sql(self, statement: str, url: str | None = None) -> list[tuple[object, ...]]:
        import psycopg

        with psycopg.connect(url or self.url(), autocommit=True) as conn:
            cur = conn.execute(statement)
            return cur.fetchall() if cur.description else []


@contextlib.contextmanager
def running(*, durable: bool = False) -> Iterator[PostgresServer]:
    server = PostgresServer(durable=durable)
    try:
        server.start()
        yield server
    finally:
        server.stop()


if __name__ == "__main__":
    import sys

    with running() as srv:
        print(srv.url(), flush=True)
        sys.stdin.read()
