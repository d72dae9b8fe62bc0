"""The writers' turn across processes: a first-come, first-served queue of wfrun's
writers on one store file, kept by the kernel in a sidecar `<store>.wlock` (0600).

Why: SQLite serializes writers itself, but a writer that finds its lock taken sleeps
in the busy handler (1, 2, 5, 10 ... 100 ms between tries), and with four processes
on one file most of their time went to those sleeps. A bare `flock` (tried before)
wakes every waiter at an unlock and hands the lock to nobody, so a process with
several writing threads kept passing it among them while the other process starved.

How: a ticket queue made of Linux open-file-description byte locks
(`F_OFD_SETLKW`), which the kernel releases when their holder dies, SIGKILL included:

- byte 0 is the dispenser, and the file's first 8 bytes hold the next ticket number;
- to queue, a writer locks byte 0, reads the number n, locks byte `PLACES + n` (its
  place in line), writes n + 1 and unlocks byte 0;
- its turn comes when every place before its own is free: it waits in the kernel
  for its predecessor's place, then checks the whole range before it (a waiter that
  dies in line frees its place while the writers ahead of it still hold theirs, so
  the one behind it must not take that as its turn);
- to release, it unlocks its own place, which wakes exactly its successor, the one
  writer waiting on that byte (waiting on the whole range instead woke every waiter
  at each release, costing CPU and handing the CPU to writers with nothing to do).

So turns go in ticket order, and because a process queues one writer at a time
(threads first take the store's in-process lock, db.py), every process waiting gets
its turn within one turn of each other process. A dead process's place is freed by
the kernel: the writer behind it goes on, and nothing is left to clean up.

The wait is bounded by the store's busy timeout. No kernel lock wait has a timeout,
so a contended turn is waited for by one helper thread per process, and the writer
waits on a lock the helper releases (the store reads no clock for it). A writer that
gives up raises the same one-line "busy" error SQLite gives; its place stays in line
(the writer behind must not overtake the one ahead) and the helper passes the turn on
the moment it arrives.

The turn only orders wfrun's writers: SQLite's own lock still decides, so a foreign
writer (the `sqlite3` shell, an older wfrun) is waited for by SQLite's busy timeout
as before, and where the sidecar cannot be had (a read-only folder, another user, a
full disk, a system without OFD locks) writers take turns the old way.
"""

from __future__ import annotations

import errno
import fcntl
import os
import queue
import struct
import sys
import threading
import weakref
from contextlib import suppress
from pathlib import Path
from typing import NamedTuple

from runner.store._faults import busy

SUFFIX = ".wlock"
PLACES = 1 << 20  # byte offset of ticket 0's place (below: the dispenser and counter)
_DISPENSER = 0
# struct flock on 64-bit Linux: l_type, l_whence, (pad), l_start, l_len, l_pid, (pad).
_FLOCK = struct.Struct("hhqqi4x")
# Linux 3.15+ (Python names them on Linux only); elsewhere SQLite's lock alone.
_SETLK: int = getattr(fcntl, "F_OFD_SETLK", -1)
_SETLKW: int = getattr(fcntl, "F_OFD_SETLKW", -1)
SUPPORTED = (sys.platform == "linux" and _SETLK >= 0 and _SETLKW >= 0 and _FLOCK.size == 32
             and struct.calcsize("P") == 8)
_LIVE: weakref.WeakSet[WriteLock] = weakref.WeakSet()


def wlock_path(store: Path) -> Path:
    return store.with_name(store.name + SUFFIX)


def _lock(fd: int, offset: int, *, wait: bool, length: int = 1) -> bool:
    """Lock `length` bytes (at least one); False when one is taken and `wait` is False."""
    cmd = _SETLKW if wait else _SETLK
    try:
        fcntl.fcntl(fd, cmd, _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, offset, length, 0))
    except OSError as exc:
        if not wait and exc.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


def _unlock(fd: int, offset: int, length: int = 1) -> None:
    fcntl.fcntl(fd, _SETLK, _FLOCK.pack(fcntl.F_UNLCK, os.SEEK_SET, offset, length, 0))


def _wait_for_those_ahead(fd: int, number: int, *, wait: bool) -> bool:
    """True once every place before ticket `number` is free: each writer ahead has
    released its turn or died. The wait is on the predecessor's place alone (so a
    release wakes only the one writer behind it); once that is free, every place
    before it is checked too, because a predecessor that died in line freed its place
    while the writers ahead of it may still hold theirs (rare: then wait for them all)."""
    if number == 0:
        return True
    if not wait:
        # Without waiting, one look at the whole range answers it: two calls, not
        # four (each call releases the GIL, and with several slot threads each
        # release may hand the CPU to another thread and back).
        if not _lock(fd, PLACES, wait=False, length=number):
            return False
        _unlock(fd, PLACES, length=number)
        return True
    _lock(fd, PLACES + number - 1, wait=True)
    _unlock(fd, PLACES + number - 1)
    if number == 1:
        return True
    if not _lock(fd, PLACES, wait=False, length=number - 1):
        _lock(fd, PLACES, wait=True, length=number - 1)
    _unlock(fd, PLACES, length=number - 1)
    return True


def _take_ticket(fd: int, *, wait: bool) -> int | None:
    """Queue: the ticket number, its place locked; None if the dispenser is taken."""
    if not _lock(fd, _DISPENSER, wait=wait):
        return None
    try:
        number = int.from_bytes(os.pread(fd, 8, 0).ljust(8, b"\0"), "little")
        # A place is always free here (its last holder took it under the dispenser
        # and the counter moved past it); a file rewritten by hand is stepped over.
        while not _lock(fd, PLACES + number, wait=False):
            number += 1
        try:
            if os.pwrite(fd, (number + 1).to_bytes(8, "little"), 0) != 8:
                raise OSError(errno.EIO, "short write to the writers' queue")
        except OSError:
            _unlock(fd, PLACES + number)
            raise
        return number
    finally:
        _unlock(fd, _DISPENSER)


