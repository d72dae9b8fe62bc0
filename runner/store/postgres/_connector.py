"""The store seam on Postgres (`runner.store._connector`): `PostgresDatabase`'s pool.

`write()` is one transaction on a pooled connection; rows a transaction is about
to change are locked with `dialect.lock`, queue heads taken with
`dialect.skip_locked`. `read()` is a pooled connection in autocommit mode.
Statements arrive in `:name` style and are rewritten once (cached) to psycopg's
`%(name)s`; a literal `%` is doubled and `::type` casts are left alone. The clock
is the database's `now()` unless one was injected. Savepoints are nested
`conn.transaction()` blocks; a unique violation is `UniqueViolation`, every other
error is translated by `db.translate` (connection loss: `StoreUnavailable`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager

import psycopg
from psycopg import errors as pg_errors

from runner.store._connector import Dialect, Params, Row, Transaction, UniqueViolation
from runner.store.postgres._db import Conn, PostgresDatabase
from runner.store.postgres._wakeups import notify

DIALECT = Dialect(name="postgres", lock=" FOR UPDATE",
                  skip_locked=" FOR UPDATE SKIP LOCKED", unlimited=None,
                  same="IS NOT DISTINCT FROM",
                  key_lock="SELECT pg_advisory_xact_lock(hashtext('wfrun-gate:' || :key))")
_NO_PARAMS: Params = {}
#: The database clock in integer milliseconds (the transaction's start).
DB_NOW_MS = "(extract(epoch FROM now()) * 1000)::bigint"
# `:name` not preceded by another `:` (so `x::bigint` stays a cast).
_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


@functools.lru_cache(maxsize=1024)
def to_psycopg(sql: str) -> str:
    """`:name` parameters as psycopg's `%(name)s` (a literal `%` doubled)."""
    return _NAMED.sub(r"%(\1)s", sql.replace("%", "%%"))


class PostgresTransaction:
    """`Transaction` on one pooled connection."""

    def __init__(self, db: PostgresDatabase, conn: Conn) -> None:
        self._db = db
        self._conn = conn
        self._now: int | None = None

    @property
    def dialect(self) -> Dialect:
        return DIALECT

    @property
    def conn(self) -> Conn:
        """The psycopg connection: for this backend's own statements in the same
        transaction (run bundles, store/postgres/_bundles.py)."""
        return self._conn

    def _run(self, sql: str, params: Params) -> psycopg.Cursor[Row]:
        try:
            return self._conn.execute(to_psycopg(sql), params)
        except pg_errors.UniqueViolation as exc:
            raise UniqueViolation(
                f"{str(exc).strip().splitlines()[0]} (database {self._db.where})") from None

    def all(self, sql: str, params: Params = _NO_PARAMS) -> list[Row]:
        cursor = self._run(sql, params)
        return cursor.fetchall() if cursor.description is not None else []

    def one(self, sql: str, params: Params = _NO_PARAMS) -> Row | None:
        cursor = self._run(sql, params)
        return cursor.fetchone() if cursor.description is not None else None

    def run(self, sql: str, params: Params = _NO_PARAMS) -> int:
        return self._run(sql, params).rowcount

    def many(self, sql: str, rows: Sequence[Params]) -> None:
        try:
            with self._conn.cursor() as cursor:
                cursor.executemany(to_psycopg(sql), rows)
        except pg_errors.UniqueViolation as exc:
            raise UniqueViolation(
                f"{str(exc).strip().splitlines()[0]} (database {self._db.where})") from None

    def now_ms(self) -> int:
        if self._now is None:
            self._now = self._db.now_ms(self._conn)
        return self._now

    def clock_sql(self, name: str = "now") -> tuple[str, dict[str, int]]:
        if self._now is None and not self._db.injected_clock:
            return DB_NOW_MS, {}
        return f":{name}", {name: int(self.now_ms())}

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        with self._conn.transaction():
            yield

    def statement(self) -> AbstractContextManager[None]:
        return self.savepoint()

    def notify(self, channel: str, item_id: str) -> None:
        notify(self._conn, channel, item_id)


class PostgresConnector:
    """`Connector` on one Postgres database (and schema)."""

    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db

    @property
    def dialect(self) -> Dialect:
        return DIALECT

    @contextmanager
    def write(self, *, durable: bool = True, shared_sync: bool = False) -> Iterator[Transaction]:
        # `shared_sync` changes nothing here: the server flushes concurrent commits
        # together itself, before any of them is seen.
        with self._db.write() as conn:
            if not durable:
                conn.execute("SET LOCAL synchronous_commit = off")
            yield PostgresTransaction(self._db, conn)

    @contextmanager
    def read(self) -> Iterator[Transaction]:
        with self._db.connection() as conn:
            yield PostgresTransaction(self._db, conn)

    @contextmanager
    def write_one(self) -> Iterator[Transaction]:
        # An autocommit connection: the statement is its own transaction.
        with self._db.connection() as conn:
            yield PostgresTransaction(self._db, conn)

    def now_ms(self) -> int:
        return self._db.now_ms()


