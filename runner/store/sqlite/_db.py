"""The SQLite store's connections and transactions (the write transaction and the
seam's `SqliteTransaction` on it: what `SqliteConnector` hands out), and the batched
scrub of its WAL (the open procedure: _open.py; the file and a new connection's
pragmas: _files.py).

One connection per thread at a time (and per process: a connection never crosses
fork()); a finished thread's connection is reused by the next thread.
Every writing transaction is `BEGIN IMMEDIATE`; sqlite3 runs in autocommit mode
(`isolation_level=None`) so Python never opens a deferred transaction itself.

The input scrub (`BatchedScrub`, handed out by `SqliteStore.input_scrub`): no stale
WAL frame keeps a copy of cleared private input. A launch's private input is cleared
from its row when it goes `running` (or fails, or is cancelled); `secure_delete`
zeroes it in the database file, but the WAL still holds the frames written before.
A TRUNCATE checkpoint (`SqliteDatabase.checkpoint`) folds the WAL into the file and
empties it. One checkpoint per run made every later commit grow the WAL again (issue
15), so an activation *owes* its scrub and the owed scrubs are paid together: when
the runner finds the queue empty, when a run claimed by id ends, or once SCRUB_BATCH
activations or SCRUB_SECONDS have passed since the first one owed (checked at each
activation, claim and run end, and by the lease keeper's tick while a run executes).
docs/launch.md ("Secrets") has the bound. SQLite discipline, so it lives here (huey
keeps its own in `storage.py`); Postgres has no WAL file to scrub and its store hands
out `NoScrub`.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from runner.store import _faults as store_faults
from runner.store._connector import Dialect, Params, Row, UniqueViolation
from runner.store._errors import (
    StoreCorrupt,
    StoreError,
)
from runner.store.sqlite import _faults as sqlite_faults
from runner.store.sqlite._files import (
    DEFAULT_BUSY_TIMEOUT_MS,
    connect,
    open_in_this_process,
    track_open,
)
from runner.store.sqlite._writelock import WriteLock

if TYPE_CHECKING:
    import logging

def translate(exc: sqlite3.Error, path: Path) -> StoreError:
    """Map a sqlite3 error onto the store's exception tree (see `faults`)."""
    return sqlite_faults.from_sqlite(exc, path)


#: The SQL fragments SQLite needs: writers are serialized (`BEGIN IMMEDIATE`), so a
#: read-then-update needs no row lock.
DIALECT = Dialect(name="sqlite", lock="", skip_locked="", unlimited=-1, same="IS",
                  index_hints=True, cheap_returning=False, parallel_writes=False,
                  notices=False)
_NO_PARAMS: Params = {}


def _no_clock() -> float:
    raise AssertionError("a raw write (`SqliteDatabase.write`) reads no clock")


