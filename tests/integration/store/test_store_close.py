"""Closing a store while other threads hold connections to it."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from runner.store import SqliteStore, StoreError


def test_close_leaves_a_live_threads_connection_to_that_thread(tmp_path: Path) -> None:
    """Closing a connection another thread is using can crash the interpreter (a lease
    keeper's read raced its owner's close). A live thread's connection is closed by
    that thread at its next use, which then fails cleanly."""
    store = SqliteStore(tmp_path / "s.sqlite3")
    used, closed, done = threading.Event(), threading.Event(), threading.Event()
    seen: list[BaseException] = []

    def keeper() -> None:
        store.run_events.read()  # opens this thread's connection
        used.set()
        closed.wait(30)
        try:
            store.run_events.read()
        except StoreError as exc:
            seen.append(exc)
        done.set()

    thread = threading.Thread(target=keeper)
    thread.start()
    assert used.wait(30)
    store.close()
    closed.set()
    assert done.wait(30)
    thread.join(30)
    assert len(seen) == 1
    assert "is closed" in str(seen[0])
    with pytest.raises(StoreError):
        store.run_events.read()
