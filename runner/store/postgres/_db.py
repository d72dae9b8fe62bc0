"""The Postgres connection side: connections, transactions, the clock, error translation.

Every operation is one transaction on a connection of its own (psycopg 3, autocommit
off only inside `write()`'s explicit transaction). Rows come back as dicts, so the
query modules read columns by name as the SQLite ones do.

Connections: the first is made when the store opens (an unreachable server or a
refused login is one line with libpq's reason, at once) and kept for the next
operation; only an operation that starts while it is in use (another thread: a
host's runs, its listener) makes the pool (psycopg_pool, imported then) for the
rest. A CLI command thus connects once and never starts the pool's threads: the
probe connection, the pool's own first connection and its import were a third of
a command's wait on Postgres (issue 34 item 12).

Time: `now` (wall-clock seconds) when the caller injects one (tests), otherwise
the database clock (`now()`, the transaction's start), so the hosts sharing one
database agree on leases whatever their own clocks say.

Connection loss (server restart, network) is `StoreUnreachable`: retryable; a
broken connection is dropped and the next call reconnects. The URL's password
never appears in a message (`mask_url`).
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row

from runner.store._errors import (
    StoreDiskFull,
    StoreError,
    StoreNoPermission,
    StoreReadOnly,
    StoreUnreachable,
)
from runner.store._urls import mask_url

if TYPE_CHECKING:
    import psycopg_pool

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
    pool = sys.modules.get("psycopg_pool")  # imported only once a pool was made
    if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)) \
            or (pool is not None and isinstance(exc, pool.PoolTimeout)):
        return StoreUnreachable(
            f"cannot reach the database at {where} ({text}); try again, or check the "
            "server and the URL")
    return StoreError(f"database error at {where}: {text}")


class PostgresDatabase:
    """Connections to one database (and schema: the URL's search_path): one kept, a
    pool beside it once two operations overlap (`pool_size` in all)."""

    def __init__(self, url: str, *, now: Callable[[], float] | None = None,
                 pool_size: int = DEFAULT_POOL_SIZE,
                 connect_timeout: float = CONNECT_TIMEOUT_SECONDS) -> None:
        self.url = url
        self.where = mask_url(url)
        self._now = now
        self._pool_size = pool_size
        self._timeout = connect_timeout
        self._lock = threading.Lock()
        self._pool: psycopg_pool.ConnectionPool[Conn] | None = None
        self._closed = False
        self._kept_busy = False
        self._kept: Conn | None = self._connect()

    def _connect(self) -> Conn:
        try:
            conn: Conn = psycopg.connect(self.url, autocommit=True, row_factory=dict_row,
                                         connect_timeout=max(1, round(self._timeout)))
        except psycopg.Error as exc:
            raise translate(exc, self.where) from None
        return conn

    @contextmanager
    def _checkout(self) -> Iterator[Conn]:
        """A connection for one operation: the kept one when it is free, else the pool's."""
        self._check_open()
        with self._lock:
            kept = not self._kept_busy
            self._kept_busy = True
        if not kept:
            with self._pooled() as conn:
                yield conn
            return
        try:
            if self._kept is None or self._kept.closed:
                self._kept = None
                self._kept = self._connect()
            conn = self._kept
            yield conn
        finally:
            self._release_kept()

    def _release_kept(self) -> None:
        """Keep the connection for the next operation if it is sound and idle (as the
        pool does); a broken one, or one left in a transaction, is closed."""
        conn = self._kept
        if conn is not None and (self._closed or conn.broken or conn.closed
                                 or conn.info.transaction_status != TransactionStatus.IDLE):
            self._kept = None
            conn.close()
        with self._lock:
            self._kept_busy = False

    @contextmanager
    def _pooled(self) -> Iterator[Conn]:
        import psycopg_pool

        with self._lock:
            pool = self._pool
        if pool is None:
            pool = self._open_pool()
        try:
            with pool.connection() as conn:
                yield conn
        except psycopg_pool.PoolTimeout as exc:
            raise translate(exc, self.where) from None

    def _open_pool(self) -> psycopg_pool.ConnectionPool[Conn]:
        import psycopg_pool

        pool: psycopg_pool.ConnectionPool[Conn] = psycopg_pool.ConnectionPool(
            self.url,
            min_size=1,
            max_size=max(1, self._pool_size - 1),  # the kept connection is the other
            open=False,
            timeout=self._timeout,
            kwargs={"row_factory": dict_row, "autocommit": True},
            connection_class=psycopg.Connection[Row],
            name="wfrun-store",
        )
        try:
            pool.open(wait=True, timeout=self._timeout)
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            pool.close()
            raise translate(exc, self.where) from None
        with self._lock:
            if self._pool is None and not self._closed:
                self._pool = pool
                return pool
            other = self._pool
        pool.close()  # another thread made one first, or the store closed meanwhile
        if other is None:
            raise StoreError(f"the store at {self.where} is closed")
        return other

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
        try:
            with self._checkout() as conn, conn.transaction():
                yield conn
        except psycopg.Error as exc:
            raise translate(exc, self.where) from None

    def read(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[Row]:
        """One read statement in its own snapshot; every row."""
        try:
            with self._checkout() as conn:
                return conn.execute(sql, params).fetchall()
        except psycopg.Error as exc:
            raise translate(exc, self.where) from None

    @contextmanager
    def connection(self) -> Iterator[Conn]:
        """A connection in autocommit mode (DDL checks)."""
        try:
            with self._checkout() as conn:
                yield conn
        except psycopg.Error as exc:
            raise translate(exc, self.where) from None

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"the store at {self.where} is closed")

    def close(self) -> None:
        """Close the connections; one in use closes when its operation ends."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            pool, self._pool = self._pool, None
            kept = None if self._kept_busy else self._kept
            if kept is not None:
                self._kept = None
        if kept is not None:
            kept.close()
        if pool is not None:
            pool.close()
