"""Real machine faults for tests: a small tmpfs filled to the last page, a read-only
bind mount, a page of a SQLite file overwritten, a file truncated (issue 10).

The tests run as root in their container, so `mount` is allowed; root ignores file
modes, which is why "read-only" here is a read-only mount, never a chmod. Where
mounting is not permitted the fixture skips with the reason (a skip is never
counted as a pass).
"""

from __future__ import annotations

import errno
import hashlib
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

PAGE = 4096


def _mount(*args: str) -> None:
    done = subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        pytest.skip(f"mount {' '.join(args)} is not permitted here: {done.stderr.strip()}")


def _umount(where: Path) -> None:
    subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=30, check=False)


@contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A real file system of `size` (e.g. "2m") at `where`, unmounted afterwards."""
    where.mkdir(parents=True, exist_ok=True)
    _mount("-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where))
    try:
        yield where
    finally:
        _umount(where)


def resize(where: Path, size: str) -> None:
    """More room on a mounted tmpfs ("space returns")."""
    _mount("-o", f"remount,size={size}", str(where))


@contextmanager
def read_only(folder: Path) -> Iterator[Path]:
    """`folder` bind-mounted read-only onto itself: every write under it is EROFS."""
    with mirror(folder, folder):
        yield folder


@contextmanager
def mirror(folder: Path, at: Path) -> Iterator[Path]:
    """`folder` bind-mounted read-only at `at`: the same files on a path other users can
    walk, whatever the modes of the folders above `folder` (a `mktemp -d` is 0700)."""
    at.mkdir(parents=True, exist_ok=True)
    _mount("--bind", str(folder), str(at))
    try:
        _mount("-o", "remount,bind,ro", str(at))
        yield at
    finally:
        _umount(at)


def fill(folder: Path) -> Path:
    """Write a filler file until the file system refuses (ENOSPC); returns it."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        for chunk in (1 << 20, 1 << 16, PAGE, 512):
            try:
                while True:
                    os.write(fd, b"\0" * chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
    finally:
        os.close(fd)
    return filler


def checkpoint(path: Path) -> None:
    """Fold a store's WAL into the file, so its pages are all in the main file."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.close()


def root_pages(path: Path) -> dict[str, int]:
    """Table and index name -> its root page number."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {name: page for name, page in
                conn.execute("SELECT name, rootpage FROM sqlite_master WHERE rootpage > 0")}
    finally:
        conn.close()


def overwrite_page(path: Path, page: int) -> None:
    """Replace page `page` (1-based) with garbage; page 1 keeps its 100-byte header."""
    start = PAGE * (page - 1) + (100 if page == 1 else 0)
    with open(path, "r+b") as fh:
        fh.seek(start)
        fh.write(b"\xa5" * (PAGE * page - start))


def truncate(path: Path, size: int) -> None:
    os.truncate(path, size)


def snapshot(folder: Path) -> dict[str, tuple[int, str]]:
    """Every file and folder under `folder`: mode and sha256 (folders: "")."""
    found: dict[str, tuple[int, str]] = {}
    for path in sorted(folder.rglob("*")):
        rel = str(path.relative_to(folder))
        info = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
        found[rel] = (info.st_mode, digest)
    return found


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
