"""The SQLite file: creating it privately, checking it read-only, connections, transactions.

Open procedure (see docs/store.md):

1. Refuse SQLite older than 3.35 (RETURNING, partial indexes, UPSERT).
2. An existing file is inspected through a read-only connection before anything
   writes to it: a file in WAL mode that nobody has open (no `-shm` beside it) is
   read with `immutable=1` so not even the `-shm`/`-wal` sidecars appear; otherwise
   `mode=ro`. Another layout raises IncompatibleLayout and leaves the file
   byte-identical. A damaged, full, read-only or forbidden file raises its own
   class (`runner.store.faults`), never IncompatibleLayout.
3. A missing store is built complete (WAL, schema) in a private temporary file
   created 0600 (folder 0700) before its first SQLite open, so SQLite creates
   `-wal`/`-shm` with the same mode, and hard-linked into place: others see no
   store or a finished one. An existing empty file is set up in place.
4. Every connection sets WAL, `synchronous=FULL`, `busy_timeout`, `foreign_keys=ON`
   and `secure_delete=ON`.

A read-only database (`read_only=True`, for views such as `wfrun status`) never
creates, sets up or tightens anything and opens `mode=ro`, or `immutable=1` when
its folder cannot be written and no `-wal` exists (a read-only project).

One connection per thread at a time (and per process: a connection never crosses
fork()); a finished thread's connection is reused by the next thread.
Every writing transaction is `BEGIN IMMEDIATE`; sqlite3 runs in autocommit mode
(`isolation_level=None`) so Python never opens a deferred transaction itself.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import sqlite3
import stat
import tempfile
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Literal

from runner.private import private_dirs
from runner.store import faults, sqlite_faults
from runner.store.errors import (
    IncompatibleLayout,
    SqliteTooOld,
    StoreCorrupt,
    StoreError,
    StoreReadOnly,
    StoreUnavailable,
)
from runner.store.sqlite_schema import create_schema, layout_drift, read_layout, schema_id_drift

MIN_SQLITE_VERSION = (3, 35, 0)
DEFAULT_BUSY_TIMEOUT_MS = 5000
DIR_MODE = 0o700
FILE_MODE = 0o600
SIDECAR_SUFFIXES = ("-wal", "-shm", "-journal")
_SQLITE_MAGIC = b"SQLite format 3\x00"
_WAL_SWITCH_ATTEMPTS = 200
# A live -shm is at least one 32 KiB region; a smaller one is a stub a refused open
# left (growing it is what failed on a full disk).
_SHM_MIN_BYTES = 32 * 1024
# What link(2) says on a file system without hard links (FAT, some FUSE mounts).
_NO_HARD_LINKS = frozenset({errno.EPERM, errno.EXDEV, errno.EMLINK, errno.ENOTSUP,
                            errno.EOPNOTSUPP, errno.ENOSYS})


def check_sqlite_version() -> None:
    """Raise SqliteTooOld unless the linked SQLite library is new enough."""
    found = tuple(sqlite3.sqlite_version_info)
    if found < MIN_SQLITE_VERSION:
        need = ".".join(map(str, MIN_SQLITE_VERSION))
        raise SqliteTooOld(
            f"SQLite {sqlite3.sqlite_version} is too old for the wfrun store; "
            f"{need} or newer is needed (use a Python built with a newer SQLite)"
        )


def sidecar_paths(path: Path) -> list[Path]:
    return [path.with_name(path.name + suffix) for suffix in SIDECAR_SUFFIXES]


FileState = Literal["empty", "compatible"]


# Store files this process has open, with a count of handles. POSIX drops every
# lock a process holds on a file when *any* descriptor of that file is closed, so
# once SQLite holds locks here, the file must never be opened and closed by plain
# Python I/O again (that could let another process delete the live -wal).
_OPEN_STORES: dict[str, int] = {}
_OPEN_GUARD = threading.Lock()


def _opened(path: Path, delta: int) -> None:
    key = os.path.realpath(path)
    with _OPEN_GUARD:
        count = _OPEN_STORES.get(key, 0) + delta
        if count > 0:
            _OPEN_STORES[key] = count
        else:
            _OPEN_STORES.pop(key, None)


def open_in_this_process(path: Path) -> bool:
    with _OPEN_GUARD:
        return _OPEN_STORES.get(os.path.realpath(path), 0) > 0


def inspect_existing(path: Path) -> FileState:
    """Check an existing store file without writing to it (or creating sidecars)."""
    if open_in_this_process(path):
        # Already opened (and its layout checked) by this process; reading its header
        # with plain file I/O now would drop SQLite's locks (see _OPEN_STORES).
        return _inspect_uri(path, path.absolute().as_uri() + "?mode=ro")
    try:
        before = path.stat()
        with path.open("rb") as handle:
            header = handle.read(100)
    except OSError as exc:
        raise faults.from_os(exc, path, "read") from None
    if not header:
        return "empty"
    if not header.startswith(_SQLITE_MAGIC):
        # Not a layout wfrun could read: a damaged header or another program's file.
        # Either way deleting it (reset) is not the advice; moving it aside is.
        raise faults.corrupt(path, "the file is not a SQLite database")
    if len(header) < 100:
        raise faults.corrupt(path, f"the file is truncated to {len(header)} bytes")
    wal_path, shm_path = sidecar_paths(path)[:2]
    if header[18] == 2 and not shm_path.exists():
        # WAL-mode file that nobody has open (an open one has its -shm): read it as
        # immutable, so refusing it creates no -shm/-wal. Trust the answer only if
        # nobody changed the file meanwhile.
        error: StoreError | None = None
        state: FileState = "empty"
        try:
            state = _inspect_uri(path, path.absolute().as_uri() + "?mode=ro&immutable=1")
        except StoreError as exc:
            error = exc
        after = path.stat()
        unchanged = (before.st_ino, before.st_size, before.st_mtime_ns) == (
            after.st_ino,
            after.st_size,
            after.st_mtime_ns,
        )
        if unchanged and not shm_path.exists():
            if isinstance(error, IncompatibleLayout) or (error and not wal_path.exists()):
                raise error
            if error is None and not wal_path.exists():
                return state
            if wal_path.exists():
                # A -wal left beside it may hold commits the immutable read skipped, and
                # reading them in place would create the -shm: read a private copy.
                return _inspect_copy(path, wal_path)
    return _inspect_uri(path, read_only_uri(path))


def _inspect_copy(path: Path, wal_path: Path) -> FileState:
    """Inspect a copy of the file and its -wal in a private temporary folder, so a
    refused store is left byte- and file-identical (no -shm appears beside it)."""
    with tempfile.TemporaryDirectory(prefix="wfrun-inspect-") as folder:
        copy = Path(folder) / path.name
        try:
            shutil.copyfile(path, copy)
            shutil.copyfile(wal_path, copy.with_name(copy.name + "-wal"))
        except FileNotFoundError:  # its owner opened and checkpointed it meanwhile
            return _inspect_uri(path, read_only_uri(path))
        except OSError as exc:
            raise faults.from_os(exc, path, "read") from None
        try:
            return _inspect_uri(copy, copy.absolute().as_uri() + "?mode=ro")
        except IncompatibleLayout as exc:
            raise IncompatibleLayout(str(path), exc.detail) from None
        except StoreError as exc:
            raise type(exc)(exc.message.replace(str(copy), str(path))) from None


def _inspect_uri(path: Path, uri: str) -> FileState:
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=5.0)
    except sqlite3.Error as exc:
        raise sqlite_faults.from_sqlite(exc, path) from None
    try:
        layout = read_layout(conn)
        if layout.empty:
            return "empty"
        drift = layout_drift(layout) or schema_id_drift(conn)
    except sqlite3.DatabaseError as exc:
        if sqlite_faults.is_machine_fault(exc):  # damaged, full, locked, read-only: not a layout
            raise sqlite_faults.from_sqlite(exc, path) from None
        raise IncompatibleLayout(str(path), f"the file cannot be read as a store ({exc})") from None
    finally:
        conn.close()
    if drift:
        raise IncompatibleLayout(str(path), drift)
    return "compatible"


def create_private_file(path: Path) -> bool:
    """Create the folder (0700) and an empty file (0600); False if it already existed."""
    try:
        private_dirs(path.parent)  # each folder it makes 0700, whatever the umask
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
    except FileExistsError:
        return False
    except OSError as exc:
        raise faults.from_os(exc, path, "create") from None
    try:
        os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)
    return True


def create_store_file(path: Path, now_ms: int) -> None:
    """Build a complete store in a private temporary file, then link it into place.

    Other processes see either no store or a finished one (WAL mode, full schema),
    never a half-made file; the loser of a creation race discards its copy.
    Where hard links are unsupported, an empty file is left for in-place setup.
    """
    temp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.creating")
    create_private_file(temp)
    try:
        conn = sqlite3.connect(str(temp), isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("BEGIN IMMEDIATE")
            create_schema(conn, now_ms)
            conn.execute("COMMIT")
        finally:
            conn.close()
        with suppress(FileExistsError):
            os.link(temp, path)
        _fsync_folder(path.parent)
    except sqlite3.Error as exc:
        raise translate(exc, path) from None
    except OSError as exc:
        if exc.errno not in _NO_HARD_LINKS:
            raise faults.from_os(exc, path, "create") from None  # full, read-only, ...
        create_private_file(path)  # no hard links here: set it up in place
    finally:
        for leftover in (temp, *sidecar_paths(temp)):
            with suppress(FileNotFoundError):
                leftover.unlink()


def _fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def tighten_permissions(path: Path) -> None:
    """Folder 0700, store file and existing sidecars 0600."""
    try:
        if stat.S_IMODE(path.parent.stat().st_mode) != DIR_MODE:
            path.parent.chmod(DIR_MODE)
        for candidate in (path, *sidecar_paths(path)):
            try:
                if stat.S_IMODE(candidate.stat().st_mode) != FILE_MODE:
                    candidate.chmod(FILE_MODE)
            except FileNotFoundError:
                # Absent, or a sidecar another opener's connection just removed (a
                # rollback journal comes and goes): nothing to secure.
                if candidate == path:
                    raise
    except OSError as exc:
        raise faults.from_os(exc, path, "secure") from None


def translate(exc: sqlite3.Error, path: Path) -> StoreError:
    """Map a sqlite3 error onto the store's exception tree (see `faults`)."""
    return sqlite_faults.from_sqlite(exc, path)


