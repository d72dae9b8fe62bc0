"""The store seam on SQLite (`runner.store._connector`): `SqliteDatabase`'s transactions.

`write()` is `SqliteDatabase.transaction()` (the in-process writer lock, the writers'
turn, then `BEGIN IMMEDIATE`) on the store's clock, handed out as it is: no hop
between the queue and the database. `read()` runs on this thread's connection in
autocommit mode. The transaction itself (`SqliteTransaction`) lives with the
connections it runs on, in _db.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from functools import partial

from runner.store._connector import Transaction
from runner.store.sqlite._db import DIALECT, SqliteDatabase, SqliteTransaction


class SqliteConnector:
    """`Connector` on one SQLite store file; `clock` is the store's injected clock
    (`Clock.now`: seconds since the Unix epoch), read in whole milliseconds."""

    dialect = DIALECT

    def __init__(self, db: SqliteDatabase, clock: Callable[[], float]) -> None:
        self._db = db
        self._clock = clock
        self.write = partial(db.transaction, clock)

    @contextmanager
    def read(self) -> Iterator[Transaction]:
        yield SqliteTransaction(self._db, self._db.connection(), self._clock)

    def write_one(self) -> AbstractContextManager[Transaction]:
        return self.write()

    def now_ms(self) -> int:
        return round(self._clock() * 1000)
