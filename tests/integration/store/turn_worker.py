"""One process in the writers' queue of a store file (run by test_store_write_turns.py).

    python turn_worker.py hold STORE NAME      # write NAME in a transaction, print `held`,
                                               # commit when a line arrives on stdin
    python turn_worker.py write STORE NAME     # write NAME in one transaction, then exit
    python turn_worker.py loop STORE NAME THREADS TURNS   # THREADS threads, TURNS writes
                                               # each; every row records its ticket and the
                                               # tickets taken while it held the turn
    python turn_worker.py exclusive STORE DIR TURNS   # the bare turn (no SQLite): an O_EXCL
                                               # marker and a read-modify-write counter
    python turn_worker.py turn STORE DIR       # the bare turn once: O_EXCL marker, print
                                               # `turn`, let go when a line arrives

`loop` and `exclusive` print `ready`, then wait for a line on stdin, so every process
starts contending at once. The store's table is `t (v TEXT, pid INT, ticket INT,
behind INT)`, made by the test.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

from runner.store.sqlite._db import SqliteDatabase
from runner.store.sqlite._writelock import WriteLock, tickets_taken

#: The longest a `loop` writer holds its turn waiting for another to queue behind it.
CONTEND_FOR = 0.02


def hold(db: SqliteDatabase, name: str) -> None:
    with db.write() as conn:
        conn.execute("INSERT INTO t (v, pid) VALUES (?, ?)", (name, os.getpid()))
        print("held", flush=True)
        sys.stdin.readline()


def write(db: SqliteDatabase, name: str) -> None:
    with db.write() as conn:
        conn.execute("INSERT INTO t (v, pid) VALUES (?, ?)", (name, os.getpid()))


def loop(db: SqliteDatabase, name: str, threads: int, turns: int) -> None:
    def writes() -> None:
        for i in range(turns):
            with db.write() as conn:
                turn = db._turns.held
                assert turn is not None, "a write without the writers' turn"
                # Hold the turn until another writer stands in line (or briefly, once
                # the others are done): with a fast disk and busy cores the processes'
                # writes would otherwise rarely overlap, and the line would go untested.
                until = time.monotonic() + CONTEND_FOR
                while tickets_taken(db.path) <= turn.number + 1 and time.monotonic() < until:
                    time.sleep(0.0002)
                # Read inside the turn: every ticket in (turn.number, behind) is a
                # writer queued behind this one right now.
                conn.execute("INSERT INTO t VALUES (?, ?, ?, ?)",
                             (f"{name}-{i}", os.getpid(), turn.number,
                              tickets_taken(db.path)))

    workers = [threading.Thread(target=writes) for _ in range(threads)]
    print("ready", flush=True)
    sys.stdin.readline()
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def exclusive(store: Path, folder: Path, turns: int) -> None:
    lock = WriteLock(store)
    marker, counter = folder / "inside", folder / "counter"
    print("ready", flush=True)
    sys.stdin.readline()
    for _ in range(turns):
        turn = lock.acquire(30_000)
        assert turn is not None, "no writers' queue on this system"
        # Fails with FileExistsError if another process is inside at the same time.
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        value = int(counter.read_text())
        os.sched_yield()  # invite an overlap, were the turn not exclusive
        counter.write_text(str(value + 1))
        os.close(fd)
        os.unlink(marker)
        lock.release(turn)


def turn_once(store: Path, folder: Path) -> None:
    lock = WriteLock(store)
    turn = lock.acquire(30_000)
    assert turn is not None, "no writers' queue on this system"
    fd = os.open(folder / "inside", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    print("turn", flush=True)
    sys.stdin.readline()
    os.close(fd)
    os.unlink(folder / "inside")
    lock.release(turn)


def main(argv: list[str]) -> None:
    mode, store = argv[0], Path(argv[1])
    if mode == "exclusive":
        exclusive(store, Path(argv[2]), int(argv[3]))
        return
    if mode == "turn":
        turn_once(store, Path(argv[2]))
        return
    db = SqliteDatabase(store, busy_timeout_ms=30_000)
    try:
        if mode == "hold":
            hold(db, argv[2])
        elif mode == "write":
            write(db, argv[2])
        elif mode == "loop":
            loop(db, argv[2], int(argv[3]), int(argv[4]))
        else:
            raise SystemExit(f"unknown mode {mode}")
    finally:
        db.close()


if __name__ == "__main__":
    main(sys.argv[1:])
