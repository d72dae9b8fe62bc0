"""A finished thread's SQLite connection is reused by the next thread (a host run is a
thread), never shared by two live threads, and never left open by close()."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from runner.store import StoreError
from runner.store.sqlite._db import SqliteDatabase
from runner.store.sqlite._open import open_database


def _in_thread(fn: Any) -> Any:
    box: list[Any] = []
    thread = threading.Thread(target=lambda: box.append(fn()))
    thread.start()
    thread.join(30)
    assert box, "the thread failed"
    return box[0]


def _open(tmp_path: Path) -> SqliteDatabase:
    return open_database(tmp_path / "s.sqlite3", now_ms=0, busy_timeout_ms=5000)


def _conn(db: SqliteDatabase) -> sqlite3.Connection:
    return db.connection()


def test_threads_one_after_another_share_one_connection(tmp_path: Path) -> None:
    store = _open(tmp_path)
    try:
        def used() -> int:
            store.read("SELECT count(*) FROM sqlite_master")
            return id(_conn(store))

        ids = {_in_thread(used) for _ in range(20)}
        assert len(ids) == 1  # a connection (and its PRAGMAs) per thread would give 20
        settings = _in_thread(lambda: store.settings())
        assert str(settings["journal_mode"]).lower() == "wal"
        assert settings["synchronous"] == 2  # FULL survives the reuse
    finally:
        store.close()


def test_live_threads_never_share_a_connection(tmp_path: Path) -> None:
    store = _open(tmp_path)
    seen: list[int] = []
    ready, go = threading.Barrier(5), threading.Event()

    def worker() -> None:
        seen.append(id(_conn(store)))
        ready.wait(30)
        go.wait(30)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    try:
        _in_thread(lambda: _conn(store))  # one connection in the pool already
        for t in threads:
            t.start()
        ready.wait(30)
        assert len(set(seen)) == 4
    finally:
        go.set()
        for t in threads:
            t.join(30)
        store.close()


def test_close_closes_pooled_connections(tmp_path: Path) -> None:
    store = _open(tmp_path)
    conn = _in_thread(lambda: _conn(store))
    store.close()
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        conn.execute("SELECT 1")  # a pooled connection does not outlive close()


def test_every_threads_writes_go_through_the_one_write_connection(tmp_path: Path) -> None:
    """Writes take turns anyway; on one connection its page cache stays warm, where each
    thread's own was thrown away after any other thread's commit (and read back)."""
    store = _open(tmp_path)
    sent: list[str] = []
    try:
        with store.write() as conn:
            conn.execute("CREATE TABLE t (n INTEGER)")
        store.trace(sent.append)  # set here, on the main thread

        def writes() -> None:
            for n in range(5):
                with store.write() as conn:
                    conn.execute(f"INSERT INTO t (n) VALUES ({n})")

        threads = [threading.Thread(target=writes) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert store.read("SELECT count(*) FROM t")[0][0] == 20
    finally:
        store.close()
    assert len([s for s in sent if s.startswith("INSERT INTO t")]) == 20
    assert len([s for s in sent if s == "BEGIN IMMEDIATE"]) == 20


def test_a_close_during_another_threads_write_closes_its_connection_after_it(
        tmp_path: Path) -> None:
    store = _open(tmp_path)
    inside, closed = threading.Event(), threading.Event()
    used: list[sqlite3.Connection] = []

    def write() -> None:
        with store.write() as conn:
            used.append(conn)
            conn.execute("CREATE TABLE t (n INTEGER)")
            inside.set()
            closed.wait(30)
            conn.execute("INSERT INTO t (n) VALUES (1)")  # still open mid-write

    thread = threading.Thread(target=write)
    thread.start()
    assert inside.wait(30)
    store.close()
    closed.set()
    thread.join(30)
    assert not thread.is_alive()
    with pytest.raises(sqlite3.ProgrammingError):
        used[0].execute("SELECT 1")  # closed by the writer once its write was over
    with pytest.raises(StoreError, match="closed"), store.write():
        pass
    again = sqlite3.connect(tmp_path / "s.sqlite3")
    try:
        assert again.execute("SELECT count(*) FROM t").fetchone()[0] == 1  # committed
    finally:
        again.close()