def tickets_taken(store: Path) -> int:
    """How many turns were ever asked for on this store's sidecar (tests, benches)."""
    try:
        with wlock_path(store).open("rb") as f:
            return int.from_bytes(f.read(8).ljust(8, b"\0"), "little")
    except FileNotFoundError:
        return 0


class Turn(NamedTuple):
    """A writer's turn (`number`: its ticket, its place locked on `fd`), held until
    `WriteLock.release`."""

    fd: int
    number: int


class _Wait:
    __slots__ = ("abandoned", "answered", "failed", "number", "signal")

    def __init__(self, number: int | None) -> None:
        self.number = number  # None: the helper queues it (the dispenser was taken)
        # Held until the helper answers: the writer waits by acquiring it. A bare lock,
        # not an Event (a Condition and a lock per wait): one futex wait and one wake.
        self.signal = threading.Lock()
        self.signal.acquire()
        self.answered = False  # set under WriteLock._mutex, before `signal` is released
        self.abandoned = False
        self.failed = False


class _Line:
    """One open description of the sidecar and the helper that waits on it. Every lock
    of the process is taken through it, so two waits of one process must never overlap
    on it (a description never conflicts with itself): the fast path is used only
    while the helper has nothing in flight, and the helper works one wait at a time."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.waits: queue.SimpleQueue[_Wait | None] = queue.SimpleQueue()
        self.in_flight = 0
        self.helper: threading.Thread | None = None


class WriteLock:
    """One process's place in the writers' queue of a store file. `acquire` and
    `release` are called only under the store's in-process writer lock."""

    def __init__(self, store: Path) -> None:
        self._store = store
        self._path = wlock_path(store)
        self._mutex = threading.Lock()
        self._line: _Line | None = None
        self._unusable = not SUPPORTED
        self.held: Turn | None = None  # this process's turn, while it has one
        _LIVE.add(self)

    def _open(self) -> _Line | None:
        """The sidecar, opened (None: unusable here, SQLite's lock alone)."""
        if self._unusable:
            return None
        try:
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW,
                         0o600)
        except OSError:
            self._unusable = True  # a read-only folder, another user: SQLite alone
            return None
        self._line = _Line(fd)
        return self._line

    def acquire(self, timeout_ms: int) -> Turn | None:
        """Wait for this process's turn; None when there is no queue to join (go ahead:
        SQLite's lock decides). Raises StoreBusy once `timeout_ms` has passed."""
        with self._mutex:
            line = self._line or self._open()
            if line is None:
                return None
            try:
                number = None if line.in_flight else _take_ticket(line.fd, wait=False)
                if number is not None and _wait_for_those_ahead(line.fd, number, wait=False):
                    self.held = Turn(line.fd, number)
                    return self.held
            except OSError:
                self._give_up()  # e.g. a full disk refused the counter: SQLite alone
                return None
            wait = _Wait(number)
            line.in_flight += 1
            line.waits.put(wait)
            if line.helper is None:
                line.helper = threading.Thread(target=self._serve, args=(line,), daemon=True,
                                               name="wfrun-store-write-turns")
                line.helper.start()
        if not wait.signal.acquire(timeout=timeout_ms / 1000):
            with self._mutex:
                if not wait.answered:
                    wait.abandoned = True  # the helper passes the turn on when it comes
                    raise busy(self._store)
        if wait.failed or wait.number is None:
            return None
        self.held = Turn(line.fd, wait.number)
        return self.held

    def release(self, turn: Turn) -> None:
        self.held = None
        _unlock(turn.fd, PLACES + turn.number)  # wakes the one writer behind

    def _serve(self, line: _Line) -> None:
        """The helper: waits in the kernel for each queued writer's turn, in order."""
        while True:
            wait = line.waits.get()
            if wait is None:  # the line was closed; everything before it is settled
                os.close(line.fd)
                return
            try:
                if wait.number is None:
                    wait.number = _take_ticket(line.fd, wait=True)
                assert wait.number is not None
                _wait_for_those_ahead(line.fd, wait.number, wait=True)
            except OSError:  # e.g. ENOLCK: this write goes on SQLite's lock alone
                wait.failed = True
            with self._mutex:
                line.in_flight -= 1
                wait.answered = True
                wait.signal.release()
                if not wait.abandoned and not wait.failed:
                    continue
            if wait.number is not None:  # its writer gave up, or the wait failed
                with suppress(OSError):
                    _unlock(line.fd, PLACES + wait.number)

    def _give_up(self) -> None:
        line, self._line, self._unusable = self._line, None, True
        if line is not None:
            self._retire(line)

    @staticmethod
    def _retire(line: _Line) -> None:
        if line.helper is not None:
            line.waits.put(None)  # the helper closes the descriptor after its last wait
        else:
            os.close(line.fd)

    def close(self) -> None:
        """Let the sidecar go once this process has no handle on the store left (it is
        opened again by the next write). Never called while this process holds a turn."""
        with self._mutex:
            line, self._line = self._line, None
            if line is not None:
                self._retire(line)

    def _forget(self) -> None:
        """In a fork()ed child: the inherited description is the parent's (it holds the
        parent's places, and keeping it open would keep them held after the parent
        dies); close it and queue anew. The parent's helper does not exist here."""
        self._mutex = threading.Lock()
        self.held = None
        line, self._line = self._line, None
        if line is not None:
            os.close(line.fd)


def _after_fork_in_child() -> None:
    for lock in list(_LIVE):
        lock._forget()


os.register_at_fork(after_in_child=_after_fork_in_child)
