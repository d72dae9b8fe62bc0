"""The store seam on SQLite (`runner.store._connector`): `SqliteDatabase`'s transactions.

`write()` is `SqliteDatabase.write()` (the in-process writer lock, then `BEGIN
IMMEDIATE`), so a read-then-update needs no row lock: `lock` is empty.
`read()` runs on this thread's connection in autocommit mode. Statements use
SQLite's own `:name` parameters unchanged; rows are dicts (a cursor row factory,
so the connection's `sqlite3.Row` for older modules is left alone). Savepoints
are `SAVEPOINT`/`ROLLBACK TO`; a unique constraint failure is `UniqueViolation`,
every other sqlite3 error is translated by `faults.from_sqlite`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from operator import itemgetter
from typing import Any

from runner.store._connector import Dialect, Params, Row, Transaction, UniqueViolation
from runner.store.sqlite._db import SqliteDatabase, translate

DIALECT = Dialect(name="sqlite", lock="", skip_locked="", unlimited=-1, same="IS",
                  index_hints=True, cheap_returning=False, parallel_writes=False)
_NO_PARAMS: Params = {}
_ONE_STATEMENT = nullcontext()


def _dict_row(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> Row:
    return dict(zip(map(itemgetter(0), cursor.description), row, strict=True))


class SqliteTransaction:
    """`Transaction` on one SQLite connection."""

    dialect = DIALECT  # one for every transaction (read per statement: a constant)

    def __init__(self, db: SqliteDatabase, conn: sqlite3.Connection,
                 clock: Callable[[], float]) -> None:
        self._db = db
        self._conn = conn
        self._clock = clock
        self._now: int | None = None
        self._savepoints = 0

    def _error(self, exc: sqlite3.Error) -> Exception:
        if isinstance(exc, sqlite3.IntegrityError) and "UNIQUE constraint failed" in str(exc):
            return UniqueViolation(f"{exc} (store {self._db.path})")
        return translate(exc, self._db.path)

    # Each statement translates its errors in one try (no context manager per call:
    # a run makes ~20 statements, and the seam's overhead was a visible share of them).
    def all(self, sql: str, params: Params = _NO_PARAMS) -> list[Row]:
        cursor = self._conn.cursor()
        cursor.row_factory = _dict_row
        try:
            rows: list[Row] = cursor.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise self._error(exc) from None
        return rows

    def one(self, sql: str, params: Params = _NO_PARAMS) -> Row | None:
        cursor = self._conn.cursor()
        cursor.row_factory = _dict_row
        try:
            row: Row | None = cursor.execute(sql, params).fetchone()
        except sqlite3.Error as exc:
            raise self._error(exc) from None
        return row

    def run(self, sql: str, params: Params = _NO_PARAMS) -> int:
        try:  # the connection's own cursor: no row is read
            return self._conn.execute(sql, params).rowcount
        except sqlite3.Error as exc:
            raise self._error(exc) from None

    def many(self, sql: str, rows: Sequence[Params]) -> None:
        try:
            self._conn.executemany(sql, rows)
        except sqlite3.Error as exc:
            raise self._error(exc) from None

    def now_ms(self) -> int:
        if self._now is None:
            self._now = round(self._clock() * 1000)  # as SqliteStore.now_ms
        return self._now

    def clock_sql(self, name: str = "now") -> tuple[str, dict[str, int]]:
        return f":{name}", {name: int(self.now_ms())}

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        self._savepoints += 1
        name = f"wfrun_sp{self._savepoints}"
        self.run(f"SAVEPOINT {name}")
        try:
            yield
        except BaseException:
            self.run(f"ROLLBACK TO {name}")
            self.run(f"RELEASE {name}")
            raise
        self.run(f"RELEASE {name}")

    def statement(self) -> AbstractContextManager[None]:
        # SQLite's conflict resolution (ABORT) backs out the refused statement alone and
        # keeps the transaction: a savepoint around it is two statements for nothing.
        return _ONE_STATEMENT

    def notify(self, channel: str, item_id: str) -> None:
        """SQLite has no notices: hosts on one file poll (and share no machine anyway)."""


class SqliteConnector:
    """`Connector` on one SQLite store file; `clock` is the store's injected clock
    (`Clock.now`: seconds since the Unix epoch), read in whole milliseconds."""

    dialect = DIALECT

    def __init__(self, db: SqliteDatabase, clock: Callable[[], float]) -> None:
        self._db = db
        self._clock = clock

    @contextmanager
    def write(self, *, durable: bool = True, shared_sync: bool = False) -> Iterator[Transaction]:
        with self._db.write(durable=durable, shared_sync=shared_sync) as conn:
            yield SqliteTransaction(self._db, conn, self._clock)

    @contextmanager
    def read(self) -> Iterator[Transaction]:
        yield SqliteTransaction(self._db, self._db.connection(), self._clock)

    def write_one(self) -> AbstractContextManager[Transaction]:
        return self.write()

    def now_ms(self) -> int:
        return round(self._clock() * 1000)
