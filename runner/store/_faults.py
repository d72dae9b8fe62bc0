"""Machine faults on the store's files: their messages, and OS errors and the file
system told apart by errno and statvfs (backend-neutral; SQLite's result codes are
read in `runner.store.sqlite._faults`).

Each fault gets its own class and one line saying what to do that loses nothing;
only a readable file with another layout ever earns the reset advice
(`IncompatibleLayout`, raised by the layout check, not here).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from runner.store._errors import (
    StoreBusy,
    StoreCorrupt,
    StoreDiskFull,
    StoreError,
    StoreNoPermission,
    StoreReadOnly,
    StoreUnavailable,
    StoreUnreachable,
)

# Below this much free space a failed write is a full disk: SQLite needs a few pages
# for the WAL and its index, and a disk this full refuses them.
_NEARLY_FULL_BYTES = 256 * 1024


def disk_full(path: Path) -> StoreDiskFull:
    return StoreDiskFull(
        f"no space left on the device holding the store {path}; nothing was changed. "
        "Free some space, then run the command again (queued launches are kept)"
    )


def read_only(path: Path) -> StoreReadOnly:
    return StoreReadOnly(
        f"the store {path} is on a read-only file system or folder; nothing was changed. "
        "Make it writable (e.g. remount it read-write) to start, run or cancel; "
        "`wfrun status` and `wfrun why` can still read it"
    )


def no_permission(path: Path, detail: str) -> StoreNoPermission:
    return StoreNoPermission(
        f"permission denied for the store {path} ({detail}); nothing was changed. "
        "Run wfrun as the user who owns the project, or give that user access to its folder"
    )


def corrupt(path: Path, detail: str) -> StoreCorrupt:
    return StoreCorrupt(
        f"the store {path} is damaged ({detail}); wfrun changed nothing in it. Stop every "
        "`wfrun host`, keep a copy of the file, then restore it from a backup or salvage "
        f"its rows with `sqlite3 {path} .recover`; run bundles are not affected"
    )


def busy(path: Path) -> StoreBusy:
    return StoreBusy(f"the store {path} is busy (locked by another process); try again")


def _existing(path: Path) -> Path:
    """`path` or its nearest existing ancestor (what statvfs/access can ask about)."""
    candidate = path
    while not candidate.exists() and candidate.parent != candidate:
        candidate = candidate.parent
    return candidate


def file_system_fault(path: Path) -> StoreUnavailable | None:
    """What the file system says is wrong where `path` lives: read-only, full, or
    not writable by this user; None when it looks fine."""
    where = _existing(path.parent)
    try:
        vfs = os.statvfs(where)
    except OSError:
        return None
    if vfs.f_flag & os.ST_RDONLY:
        return read_only(path)
    free = vfs.f_bfree if os.geteuid() == 0 else vfs.f_bavail
    if free * vfs.f_frsize < _NEARLY_FULL_BYTES:
        return disk_full(path)
    for target, mode in ((where, os.W_OK | os.X_OK), (path, os.R_OK | os.W_OK)):
        if target.exists() and not os.access(target, mode):
            return no_permission(path, f"{target} is not writable by this user")
    return None


def from_os(exc: OSError, path: Path, doing: str) -> StoreError:
    """An OSError met while `doing` something to the store's files."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return disk_full(path)
    if exc.errno == errno.EROFS:
        return read_only(path)
    if exc.errno in (errno.EACCES, errno.EPERM):
        where = f" on {exc.filename}" if exc.filename else ""
        return no_permission(path, f"{exc.strerror or 'denied'}{where}")
    return StoreUnreachable(f"cannot {doing} the store at {path}: {exc.strerror}")
