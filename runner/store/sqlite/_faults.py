"""SQLite's result codes as store faults (`faults` has the messages and the errno side).

A full disk, a read-only mount, a held lock, a damaged page and a file this user
may not open surface from sqlite3 as a few generic messages ("disk I/O error",
"unable to open database file"); the result code tells them apart, never the text.
SQLite reports some ENOSPC and EROFS cases only as SQLITE_IOERR (extending the
`-shm` on a full tmpfs) or SQLITE_CANTOPEN (creating a `-wal` in a read-only folder),
so those two codes are refined by asking the file system (`faults.file_system_fault`).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from runner.store._errors import StoreError, StoreUnreachable
from runner.store._faults import (
    busy,
    corrupt,
    disk_full,
    file_system_fault,
    no_permission,
    read_only,
)

# Primary result codes (sqlite3.h); extended codes keep these in their low byte.
SQLITE_PERM = 3
SQLITE_BUSY = 5
SQLITE_LOCKED = 6
SQLITE_READONLY = 8
SQLITE_IOERR = 10
SQLITE_CORRUPT = 11
SQLITE_FULL = 13
SQLITE_CANTOPEN = 14
SQLITE_NOTADB = 26
_MACHINE_CODES = frozenset({SQLITE_PERM, SQLITE_BUSY, SQLITE_LOCKED, SQLITE_READONLY,
                            SQLITE_IOERR, SQLITE_CORRUPT, SQLITE_FULL, SQLITE_CANTOPEN,
                            SQLITE_NOTADB})


def is_machine_fault(exc: sqlite3.Error) -> bool:
    """True when SQLite failed because of the file or the machine (damage, space,
    locks, mounts, modes), not because of what the file contains."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(code, int) and (code & 0xFF) in _MACHINE_CODES


def from_sqlite(exc: sqlite3.Error, path: Path) -> StoreError:
    """A sqlite3 error as the store class that says what to do."""
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    text = str(exc)
    if primary in (SQLITE_BUSY, SQLITE_LOCKED):
        return busy(path)
    if primary in (SQLITE_CORRUPT, SQLITE_NOTADB):
        return corrupt(path, text)
    if primary == SQLITE_FULL:
        return disk_full(path)
    if primary == SQLITE_READONLY:
        # SQLITE_READONLY_DBMOVED and friends aside, the usual cause is the mount or mode.
        return file_system_fault(path) or read_only(path)
    if primary == SQLITE_PERM:
        return no_permission(path, text)
    if primary in (SQLITE_IOERR, SQLITE_CANTOPEN):
        fault = file_system_fault(path)
        if fault is not None:
            return fault
        return StoreUnreachable(
            f"cannot use the store {path}: {text}; nothing was changed. Check the disk "
            "and the folder's permissions, then run the command again"
        )
    if isinstance(exc, sqlite3.IntegrityError):
        return StoreError(f"store constraint violated in {path}: {text}")
    if isinstance(exc, sqlite3.OperationalError):
        return StoreUnreachable(f"store at {path} unavailable: {text}")
    return StoreError(f"store error in {path}: {text}")


