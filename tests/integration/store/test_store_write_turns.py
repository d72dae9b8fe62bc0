"""wfrun's writers take turns across processes, first come first served (writelock.py).

Real processes on a real store file. The turn is exclusive (no two processes inside
at once), served in the order writers queued, and a process with several writing
threads never has more than one writer in the line, so every process waiting gets
its turn within one turn of each other process. A writer's wait is bounded by the
busy timeout (one-line error, nothing written); one that gave up keeps its place and
passes the turn on; a SIGKILLed holder or waiter frees its place; a fork()ed child
never shares its parent's turn; the last handle closed lets the sidecar go.
Every wait is on evidence (a printed line, the sidecar's ticket count), never a sleep.
"""

from __future__ import annotations

import fcntl
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from waiting import LineReader, wait_until

from runner.store import SqliteStore
from runner.store._errors import StoreBusy
from runner.store.sqlite import _writelock as writelock
from runner.store.sqlite._db import SqliteDatabase
from runner.store.sqlite._open import open_database
from runner.store.sqlite._writelock import PLACES, WriteLock, tickets_taken, wlock_path

pytestmark = pytest.mark.skipif(not writelock.SUPPORTED,
                                reason="the writers' queue needs Linux OFD locks")

WORKER = Path(__file__).with_name("turn_worker.py")
BUSY = r"is busy \(locked by another process\); try again$"


def _open(path: Path, busy_timeout_ms: int = 30_000) -> SqliteDatabase:
    db = open_database(path, now_ms=0, busy_timeout_ms=busy_timeout_ms)
    with db.write() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS t (v TEXT, pid INT, ticket INT, behind INT)")
    return db


def _names(db: SqliteDatabase) -> list[str]:
    return [str(row[0]) for row in db.read("SELECT v FROM t ORDER BY rowid")]


def _line_is_empty(path: Path) -> bool:
    """True when no process holds or waits for a turn (no place in the line is locked)."""
    fd = os.open(wlock_path(path), os.O_RDWR)
    try:
        probe = writelock._FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, PLACES, 0, 0)
        try:
            fcntl.fcntl(fd, writelock._SETLK, probe)
        except BlockingIOError:
            return False
        except PermissionError:
            return False
        return True
    finally:
        os.close(fd)


def _spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(WORKER), *args], text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def _say(child: subprocess.Popen[str], line: str = "go") -> None:
    assert child.stdin is not None
    child.stdin.write(line + "\n")
    child.stdin.flush()


def _expect(child: subprocess.Popen[str], word: str) -> None:
    assert child.stdout is not None
    line = LineReader(child.stdout).next_line()
    if line != word:
        child.kill()
        raise AssertionError(f"expected {word!r} from the child, got {line!r}; "
                             f"stderr: {child.communicate(timeout=30)[1]}")


def _finished(child: subprocess.Popen[str]) -> None:
    _, err = child.communicate(timeout=60)
    assert child.returncode == 0, err


@contextmanager
def _children() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    with ExitStack() as stack:
        yield started
        for child in started:
            stack.enter_context(child)  # closes its pipes
            if child.poll() is None:
                child.kill()
            child.wait(30)


def _queue_writer(store: Path, name: str, started: list[subprocess.Popen[str]],
                  *, expected: int) -> subprocess.Popen[str]:
    """A child that writes NAME once, started and waited for until it stands in line
    (its ticket taken: the sidecar's count reaches `expected`)."""
    child = _spawn("write", str(store), name)
    started.append(child)
    wait_until(lambda: tickets_taken(store) == expected,
               what=lambda: f"{name} to queue (tickets {tickets_taken(store)})")
    return child


