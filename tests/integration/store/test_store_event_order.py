"""Run events become visible in `seq` order (SQLite, Postgres): a reader paging with
`read(after_seq=...)` never skips an event a slower transaction commits late.

On Postgres a sequence hands out numbers at INSERT time; before the append-order
lock (domain/_launch_queries.py) a transaction holding seq N open let another commit N+1,
a reader saw N+1, moved its cursor past N, and never read N.
"""

from __future__ import annotations

import threading
from typing import cast

from storekit import Backend, FakeClock
from waiting import wait_until

from runner.store import Store
from runner.store.domain._launch_queries import RunEvents


def _blocked_on_the_append_lock(backend: Backend, events: RunEvents) -> bool:
    if backend.name == "sqlite":
        return True  # BEGIN IMMEDIATE: the second writer cannot even start
    with events._connector.read() as tx:
        row = tx.one("SELECT COUNT(*) AS n FROM pg_locks WHERE locktype = 'advisory'"
                     " AND NOT granted")
    return row is not None and int(row["n"]) > 0


def test_a_reader_never_skips_an_event_committed_late(store: Store, backend: Backend,
                                                       clock: FakeClock) -> None:
    events = cast(RunEvents, store.run_events)
    reader = backend.open(clock)  # its own connections: the writers hold the store's
    tail = cast(RunEvents, reader.run_events)
    drawn, release = threading.Event(), threading.Event()
    fast_done = threading.Event()

    def slow() -> None:
        with events.writing() as (_tx, log):
            log.add("run-slow", "test.slow", {})
            log.flush()  # its seq is drawn now; the commit waits for `release`
            drawn.set()
            release.wait(30)

    def fast() -> None:
        events.append("run-fast", "test.fast", {})
        fast_done.set()

    slow_writer = threading.Thread(target=slow)
    slow_writer.start()
    assert drawn.wait(30)
    fast_writer = threading.Thread(target=fast)
    fast_writer.start()
    try:
        # Either the fast writer committed around the open one (the bug's window), or
        # it waits for the slow one's commit: read in between, as a live tail would.
        wait_until(lambda: fast_done.is_set() or _blocked_on_the_append_lock(backend, tail),
                   what="the second writer to commit or to wait for the first")
        seen = tail.read()
    finally:
        release.set()
        slow_writer.join(30)
        fast_writer.join(30)
    cursor = seen[-1].seq if seen else 0
    seen += tail.read(after_seq=cursor)
    reader.close()
    assert [e.type for e in seen] == ["test.slow", "test.fast"]
    assert [e.seq for e in seen] == sorted(e.seq for e in events.read())