@dataclass(eq=False)  # one per transaction: compared (and hashed) by identity
class SqliteTransaction:
    """The seam's `Transaction` on one SQLite connection (`runner.store._connector`).

    Statements use SQLite's own `:name` parameters unchanged; rows are dicts, built
    here from each cursor's tuples (the connection's `sqlite3.Row` for older modules is
    left alone). Savepoints are `SAVEPOINT`/`ROLLBACK TO`; a unique constraint failure
    is `UniqueViolation`, every other sqlite3 error is translated by
    `faults.from_sqlite`."""

    db: SqliteDatabase
    conn: sqlite3.Connection
    clock: Callable[[], float]  # the store's: seconds since the Unix epoch
    now: int | None = None  # `now_ms`, once read
    savepoints: int = 0

    dialect: ClassVar[Dialect] = DIALECT
    # SQLite's conflict resolution (ABORT) backs out a refused statement alone and keeps
    # the transaction: a savepoint around it would be two statements for nothing.
    statement: ClassVar[Callable[[], AbstractContextManager[None]]] = staticmethod(nullcontext)

    def _error(self, exc: sqlite3.Error) -> Exception:
        if isinstance(exc, sqlite3.IntegrityError) and "UNIQUE constraint failed" in str(exc):
            return UniqueViolation(f"{exc} (store {self.db.path})")
        return translate(exc, self.db.path)

    # Each statement translates its errors in one try (no context manager per call:
    # a run makes ~20 statements, and the seam's overhead was a visible share of them).
    def all(self, sql: str, params: Params = _NO_PARAMS) -> list[Row]:
        cursor = self.conn.cursor()
        cursor.row_factory = None
        try:
            rows = cursor.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise self._error(exc) from None
        names = [column[0] for column in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in rows]

    def one(self, sql: str, params: Params = _NO_PARAMS) -> Row | None:
        cursor = self.conn.cursor()
        cursor.row_factory = None
        try:
            row = cursor.execute(sql, params).fetchone()
        except sqlite3.Error as exc:
            raise self._error(exc) from None
        if row is None:
            return None
        return dict(zip(map(itemgetter(0), cursor.description), row, strict=True))

    def run(self, sql: str, params: Params = _NO_PARAMS) -> int:
        try:  # the connection's own cursor: no row is read
            return self.conn.execute(sql, params).rowcount
        except sqlite3.Error as exc:
            raise self._error(exc) from None

    def many(self, sql: str, rows: Sequence[Params]) -> None:
        try:
            self.conn.executemany(sql, rows)
        except sqlite3.Error as exc:
            raise self._error(exc) from None

    def now_ms(self) -> int:
        if self.now is None:
            self.now = round(self.clock() * 1000)  # as SqliteStore.now_ms
        return self.now

    def clock_sql(self, name: str = "now") -> tuple[str, dict[str, int]]:
        return f":{name}", {name: int(self.now_ms())}

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        self.savepoints += 1
        name = f"wfrun_sp{self.savepoints}"
        self.run(f"SAVEPOINT {name}")
        try:
            yield
        except BaseException:
            self.run(f"ROLLBACK TO {name}")
            self.run(f"RELEASE {name}")
            raise
        self.run(f"RELEASE {name}")

    def notify(self, channel: str, item_id: str) -> None:
        """SQLite has no notices: hosts on one file poll (and share no machine anyway)."""


_WRITE_LOCKS: dict[str, tuple[threading.Lock, WriteLock]] = {}
_WRITE_LOCKS_GUARD = threading.Lock()


def _write_lock_for(path: Path) -> tuple[threading.Lock, WriteLock]:
    """One in-process writer lock per store file, shared by every handle on it, and
    the process's place in the file's writers' queue (`writelock`), used only under it."""
    key = os.path.realpath(path)
    with _WRITE_LOCKS_GUARD:
        locks = _WRITE_LOCKS.get(key)
        if locks is None:
            locks = _WRITE_LOCKS[key] = (threading.Lock(), WriteLock(Path(key)))
        return locks


class _Slot:
    """A thread's hold on a connection. When the thread ends, Python drops its
    thread-local data and this hands the connection back to the store's pool, so
    the next thread (the host starts one per run) skips the open and its PRAGMAs."""

    __slots__ = ("conn", "db", "pid")

    def __init__(self, pid: int, conn: sqlite3.Connection, db: SqliteDatabase) -> None:
        self.pid, self.conn = pid, conn
        self.db: weakref.ref[SqliteDatabase] | None = weakref.ref(db)

    def __del__(self) -> None:
        # Runs at thread exit (or when the slot is replaced): only a list append, which
        # needs no lock, so it can never deadlock with a lock held where the GC runs.
        # A connection of a closed store, or one left inside a transaction, is not
        # reused: dropped here, sqlite3 closes it.
        db = self.db() if self.db is not None else None
        try:
            if db is not None and not db._closed and not self.conn.in_transaction:
                db._pool.append((self.pid, self.conn))
        except Exception:  # a closed connection: nothing to hand back
            pass


