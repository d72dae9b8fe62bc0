"""A throwaway PostgreSQL 15 cluster for tests: initdb, start, schemas, stop.

`initdb` refuses to run as root, so the server runs as the `postgres` user
(runuser) with its data folder inside a private temporary folder owned by that
user. It listens on a free port on 127.0.0.1 only and keeps its unix socket in the
temporary folder. The benches' clusters keep the default durability settings (fsync
on): they measure what a commit costs. The tests' cluster (`pg_cluster`) runs without
`fsync` (and so without full-page writes): those guard only against the operating
system losing its page cache (a power cut), which no test makes; a killed or restarted
server loses nothing either way, since every commit is still written to the kernel
before it returns (`synchronous_commit` stays on). Under a loaded disk, the fsyncs of
each commit, of CREATE/DROP DATABASE and of a restart's shutdown checkpoint were
seconds of waiting per test.
`pg_ctl -w` waits for the server to accept connections: nothing here races a
timer against start-up.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

PG_BIN = Path("/usr/lib/postgresql/15/bin")
# The clusters running in this process, for tests/cpuprofile.py (the server is not
# our child: its CPU is read from /proc).
LIVE: set[PgCluster] = set()
_START_ATTEMPTS = 5  # a free port can be taken between picking it and the server binding it


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PgCluster:
    """One cluster; `url(schema)` connects with that schema first on the search path."""

    def __init__(self, *, durable: bool = True) -> None:
        self.durable = durable  # False: no fsync, for tests (the module's docstring)
        self.root = Path(tempfile.mkdtemp(prefix="wfrun-pg-"))
        self.data = self.root / "data"
        self.sockets = self.root / "sockets"
        self.log = self.root / "server.log"
        self.port = 0
        self._user = pwd.getpwnam("postgres")
        self._started = False
        self.postmaster_pid = 0

    def _as_postgres(self, *args: str) -> subprocess.CompletedProcess[str]:
        command = [str(PG_BIN / args[0]), *args[1:]]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        return subprocess.run(command, capture_output=True, text=True, check=False, cwd=self.root)

    def start(self) -> None:
        os.chown(self.root, self._user.pw_uid, self._user.pw_gid)
        self.root.chmod(0o700)
        self.sockets.mkdir(mode=0o700)
        os.chown(self.sockets, self._user.pw_uid, self._user.pw_gid)
        done = self._as_postgres(
            "initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
            "--locale=C.UTF-8",
        )
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stderr.strip()}")
        for _ in range(_START_ATTEMPTS):
            self.port = _free_port()
            options = (
                f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.sockets}"
                " -c max_connections=200"
                # A throwaway cluster lives for minutes: autovacuum only takes CPU from
                # the tests and adds its own transactions to the counts they read.
                " -c autovacuum=off"
            )
            if not self.durable:
                options += " -c fsync=off -c full_page_writes=off"
            done = self._as_postgres(
                "pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "120",
                "-o", options, "start",
            )
            if done.returncode == 0:
                self._started = True
                self._note_postmaster()
                return
        raise RuntimeError(f"pg_ctl start failed: {done.stderr.strip()} {self.read_log()}")

    def _note_postmaster(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.postmaster_pid = int((self.data / "postmaster.pid").read_text().split()[0])
        LIVE.add(self)

    def read_log(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def restart(self) -> None:
        """Stop (fast) and start again, each bounded by pg_ctl's 120 s: up to 240 s, so
        a caller's test timeout must be longer (under load the shutdown checkpoint of a
        session's worth of schemas is slow). A failed restart still tries a start, so
        the tests after it do not all find the shared cluster down."""
        done = self._as_postgres(
            "pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "120",
            "-m", "fast", "restart",
        )
        if done.returncode != 0:
            self._as_postgres("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w",
                              "-t", "120", "start")
            raise RuntimeError(f"pg_ctl restart failed: {done.stderr.strip()} {self.read_log()}")
        self._note_postmaster()

    def stop(self) -> None:
        if self._started:
            self._as_postgres("pg_ctl", "-D", str(self.data), "-w", "-m", "immediate", "stop")
            self._started = False
        LIVE.discard(self)
        shutil.rmtree(self.root, ignore_errors=True)

    @property
    def admin_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def url(self, schema: str | None = None) -> str:
        if schema is None:
            return self.admin_url
        return f"{self.admin_url}?options=-csearch_path%3D{schema}"

    def create_schema(self, schema: str) -> str:
        """A fresh, empty schema; returns the URL that uses it."""
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            conn.execute(f'CREATE SCHEMA "{schema}"')
        return self.url(schema)


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    """One PostgreSQL 15 cluster for the session (registered once, in tests/conftest.py:
    a module importing this fixture would get a cluster of its own), stopped and
    removed at the end, also when tests fail."""
    cluster = PgCluster(durable=False)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
