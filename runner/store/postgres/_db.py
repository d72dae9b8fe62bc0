"""The Postgres connection side: a pool, transactions, the clock, error translation.

Every operation is one transaction on a pooled connection (psycopg 3, autocommit
off only inside `write()`'s explicit transaction). Rows come back as dicts, so the
query modules read columns by name as the SQLite ones do.

Time: `now` (wall-clock seconds) when the caller injects one (tests), otherwise
the database clock (`now()`, the transaction's start), so the hosts sharing one
database agree on leases whatever their own clocks say.

Connection loss (server restart, network) is `StoreUnreachable`: retryable; a
broken connection is dropped from the pool and the next call reconnects. The
URL's password never appears in a message (`mask_url`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
import psycopg_pool
from psycopg import errors as pg_errors
from psycopg.rows import dict_row

from runner.store._errors import (
    StoreDiskFull,
    StoreError,
    StoreNoPermission,
    StoreReadOnly,
    StoreUnreachable,
)
from runner.store._urls import mask_url

# The pool logs each failed reconnection attempt; the store raises StoreUnreachable
# for the caller instead, so those records stay out of the user's terminal.
logging.getLogger("psycopg.pool").addHandler(logging.NullHandler())
logging.getLogger("psycopg.pool").propagate = False

Row = dict[str, Any]
Conn = psycopg.Connection[Row]
DEFAULT_POOL_SIZE = 8
CONNECT_TIMEOUT_SECONDS = 10.0
_DB_NOW_MS = "SELECT (extract(epoch FROM now()) * 1000)::bigint AS now_ms"


def translate(exc: BaseException, where: str) -> StoreError:
    """Map a psycopg error onto the store's exception tree, one line, no password."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, pg_errors.DiskFull):
        return StoreDiskFull(f"the database at {where} is out of disk space: {text}")
    if isinstance(exc, pg_errors.ReadOnlySqlTransaction):
        return StoreReadOnly(f"the database at {where} is read-only (a standby?): {text}")
    if isinstance(exc, pg_errors.InsufficientPrivilege):
        return StoreNoPermission(
            f"the database user may not use the wfrun tables at {where}: {text}")
    if isinstance(exc, (psycopg.OperationalError, psycopg_pool.PoolTimeout,
                        psycopg.InterfaceError)):
        return StoreUnreachable(
            f"cannot reach the database at {where} ({text}); try again, or check the "
            "server and the URL")
    return StoreError(f"database error at {where}: {text}")


class PostgresDatabase:
    """A connection pool on one database (and schema: the URL's search_path)."""

    def __init__(self, url: str, *, now: Callable[[], float] | None = None,
                 pool_size: int = DEFAULT_POOL_SIZE,
                 connect_timeout: float = CONNECT_TIMEOUT_SECONDS) -> None:
        self.url = url
        self.where = mask_url(url)
        self._now = now
        try:
            # One direct attempt first: an unreachable server or a refused login is one
            # line with libpq's reason now, not a pool retrying until its timeout.
            psycopg.connect(url, connect_timeout=max(1, round(connect_timeout))).close()
        except psycopg.Error as exc:
            raise translate(exc, self.where) from None
        self._pool: psycopg_pool.ConnectionPool[Conn] = psycopg_pool.ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            open=False,
            timeout=connect_timeout,
            kwargs={"row_factory": dict_row, "autocommit": True},
            connection_class=psycopg.Connection[Row],
            name="wfrun-store",
        )
        try:
            self._pool.open(wait=True, timeout=connect_timeout)
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            self._pool.close()
            raise translate(exc, self.where) from None
        self._closed = False

    @property
    def injected_clock(self) -> bool:
        return self._now is not None

    def now_ms(self, conn: Conn | None = None) -> int:
        """Milliseconds: the injected clock, or the database's (in `conn`'s transaction)."""
        if self._now is not None:
            return round(self._now() * 1000)  # nearest ms: float seconds carry noise
        if conn is not None:
            row = conn.execute(_DB_NOW_MS).fetchone()
            assert row is not None
            return int(row["now_ms"])
        rows = self.read(_DB_NOW_MS)
        return int(rows[0]["now_ms"])

    @contextmanager
    def write(self) -> Iterator[Conn]:
        """One transaction: committed on success, rolled back on any error."""
        self._check_open()
        try:
            with self._pool.connection() as conn, conn.transaction():
                yield conn
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise translate(exc, self.where) from None

    def read(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[Row]:
        """One read statement in its own snapshot; every row."""
        self._check_open()
        try:
            with self._pool.connection() as conn:
                return conn.execute(sql, params).fetchall()
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise translate(exc, self.where) from None

    @contextmanager
    def connection(self) -> Iterator[Conn]:
        """A pooled connection in autocommit mode (DDL checks, LISTEN)."""
        self._check_open()
        try:
            with self._pool.connection() as conn:
                yield conn
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise translate(exc, self.where) from None

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"the store at {self.where} is closed")

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._pool.close()
