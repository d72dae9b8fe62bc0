"""wfrun's writers take turns across processes on `<store>.wlock` (writerlock.py).

Real processes and a real store file: a writer waits while another process holds the
sidecar's lock, its wait is bounded by the busy timeout (one-line "busy" error, nothing
written), a SIGKILLed holder's lock is released by the kernel, and a fork()ed child
does not inherit its parent's turn.
"""

from __future__ import annotations

import fcntl
import os
import signal
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from waiting import LineReader, wait_until

from runner.store.errors import StoreBusy
from runner.store.sqlite.db import SqliteDatabase, open_database
from runner.store.sqlite.writerlock import WriterLock, wlock_path

# A child that holds the sidecar's lock itself (as another wfrun writer would, between
# its BEGIN IMMEDIATE and COMMIT) without touching SQLite's lock.
HOLD_WLOCK = (
    "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR); "
    "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.readline()"
)
# A child in the middle of a real write transaction (both locks held) until killed; a
# plain handle (the test's table is not the store's layout, which the open would check).
HOLD_WRITE = (
    "import sys; from pathlib import Path; from runner.store.sqlite.db import SqliteDatabase\n"
    "db = SqliteDatabase(Path(sys.argv[1]))\n"
    "with db.write() as conn:\n"
    "    conn.execute(\"INSERT INTO t VALUES ('child')\")\n"
    "    print('held', flush=True); sys.stdin.readline()\n"
)


def _open(path: Path, busy_timeout_ms: int = 5000) -> SqliteDatabase:
    db = open_database(path, now_ms=0, busy_timeout_ms=busy_timeout_ms)
    with db.write() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS t (v TEXT)")
    return db


def _rows(db: SqliteDatabase) -> list[str]:
    return [str(row[0]) for row in db.read("SELECT v FROM t ORDER BY rowid")]


def _free(path: Path) -> bool:
    """True when nobody holds the sidecar's lock (tried on a descriptor of our own)."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


@contextmanager
def _child(code: str, path: Path) -> Iterator[subprocess.Popen[str]]:
    """A child process that has printed `held`; killed and reaped (pipes closed) after."""
    with subprocess.Popen([sys.executable, "-c", code, str(path)], text=True,
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as child:
        try:
            assert child.stdout is not None
            line = LineReader(child.stdout).next_line()
            if line != "held":
                child.kill()
                raise AssertionError(f"the child did not take its lock: {line!r}, "
                                     f"stderr: {child.communicate(timeout=30)[1]}")
            yield child
        finally:
            child.kill()
            child.wait(30)


def test_the_sidecar_is_private_and_made_on_the_first_write(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        db = _open(tmp_path / "s.sqlite3")
    finally:
        os.umask(old)
    try:
        sidecar = wlock_path(tmp_path / "s.sqlite3")
        assert sidecar.name == "s.sqlite3.wlock"
        assert stat.S_IMODE(sidecar.stat().st_mode) == 0o600
        assert _free(sidecar)  # held only inside a transaction
    finally:
        db.close()


def test_a_writer_waits_for_another_process_turn_then_writes(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    db = _open(path)
    try:
        with _child(HOLD_WLOCK, wlock_path(path)) as child:
            # SQLite's own lock is free: only the sidecar makes this writer wait, and the
            # busy timeout bounds the wait with the store's one-line error, writing nothing.
            short = SqliteDatabase(path, busy_timeout_ms=150)
            try:
                with pytest.raises(StoreBusy, match=r"is busy \(locked by another "
                                                    r"process\); try again$"), \
                        short.write() as conn:
                    conn.execute("INSERT INTO t VALUES ('too early')")
            finally:
                short.close()
            assert _rows(db) == []
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
            assert child.wait(30) == 0
        with db.write() as conn:  # the turn is free again
            conn.execute("INSERT INTO t VALUES ('after')")
        assert _rows(db) == ["after"]
    finally:
        db.close()


def test_a_waiting_writer_gets_its_turn_when_the_holder_unlocks(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    db = _open(path)
    try:
        with _child(HOLD_WLOCK, wlock_path(path)) as child:
            writer = threading.Thread(target=_insert, args=(db, "waited"))
            writer.start()
            turn = db._writer_turn
            wait_until(lambda: turn._in_flight == 1)  # blocked in flock, in the kernel
            assert writer.is_alive()
            assert _rows(db) == []
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
            writer.join(30)
            assert not writer.is_alive()
            assert child.wait(30) == 0
        assert _rows(db) == ["waited"]
        assert _free(wlock_path(path))  # released after its COMMIT
    finally:
        db.close()


def _insert(db: SqliteDatabase, value: str) -> None:
    with db.write() as conn:
        conn.execute("INSERT INTO t VALUES (?)", (value,))


def test_a_sigkilled_holder_releases_its_turn(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    db = _open(path)
    try:
        with _child(HOLD_WRITE, path) as child:
            assert not _free(wlock_path(path))  # the child is mid-transaction
            os.kill(child.pid, signal.SIGKILL)
            assert child.wait(30) == -signal.SIGKILL
        assert _free(wlock_path(path))  # the kernel released it; nothing to clean up
        with db.write() as conn:
            conn.execute("INSERT INTO t VALUES ('parent')")
        assert _rows(db) == ["parent"]  # the killed transaction left nothing
    finally:
        db.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX-only")
def test_a_forked_child_does_not_share_its_parents_turn(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    db = _open(path)
    # The process's own handle on the sidecar (its descriptor is what fork() copies):
    # held here, without the in-process lock, as a writer's turn would be.
    turn = db._writer_turn
    assert isinstance(turn, WriterLock)
    assert turn.acquire(5000)
    try:
        pid = os.fork()
        if pid == 0:  # the child: its own descriptor, so the parent's turn blocks it
            code = 1
            try:
                child_db = SqliteDatabase(path, busy_timeout_ms=150)
                try:
                    with child_db.write() as conn:
                        conn.execute("INSERT INTO t VALUES ('child')")
                except StoreBusy:
                    code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, "the child wrote during our turn"
    finally:
        turn.release()
    assert _rows(db) == []
    db.close()


def _open_wlocks(path: Path) -> int:
    target = str(wlock_path(path).resolve())
    count = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{name}") == target
        except OSError:
            continue
    return count


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="needs Linux /proc")
def test_the_last_handle_closed_closes_the_sidecar(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    first, second = _open(path), SqliteDatabase(path)
    assert _open_wlocks(path) == 1  # one descriptor for every handle of the process
    first.close()
    assert _open_wlocks(path) == 1  # `second` still writes
    _insert(second, "still")
    second.close()
    assert _open_wlocks(path) == 0  # no descriptor per store opened over a process's life