class SqliteDatabase:
    """Connections (one per thread at a time, never across fork(), pooled when their
    thread ends) and transactions on one store file."""

    def __init__(self, path: Path, *, busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
                 read_only: bool = False) -> None:
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self.read_only = read_only
        self._local = threading.local()
        self._lock = threading.Lock()
        self._write_lock, self._turns = _write_lock_for(path)
        track_open(path, +1)
        # id(conn) -> (pid, owning thread, conn): close() closes what no live thread uses.
        self._connections: dict[int, tuple[int, int, sqlite3.Connection]] = {}
        self._pool: list[tuple[int, sqlite3.Connection]] = []
        self._relaxed: set[int] = set()  # id(conn) of connections at synchronous=NORMAL
        self._wal = f"{path}-wal"  # synced after a shared-sync commit (`transaction`)
        self._closed = False
        # (pid, conn): the one connection every write of this process takes turns on
        # (`_writer_connection`); parents' ones are kept, never closed, after a fork.
        self._writer: tuple[int, sqlite3.Connection] | None = None
        self._forked: list[sqlite3.Connection] = []

    def connection(self) -> sqlite3.Connection:
        """This thread's connection: its own, a pooled one, or a new one opened with the
        store's pragmas."""
        pid = os.getpid()
        cached: _Slot | None = getattr(self._local, "slot", None)
        if self._closed:
            if cached is not None and cached.pid == pid:
                # Closed by another thread: this thread closes its own connection, here,
                # where nothing else can be using it.
                self._local.slot = None
                cached.db = None  # not back into the pool
                cached.conn.close()
            raise StoreError(f"the store at {self.path} is closed")
        if cached is not None and cached.pid == pid:
            return cached.conn
        conn = self._pooled(pid)
        if conn is None:
            conn = connect(self.path, self.busy_timeout_ms, self.read_only)
            with self._lock:
                self._connections[id(conn)] = (pid, threading.get_ident(), conn)
        self._local.slot = _Slot(pid, conn, self)
        return conn

    def _pooled(self, pid: int) -> sqlite3.Connection | None:
        """A connection a finished thread of this process handed back, now this thread's
        (recorded as such under the lock, so close() leaves it to this thread)."""
        with self._lock:
            if self._closed:
                raise StoreError(f"the store at {self.path} is closed")
            while self._pool:
                owner, conn = self._pool.pop()
                if owner == pid and id(conn) in self._connections:
                    self._connections[id(conn)] = (pid, threading.get_ident(), conn)
                    return conn
        return None

    @contextmanager
    def transaction(self, clock: Callable[[], float], *, durable: bool = True,
                    shared_sync: bool = False) -> Iterator[SqliteTransaction]:
        """A `BEGIN IMMEDIATE` transaction: committed on success, rolled back on error
        (the seam's `Connector.write`; `clock` is the store's, read by `now_ms`).

        `durable=False`: a commit that need not survive a power loss (the callers say
        why), made with `synchronous = NORMAL`: no fsync of its own, still atomic and
        visible to every other connection at once, and made durable by the next FULL
        commit's fsync of the WAL, which covers every frame before it.

        Threads of this process take turns on a Python lock first, then wfrun's
        processes in the file's first-come, first-served writers' queue (`writelock`):
        SQLite's own busy handler waits by sleeping (1, 2, 5, 10 ms ...), which wasted
        most of the time when several writers met. A foreign writer is still waited
        for by SQLite's busy timeout, with the same one-line "busy" error.

        `shared_sync=True` (durable): group commit. The transaction commits with
        `synchronous = NORMAL` (no sync while it holds SQLite's write lock and the
        writers' turn), and then, with both let go, this thread syncs the WAL file
        (`fdatasync`), which covers every frame written before it: the commit is
        durable before the block returns, as with FULL, and the next writer commits
        meanwhile, so writers that commit close together share the disk's flushes.
        Other connections may see the commit a moment before it is durable; the
        callers (a run's ending) record what their bundle holds durably already.
        """
        shared = durable and shared_sync and not self.read_only
        with self._write_lock:
            # A read-only handle creates nothing, not even the sidecar; SQLite refuses
            # its writes.
            turn = None if self.read_only else self._turns.acquire(self.busy_timeout_ms)
            try:
                try:
                    conn = self._writer_connection()
                    self._sync_for(conn, durable and not shared)
                    conn.execute("BEGIN IMMEDIATE")
                except sqlite3.Error as exc:
                    raise translate(exc, self.path) from None
                try:
                    yield SqliteTransaction(self, conn, clock)
                    conn.execute("COMMIT")
                except sqlite3.Error as exc:
                    self._rollback(conn)
                    raise translate(exc, self.path) from None
                except BaseException:
                    self._rollback(conn)
                    raise
            finally:
                if turn is not None:
                    self._turns.release(turn)
                if self._closed:  # closed during this write: close() left it to us
                    self._close_writer()
        if shared:  # reached only once the transaction committed
            self._sync_wal()

    @contextmanager
    def write(self, *, durable: bool = True) -> Iterator[sqlite3.Connection]:
        """`transaction`'s connection itself, for the store's own setup (_open.py) and
        tests: statements as sqlite3 runs them, and no clock."""
        with self.transaction(_no_clock, durable=durable) as tx:
            yield tx.conn

    def _sync_wal(self) -> None:
        """Make every commit so far durable: sync the WAL file (SQLite writes its frames
        with pwrite, so they are all in it). A WAL that is gone was checkpointed into
        the database file and removed, which SQLite syncs before it lets the WAL go."""
        try:
            fd = os.open(self._wal, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise store_faults.from_os(exc, self.path, "sync") from None
        try:
            os.fdatasync(fd)
        except OSError as exc:
            raise store_faults.from_os(exc, self.path, "sync") from None
        finally:
            os.close(fd)

    def _writer_connection(self) -> sqlite3.Connection:
        """The process's write connection (called under `_write_lock`, so one thread
        uses it at a time). One for all writers, not each thread's own: a connection's
        page cache is thrown away whenever another connection has committed since its
        last transaction, so with a host's 16 item slots writing in turn every write
        read its pages back (~22 `pread`s per fan-out item, ~4 now); this one's stays warm."""
        if self._closed:
            raise StoreError(f"the store at {self.path} is closed")
        pid = os.getpid()
        if self._writer is not None:
            if self._writer[0] == pid:
                return self._writer[1]
            self._forked.append(self._writer[1])  # never used nor closed across fork()
            self._writer = None
        conn = connect(self.path, self.busy_timeout_ms, self.read_only)
        self._writer = (pid, conn)
        return conn

    def trace(self, callback: Callable[[str], object] | None) -> None:
        """Every statement this thread reads with and every write sends, to `callback`
        (None: stop); for tests and benches that count statements."""
        self.connection().set_trace_callback(callback)
        with self._write_lock:
            self._writer_connection().set_trace_callback(callback)

    def _close_writer(self) -> None:
        """Close the write connection; only with `_write_lock` held (no write in it)."""
        writer, self._writer = self._writer, None
        if writer is not None and writer[0] == os.getpid():
            self._relaxed.discard(id(writer[1]))
            writer[1].close()

    def _sync_for(self, conn: sqlite3.Connection, durable: bool) -> None:
        """Set the connection's synchronous level for the next write, only when it
        changes: a run alternates relaxed and durable writes, and a PRAGMA each way
        around every relaxed one was two statements per commit. Only `transaction()`
        commits on these connections, and each asks for its level first, so a
        connection left at NORMAL never commits a durable write. A stale id (a
        dropped connection's, reused by a new one at FULL) can only make a relaxed
        write durable, never the other way round."""
        relaxed = id(conn) in self._relaxed
        if relaxed != durable:
            return
        conn.execute(f"PRAGMA synchronous = {'FULL' if durable else 'NORMAL'}")
        with self._lock:
            if durable:
                self._relaxed.discard(id(conn))
            else:
                self._relaxed.add(id(conn))

    @staticmethod
    def _rollback(conn: sqlite3.Connection) -> None:
        if conn.in_transaction:
            with suppress(sqlite3.Error):
                conn.execute("ROLLBACK")

    def read(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[sqlite3.Row]:
        """Run one read statement (its own snapshot) and fetch every row."""
        try:
            rows: list[sqlite3.Row] = self.connection().execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise translate(exc, self.path) from None
        return rows

    def settings(self) -> dict[str, object]:
        """This thread's connection settings, as SQLite reports them."""
        conn = self.connection()
        names = ("journal_mode", "synchronous", "busy_timeout", "foreign_keys", "secure_delete")
        try:
            self._sync_for(conn, True)  # the level every write but the relaxed ones runs at
            return {name: conn.execute(f"PRAGMA {name}").fetchone()[0] for name in names}
        except sqlite3.Error as exc:
            raise translate(exc, self.path) from None

    def checkpoint(self) -> None:
        """Copy the WAL into the database file and truncate the WAL to zero bytes.

        In the writers' turn: a TRUNCATE checkpoint takes SQLite's write lock, and
        outside the turn it slept in the busy handler while wfrun's writers went on."""
        with self._write_lock:
            turn = None if self.read_only else self._turns.acquire(self.busy_timeout_ms)
            try:
                self.connection().execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            except sqlite3.Error as exc:
                raise translate(exc, self.path) from None
            finally:
                if turn is not None:
                    self._turns.release(turn)

    def integrity_problems(self, limit: int) -> list[str]:
        """`PRAGMA quick_check(limit)`: the problems found, or [] for a sound file.
        Damage bad enough to stop the check itself is reported as its one problem."""
        try:
            rows = self.connection().execute(f"PRAGMA quick_check({int(limit)})").fetchall()
        except sqlite3.DatabaseError as exc:
            if sqlite_faults.is_machine_fault(exc) and not isinstance(
                    translate(exc, self.path), StoreCorrupt):
                raise translate(exc, self.path) from None
            return [str(exc)]
        problems = [str(row[0]) for row in rows]
        return [] if problems == ["ok"] else problems

    def close(self) -> None:
        """Close the store (idempotent): this thread's connection and those of threads
        that have ended now; a live thread closes its own at its next use. Closing a
        connection another thread is in the middle of using can crash the interpreter
        (a lease keeper reading run events while its owner closes the store did)."""
        pid = os.getpid()
        me = threading.get_ident()
        alive = {t.ident for t in threading.enumerate()}
        with self._lock:
            connections, self._connections = self._connections, {}
            was_closed, self._closed = self._closed, True
            self._pool.clear()
        if not was_closed:
            track_open(self.path, -1)
            # The last handle of the process lets the sidecar go; only when no writer of
            # this process is mid-turn (never waits: close() may run inside a write).
            if self._write_lock.acquire(blocking=False):
                try:
                    self._close_writer()
                    if not open_in_this_process(self.path):
                        self._turns.close()
                finally:
                    self._write_lock.release()
        for owner, thread, conn in connections.values():
            if owner == pid and (thread == me or thread not in alive):
                conn.close()
        cached: _Slot | None = getattr(self._local, "slot", None)
        if cached is not None:
            cached.db = None
            self._local.slot = None


def _log() -> logging.Logger:
    """This module's logger. `logging` loads only when something is logged: this
    module loads on every command (cold start)."""
    import logging

    return logging.getLogger(__name__)


SCRUB_BATCH = 64
SCRUB_SECONDS = 1.0


class BatchedScrub:
    """One runner's owed scrubs over one store file. Thread-safe: the run path and
    the lease keeper's thread both pay it. `monotonic` is the runner's clock."""

    def __init__(self, checkpoint: Callable[[], None], monotonic: Callable[[], float], *,
                 enabled: bool = True, batch: int = SCRUB_BATCH,
                 seconds: float = SCRUB_SECONDS) -> None:
        self._checkpoint = checkpoint
        self._monotonic = monotonic
        self._enabled = enabled  # False: benches compare the cost without it
        self._batch = batch
        self._seconds = seconds
        self._lock = threading.Lock()
        self._owed = 0
        self._since = 0.0

    def cleared(self) -> None:
        """An activation cleared input: owe its scrub; pay now if the batch is due."""
        now = self._monotonic()
        with self._lock:
            if not self._owed:
                self._since = now
            self._owed += 1
        self.tick()

    def tick(self) -> None:
        """Pay the owed scrubs if the batch is due (by count or by age)."""
        now = self._monotonic()
        with self._lock:
            due = self._owed >= self._batch or (
                self._owed > 0 and now - self._since >= self._seconds)
        if due:
            self.now()

    def flush(self) -> None:
        """Pay the owed scrubs, if any (idle, or a run claimed by id ended)."""
        with self._lock:
            owed = self._owed > 0
        if owed:
            self.now()

    def now(self) -> None:
        """Scrub at once (a failed start, a cancel, recovery): this pays what is owed
        too. Best effort: a busy store keeps the frames until the next scrub."""
        with self._lock:
            self._owed = 0
        if not self._enabled:
            return
        try:
            self._checkpoint()
        except StoreError as exc:
            _log().debug("could not checkpoint the store after clearing input: %s", exc.message)
