"""The SQLite store file on disk: version check, sidecars, read-only inspection,
private creation, permissions and removal (the file half of the open procedure in
open.py; see docs/store.md)."""

from __future__ import annotations

import errno
import os
import secrets
import sqlite3
import stat
import threading
from contextlib import suppress
from pathlib import Path
from typing import Literal

from runner._private import private_dirs
from runner.store import _faults as faults
from runner.store._errors import (
    IncompatibleLayout,
    SqliteTooOld,
    StoreError,
    StoreReadOnly,
    StoreUnavailable,
)
from runner.store.sqlite import _faults as sqlite_faults
from runner.store.sqlite._schema import create_schema, layout_drift, read_layout, schema_id_drift

MIN_SQLITE_VERSION = (3, 35, 0)
DEFAULT_BUSY_TIMEOUT_MS = 5000
DIR_MODE = 0o700
FILE_MODE = 0o600
SIDECAR_SUFFIXES = ("-wal", "-shm", "-journal")
_SQLITE_MAGIC = b"SQLite format 3\x00"
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


def track_open(path: Path, delta: int) -> None:
    """Count a handle on `path` opened (+1) or closed (-1) by this process."""
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
    import shutil  # here: rare, and shutil costs every store open ~3 ms of imports
    import tempfile

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
        raise sqlite_faults.from_sqlite(exc, path) from None
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


_WAL_SWITCH_ATTEMPTS = 200


def connect(path: Path, busy_timeout_ms: int, read_only: bool) -> sqlite3.Connection:
    """A new connection to the store file with the store's pragmas (WAL, FULL sync,
    foreign keys, secure delete), or a read-only one (`read_only_uri`)."""
    try:
        conn = sqlite3.connect(
            read_only_uri(path) if read_only else str(path),
            timeout=busy_timeout_ms / 1000,
            isolation_level=None,
            check_same_thread=False,
            uri=read_only,
        )
    except sqlite3.Error as exc:
        raise sqlite_faults.from_sqlite(exc, path) from None
    try:
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        if read_only:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # opens it now
            return conn
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        if str(mode).lower() != "wal":
            mode = _switch_to_wal(conn)
        if str(mode).lower() != "wal":
            raise StoreUnavailable(
                f"the store at {path} cannot use WAL (journal mode {mode}); "
                "keep it on a local file system"
            )
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA secure_delete = ON")
    except sqlite3.Error as exc:
        conn.close()
        raise sqlite_faults.from_sqlite(exc, path) from None
    except StoreError:
        conn.close()
        raise
    return conn


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
