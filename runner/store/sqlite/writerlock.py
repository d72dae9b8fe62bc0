"""The writers' turn across processes: a POSIX lock on a private sidecar file.

SQLite serializes writers itself (`BEGIN IMMEDIATE` takes its write lock), but a
writer that finds the lock taken waits in SQLite's busy handler, which sleeps 1, 2,
5, 10 ... 100 ms between tries: with several wfrun processes on one store file most
of their time went to those sleeps, not to the disk. So before `BEGIN IMMEDIATE` each
wfrun writer takes `flock` on `<store>.wlock` (0600, beside the store): the writers
of all wfrun processes on this file queue there, and a waiter gets its turn within a
fraction of a millisecond of the holder's COMMIT.

The wait is bounded by the store's busy timeout. `flock` has no timeout of its own
(only a signal interrupts a blocked call, and signals reach only the main thread), so
a contended turn is waited for by one helper thread per process blocked in `flock`,
which the kernel wakes at the holder's unlock; the writer waits on an Event with the
busy timeout. At the timeout it gives up its ticket (the helper drops a lock that
arrives too late) and raises the same one-line "busy" error SQLite's timeout gives.
The store reads no clock for this (time is an input; the timed wait is the Event's).
`flock`, not `fcntl` locks: those belong to the process (threads would share them)
and closing any descriptor of the file drops them.

The lock is only an ordering aid: SQLite's own lock still decides, so a foreign
writer (the `sqlite3` shell, an older wfrun) that never takes it is waited for by
SQLite's busy handler exactly as before, and a sidecar that cannot be created (a
read-only folder) only means taking turns the old way. A SIGKILLed holder's `flock`
is released by the kernel when its last descriptor closes; nothing is left to clean.
"""

from __future__ import annotations

import fcntl
import os
import queue
import threading
from pathlib import Path

from runner.store.faults import busy

SUFFIX = ".wlock"


def wlock_path(store: Path) -> Path:
    return store.with_name(store.name + SUFFIX)


class _Ticket:
    __slots__ = ("abandoned", "granted")

    def __init__(self) -> None:
        self.granted = threading.Event()
        self.abandoned = False


class WriterLock:
    """One process's handle on a store's `.wlock`. `acquire`/`release` are called only
    under the store's in-process writer lock, so one descriptor serves every thread
    (and handle) of the process on that file; the helper thread shares it."""

    def __init__(self, store: Path) -> None:
        self._store = store
        self._path = wlock_path(store)
        self._fd = -1
        self._pid = 0
        self._unusable = False
        self._mutex = threading.Lock()
        self._tickets: queue.SimpleQueue[_Ticket] = queue.SimpleQueue()
        self._in_flight = 0  # tickets the helper has not settled (its flock may be pending)
        self._helper: threading.Thread | None = None

    def _descriptor(self) -> int:
        """The open sidecar, or -1 when it cannot be had. After fork() everything is
        this process's anew: a child sharing the parent's open file description would
        share its lock, and the parent's helper thread does not exist here."""
        pid = os.getpid()
        if self._fd >= 0 and self._pid == pid:
            return self._fd
        if self._pid != pid:
            self._fd = -1  # the parent's descriptor: the child leaves it be
            self._mutex = threading.Lock()
            self._tickets = queue.SimpleQueue()
            self._in_flight = 0
            self._helper = None
        if self._unusable:
            return -1
        try:
            self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
                               | os.O_NOFOLLOW, 0o600)
        except OSError:
            self._unusable = True  # e.g. a read-only folder: SQLite's busy handler alone
            return -1
        self._pid = pid
        return self._fd

    def acquire(self, timeout_ms: int) -> bool:
        """Take this process's turn; False when there is no sidecar to lock (go ahead:
        SQLite's lock decides). Raises StoreBusy once `timeout_ms` has passed."""
        fd = self._descriptor()
        if fd < 0:
            return False
        with self._mutex:
            if self._in_flight == 0:
                # Never beside a pending helper flock: on the same descriptor this one
                # would succeed on the helper's lock, which it may then drop.
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return True
                except BlockingIOError:
                    pass
                except OSError:
                    return False  # a file system without flock: SQLite's lock decides
            ticket = _Ticket()
            self._in_flight += 1
            self._tickets.put(ticket)
            if self._helper is None:
                self._helper = threading.Thread(target=self._wait_turns, args=(fd,),
                                                name="wfrun-store-writer-turn", daemon=True)
                self._helper.start()
        if ticket.granted.wait(timeout_ms / 1000):
            return True
        with self._mutex:
            if ticket.granted.is_set():
                return True  # granted as the wait ended
            ticket.abandoned = True
        raise busy(self._store)

    def _wait_turns(self, fd: int) -> None:
        """The helper: blocked in the kernel until the turn is this process's."""
        while True:
            ticket = self._tickets.get()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError:  # the descriptor was closed under it: the turn is void
                with self._mutex:
                    self._in_flight -= 1
                    ticket.abandoned = True
                return
            with self._mutex:
                self._in_flight -= 1
                if ticket.abandoned:
                    fcntl.flock(fd, fcntl.LOCK_UN)  # its writer gave up: pass the turn on
                else:
                    ticket.granted.set()

    def release(self) -> None:
        if self._fd >= 0 and self._pid == os.getpid():
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """Close the descriptor once this process has no handle on the store left (it
        is reopened on the next write). Kept while the helper may still use it."""
        with self._mutex:
            if self._fd >= 0 and self._pid == os.getpid() and self._in_flight == 0 \
                    and self._helper is None:
                os.close(self._fd)
                self._fd = -1
