"""A folder bundle's files: private (0600 files in 0700 folders), written whole or not at
all (a short write on a nearly full disk is an error, never a truncated file), made
new, replaced atomically or updated in place; and the workflow snapshots every run of
one definition shares by hard link (`runs/.snapshots/`)."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import threading
from pathlib import Path

from runner._private import private_dirs

from ._bundlefmt import SNAPSHOTS


def private_dir(path: Path) -> None:
    private_dirs(path)  # parents too: a WFRUN_HOME made here is 0700 under any umask
    os.chmod(path, 0o700)


# Runs folders this process has made private: a run's bundle pays no stat and chmod of
# its parent (a removed folder is made again: its bundle's mkdir says so).
_PRIVATE_RUNS: set[Path] = set()
_PRIVATE_LOCK = threading.Lock()


def make_bundle_dir(runs_dir: Path, root: Path) -> None:
    with _PRIVATE_LOCK:
        known = runs_dir in _PRIVATE_RUNS
    if not known:
        private_dir(runs_dir)
    try:
        os.mkdir(root, 0o700)
    except FileNotFoundError:
        if not known:
            raise
        private_dir(runs_dir)  # removed since (a test, a hand): once more, made private
        os.mkdir(root, 0o700)
    with _PRIVATE_LOCK:
        _PRIVATE_RUNS.add(runs_dir)


# Root may use the blocks and inodes a file system keeps back; others may not.
_PRIVILEGED = os.geteuid() == 0


def room_left(folder: str) -> None:
    """ENOSPC when `folder`'s file system has no block or no inode left for this
    process, as a small file's creation there would fail: one `statvfs`, for a writer
    that creates its first file later (a pure run, at its seal) but must refuse a full
    disk before it does anything, as that file's creation used to."""
    st = os.statvfs(folder)
    blocks = st.f_bfree if _PRIVILEGED else st.f_bavail
    inodes = st.f_ffree if _PRIVILEGED else st.f_favail
    if blocks == 0 or (inodes == 0 and st.f_files):  # f_files 0: no inode count kept
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def write_all(fd: int, data: bytes) -> None:
    """Every byte or an OSError: a nearly full disk first writes short, then refuses
    (ENOSPC); a short write taken for a whole one would leave a truncated file."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[written:]


def _write_new(path: str | Path, flag: int, mode: int, data: bytes, sync: bool) -> None:
    """Open `path` for writing (created with `mode`; `flag` O_EXCL or O_TRUNC), write
    `data` whole, fsync when asked, close: what the writers below share."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | flag, mode)
    try:
        write_all(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def create_private(path: str | Path, data: bytes, *, sync: bool = False,
                   mode: int = 0o600) -> None:
    """Write a new 0600 file in place: for a file no reader looks at yet (a refused
    write removes what it began). `mode` 0o400: born read-only (a sealed bundle's file:
    the new file's descriptor may still write it, and no chmod follows)."""
    try:
        _write_new(path, os.O_EXCL, mode, data, sync)
    except BaseException:
        Path(path).unlink(missing_ok=True)
        raise


def write_private(path: str | Path, data: bytes, *, sync: bool = False) -> None:
    """Atomically replace `path` with a 0600 file (a refused write leaves no temp file)."""
    folder, name = os.path.split(path)
    tmp = os.path.join(folder, f".{name}.tmp")
    try:
        _write_new(tmp, os.O_TRUNC, 0o600, data, sync)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def update_private(path: str, data: bytes, *, sync: bool = False) -> None:
    """Overwrite an existing file in place (no temp file to create and rename): for a
    projection whose reader rebuilds it from the trace when it finds it torn."""
    fd = os.open(path, os.O_WRONLY)
    try:
        view = memoryview(data)
        at = 0
        while at < len(data):
            written = os.pwrite(fd, view[at:], at)
            if written <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            at += written
        os.ftruncate(fd, len(data))
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


# A snapshot's shared file name by its bytes: a host links one definition's snapshot
# per run, and hashing a dict key is cheaper than its SHA-256 and two pathlib joins.
# Bounded: a host that meets more definitions than this starts over.
_SHARED_NAMES: dict[bytes, str] = {}
_SHARED_KEPT = 64


def link_snapshot(runs_dir: str | Path, path: str | Path, data: bytes) -> bool:
    """Make `path` a hard link to the one copy of `data` in `runs/.snapshots/`, named
    by its SHA-256: the runs of one definition share the snapshot's inode. A file
    creation costs 20 µs to 1 ms of kernel CPU on this VM, depending on the folder (a
    link ~0.02 ms; bench/RESULTS.md, "The file system"), and the snapshot is the one
    bundle file that never differs between runs. The copy is written whole,
    fsync'd and made read-only (0400) before it gets its name, so every link to it is
    whole, and nothing writes it again (a rewrite of a snapshot replaces the link).
    False where links do not work here (another file system's rules, the link limit):
    the caller writes the file itself, as before."""
    name = _SHARED_NAMES.get(data)
    if name is None:
        if len(_SHARED_NAMES) >= _SHARED_KEPT:
            _SHARED_NAMES.clear()
        name = _SHARED_NAMES[data] = f"sha256-{hashlib.sha256(data).hexdigest()}.json"
    shared = os.path.join(runs_dir, SNAPSHOTS, name)
    for attempt in range(3):
        try:
            os.link(shared, path)
            return True
        except FileNotFoundError:  # the first run of this definition, or pruned just now
            if not _store_snapshot(Path(shared), data):
                return False
        except OSError as exc:
            if exc.errno == errno.EEXIST:
                raise
            if exc.errno != errno.EMLINK or attempt:
                return False
            with contextlib.suppress(OSError):  # ext4 allows 65,000 links: a fresh copy
                os.unlink(shared)
    return False


def _store_snapshot(shared: Path, data: bytes) -> bool:
    folder = shared.parent
    tmp = folder / f".{shared.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        if not folder.is_dir():
            private_dir(folder)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            write_all(fd, data)
            os.fsync(fd)
            os.fchmod(fd, 0o400)
        finally:
            os.close(fd)
        with contextlib.suppress(FileExistsError):  # another writer stored it first
            os.link(tmp, shared)
        return True
    except OSError:
        return False
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