_WRITE_LOCKS: dict[str, threading.Lock] = {}
_WRITE_LOCKS_GUARD = threading.Lock()


def _write_lock_for(path: Path) -> threading.Lock:
    """One in-process writer lock per store file, shared by every handle on it."""
    key = os.path.realpath(path)
    with _WRITE_LOCKS_GUARD:
        return _WRITE_LOCKS.setdefault(key, threading.Lock())


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
        self._write_lock = _write_lock_for(path)
        _opened(path, +1)
        # id(conn) -> (pid, owning thread, conn): close() closes what no live thread uses.
        self._connections: dict[int, tuple[int, int, sqlite3.Connection]] = {}
        self._pool: list[tuple[int, sqlite3.Connection]] = []
        self._closed = False

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
            conn = self._connect()
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

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                read_only_uri(self.path) if self.read_only else str(self.path),
                timeout=self.busy_timeout_ms / 1000,
                isolation_level=None,
                check_same_thread=False,
                uri=self.read_only,
            )
        except sqlite3.Error as exc:
            raise translate(exc, self.path) from None
        try:
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
            if self.read_only:
                conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # opens it now
                return conn
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            if str(mode).lower() != "wal":
                mode = self._switch_to_wal(conn)
            if str(mode).lower() != "wal":
                raise StoreUnavailable(
                    f"the store at {self.path} cannot use WAL (journal mode {mode}); "
                    "keep it on a local file system"
                )
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA secure_delete = ON")
        except sqlite3.Error as exc:
            conn.close()
            raise translate(exc, self.path) from None
        except StoreError:
            conn.close()
            raise
        return conn

    @staticmethod
    def _switch_to_wal(conn: sqlite3.Connection) -> object:
        """Only for a store set up in place: SQLite may refuse the switch with
        SQLITE_BUSY without waiting while another connection opens the file."""
        for _ in range(_WAL_SWITCH_ATTEMPTS - 1):
            try:
                return conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
        return conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A `BEGIN IMMEDIATE` transaction: committed on success, rolled back on error.

        Threads of this process take turns on a Python lock first: SQLite's own busy
        handler waits by sleeping (1, 2, 5, 10 ms ...), which wastes most of the time
        when several workers of one process write at once. Other processes still
        contend through SQLite's lock and busy timeout.
        """
        with self._write_lock:
            yield from self._write()

    def _write(self) -> Iterator[sqlite3.Connection]:
        conn = self.connection()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise translate(exc, self.path) from None
        try:
            yield conn
        except sqlite3.Error as exc:
            self._rollback(conn)
            raise translate(exc, self.path) from None
        except BaseException:
            self._rollback(conn)
            raise
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback(conn)
            raise translate(exc, self.path) from None

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
            return {name: conn.execute(f"PRAGMA {name}").fetchone()[0] for name in names}
        except sqlite3.Error as exc:
            raise translate(exc, self.path) from None

    def checkpoint(self) -> None:
        """Copy the WAL into the database file and truncate the WAL to zero bytes."""
        try:
            self.connection().execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.Error as exc:
            raise translate(exc, self.path) from None

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

    def initialize(self, now_ms: int) -> None:
        """Create the schema in an empty store, or verify what another process made."""
        with self.write() as conn:
            layout = read_layout(conn)
            if layout.empty:
                create_schema(conn, now_ms)
                return
            drift = layout_drift(layout) or schema_id_drift(conn)
            if drift:
                raise IncompatibleLayout(str(self.path), drift)

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
            _opened(self.path, -1)
        for owner, thread, conn in connections.values():
            if owner == pid and (thread == me or thread not in alive):
                conn.close()
        cached: _Slot | None = getattr(self._local, "slot", None)
        if cached is not None:
            cached.db = None
            self._local.slot = None


def read_only_uri(path: Path) -> str:
    """`mode=ro`, or `immutable=1` where SQLite could not create or grow the `-shm` a
    WAL read needs (a read-only or full file system, a folder this user may not write)
    and no `-wal` holds commits an immutable read would skip. Immutable reads assume
    nobody writes meanwhile: true of a read-only mount, and of a full disk but for
    commits already in a `-wal`, which is why a non-empty one is never skipped."""
    uri = path.absolute().as_uri() + "?mode=ro"
    fault = faults.file_system_fault(path)
    if fault is None:
        return uri
    wal, shm = sidecar_paths(path)[:2]
    try:
        wal_empty = wal.stat().st_size == 0
    except FileNotFoundError:
        wal_empty = True
    try:
        shm_ready = shm.stat().st_size >= _SHM_MIN_BYTES
    except FileNotFoundError:
        shm_ready = False
    if shm_ready:
        return uri  # SQLite reads a WAL through a live -shm, even a read-only one
    if wal_empty:
        return uri + "&immutable=1"
    if isinstance(fault, StoreReadOnly):
        raise StoreReadOnly(
            f"the store {path} is in a read-only folder and its {wal.name} holds commits "
            f"without a {shm.name} to read them by; nothing was changed. Make the folder "
            "writable once (any wfrun command then folds them in)"
        )
    raise fault


def open_database(path: Path, *, now_ms: int, busy_timeout_ms: int,
                  read_only: bool = False) -> SqliteDatabase:
    """Run the open procedure and return a ready database. `read_only` opens an
    existing, set-up store for reading only (it creates and changes nothing)."""
    check_sqlite_version()
    if path.is_dir():
        raise StoreUnavailable(f"the store path {path} is a directory")
    if not path.exists():
        orphans = [p.name for p in sidecar_paths(path) if p.exists()]
        if orphans and not path.exists():  # SQLite could replay an orphaned WAL
            # Not a layout mismatch: resetting would delete the commits in the orphan.
            raise StoreCorrupt(
                f"the store file {path} is missing but {', '.join(orphans)} remain(s) beside "
                "it; nothing was changed. Restore the store file from a backup, or move the "
                "leftover file(s) aside to start a new, empty store"
            )
        if read_only:
            raise StoreUnavailable(f"no store at {path} yet; it is created on the first start")
        create_store_file(path, now_ms)
    state = inspect_existing(path)
    if read_only:
        if state == "empty":
            raise StoreUnavailable(f"the store {path} is empty (not set up yet); "
                                   "any command that writes sets it up")
        db = SqliteDatabase(path, busy_timeout_ms=busy_timeout_ms, read_only=True)
        try:
            db.connection()
        except BaseException:
            db.close()
            raise
        return db
    tighten_permissions(path)
    db = SqliteDatabase(path, busy_timeout_ms=busy_timeout_ms)
    try:
        db.connection()
        if state == "empty":
            db.initialize(now_ms)
        tighten_permissions(path)
    except BaseException:
        db.close()
        raise
    return db


def remove_store_files(path: Path) -> list[Path]:
    """Delete the store file and its SQLite sidecars, nothing else. Returns what went."""
    if path.is_dir():
        raise StoreUnavailable(f"the store path {path} is a directory")
    removed = []
    for candidate in (path, *sidecar_paths(path)):
        try:
            candidate.unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise StoreUnavailable(f"cannot remove {candidate}: {exc.strerror}") from None
        removed.append(candidate)
    return removed