def test_the_sidecar_is_private_and_the_line_empty_between_writes(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        db = _open(tmp_path / "s.sqlite3")
    finally:
        os.umask(old)
    try:
        sidecar = wlock_path(tmp_path / "s.sqlite3")
        assert sidecar.name == "s.sqlite3.wlock"
        assert stat.S_IMODE(sidecar.stat().st_mode) == 0o600
        assert tickets_taken(db.path) == 1  # the table's write (the file was made apart)
        assert _line_is_empty(db.path)  # a place is held only inside a transaction
        with db.write():
            assert not _line_is_empty(db.path)
        assert _line_is_empty(db.path)
        assert tickets_taken(db.path) == 2
    finally:
        db.close()


def test_the_turn_is_exclusive_across_processes(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite3"
    (tmp_path / "counter").write_text("0")
    procs, turns = 4, 150
    with _children() as started:
        for _ in range(procs):
            started.append(_spawn("exclusive", str(store), str(tmp_path), str(turns)))
        for child in started:
            _expect(child, "ready")
        for child in started:
            _say(child)
        for child in started:
            _finished(child)  # a child inside with another fails on its O_EXCL marker
    assert int((tmp_path / "counter").read_text()) == procs * turns  # no update lost
    assert tickets_taken(store) == procs * turns
    assert _line_is_empty(store)


def test_processes_are_served_in_ticket_order_one_writer_each(tmp_path: Path) -> None:
    """Four processes, two of them with three writing threads, all writing at once."""
    db = _open(tmp_path / "s.sqlite3")
    first = tickets_taken(db.path)
    turns = 40
    threads = {"a": 3, "b": 1, "c": 3, "d": 1}
    try:
        with _children() as started:
            for name, n in threads.items():
                started.append(_spawn("loop", str(db.path), name, str(n), str(turns)))
            for child in started:
                _expect(child, "ready")
            for child in started:
                _say(child)
            for child in started:
                _finished(child)
        rows = [(int(r[0]), int(r[1]), int(r[2])) for r in db.read(
            "SELECT pid, ticket, behind FROM t WHERE ticket IS NOT NULL ORDER BY rowid")]
    finally:
        db.close()
    total = sum(threads.values()) * turns
    # Served first come, first served: in commit order the tickets are exactly the
    # ones handed out, in order, none skipped and none overtaken.
    assert [ticket for _, ticket, _ in rows] == list(range(first, first + total))
    owner = {ticket: pid for pid, ticket, _ in rows}
    pids = {pid for pid, _, _ in rows}
    assert len(pids) == len(threads)
    waited_behind_another = 0
    for pid, ticket, behind in rows:
        queued = [owner[t] for t in range(ticket + 1, min(behind, first + total))]
        # Everyone in line behind a turn is another process, each at most once: a
        # process's threads queue one at a time, so none can crowd the others out and
        # every waiting process is served within one turn of each other process.
        assert pid not in queued
        assert len(queued) == len(set(queued)) <= len(threads) - 1
        waited_behind_another += bool(queued)
    assert waited_behind_another > total // 4, "the processes hardly contended"


def test_queued_writers_are_served_in_the_order_they_queued(tmp_path: Path) -> None:
    db = _open(tmp_path / "s.sqlite3")
    try:
        with _children() as started:
            holder = _spawn("hold", str(db.path), "holder")
            started.append(holder)
            _expect(holder, "held")
            base = tickets_taken(db.path)
            names = ["w1", "w2", "w3", "w4", "w5"]
            waiting = [_queue_writer(db.path, name, started, expected=base + i + 1)
                       for i, name in enumerate(names)]
            assert _names(db) == []  # nobody overtook the holder
            _say(holder)
            for child in [holder, *waiting]:
                _finished(child)
        assert _names(db) == ["holder", *names]
        assert _line_is_empty(db.path)
    finally:
        db.close()


def test_a_sigkilled_holder_mid_write_and_a_waiter_free_their_places(tmp_path: Path) -> None:
    db = _open(tmp_path / "s.sqlite3")
    try:
        with _children() as started:
            holder = _spawn("hold", str(db.path), "holder")
            started.append(holder)
            _expect(holder, "held")
            base = tickets_taken(db.path)
            w1 = _queue_writer(db.path, "w1", started, expected=base + 1)
            w2 = _queue_writer(db.path, "w2", started, expected=base + 2)
            w3 = _queue_writer(db.path, "w3", started, expected=base + 3)
            for victim in (w2, holder):  # a waiter mid-line, then the holder mid-write
                victim.kill()
                assert victim.wait(30) == -signal.SIGKILL
            _finished(w1)
            _finished(w3)
        assert _names(db) == ["w1", "w3"]  # the killed transaction left nothing
        assert _line_is_empty(db.path)
    finally:
        db.close()


def test_a_waiter_that_dies_in_line_lets_nobody_overtake(tmp_path: Path) -> None:
    """w3 stands behind w2, w2 behind w1, w1 behind the holder: when w2 dies, w3 must
    still wait for w1 (and the holder), not only for its dead predecessor."""
    store, apart = tmp_path / "s.sqlite3", tmp_path / "holder"
    apart.mkdir()  # the holder's marker: it dies inside, and w1 enters at once
    with _children() as started:
        holder = _spawn("turn", str(store), str(apart))
        started.append(holder)
        _expect(holder, "turn")
        base = tickets_taken(store)
        line = []
        for i, name in enumerate(["w1", "w2", "w3"]):
            child = _spawn("turn", str(store), str(tmp_path))
            started.append(child)
            wait_until(lambda n=base + i + 1: tickets_taken(store) == n,
                       what=f"{name} to queue")
            line.append(child)
        w1, w2, w3 = line
        assert w3.stdout is not None
        w3_out = LineReader(w3.stdout)  # w3 inside now would print `turn` (or fail on
        w2.kill()                       # the holder's marker)
        assert w2.wait(30) == -signal.SIGKILL
        holder.kill()  # then the holder, mid-turn
        assert holder.wait(30) == -signal.SIGKILL
        _expect(w1, "turn")
        assert w3_out.lines == [], "w3 overtook w1"
        assert w3.poll() is None, "w3 overtook w1 (and met the holder inside)"
        _say(w1)
        _finished(w1)
        assert w3_out.next_line() == "turn"
        _say(w3)
        _finished(w3)
    assert _line_is_empty(store)


def test_a_writer_that_gives_up_keeps_its_place_and_passes_the_turn_on(
        tmp_path: Path) -> None:
    db = _open(tmp_path / "s.sqlite3")
    short = SqliteDatabase(db.path, busy_timeout_ms=200)  # same process, same place
    try:
        with _children() as started:
            holder = _spawn("hold", str(db.path), "holder")
            started.append(holder)
            _expect(holder, "held")
            base = tickets_taken(db.path)
            with pytest.raises(StoreBusy, match=BUSY), short.write() as conn:
                conn.execute("INSERT INTO t (v) VALUES ('too late')")
            assert tickets_taken(db.path) == base + 1  # its place is still in line
            after = _queue_writer(db.path, "after", started, expected=base + 2)
            _say(holder)
            _finished(holder)
            _finished(after)  # the place given up was passed on, not left blocking
        with db.write() as conn:
            conn.execute("INSERT INTO t (v) VALUES ('me again')")
        assert _names(db) == ["holder", "after", "me again"]
        wait_until(lambda: _line_is_empty(db.path), what="the line to empty")
    finally:
        short.close()
        db.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX-only")
def test_a_forked_child_does_not_share_its_parents_turn(tmp_path: Path) -> None:
    db = _open(tmp_path / "s.sqlite3")
    turns = db._turns
    turn = turns.acquire(5000)  # held here, as a writer's would be
    assert turn is not None
    try:
        pid = os.fork()
        if pid == 0:  # the child queues on its own description, behind the parent
            code = 1
            try:
                child_db = SqliteDatabase(db.path, busy_timeout_ms=150)
                try:
                    with child_db.write() as conn:
                        conn.execute("INSERT INTO t (v) VALUES ('child')")
                except StoreBusy:
                    code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, "the child wrote during our turn"
    finally:
        turns.release(turn)
    assert _names(db) == []
    db.close()


def _open_sidecars(path: Path) -> int:
    target = str(wlock_path(path).resolve())
    count = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{name}") == target
        except OSError:
            continue
    return count


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="needs Linux /proc")
def test_the_last_handle_closed_lets_the_sidecar_go(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    first, second = _open(path), SqliteDatabase(path)
    assert _open_sidecars(path) == 1  # one description for every handle of the process
    with _children() as started:  # a contended turn: the helper thread waits for it
        holder = _spawn("hold", str(path), "holder")
        started.append(holder)
        _expect(holder, "held")
        base = tickets_taken(path)
        _say(holder)
        with second.write() as conn:
            conn.execute("INSERT INTO t (v) VALUES ('second')")
        _finished(holder)
        assert tickets_taken(path) == base + 1
    first.close()
    assert _open_sidecars(path) == 1  # `second` still writes
    second.close()
    # The helper closes the description after its last wait.
    wait_until(lambda: _open_sidecars(path) == 0, what="the sidecar's descriptor to close")


def test_without_a_sidecar_writers_take_turns_on_sqlites_lock(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    wlock_path(path).mkdir(parents=True)  # cannot be opened as the sidecar
    db = _open(path)
    try:
        with db.write() as conn:
            conn.execute("INSERT INTO t (v) VALUES ('still')")
        assert _names(db) == ["still"]
    finally:
        db.close()


def test_a_read_only_handle_creates_no_sidecar(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    SqliteStore(path).close()
    wlock_path(path).unlink(missing_ok=True)
    with SqliteStore(path, read_only=True) as view:
        assert view.launches.query() == []
        view.checkpoint()
    assert not wlock_path(path).exists()


def test_a_process_without_the_sidecar_still_waits_for_one_with_it(tmp_path: Path) -> None:
    """The turn only orders wfrun's writers; SQLite's lock still decides."""
    db = _open(tmp_path / "s.sqlite3")
    lock = WriteLock(db.path)
    try:
        with _children() as started:
            holder = _spawn("hold", str(db.path), "holder")
            started.append(holder)
            _expect(holder, "held")
            lock._unusable = True  # as on a system without OFD locks
            assert lock.acquire(5000) is None
            short = SqliteDatabase(db.path, busy_timeout_ms=150)
            short._turns = lock
            try:
                with pytest.raises(StoreBusy, match=BUSY), short.write() as conn:
                    conn.execute("INSERT INTO t (v) VALUES ('too early')")
            finally:
                short.close()
            _say(holder)
            _finished(holder)
        assert _names(db) == ["holder"]
    finally:
        db.close()
